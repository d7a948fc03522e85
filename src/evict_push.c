/*-------------------------------------------------------------------------
 *
 * evict_push.c
 *	  Copy clean pages that are about to leave shared buffers into the
 *	  tier, ahead of the clock sweep.
 *
 * PostgreSQL has no eviction callback, so bpext does what the bgwriter
 * does: it reads the clock hand (StrategySyncStart, passing NULL for the
 * allocation counter so the bgwriter's pacing is not disturbed) and looks
 * at the buffers just ahead of it.  Those that are valid, clean, unpinned
 * and at usage count 0 are the next victims.  One the tier already holds
 * gets a usage count there, as a hit would (it has been in shared
 * buffers since the tier served or stored it: tier_map_note_departure).
 * Either way the sizing advisor hears of it (bpext_sizing_pushed), for the
 * miniatures of the tier it runs.  For each one not already in the tier:
 *
 *	1. note its tag under the buffer header spinlock;
 *	2. pin it with ReadRecentBuffer, which re-checks the tag, never does
 *	   I/O and leaves the usage count alone;
 *	3. take an admission ticket (tier_map_begin_admit), share-lock the
 *	   content, check it is still clean, copy it into an aligned batch
 *	   buffer, check again, unlock and unpin: microseconds, no I/O while
 *	   pinned, so DROP, TRUNCATE and VACUUM are never held up;
 *	4. when the batch is full or the scan is done, write the batch with as
 *	   few pwritev calls as the slots allow and publish the pages whose
 *	   tickets still hold.
 *
 * Each round looks only at buffers that entered the window since the last
 * round (positions are counted in clock passes since startup), so a server
 * that evicts nothing costs the worker nothing but a look at the hand.
 * A victim is pushed only if the worker sees it before the hand gets
 * there, so the worker paces itself on the hand: it sleeps no longer than
 * the hand takes to cover a quarter of the window (bpext.push_interval
 * while the hand stands still), and by default the window doubles, up to
 * all of shared buffers, whenever the hand overtook it (see
 * current_lookahead).
 *
 * Counting what the push missed.  There is no eviction hook either, so the
 * worker detects replacements: it keeps, in its private memory, the tag it
 * last observed at every buffer position and whether that was a valid,
 * clean main-fork page.  It observes every buffer once per lap of the
 * hand: those entering the window, and, when the hand overtook the window
 * (the worker fell behind), also the positions the hand passed that the
 * worker never looked at in that lap (too late to push them, not to see
 * them replaced).  The tag is compared unlocked first, and read under the
 * header spinlock only when it differs.  A position whose tag changed
 * while its old page was clean when last observed is a clean eviction
 * (clean_evictions); if the tier does not hold the old page at that
 * moment, the push missed it (missed_pushes).  Cost: nothing while the
 * hand stands still, one unlocked tag compare per buffer per lap
 * otherwise, and a map lookup per eviction.
 *
 * What these counts are not exact about: a page dirtied after its last
 * observation and written out at eviction counts as a clean eviction (it
 * is in the tier under bpext.write_policy = dual_write, so captured; under
 * invalidate it counts as missed), while one dirty when last observed and
 * written before its eviction is not counted at all; a buffer reused by a
 * ring strategy (bulk reads, VACUUM) is seen at most once per lap; a page
 * pushed and then evicted from a full tier, or invalidated, before the
 * check counts as missed; so does a page dropped with its relation whose
 * buffer was reused before the worker saw it free.  Observations restart
 * from nothing when the tier is turned on.
 *
 * The copy of a clean buffer equals its data file's image, except that the
 * in-memory pd_checksum is stale (it is computed only when the page is
 * written), so it is recomputed on the copy when checksums are on.  Hint
 * bits set concurrently under a share lock may make the copy carry hints
 * the file lacks; the buffer then becomes dirty, so its next write
 * invalidates the copy.  One exception stays: with data checksums on and a
 * relation created in the same transaction under wal_level = minimal (or a
 * buffer whose hints were set during recovery), setting a hint bit does not
 * dirty the buffer, so the tier can hold the page with hint bits its file
 * lacks.  Such a page is exactly as valid: hint bits only cache commit
 * status that the page's tuples already imply.  doc/how-it-works.md states
 * this as the exact guarantee, and test/t/009_tier_bytes.pl checks it bit
 * by bit.
 *
 * Runs only in the bpext worker, under its resource owner.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "storage/buf_internals.h"
#include "storage/bufmgr.h"
#include "storage/bufpage.h"
#include "utils/memutils.h"

#include "evict_push.h"
#include "settings.h"
#include "sizing.h"
#include "stats.h"
#include "tier_control.h"
#include "tier_io.h"

#define PUSH_BATCH_PAGES	64

/* A victim-to-be noted during the scan, copied afterwards. */
typedef struct PushCandidate
{
	BufferTag	tag;
	int			buf_id;
} PushCandidate;

/* What the worker last saw at one buffer position. */
typedef struct ObservedBuffer
{
	BufferTag	tag;
	bool		clean_page;		/* a valid, clean main-fork page */
} ObservedBuffer;

static TierBatch *push_batch = NULL;
static ObservedBuffer *observed = NULL;	/* NBuffers entries */
static bool observing = false;
static PushCandidate *candidates = NULL;
static int	candidates_capacity = 0;

/*
 * Is the buffer, by its state word, one the clock hand will take next?
 * Main forks only: free space map and visibility map pages are initialised
 * in memory without being marked dirty, so a clean one need not match its
 * file (they still enter the tier when written, as dual writes).
 */
static inline bool
is_clean_victim(BpextBufState buf_state)
{
	return (buf_state & (BM_VALID | BM_TAG_VALID)) == (BM_VALID | BM_TAG_VALID) &&
		(buf_state & (BM_DIRTY | BM_IO_IN_PROGRESS | BM_IO_ERROR)) == 0 &&
		BUF_STATE_GET_REFCOUNT(buf_state) == 0 &&
		BUF_STATE_GET_USAGECOUNT(buf_state) == 0;
}

/* Is the buffer, by its state word and tag, a clean main-fork page? */
static inline bool
is_clean_page(BpextBufState buf_state, const BufferTag *tag)
{
	return (buf_state & (BM_VALID | BM_TAG_VALID)) == (BM_VALID | BM_TAG_VALID) &&
		(buf_state & (BM_DIRTY | BM_IO_IN_PROGRESS | BM_IO_ERROR)) == 0 &&
		BPEXT_BUFTAG_FORK(*tag) == MAIN_FORKNUM;
}

/*
 * Observe one buffer position (see the file header): count its old page as
 * evicted, and as missed if the tier lacks it, when its tag changed, and
 * remember what it holds now.
 */
static void
observe_buffer(int buf_id, BufferDesc *desc, BpextBufState buf_state)
{
	ObservedBuffer *obs = &observed[buf_id];
	BufferTag	tag;

	/* Unlocked: a torn read only sends us to the spinlock. */
	tag = desc->tag;
	if (BPEXT_BUFTAGS_EQUAL(tag, obs->tag))
	{
		obs->clean_page = is_clean_page(buf_state, &tag);
		return;
	}

	buf_state = LockBufHdr(desc);
	tag = desc->tag;
	bpext_unlock_buf_hdr(desc, buf_state);

	if (!(buf_state & BM_TAG_VALID))
	{
		/*
		 * No page: from 16 on, a victim between losing its old tag and
		 * getting its new one (pinned; look again next lap); otherwise a
		 * buffer freed by a DROP or TRUNCATE, which is no eviction.
		 */
		if (BUF_STATE_GET_REFCOUNT(buf_state) == 0)
		{
			obs->tag = tag;
			obs->clean_page = false;
		}
		return;
	}
	if (BPEXT_BUFTAGS_EQUAL(tag, obs->tag))
	{
		obs->clean_page = is_clean_page(buf_state, &tag);
		return;
	}
	if (obs->clean_page)
	{
		BpextRelFile rfile = BPEXT_BUFTAG_RELFILE(obs->tag);

		BPEXT_COUNT(clean_evictions, 1);
		if (!tier_map_contains(&rfile, BPEXT_BUFTAG_FORK(obs->tag),
							   BPEXT_BUFTAG_BLOCK(obs->tag)))
			BPEXT_COUNT(missed_pushes, 1);
	}
	obs->tag = tag;
	obs->clean_page = is_clean_page(buf_state, &tag);
}

/*
 * Copy one candidate into the batch if it is still a clean copy of its
 * page.  Returns whether a page was added.
 */
static bool
copy_candidate(const PushCandidate *cand)
{
	BpextRelFile rfile_copy = BPEXT_BUFTAG_RELFILE(cand->tag);
	const BpextRelFile *rfile = &rfile_copy;
	ForkNumber	fork = BPEXT_BUFTAG_FORK(cand->tag);
	BlockNumber block = BPEXT_BUFTAG_BLOCK(cand->tag);
	BufferDesc *desc = GetBufferDescriptor(cand->buf_id);
	Buffer		buffer = cand->buf_id + 1;
	char	   *copy;
	bool		clean;

	/*
	 * The ticket comes first: it may wait for the relation lock, and we
	 * must not make InvalidateBuffer spin on our pin meanwhile.
	 */
	copy = tier_batch_begin(push_batch, rfile, fork, block);
	if (copy == NULL)
		return false;
	if (!ReadRecentBuffer(*rfile, fork, block, buffer))
	{
		tier_batch_cancel_pending(push_batch);
		return false;
	}

	LockBuffer(buffer, BPEXT_BUFFER_LOCK_WRITE_IMAGE);
	clean = (bpext_buf_state_read(desc) & BM_DIRTY) == 0;
	if (clean)
	{
		memcpy(copy, BufferGetPage(buffer), BLCKSZ);
		clean = (bpext_buf_state_read(desc) & BM_DIRTY) == 0;
	}
	LockBuffer(buffer, BUFFER_LOCK_UNLOCK);
	ReleaseBuffer(buffer);

	/* A new (all-zero) page may exist only in memory; leave it out. */
	if (!clean || PageIsNew((Page) copy))
	{
		tier_batch_cancel_pending(push_batch);
		return false;
	}
	if (DataChecksumsEnabled())
		bpext_page_set_checksum((Page) copy, block);
	tier_batch_add(push_batch, rfile, fork, block);
	return true;
}

/*
 * Give back what a round in progress holds (the worker is exiting).
 */
void
bpext_push_abandon(void)
{
	if (push_batch != NULL)
		tier_batch_abandon(push_batch);
}

/*
 * How many buffers ahead of the hand this round looks at.  A set
 * bpext.push_lookahead is used as it is.  By default, a quarter of shared
 * buffers, doubled each time the hand overtook the window (the worker,
 * short of CPU or outrun by a fast sweep, came too late for some victims),
 * up to all of shared buffers, and shrunk back by a sixteenth in rounds
 * where the hand moved less than a quarter of it.  Looking further ahead
 * costs only pushes of pages that are used again before the hand comes.
 */
static int
current_lookahead(uint64 hand_pos, bool overtaken)
{
	static int	lookahead = 0;
	static uint64 last_hand_pos = 0;
	int			base;
	uint64		moved = hand_pos - Min(last_hand_pos, hand_pos);

	last_hand_pos = hand_pos;
	if (bpext_push_lookahead > 0)
		return Min(bpext_push_lookahead, NBuffers);

	base = Min(Max(NBuffers / 4, 16), NBuffers);
	if (lookahead < base)
		lookahead = base;
	if (overtaken)
		lookahead = (int) Min((int64) lookahead * 2, (int64) NBuffers);
	else if (moved < (uint64) lookahead / 4)
		lookahead = Max(base, lookahead - lookahead / 16);
	return lookahead;
}

/*
 * How long the worker may sleep after a round: as long as the hand, at the
 * speed it had since the last round, takes to cover a quarter of the
 * lookahead, so that the next round finds the buffers it must push still
 * ahead of it; at most bpext.push_interval, which is also the pause while
 * the hand stands still; none at all if the hand overtook the window.
 */
static long
next_sleep_ms(uint64 hand_pos, int lookahead, bool overtaken)
{
	static uint64 last_hand_pos = 0;
	static TimestampTz last_time = 0;
	TimestampTz now = GetCurrentTimestamp();
	uint64		moved = hand_pos - Min(last_hand_pos, hand_pos);
	double		elapsed_us = (double) (now - Min(last_time, now));
	long		sleep_ms = bpext_push_interval_ms;

	if (overtaken)
		sleep_ms = 0;
	else if (last_time != 0 && moved > 0)
		sleep_ms = Min(sleep_ms,
					   (long) (elapsed_us * lookahead / (4.0 * moved) / 1000.0));
	last_hand_pos = hand_pos;
	last_time = now;
	return sleep_ms;
}

/*
 * Where the clock hand is, in buffers passed since the server started
 * (StrategySyncStart without the allocation counter, which is the
 * bgwriter's).  Also for the sizing sweep and the worker's rest.
 */
uint64
bpext_clock_hand_position(void)
{
	uint32		passes;
	int			hand = StrategySyncStart(&passes, NULL);

	return (uint64) passes * NBuffers + hand;
}

/*
 * One pass over the buffers ahead of the clock hand.  Returns how many
 * milliseconds the worker may sleep before the next one.
 */
long
bpext_push_round(void)
{
	static uint64 scanned_until = 0;
	uint64		hand_pos;
	bool		overtaken;
	long		sleep_ms;
	int			lookahead;
	uint64		window_start;
	uint64		window_end;
	uint64		pos;
	int			ncand = 0;
	int			published = 0;
	int			i;

	if (!bpext_tier_enabled() || bpext_admission_paused())
	{
		observing = false;
		return bpext_push_interval_ms;
	}

	if (push_batch == NULL)
		push_batch = tier_batch_create(PUSH_BATCH_PAGES, BPEXT_SOURCE_EVICT_PUSH);
	if (observed == NULL)
		observed = MemoryContextAllocExtended(TopMemoryContext,
											  (Size) NBuffers * sizeof(ObservedBuffer),
											  MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	if (!observing)
	{
		/* What was seen before the tier was on says nothing now. */
		memset(observed, 0, (Size) NBuffers * sizeof(ObservedBuffer));
		observing = true;
	}

	/*
	 * Look only at buffers not examined in an earlier round: the window is
	 * [hand, hand + lookahead) in clock positions counted since startup,
	 * less what an earlier window already covered.  When the hand has not
	 * moved (nothing is being evicted) there is nothing to do at all.
	 */
	window_start = bpext_clock_hand_position();
	hand_pos = window_start;
	overtaken = scanned_until < window_start;
	lookahead = current_lookahead(hand_pos, overtaken);
	window_end = window_start + lookahead;
	if (candidates_capacity < lookahead)
	{
		if (candidates)
			pfree(candidates);
		candidates = MemoryContextAllocHuge(TopMemoryContext,
											(Size) lookahead * sizeof(PushCandidate));
		candidates_capacity = lookahead;
	}

	/*
	 * The hand overtook the last window: the positions it passed that no
	 * window covered are past pushing, but observe them once anyway, so
	 * that their replacement next lap is seen.
	 */
	for (pos = Max(scanned_until, window_start - Min(window_start, (uint64) NBuffers));
		 pos < window_start; pos++)
	{
		int			buf_id = (int) (pos % NBuffers);
		BufferDesc *desc = GetBufferDescriptor(buf_id);

		observe_buffer(buf_id, desc, bpext_buf_state_read(desc));
	}

	if (scanned_until > window_start)
		window_start = Min(scanned_until, window_end);
	scanned_until = Max(scanned_until, window_end);

	for (pos = window_start; pos < window_end; pos++)
	{
		int			buf_id = (int) (pos % NBuffers);
		BufferDesc *desc = GetBufferDescriptor(buf_id);
		BpextBufState buf_state = bpext_buf_state_read(desc);

		observe_buffer(buf_id, desc, buf_state);

		/* Cheap unlocked pre-filter, then the tag under the spinlock. */
		if (!is_clean_victim(buf_state))
			continue;
		buf_state = LockBufHdr(desc);
		if (is_clean_victim(buf_state) &&
			BPEXT_BUFTAG_FORK(desc->tag) == MAIN_FORKNUM)
		{
			candidates[ncand].tag = desc->tag;
			candidates[ncand].buf_id = buf_id;
			ncand++;
		}
		bpext_unlock_buf_hdr(desc, buf_state);
	}

	for (i = 0; i < ncand && bpext_tier_enabled(); i++)
	{
		const BufferTag *tag = &candidates[i].tag;
		BpextRelFile rfile = BPEXT_BUFTAG_RELFILE(*tag);

		if (tier_map_note_departure(&rfile, BPEXT_BUFTAG_FORK(*tag),
									BPEXT_BUFTAG_BLOCK(*tag)))
		{
			bpext_sizing_pushed(&rfile, BPEXT_BUFTAG_FORK(*tag),
								BPEXT_BUFTAG_BLOCK(*tag));
			continue;
		}
		if (!copy_candidate(&candidates[i]))
			continue;
		bpext_sizing_pushed(&rfile, BPEXT_BUFTAG_FORK(*tag),
							BPEXT_BUFTAG_BLOCK(*tag));
		if (push_batch->npages == push_batch->capacity)
			published += tier_batch_flush(push_batch);
	}
	published += tier_batch_flush(push_batch);
	sleep_ms = next_sleep_ms(hand_pos, lookahead, overtaken);
	return published > 0 ? Min(sleep_ms, 1) : sleep_ms;
}

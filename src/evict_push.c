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
 * and at usage count 0 are the next victims.  For each one not already in
 * the tier:
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
 * status that the page's tuples already imply.  The README states this as
 * the exact guarantee, and test/t/009_tier_bytes.pl checks it bit by bit.
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

#include "bpext.h"
#include "evict_push.h"
#include "tier_io.h"

#define PUSH_BATCH_PAGES	64

/* A victim-to-be noted during the scan, copied afterwards. */
typedef struct PushCandidate
{
	BufferTag	tag;
	int			buf_id;
} PushCandidate;

static TierBatch *push_batch = NULL;
static PushCandidate *candidates = NULL;
static int	candidates_capacity = 0;

/*
 * Is the buffer, by its state word, one the clock hand will take next?
 * Main forks only: free space map and visibility map pages are initialised
 * in memory without being marked dirty, so a clean one need not match its
 * file (they still enter the tier when written, as dual writes).
 */
static inline bool
is_clean_victim(uint32 buf_state)
{
	return (buf_state & (BM_VALID | BM_TAG_VALID)) == (BM_VALID | BM_TAG_VALID) &&
		(buf_state & (BM_DIRTY | BM_IO_IN_PROGRESS | BM_IO_ERROR)) == 0 &&
		BUF_STATE_GET_REFCOUNT(buf_state) == 0 &&
		BUF_STATE_GET_USAGECOUNT(buf_state) == 0;
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

	LockBuffer(buffer, BUFFER_LOCK_SHARE);
	clean = (pg_atomic_read_u32(&desc->state) & BM_DIRTY) == 0;
	if (clean)
	{
		memcpy(copy, BufferGetPage(buffer), BLCKSZ);
		clean = (pg_atomic_read_u32(&desc->state) & BM_DIRTY) == 0;
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
		PageSetChecksumInplace((Page) copy, block);
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
 * One pass over the buffers ahead of the clock hand.  Returns the number of
 * pages published to the tier.
 */
int
bpext_push_round(void)
{
	static uint64 scanned_until = 0;
	uint32		complete_passes;
	int			hand;
	int			lookahead;
	uint64		window_start;
	uint64		window_end;
	uint64		pos;
	int			ncand = 0;
	int			published = 0;
	int			i;

	if (!bpext_tier_enabled())
		return 0;

	lookahead = bpext_push_lookahead > 0 ? bpext_push_lookahead :
		Max(NBuffers / 4, 16);
	lookahead = Min(lookahead, NBuffers);

	if (push_batch == NULL)
		push_batch = tier_batch_create(PUSH_BATCH_PAGES, BPEXT_SOURCE_EVICT_PUSH);
	if (candidates_capacity < lookahead)
	{
		if (candidates)
			pfree(candidates);
		candidates = MemoryContextAlloc(TopMemoryContext,
										lookahead * sizeof(PushCandidate));
		candidates_capacity = lookahead;
	}

	/*
	 * Look only at buffers not examined in an earlier round: the window is
	 * [hand, hand + lookahead) in clock positions counted since startup,
	 * less what an earlier window already covered.  When the hand has not
	 * moved (nothing is being evicted) there is nothing to do at all.
	 */
	hand = StrategySyncStart(&complete_passes, NULL);
	window_start = (uint64) complete_passes * NBuffers + hand;
	window_end = window_start + lookahead;
	if (scanned_until > window_start)
		window_start = Min(scanned_until, window_end);
	scanned_until = window_end;

	for (pos = window_start; pos < window_end; pos++)
	{
		int			buf_id = (int) (pos % NBuffers);
		BufferDesc *desc = GetBufferDescriptor(buf_id);
		uint32		buf_state;

		/* Cheap unlocked pre-filter, then the tag under the spinlock. */
		if (!is_clean_victim(pg_atomic_read_u32(&desc->state)))
			continue;
		buf_state = LockBufHdr(desc);
		if (is_clean_victim(buf_state) &&
			BPEXT_BUFTAG_FORK(desc->tag) == MAIN_FORKNUM)
		{
			candidates[ncand].tag = desc->tag;
			candidates[ncand].buf_id = buf_id;
			ncand++;
		}
		UnlockBufHdr(desc, buf_state);
	}

	for (i = 0; i < ncand && bpext_tier_enabled(); i++)
	{
		const BufferTag *tag = &candidates[i].tag;
		BpextRelFile rfile = BPEXT_BUFTAG_RELFILE(*tag);

		if (tier_map_contains(&rfile, BPEXT_BUFTAG_FORK(*tag),
							  BPEXT_BUFTAG_BLOCK(*tag)))
			continue;
		if (copy_candidate(&candidates[i]) &&
			push_batch->npages == push_batch->capacity)
			published += tier_batch_flush(push_batch);
	}
	published += tier_batch_flush(push_batch);
	return published;
}

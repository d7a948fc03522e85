/*-------------------------------------------------------------------------
 *
 * tier_io.c
 *	  Moving pages between PostgreSQL and the tier: serving a read with
 *	  verification, storing one page, storing a batch of pages.
 *
 * A read is served only if the slot is current when looked up, its
 * content's CRC (over the page identity and the page) matches the one
 * recorded at admission, and the slot is still current after the read.
 * Anything else falls back to the data file.  A mismatch or an I/O error on
 * a slot that is still current means the tier file is damaged: the tier
 * goes to ERROR state (bpext_tier_fail) and stops serving.  Every read and
 * write is stamped for io_watch.c, and none starts while another one has
 * been under way for longer than bpext.io_timeout.  A read never waits
 * for the device longer than that either (tier_file_read_page and
 * tier_readers.c): every tier read of a backend, for a shared-buffer miss
 * or for a view, goes through read_current_page.
 *
 * Stores take a ticket (tier_map_begin_admit) before the page is copied and
 * publish after it is written (smgr calls do not store: they queue the
 * page and its ticket for the worker, store_queue.c); see tier_map.c for why that is enough to
 * never publish a page that changed meanwhile.  Publication also names the
 * file incarnation the write went to, so a write that outlasted a switch
 * to another file is never published into the new one's map.  A store
 * that finds no file to write to (the worker just released it) is a lost
 * race, not an I/O error.
 *
 * Locking: none of its own; tier_map.c's locks protect the map, and every
 * process has its own descriptor for the file.  No errors are raised and
 * nothing is allocated on the read path, which runs inside smgr calls.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "pgstat.h"
#include "portability/instr_time.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

#include "adaptive_admission.h"
#include "io_watch.h"
#include "stats.h"
#include "test_hooks.h"
#include "tier_control.h"
#include "tier_file.h"
#include "tier_io.h"
#include "wait_events.h"

/* An aligned page for tier_private_page; static so that no smgr call
 * allocates. */
static union
{
	char		data[BLCKSZ + TIER_IO_ALIGN];
	double		force_align;
}			store_space;

/*
 * This process's aligned scratch page, for the image a dual write writes
 * to its data file and then queues for the tier.  One page: only one
 * write is under way in a process at a time.
 */
char *
tier_private_page(void)
{
	return (char *) TYPEALIGN(TIER_IO_ALIGN, store_space.data);
}

/*
 * Tier writes, seen as outstanding I/O and as an Extension wait.  See
 * tier_file_write_pages for *incarnation.
 */
static bool
write_pages(uint32 first_slot, int npages, char *const *pages,
			uint32 *incarnation)
{
	bool		ok;
	int			save_errno;

	BPEXT_COUNT(outstanding_io, 1);
	bpext_io_watch_begin(true);
	pgstat_report_wait_start(BPEXT_WAIT_EVENT(BPEXT_WAIT_TIER_WRITE));
	ok = tier_file_write_pages(first_slot, npages, pages, incarnation);
	save_errno = errno;
	pgstat_report_wait_end();
	bpext_io_watch_end();
	BPEXT_COUNT(outstanding_io, -1);
	errno = save_errno;
	return ok;
}

/*
 * Fill buffer with the page from the tier if it holds a current, intact
 * copy.  Returns false (buffer contents undefined) otherwise.  A read
 * error or a checksum mismatch switches the tier off, whoever reads; only
 * reads that serve a shared-buffer miss count as lookups, hits, page reads
 * and read time.  On success, *read_us (if not NULL) is how long the read,
 * its checksum and its re-check took.  The clock is read twice per read:
 * the start serves the I/O watch's check and stamp and the timing.
 * before_read (if not NULL) is called once the page is found and pinned,
 * just before the read that may wait on the device.  While admission is
 * paused most misses do not look (adaptive_admission.c): they are neither
 * lookups nor hits.
 */
static bool
read_current_page(const BpextRelFile *rfile, ForkNumber fork,
				  BlockNumber block, char *buffer, bool serving,
				  uint64 *read_us, void (*before_read) (void))
{
	pg_crc32c	crc;
	uint32		slot;
	uint32		chain_cuts;
	uint64		start_us;
	uint64		elapsed_us;
	TierReadResult result;
	bool		read_ok;
	bool		crc_ok;
	bool		still_valid;
	int			save_errno;
	Oid			hold_rel;

	if (!tier_file_ready())
		return false;
	if (serving && unlikely(bpext_admission_paused()) &&
		!bpext_adaptive_look_in_tier())
		return false;
	if (serving)
		BPEXT_COUNT(lookups, 1);
	slot = tier_map_lookup_pin(rfile, fork, block, &crc, &chain_cuts);
	if (slot == TIER_INVALID_INDEX)
		return false;
	start_us = bpext_io_watch_clock();
	if (!bpext_io_watch_check_at(start_us))
	{
		tier_map_unpin(slot);
		return false;
	}
	if (serving)
		BPEXT_COUNT(hits, 1);
	if (before_read != NULL)
		before_read();

	BPEXT_COUNT(outstanding_io, 1);
	bpext_io_watch_begin_at(false, start_us);
	pgstat_report_wait_start(BPEXT_WAIT_EVENT(BPEXT_WAIT_TIER_READ));
	result = tier_file_read_page(slot, buffer);
	save_errno = errno;
	read_ok = result == TIER_READ_OK;
	pgstat_report_wait_end();
	bpext_io_watch_end();
	BPEXT_COUNT(outstanding_io, -1);
	crc_ok = read_ok && tier_page_crc(rfile, fork, block, buffer) == crc;
	/* Tests only: hold the read here, the slot pinned, until told. */
	hold_rel = BPEXT_TEST_HOLD_TARGET("read");
	if (OidIsValid(hold_rel) && BPEXT_RELFILE_NUMBER(*rfile) == hold_rel)
		(void) BPEXT_TEST_HOLD("read", slot);
	still_valid = tier_map_pin_still_valid(slot, chain_cuts);
	tier_map_unpin(slot);
	elapsed_us = bpext_io_watch_clock() - start_us;
	if (serving)
		bpext_stats_count_tier_read(still_valid &&
									result != TIER_READ_UNAVAILABLE &&
									read_ok && crc_ok, elapsed_us);

	/*
	 * A slot invalidated while we read it is a plain miss, not damage; so
	 * is a read no helper could take, or one that did not answer in time
	 * (tier_readers.c has switched the tier off then).
	 */
	if (!still_valid || result == TIER_READ_UNAVAILABLE)
		return false;
	if (!read_ok)
	{
		BPEXT_COUNT(io_errors, 1);
		bpext_tier_fail("could not read from the tier file", save_errno);
		return false;
	}
	if (!crc_ok)
	{
		BPEXT_COUNT(crc_failures, 1);
		bpext_tier_fail("checksum mismatch in a tier page", 0);
		return false;
	}
	if (read_us != NULL)
		*read_us = elapsed_us;
	return true;
}

/*
 * Will the tier not serve this block?  Counted as a lookup (a miss) when
 * it will not; a block it holds is left to tier_serve_page, which counts
 * it when it reads it.  The answer may be out of date by the time the
 * caller acts on it, which costs a data-file read at worst: serving is
 * only ever decided by tier_serve_page.  While admission is paused, the
 * tier serves no block but its probes (adaptive_admission.c): every block
 * will miss, uncounted.
 */
bool
tier_will_miss(const BpextRelFile *rfile, ForkNumber fork, BlockNumber block)
{
	if (!tier_file_ready() || bpext_admission_paused())
		return true;
	if (tier_map_contains(rfile, fork, block))
		return false;
	BPEXT_COUNT(lookups, 1);
	return true;
}

/*
 * Serve a shared-buffer miss from the tier, if it can; *read_us is then
 * how long that took, and before_read was called before the read (see
 * read_current_page).  One lookup decides whether the tier is read.
 */
bool
tier_serve_page(const BpextRelFile *rfile, ForkNumber fork,
				BlockNumber block, char *buffer, uint64 *read_us,
				void (*before_read) (void))
{
	return read_current_page(rfile, fork, block, buffer, true, read_us,
							 before_read);
}

/*
 * Read a tier page for a view (bpext_buffer_descriptors(true)): checked as
 * a served page is, not counted as one.
 */
bool
tier_inspect_page(const BpextRelFile *rfile, ForkNumber fork,
				  BlockNumber block, char *buffer)
{
	return read_current_page(rfile, fork, block, buffer, false, NULL, NULL);
}

/* A batch of capacity aligned pages, in TopMemoryContext. */
TierBatch *
tier_batch_create(int capacity, BpextAdmitSource source)
{
	TierBatch  *batch = MemoryContextAllocZero(TopMemoryContext, sizeof(TierBatch));
	char	   *space;
	int			i;

	batch->source = source;
	batch->capacity = capacity;
	batch->pages = MemoryContextAlloc(TopMemoryContext, capacity * sizeof(char *));
	batch->tickets = MemoryContextAlloc(TopMemoryContext,
										capacity * sizeof(TierAdmitTicket));
	batch->crcs = MemoryContextAlloc(TopMemoryContext, capacity * sizeof(pg_crc32c));
	batch->slots = MemoryContextAlloc(TopMemoryContext, capacity * sizeof(uint32));
	batch->owners = MemoryContextAlloc(TopMemoryContext, capacity * sizeof(int32));
	space = MemoryContextAlloc(TopMemoryContext,
							   (Size) capacity * BLCKSZ + TIER_IO_ALIGN);
	space = (char *) TYPEALIGN(TIER_IO_ALIGN, space);
	for (i = 0; i < capacity; i++)
		batch->pages[i] = space + (Size) i * BLCKSZ;
	return batch;
}

/*
 * Take a ticket for the next page and return the buffer to copy it into,
 * or NULL if no ticket could be had.  The page is pending until it is
 * added or cancelled.  Several pages may be pending at once (a run of
 * blocks read with one call): they are added in the order they were
 * begun.
 */
char *
tier_batch_begin(TierBatch *batch, const BpextRelFile *rfile,
				 ForkNumber fork, BlockNumber block)
{
	int			i = batch->npages + batch->pending;

	Assert(i < batch->capacity);
	if (!tier_map_begin_admit(rfile, fork, block, &batch->tickets[i]))
		return NULL;
	batch->owners[i] = -1;
	batch->pending++;
	return batch->pages[i];
}

/* Page i of the batch is stored, or not: tell whoever waits for it. */
static inline void
page_done(TierBatch *batch, int i, bool published)
{
	if (batch->owners[i] >= 0 && batch->done != NULL)
		batch->done(batch->owners[i], published);
	batch->owners[i] = -1;
}

/*
 * Take over a ticket someone else took (a page from the store queue) and
 * return the buffer to copy its page into; the page is pending until
 * added.  owner (or -1) is told through batch->done whether the page was
 * published.
 */
char *
tier_batch_adopt(TierBatch *batch, const TierAdmitTicket *ticket, int32 owner)
{
	int			i = batch->npages + batch->pending;

	Assert(i < batch->capacity);
	batch->tickets[i] = *ticket;
	batch->owners[i] = owner;
	batch->pending++;
	return batch->pages[i];
}

/* The first pending page has been copied in. */
void
tier_batch_add(TierBatch *batch, const BpextRelFile *rfile, ForkNumber fork,
			   BlockNumber block)
{
	int			i = batch->npages;

	Assert(batch->pending > 0);
	batch->crcs[i] = tier_page_crc(rfile, fork, block, batch->pages[i]);
	batch->pending--;
	batch->npages++;
}

/* The pending pages will not be added after all. */
void
tier_batch_cancel_pending(TierBatch *batch)
{
	for (; batch->pending > 0; batch->pending--)
	{
		int			i = batch->npages + batch->pending - 1;

		tier_map_cancel_admit(&batch->tickets[i]);
		page_done(batch, i, false);
	}
}

/*
 * Give back every ticket the batch holds, pending ones included, without
 * writing anything (an error while filling it).
 */
void
tier_batch_abandon(TierBatch *batch)
{
	int			i;

	tier_batch_cancel_pending(batch);
	for (i = 0; i < batch->npages; i++)
	{
		tier_map_cancel_admit(&batch->tickets[i]);
		page_done(batch, i, false);
	}
	batch->npages = 0;
}

/*
 * Write the batch into the tier, consecutive slots in one pwritev each, and
 * publish every page whose ticket still holds.  Returns how many pages
 * were published; the batch is empty afterwards.
 */
int
tier_batch_flush(TierBatch *batch)
{
	int			n = batch->npages;
	int			published = 0;
	int			i;
	int			run;
	uint32		incarnation;
	instr_time	start;

	Assert(batch->pending == 0);
	if (n == 0)
		return 0;
	if (!bpext_io_watch_check() || !tier_file_ready())
	{
		tier_batch_abandon(batch);
		return 0;
	}
	batch->npages = 0;

	for (i = 0; i < n; i++)
		batch->slots[i] = tier_map_alloc_slot();

	INSTR_TIME_SET_CURRENT(start);
	for (i = 0; i < n; i = run)
	{
		run = i + 1;
		if (batch->slots[i] == TIER_INVALID_INDEX)
		{
			tier_map_cancel_admit(&batch->tickets[i]);
			page_done(batch, i, false);
			continue;
		}
		while (run < n && batch->slots[run] == batch->slots[run - 1] + 1)
			run++;
		if (!write_pages(batch->slots[i], run - i, &batch->pages[i],
						 &incarnation))
		{
			int			save_errno = errno;
			int			j;

			for (j = i; j < n; j++)
			{
				if (batch->slots[j] != TIER_INVALID_INDEX)
					tier_map_free_slot(batch->slots[j]);
				tier_map_cancel_admit(&batch->tickets[j]);
				page_done(batch, j, false);
			}
			if (incarnation != 0)
			{
				BPEXT_COUNT(io_errors, 1);
				bpext_tier_fail("could not write to the tier file", save_errno);
			}
			break;
		}
		BPEXT_COUNT(page_writes, run - i);
		for (; i < run; i++)
		{
			bool		ok = tier_map_publish(&batch->tickets[i],
											  batch->slots[i],
											  batch->crcs[i], incarnation);

			published += ok ? 1 : 0;
			page_done(batch, i, ok);
		}
	}
	BPEXT_COUNT(write_time_us, bpext_microseconds_since(start));
	BPEXT_COUNT(admitted[batch->source], published);
	return published;
}

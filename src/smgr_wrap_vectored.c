/*-------------------------------------------------------------------------
 *
 * smgr_wrap_vectored.c
 *	  The read and write wrappers of storage managers that move vectors of
 *	  blocks (PostgreSQL 17: smgr_readv, smgr_writev, smgr_prefetch;
 *	  smgr_zeroextend is smgr_wrap.c's, as 16 has it too).
 *
 *	readv		serve, block by block, what the tier holds; read each
 *				contiguous run of the other blocks from the data file with
 *				one mdreadv (with bpext.admission = read, store what md
 *				returned).  Read streams hand StartReadBuffers up to
 *				io_combine_limit blocks, so one call often mixes hits and
 *				misses; a run of misses ends at the next block the tier
 *				holds, so the data file is read in as few calls as the hits
 *				allow, and never one call per block.  (Stores are queued for
 *				the worker: store_queue.c.)
 *	writev		invalidate the blocks before the data file changes, call
 *				mdwritev, invalidate them again, then (bpext.write_policy =
 *				dual_write) queue the image of a single-block write for the
 *				worker to store (store_queue.c).
 *				Several-block writes (which 17's own code does not issue:
 *				FlushBuffer and the bulk writer write one block per call)
 *				are only invalidated.
 *	prefetch	ask md to prefetch only the runs of blocks the tier will
 *				not serve, so that a tier hit does not also cost a
 *				data-file read ahead of time.
 *
 * A block judged a miss by the run scan (tier_will_miss) and then admitted
 * by another process before mdreadv is still read from the data file,
 * which is always right; a block judged a hit and invalidated before it is
 * read becomes a miss of its own (tier_serve_page re-checks the slot).
 * Neither can serve a stale page: serving is decided per block by
 * tier_serve_page under the map's protocol (tier_map.c).
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "smgr_wrap.h"

#if BPEXT_SMGR_VECTORED

#include "portability/instr_time.h"

#include "adaptive_admission.h"
#include "descriptors.h"
#include "settings.h"
#include "sizing.h"
#include "stats.h"
#include "store_queue.h"
#include "tier_io.h"
#include "tier_map.h"

static void bpext_readv(SMgrRelation reln, ForkNumber forknum,
						BlockNumber blocknum, void **buffers,
						BlockNumber nblocks);
static void bpext_writev(SMgrRelation reln, ForkNumber forknum,
						 BlockNumber blocknum, const void **buffers,
						 BlockNumber nblocks, bool skipFsync);
static bool bpext_prefetch(SMgrRelation reln, ForkNumber forknum,
						   BlockNumber blocknum, int nblocks);

BPEXT_ASSERT_WRAPS(bpext_readv, mdreadv);
BPEXT_ASSERT_WRAPS(bpext_writev, mdwritev);
BPEXT_ASSERT_WRAPS(bpext_prefetch, mdprefetch);

/* Blocks [first, first + nblocks) of the fork are changing in the file. */
static void
invalidate_blocks(const BpextRelFile *rfile, ForkNumber forknum,
				  BlockNumber first, BlockNumber nblocks)
{
	if (nblocks == 1)
		tier_map_invalidate_block(rfile, forknum, first);
	else
		tier_map_invalidate_from(rfile, forknum, first, first + nblocks);
}

/*
 * Read nblocks consecutive blocks from the data file with one mdreadv.
 * With admission (at most BPEXT_MAX_MISS_RUN blocks), each page's ticket
 * is taken before the read, so that a write racing the read makes the copy
 * unpublishable, and the pages are queued for the tier after it.  Each page's
 * read_microsec is the time of the read that brought it in.
 */
void
bpext_read_from_data_file(SMgrRelation reln, ForkNumber forknum,
						  BlockNumber blocknum, void **buffers,
						  BlockNumber nblocks, bool admit)
{
	const BpextRelFile *rfile = &BPEXT_SMGR_RELFILE(reln);
	TierAdmitTicket tickets[BPEXT_MAX_MISS_RUN];
	bool		admitted[BPEXT_MAX_MISS_RUN];
	bool		any_admitted = false;
	instr_time	start;
	uint64		elapsed_us;
	BlockNumber i;

	Assert(!admit || nblocks <= BPEXT_MAX_MISS_RUN);
	if (admit)
	{
		for (i = 0; i < nblocks; i++)
		{
			admitted[i] = tier_map_begin_admit(rfile, forknum, blocknum + i,
											   &tickets[i]);
			any_admitted |= admitted[i];
		}
	}

	INSTR_TIME_SET_CURRENT(start);
	if (any_admitted)
	{
		/*
		 * mdreadv may raise an error; each ticket pins a relation entry,
		 * which would then leak until restart.  Cancel them on the way out.
		 */
		PG_TRY();
		{
			mdreadv(reln, forknum, blocknum, buffers, nblocks);
		}
		PG_CATCH();
		{
			for (i = 0; i < nblocks; i++)
				if (admitted[i])
					tier_map_cancel_admit(&tickets[i]);
			PG_RE_THROW();
		}
		PG_END_TRY();
	}
	else
		mdreadv(reln, forknum, blocknum, buffers, nblocks);
	elapsed_us = bpext_microseconds_since(start);

	bpext_count_data_file_read(reln, buffers, nblocks, true, elapsed_us);
	if (any_admitted)
		for (i = 0; i < nblocks; i++)
			if (admitted[i])
				store_queue_put(rfile, forknum, blocknum + i, buffers[i],
								&tickets[i], BPEXT_SOURCE_READ);
}

/*
 * Count one data-file read of nblocks pages into buffers and note, per
 * buffer, how long it took, or (not timed) that bpext could not see.
 */
void
bpext_count_data_file_read(SMgrRelation reln, void **buffers,
						   BlockNumber nblocks, bool timed, uint64 elapsed_us)
{
	BlockNumber i;

	if (bpext_smgr_tracks(reln))
		bpext_stats_count_data_file_read(nblocks, timed, elapsed_us);
	for (i = 0; i < nblocks; i++)
	{
		if (timed)
			bpext_note_buffer_read(buffers[i], elapsed_us);
		else
			bpext_note_buffer_read_untimed(buffers[i]);
	}
}

static void
bpext_readv(SMgrRelation reln, ForkNumber forknum, BlockNumber blocknum,
			void **buffers, BlockNumber nblocks)
{
	const BpextRelFile *rfile = &BPEXT_SMGR_RELFILE(reln);
	bool		admit = bpext_read_admission_wanted();
	BlockNumber i = 0;

	bpext_wake_resting_worker();
	bpext_sizing_note_read(reln, forknum, blocknum, nblocks);
	if (!bpext_smgr_serves(reln))
	{
		bpext_read_from_data_file(reln, forknum, blocknum, buffers, nblocks,
								  false);
		return;
	}

	/*
	 * Each block's lookup misses the CPU caches in a large map: ask for all
	 * of their index lines at once, so the misses overlap.
	 */
	if (nblocks > 1 && !bpext_admission_paused())
		tier_map_prefetch_run(rfile, forknum, blocknum, nblocks);

	while (i < nblocks)
	{
		uint64		read_us;
		BlockNumber run;

		if (tier_serve_page(rfile, forknum, blocknum + i, buffers[i],
							&read_us, NULL))
		{
			bpext_note_buffer_read(buffers[i], read_us);
			bpext_adaptive_note_hit(reln, forknum, blocknum + i);
			i++;
			continue;
		}

		/* A run of misses, up to the next block the tier holds. */
		run = 1;
		while (i + run < nblocks && run < BPEXT_MAX_MISS_RUN &&
			   tier_will_miss(rfile, forknum, blocknum + i + run))
			run++;
		bpext_read_from_data_file(reln, forknum, blocknum + i, buffers + i,
								  run, admit);
		i += run;
	}
}

static void
bpext_writev(SMgrRelation reln, ForkNumber forknum, BlockNumber blocknum,
			 const void **buffers, BlockNumber nblocks, bool skipFsync)
{
	const BpextRelFile *rfile = &BPEXT_SMGR_RELFILE(reln);
	char	   *image;
	const void *images[1];

	bpext_sizing_note_write(reln, forknum, blocknum, nblocks);
	if (!bpext_smgr_tracks(reln))
	{
		mdwritev(reln, forknum, blocknum, buffers, nblocks, skipFsync);
		return;
	}

	invalidate_blocks(rfile, forknum, blocknum, nblocks);
	if (nblocks != 1 || !bpext_smgr_dual_write_wanted(reln))
	{
		mdwritev(reln, forknum, blocknum, buffers, nblocks, skipFsync);
		invalidate_blocks(rfile, forknum, blocknum, nblocks);
		return;
	}

	/*
	 * Write a private copy, and store that same copy: the caller's page
	 * may be a shared buffer under a share lock, whose hint bits can change
	 * while we work, and the tier must get exactly the file's bytes.
	 */
	image = tier_private_page();
	memcpy(image, buffers[0], BLCKSZ);
	images[0] = image;
	mdwritev(reln, forknum, blocknum, images, 1, skipFsync);
	tier_map_invalidate_block(rfile, forknum, blocknum);
	bpext_smgr_store_written(rfile, forknum, blocknum, image);
}

static bool
bpext_prefetch(SMgrRelation reln, ForkNumber forknum, BlockNumber blocknum,
			   int nblocks)
{
	const BpextRelFile *rfile = &BPEXT_SMGR_RELFILE(reln);
	int			i = 0;

	if (!bpext_smgr_serves(reln))
		return mdprefetch(reln, forknum, blocknum, nblocks);

	while (i < nblocks)
	{
		int			first;

		if (tier_map_contains(rfile, forknum, blocknum + i))
		{
			i++;
			continue;
		}
		first = i++;
		while (i < nblocks && !tier_map_contains(rfile, forknum, blocknum + i))
			i++;
		/* md says false when the range is past the end of the file. */
		if (!mdprefetch(reln, forknum, blocknum + first, i - first))
			return false;
	}
	return true;
}

void
bpext_fill_read_write_wrappers(BpextSmgrWrappers *wrappers)
{
	wrappers->readv = bpext_readv;
	wrappers->writev = bpext_writev;
	wrappers->prefetch = bpext_prefetch;
}

#endif							/* BPEXT_SMGR_VECTORED */

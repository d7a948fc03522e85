/*-------------------------------------------------------------------------
 *
 * smgr_wrap_block.c
 *	  The read and write wrappers of storage managers that move one block
 *	  per call (PostgreSQL 15 and 16: smgr_read, smgr_write).
 *
 *	read		look the page up in the tier; on a hit serve it, else call
 *				mdread (and, with bpext.admission = read, queue what md
 *				returned for the tier)
 *	write		invalidate the page before the data file changes, call
 *				mdwrite, then (bpext.write_policy = dual_write) queue the
 *				image just written, which is now the file's image, for the
 *				worker to store (store_queue.c)
 *
 * The protocol (invalidate before and after a write, tickets before a
 * copy) is smgr_wrap.c's; these functions never raise an error of their
 * own.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "smgr_wrap.h"

#if !BPEXT_SMGR_VECTORED

#include "portability/instr_time.h"

#include "adaptive_admission.h"
#include "descriptors.h"
#include "settings.h"
#include "sizing.h"
#include "stats.h"
#include "store_queue.h"
#include "tier_io.h"
#include "tier_map.h"

static void bpext_read(SMgrRelation reln, ForkNumber forknum,
					   BlockNumber blocknum, BpextPageOut buffer);
static void bpext_write(SMgrRelation reln, ForkNumber forknum,
						BlockNumber blocknum, BpextPageIn buffer,
						bool skipFsync);

BPEXT_ASSERT_WRAPS(bpext_read, mdread);
BPEXT_ASSERT_WRAPS(bpext_write, mdwrite);

/*
 * smgr_read: from the tier if it can, else from the data file; the read
 * (not the lookup before it, nor a store after it) is timed for
 * bpext_buffer_descriptors.read_microsec.
 */
static void
bpext_read(SMgrRelation reln, ForkNumber forknum, BlockNumber blocknum,
		   BpextPageOut buffer)
{
	const BpextRelFile *rfile = &BPEXT_SMGR_RELFILE(reln);
	TierAdmitTicket ticket;
	bool		admit = false;
	instr_time	start;
	uint64		read_us;

	bpext_wake_resting_worker();
	bpext_sizing_note_read(reln, forknum, blocknum, 1);
	if (!bpext_smgr_serves(reln))
	{
		INSTR_TIME_SET_CURRENT(start);
		mdread(reln, forknum, blocknum, buffer);
		read_us = bpext_microseconds_since(start);
		bpext_note_buffer_read(buffer, read_us);
		if (bpext_smgr_tracks(reln))
			bpext_stats_count_data_file_read(1, true, read_us);
		return;
	}

	if (tier_serve_page(rfile, forknum, blocknum, buffer, &read_us, NULL))
	{
		bpext_note_buffer_read(buffer, read_us);
		bpext_adaptive_note_hit(reln, forknum, blocknum);
		return;
	}

	if (bpext_read_admission_wanted())
		admit = tier_map_begin_admit(rfile, forknum, blocknum, &ticket);

	/*
	 * mdread may raise an error; the ticket pins a relation entry, which
	 * would then leak until restart.  Cancel it on the way out.
	 */
	INSTR_TIME_SET_CURRENT(start);
	if (admit)
	{
		PG_TRY();
		{
			mdread(reln, forknum, blocknum, buffer);
		}
		PG_CATCH();
		{
			tier_map_cancel_admit(&ticket);
			PG_RE_THROW();
		}
		PG_END_TRY();
		read_us = bpext_microseconds_since(start);
		store_queue_put(rfile, forknum, blocknum, buffer, &ticket,
						BPEXT_SOURCE_READ);
	}
	else
	{
		mdread(reln, forknum, blocknum, buffer);
		read_us = bpext_microseconds_since(start);
	}
	bpext_note_buffer_read(buffer, read_us);
	bpext_stats_count_data_file_read(1, true, read_us);
}

static void
bpext_write(SMgrRelation reln, ForkNumber forknum, BlockNumber blocknum,
			BpextPageIn buffer, bool skipFsync)
{
	const BpextRelFile *rfile = &BPEXT_SMGR_RELFILE(reln);
	char	   *image;

	bpext_sizing_note_write(reln, forknum, blocknum, 1);
	if (!bpext_smgr_tracks(reln))
	{
		mdwrite(reln, forknum, blocknum, buffer, skipFsync);
		return;
	}

	tier_map_invalidate_block(rfile, forknum, blocknum);
	if (!bpext_smgr_dual_write_wanted(reln))
	{
		mdwrite(reln, forknum, blocknum, buffer, skipFsync);
		tier_map_invalidate_block(rfile, forknum, blocknum);
		return;
	}

	/*
	 * Write a private copy, and store that same copy: the caller's page
	 * may be a shared buffer under a share lock, whose hint bits can change
	 * while we work, and the tier must get exactly the file's bytes.
	 */
	image = tier_private_page();
	memcpy(image, buffer, BLCKSZ);
	mdwrite(reln, forknum, blocknum, image, skipFsync);
	tier_map_invalidate_block(rfile, forknum, blocknum);
	bpext_smgr_store_written(rfile, forknum, blocknum, image);
}

void
bpext_fill_read_write_wrappers(BpextSmgrWrappers *wrappers)
{
	wrappers->read = bpext_read;
	wrappers->write = bpext_write;
}

#endif							/* !BPEXT_SMGR_VECTORED */

/*-------------------------------------------------------------------------
 *
 * smgr_wrap.c
 *	  bpext's replacements for the md.c members of smgrsw[]: where the tier
 *	  serves misses and where it learns that a data file changed.
 *
 *	read		look the page up in the tier; on a hit serve it, else call
 *				mdread (and, with bpext.admission = read, store what md
 *				returned)
 *	write		invalidate the page before the data file changes, call
 *				mdwrite, then (bpext.write_policy = dual_write) store the
 *				image just written, which is now the file's image
 *	extend		invalidate the page, call mdextend
 *	truncate	invalidate the blocks going away, call mdtruncate
 *	unlink		invalidate the fork (every fork for InvalidForkNumber),
 *				call mdunlink
 *	create		invalidate the fork, call mdcreate
 *
 * Invalidation happens before md touches the file, so a copy of the old
 * image can no longer be published by the time the new image exists, and
 * for writes and extends again afterwards, so that a copy taken while the
 * write was under way cannot be either (tier_map.c).  Temporary relations
 * never involve the tier.  WAL replay goes through these same functions
 * (and db_hooks.c wraps the replay of database-wide file operations), so
 * a hot standby uses its tier as a primary does.
 *
 * These functions run where errors are not allowed (truncate in a critical
 * section, unlink after commit): they never raise an error; tier failures
 * switch the tier off and the md call goes ahead regardless.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "portability/instr_time.h"
#include "postmaster/bgworker.h"

#include "bpext.h"
#include "compat.h"
#include "descriptors.h"
#include "interpose.h"
#include "smgr_wrap.h"
#include "tier_io.h"
#include "tier_map.h"

/* May this process serve or admit pages of this relation?  Never for
 * temporary relations. */
static inline bool
tier_serves(SMgrRelation reln)
{
	return bpext_tier_enabled() && !BPEXT_SMGR_IS_TEMP(reln);
}

/*
 * Must this relation's file changes be reported to the map?  Always, but
 * for temporary relations: also while the tier is off, so that the map is
 * right whatever happens while it comes back.
 */
static inline bool
tier_tracks(SMgrRelation reln)
{
	return BpextCtl != NULL && !BPEXT_SMGR_IS_TEMP(reln);
}

/* The read itself: from the tier if it can, else from the data file. */
static void
read_page(SMgrRelation reln, ForkNumber forknum, BlockNumber blocknum,
		  char *buffer)
{
	const BpextRelFile *rfile = &BPEXT_SMGR_RELFILE(reln);
	TierAdmitTicket ticket;
	bool		admit = false;

	if (!tier_serves(reln))
	{
		mdread(reln, forknum, blocknum, buffer);
		if (tier_tracks(reln))
			bpext_stats_count_read(false);
		return;
	}

	if (tier_serve_page(rfile, forknum, blocknum, buffer))
		return;
	bpext_stats_count_read(false);

	if (bpext_admission == BPEXT_ADMIT_READ)
		admit = tier_map_begin_admit(rfile, forknum, blocknum, &ticket);

	/*
	 * mdread may raise an error; the ticket pins a relation entry, which
	 * would then leak until restart.  Cancel it on the way out.
	 */
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
		tier_store_page(rfile, forknum, blocknum, buffer, &ticket,
						BPEXT_SOURCE_READ);
	}
	else
		mdread(reln, forknum, blocknum, buffer);
}

/* smgr_read: the read, timed for bpext_buffer_descriptors.read_microsec. */
static void
bpext_read(BPEXT_READ_ARGS)
{
	instr_time	start;
	instr_time	elapsed;

	INSTR_TIME_SET_CURRENT(start);
	read_page(reln, forknum, blocknum, buffer);
	INSTR_TIME_SET_CURRENT(elapsed);
	INSTR_TIME_SUBTRACT(elapsed, start);
	bpext_note_buffer_read(buffer, INSTR_TIME_GET_MICROSEC(elapsed));
}

/*
 * Dual-write this page?  Not from the checkpointer: the pages it writes
 * stay in shared buffers, and are pushed when they are evicted clean.  Not
 * in a critical section either: nothing there should wait on the SSD.
 */
static inline bool
dual_write_wanted(SMgrRelation reln)
{
	return bpext_write_policy == BPEXT_WRITE_DUAL && tier_serves(reln) &&
		CritSectionCount == 0 && MyBackendType != B_CHECKPOINTER;
}

static void
bpext_write(BPEXT_WRITE_ARGS)
{
	const BpextRelFile *rfile = &BPEXT_SMGR_RELFILE(reln);
	TierAdmitTicket ticket;
	char	   *image;

	if (!tier_tracks(reln))
	{
		mdwrite(reln, forknum, blocknum, buffer, skipFsync);
		return;
	}

	tier_map_invalidate_block(rfile, forknum, blocknum);
	if (!dual_write_wanted(reln))
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
	if (tier_map_begin_admit(rfile, forknum, blocknum, &ticket))
		tier_store_page(rfile, forknum, blocknum, image, &ticket,
						BPEXT_SOURCE_DUAL_WRITE);
}

static void
bpext_extend(BPEXT_EXTEND_ARGS)
{
	bool		tracked = tier_tracks(reln);

	if (tracked)
		tier_map_invalidate_block(&BPEXT_SMGR_RELFILE(reln), forknum, blocknum);
	mdextend(reln, forknum, blocknum, buffer, skipFsync);
	if (tracked)
		tier_map_invalidate_block(&BPEXT_SMGR_RELFILE(reln), forknum, blocknum);
}

static void
bpext_truncate(BPEXT_TRUNCATE_ARGS)
{
	if (tier_tracks(reln))
		tier_map_invalidate_from(&BPEXT_SMGR_RELFILE(reln), forknum, nblocks,
								 BPEXT_TRUNCATE_OLD_BLOCKS(old_blocks));
#if BPEXT_TRUNCATE_HAS_OLD_BLOCKS
	mdtruncate(reln, forknum, old_blocks, nblocks);
#else
	mdtruncate(reln, forknum, nblocks);
#endif
}

static void
bpext_unlink(BPEXT_UNLINK_ARGS)
{
	if (BpextCtl != NULL && !BPEXT_BACKEND_IS_TEMP(rlocator))
	{
		if (forknum == InvalidForkNumber)
		{
			ForkNumber	fork;

			for (fork = 0; fork <= MAX_FORKNUM; fork++)
				tier_map_invalidate_fork(&BPEXT_BACKEND_RELFILE(rlocator),
										 fork);
		}
		else
			tier_map_invalidate_fork(&BPEXT_BACKEND_RELFILE(rlocator),
									 forknum);
	}
	mdunlink(rlocator, forknum, isRedo);
}

static void
bpext_create(BPEXT_CREATE_ARGS)
{
	if (tier_tracks(reln))
		tier_map_invalidate_fork(&BPEXT_SMGR_RELFILE(reln), forknum);
	mdcreate(reln, forknum, isRedo);
}

/* Called from _PG_init, in the postmaster. */
void
bpext_install_smgr_wrappers(void)
{
	BpextSmgrWrappers wrappers = {
		.create = (void *) bpext_create,
		.unlink = (void *) bpext_unlink,
		.extend = (void *) bpext_extend,
		.read = (void *) bpext_read,
		.write = (void *) bpext_write,
		.truncate = (void *) bpext_truncate,
	};

	bpext_interpose_smgr(&wrappers);
}

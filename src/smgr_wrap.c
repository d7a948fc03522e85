/*-------------------------------------------------------------------------
 *
 * smgr_wrap.c
 *	  bpext's replacements for the md.c members of smgrsw[] that every
 *	  PostgreSQL generation shares: where the tier learns that a data file
 *	  is created, grows, shrinks or goes away.  Reads and writes, whose
 *	  shape differs by generation, are in smgr_wrap_block.c (15 and 16: one
 *	  block per call) and smgr_wrap_vectored.c (17: vectors of blocks).
 *
 *	extend		invalidate the page, call mdextend
 *	zeroextend	(16 on) invalidate the new blocks before and after
 *				mdzeroextend: most relations grow this way from 16 on, and
 *				a block reused after a truncation must not be served its
 *				old image
 *	truncate	invalidate the blocks going away, call mdtruncate,
 *				invalidate them again (on 16, in the shape of the server
 *				bpext runs in: compat.h, interpose.c)
 *	unlink		invalidate the fork (every fork for InvalidForkNumber),
 *				call mdunlink, invalidate it again
 *	create		invalidate the fork (in replay, only one that does not
 *				exist yet), call mdcreate
 *
 * Invalidation happens before md touches the file, so a copy of the old
 * image can no longer be published by the time the new image exists, and
 * for writes, extends, truncations and unlinks again afterwards, so that a
 * copy taken while md was at work cannot be either (tier_map.c).  Temporary relations
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

#include "compat.h"
#include "interpose.h"
#include "smgr_wrap.h"
#include "stats.h"
#include "store_queue.h"
#include "tier_control.h"
#include "tier_map.h"

static void bpext_extend(SMgrRelation reln, ForkNumber forknum,
						 BlockNumber blocknum, BpextPageIn buffer,
						 bool skipFsync);
static void bpext_unlink(BpextRelFileBackend rlocator, ForkNumber forknum,
						 bool isRedo);
static void bpext_create(SMgrRelation reln, ForkNumber forknum, bool isRedo);

BPEXT_ASSERT_WRAPS(bpext_extend, mdextend);
BPEXT_ASSERT_WRAPS(bpext_unlink, mdunlink);
BPEXT_ASSERT_WRAPS(bpext_create, mdcreate);

#if BPEXT_SMGR_ZEROEXTEND
static void bpext_zeroextend(SMgrRelation reln, ForkNumber forknum,
							 BlockNumber blocknum, int nblocks,
							 bool skipFsync);

BPEXT_ASSERT_WRAPS(bpext_zeroextend, mdzeroextend);
#endif

#if BPEXT_TRUNCATE_SHAPE_AT_START
static void bpext_truncate_with_old_blocks(SMgrRelation reln,
										   ForkNumber forknum,
										   BlockNumber old_blocks,
										   BlockNumber nblocks);
static void bpext_truncate_without_old_blocks(SMgrRelation reln,
											  ForkNumber forknum,
											  BlockNumber nblocks);

StaticAssertDecl(__builtin_types_compatible_p(__typeof__(&bpext_truncate_with_old_blocks),
											  BpextTruncateWithOldBlocks),
				 "bpext_truncate_with_old_blocks has the shape it is named for");
StaticAssertDecl(__builtin_types_compatible_p(__typeof__(&bpext_truncate_without_old_blocks),
											  BpextTruncateWithoutOldBlocks),
				 "bpext_truncate_without_old_blocks has the shape it is named for");
#if BPEXT_TRUNCATE_HAS_OLD_BLOCKS
BPEXT_ASSERT_WRAPS(bpext_truncate_with_old_blocks, mdtruncate);
#else
BPEXT_ASSERT_WRAPS(bpext_truncate_without_old_blocks, mdtruncate);
#endif
#else
static void bpext_truncate(BPEXT_TRUNCATE_ARGS);

BPEXT_ASSERT_WRAPS(bpext_truncate, mdtruncate);
#endif

/*
 * The image just written to a data file is now that file's image: queue
 * it for the tier (store_queue.c: the worker writes it, so that no tier
 * write happens while the caller holds the buffer's I/O flag and content
 * lock).  The caller has invalidated the block after the write, so the
 * ticket taken here samples the generations of the new image.
 */
void
bpext_smgr_store_written(const BpextRelFile *rfile, ForkNumber forknum,
						 BlockNumber blocknum, const char *image)
{
	TierAdmitTicket ticket;

	if (tier_map_begin_admit(rfile, forknum, blocknum, &ticket))
		store_queue_put(rfile, forknum, blocknum, image, &ticket,
						BPEXT_SOURCE_DUAL_WRITE);
}

static void
bpext_extend(SMgrRelation reln, ForkNumber forknum, BlockNumber blocknum,
			 BpextPageIn buffer, bool skipFsync)
{
	bool		tracked = bpext_smgr_tracks(reln);

	/* A new page takes a buffer, as a miss does. */
	bpext_wake_resting_worker();
	if (tracked)
		tier_map_invalidate_block(&BPEXT_SMGR_RELFILE(reln), forknum, blocknum);
	mdextend(reln, forknum, blocknum, buffer, skipFsync);
	if (tracked)
		tier_map_invalidate_block(&BPEXT_SMGR_RELFILE(reln), forknum, blocknum);
}

#if BPEXT_SMGR_ZEROEXTEND
/* Blocks [first, first + nblocks) of the fork are being added. */
static void
invalidate_new_blocks(SMgrRelation reln, ForkNumber forknum,
					  BlockNumber first, int nblocks)
{
	if (nblocks == 1)
		tier_map_invalidate_block(&BPEXT_SMGR_RELFILE(reln), forknum, first);
	else
		tier_map_invalidate_from(&BPEXT_SMGR_RELFILE(reln), forknum, first,
								 first + (BlockNumber) nblocks);
}

static void
bpext_zeroextend(SMgrRelation reln, ForkNumber forknum, BlockNumber blocknum,
				 int nblocks, bool skipFsync)
{
	bool		tracked = bpext_smgr_tracks(reln) && nblocks > 0;

	bpext_wake_resting_worker();
	if (tracked)
		invalidate_new_blocks(reln, forknum, blocknum, nblocks);
	mdzeroextend(reln, forknum, blocknum, nblocks, skipFsync);
	if (tracked)
		invalidate_new_blocks(reln, forknum, blocknum, nblocks);
}
#endif

/*
 * Truncation and unlinking invalidate before md acts, so that no copy of a
 * block going away survives it, and again after, as writes do: a copy
 * whose ticket was taken in between (by a prewarm task of a scan whose
 * leader has already let go of its lock) read the block while it still
 * existed and could otherwise be published past the new end of the file.
 * old_blocks is InvalidBlockNumber where the server does not pass it.
 */
static void
invalidate_truncated(SMgrRelation reln, ForkNumber forknum,
					 BlockNumber old_blocks, BlockNumber nblocks)
{
	if (bpext_smgr_tracks(reln))
		tier_map_invalidate_from(&BPEXT_SMGR_RELFILE(reln), forknum, nblocks,
								 old_blocks);
}

#if BPEXT_TRUNCATE_SHAPE_AT_START
/* 16.7 and later. */
static void
bpext_truncate_with_old_blocks(SMgrRelation reln, ForkNumber forknum,
							   BlockNumber old_blocks, BlockNumber nblocks)
{
	invalidate_truncated(reln, forknum, old_blocks, nblocks);
	bpext_mdtruncate_with_old_blocks(reln, forknum, old_blocks, nblocks);
	invalidate_truncated(reln, forknum, old_blocks, nblocks);
}

/* 16.0 to 16.6. */
static void
bpext_truncate_without_old_blocks(SMgrRelation reln, ForkNumber forknum,
								  BlockNumber nblocks)
{
	invalidate_truncated(reln, forknum, InvalidBlockNumber, nblocks);
	bpext_mdtruncate_without_old_blocks(reln, forknum, nblocks);
	invalidate_truncated(reln, forknum, InvalidBlockNumber, nblocks);
}
#else
static void
bpext_truncate(BPEXT_TRUNCATE_ARGS)
{
	invalidate_truncated(reln, forknum, BPEXT_TRUNCATE_OLD_BLOCKS(old_blocks),
						 nblocks);
	bpext_mdtruncate(reln, forknum, old_blocks, nblocks);
	invalidate_truncated(reln, forknum, BPEXT_TRUNCATE_OLD_BLOCKS(old_blocks),
						 nblocks);
}
#endif

static void
invalidate_unlinked(BpextRelFileBackend rlocator, ForkNumber forknum)
{
	ForkNumber	fork;

	if (forknum != InvalidForkNumber)
	{
		tier_map_invalidate_fork(&BPEXT_BACKEND_RELFILE(rlocator), forknum);
		return;
	}
	for (fork = 0; fork <= MAX_FORKNUM; fork++)
		tier_map_invalidate_fork(&BPEXT_BACKEND_RELFILE(rlocator), fork);
}

static void
bpext_unlink(BpextRelFileBackend rlocator, ForkNumber forknum, bool isRedo)
{
	bool		tracked = BpextCtl != NULL && !BPEXT_BACKEND_IS_TEMP(rlocator);

	if (tracked)
		invalidate_unlinked(rlocator, forknum);
	mdunlink(rlocator, forknum, isRedo);
	if (tracked)
		invalidate_unlinked(rlocator, forknum);
}

/*
 * Creating a fork invalidates it: whatever the tier holds under that name
 * belongs to a file that is gone.  Replay, though, calls smgrcreate with
 * isRedo before every block it reads (XLogReadBufferExtended), only to
 * make sure the file exists, and md leaves a fork that exists as it is
 * (open already, or opened again untouched): its tier pages are still its
 * file's pages then, and invalidating them would make a standby's replay
 * miss the tier on every block.  md's own test comes first, so a fork
 * that replay has open costs no system call; mdexists opens the fork as
 * mdcreate would, and fails only where mdcreate would fail.
 */
static void
bpext_create(SMgrRelation reln, ForkNumber forknum, bool isRedo)
{
	if (bpext_smgr_tracks(reln) &&
		!(isRedo && (reln->md_num_open_segs[forknum] > 0 ||
					 mdexists(reln, forknum))))
		tier_map_invalidate_fork(&BPEXT_SMGR_RELFILE(reln), forknum);
	mdcreate(reln, forknum, isRedo);
}

/* Called from _PG_init, in the postmaster. */
void
bpext_install_smgr_wrappers(void)
{
	BpextSmgrWrappers wrappers = {
		.create = bpext_create,
		.unlink = bpext_unlink,
		.extend = bpext_extend,
#if BPEXT_SMGR_ZEROEXTEND
		.zeroextend = bpext_zeroextend,
#endif
#if BPEXT_TRUNCATE_SHAPE_AT_START
		.truncate_with_old_blocks = bpext_truncate_with_old_blocks,
		.truncate_without_old_blocks = bpext_truncate_without_old_blocks,
#else
		.truncate = bpext_truncate,
#endif
	};

	bpext_fill_read_write_wrappers(&wrappers);
#if BPEXT_SMGR_AIO
	bpext_fill_aio_read_wrappers(&wrappers);
#endif
	bpext_interpose_smgr(&wrappers);
}

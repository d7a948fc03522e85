/*-------------------------------------------------------------------------
 *
 * smgr_wrap.h
 *	  bpext's storage-manager wrappers: the ones every generation shares
 *	  (smgr_wrap.c) and the read/write path of the generation being built
 *	  (smgr_wrap_block.c for 15, smgr_wrap_vectored.c for 17 and later, and
 *	  smgr_wrap_aio.c for the asynchronous reads of 18 and later).
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_SMGR_WRAP_H
#define BPEXT_SMGR_WRAP_H

#include "miscadmin.h"

#include "compat.h"
#include "interpose.h"
#include "settings.h"
#include "tier_control.h"

extern void bpext_install_smgr_wrappers(void);

/* The generation's read and write wrappers (smgr_wrap_block/vectored.c). */
extern void bpext_fill_read_write_wrappers(BpextSmgrWrappers *wrappers);

#if BPEXT_SMGR_VECTORED
/*
 * The longest run of misses read with one mdreadv when pages are admitted
 * as they are read: it bounds the admission tickets kept on the stack.
 * Read streams combine at most io_combine_limit blocks (32 in 17, up to
 * 128 in 18), so this splits few reads.
 */
#define BPEXT_MAX_MISS_RUN	32

extern void bpext_read_from_data_file(SMgrRelation reln, ForkNumber forknum,
									  BlockNumber blocknum, void **buffers,
									  BlockNumber nblocks, bool admit);
extern void bpext_count_data_file_read(SMgrRelation reln, void **buffers,
									   BlockNumber nblocks, bool timed,
									   uint64 elapsed_us);
#endif

#if BPEXT_SMGR_AIO
/* The asynchronous read path (smgr_wrap_aio.c). */
extern void bpext_fill_aio_read_wrappers(BpextSmgrWrappers *wrappers);
#endif

/* Queue the image just written to a data file for the tier (dual write). */
extern void bpext_smgr_store_written(const BpextRelFile *rfile,
									 ForkNumber forknum, BlockNumber blocknum,
									 const char *image);

/*
 * May this process serve or admit pages of this relation?  Never for
 * temporary relations.
 */
static inline bool
bpext_smgr_serves(SMgrRelation reln)
{
	return bpext_tier_enabled() && !BPEXT_SMGR_IS_TEMP(reln);
}

/*
 * Must this relation's file changes be reported to the map?  Always, but
 * for temporary relations: also while the tier is off, so that the map is
 * right whatever happens while it comes back.
 */
static inline bool
bpext_smgr_tracks(SMgrRelation reln)
{
	return BpextCtl != NULL && !BPEXT_SMGR_IS_TEMP(reln);
}

/*
 * Dual-write this page?  Not while admission is paused
 * (adaptive_admission.c); not from the checkpointer: the pages it writes
 * stay in shared buffers, and are pushed when they are evicted clean, so
 * queueing them would only crowd out the pages the bgwriter and backends
 * write as they evict.  Not in a critical section either: the queue never
 * waits, but taking the ticket takes the map's relation lock, and bpext
 * keeps its work there to the invalidation the invariant needs.
 */
static inline bool
bpext_smgr_dual_write_wanted(SMgrRelation reln)
{
	return bpext_write_policy == BPEXT_WRITE_DUAL && bpext_smgr_serves(reln) &&
		CritSectionCount == 0 && MyBackendType != B_CHECKPOINTER &&
		!bpext_admission_paused();
}

/*
 * Store the pages read from data files (bpext.admission = read)?  Not
 * while admission is paused.
 */
static inline bool
bpext_read_admission_wanted(void)
{
	return bpext_admission == BPEXT_ADMIT_READ && !bpext_admission_paused();
}

#endif							/* BPEXT_SMGR_WRAP_H */

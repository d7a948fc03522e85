/*-------------------------------------------------------------------------
 *
 * interpose.h
 *	  Installing bpext's wrappers into the server's smgr table.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_INTERPOSE_H
#define BPEXT_INTERPOSE_H

#include "compat.h"

/*
 * The wrapper for each f_smgr member bpext replaces (smgr_wrap*.c), each
 * typed as the md.c function it replaces, so that the compiler checks
 * every assignment.
 */
typedef struct BpextSmgrWrappers
{
	__typeof__(&mdcreate) create;
	__typeof__(&mdunlink) unlink;
	__typeof__(&mdextend) extend;
#if BPEXT_TRUNCATE_SHAPE_AT_START
	/* Both shapes; the server's is installed (compat.h). */
	BpextTruncateWithOldBlocks truncate_with_old_blocks;
	BpextTruncateWithoutOldBlocks truncate_without_old_blocks;
#else
	__typeof__(&mdtruncate) truncate;
#endif
#if BPEXT_SMGR_ZEROEXTEND
	__typeof__(&mdzeroextend) zeroextend;
#endif
#if BPEXT_SMGR_VECTORED
	__typeof__(&mdprefetch) prefetch;
	__typeof__(&mdreadv) readv;
	__typeof__(&mdwritev) writev;
#if BPEXT_SMGR_AIO
	__typeof__(&mdmaxcombine) maxcombine;
	__typeof__(&mdstartreadv) startreadv;
#endif
#else
	__typeof__(&mdread) read;
	__typeof__(&mdwrite) write;
#endif
} BpextSmgrWrappers;

extern void bpext_interpose_smgr(const BpextSmgrWrappers *wrappers);

#endif							/* BPEXT_INTERPOSE_H */

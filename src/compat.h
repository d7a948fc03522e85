/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  Every difference between the PostgreSQL major (and minor) versions
 *	  that bpext supports lives here, and only here.
 *
 * Two kinds of difference matter to bpext:
 *
 *	- The layout of smgr.c's private f_smgr struct, which bpext patches at
 *	  run time (see interpose.c).  The struct is not in any header, so its
 *	  shape per version is written down below as the ordered list of md.c
 *	  functions that fill it (BPEXT_MD_SLOTS) and the byte offsets of the
 *	  slots bpext replaces.
 *
 *	- Renamed types and changed signatures in the server API (RelFileNode
 *	  became RelFileLocator in 16, smgr_truncate gained old_blocks in
 *	  15.11/16.7/17.3, smgr_read became smgr_readv in 17, ...).
 *
 * db_hooks.c also relies on RmgrTable being writable and on the
 * xl_dbase_create_file_copy_rec / _wal_log_rec / xl_dbase_drop_rec
 * records, both of which exist from 15 on unchanged through 18.
 *
 * Only 15 is built and tested today; the entries for later majors follow
 * the source trees of those releases and are refused at compile time until
 * they have been built and tested (see the #error at the end).
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_COMPAT_H
#define BPEXT_COMPAT_H

#include "storage/md.h"
#include "storage/relfilenode.h"
#include "storage/smgr.h"
#include "storage/buf_internals.h"

/*
 * The patched smgr table reaches every process by fork() inheritance from
 * the postmaster; EXEC_BACKEND builds (and so Windows) start children from
 * a fresh executable image that would not have it.
 */
#if defined(EXEC_BACKEND) || defined(WIN32)
#error "bpext needs a fork()-based server: EXEC_BACKEND and Windows builds are not supported"
#endif

#if PG_VERSION_NUM < 150000 || PG_VERSION_NUM >= 160000
#error "bpext supports PostgreSQL 15 only so far; see src/compat.h for the plan for 16, 17 and 18"
#endif

/*
 * smgr_truncate gained an "old_blocks" argument in 15.11 (smgrtruncate2).
 * A server whose minor release is on the other side of that change than the
 * headers we were built with would call our wrapper with the wrong
 * arguments; interpose.c refuses to start in that case.
 */
#if PG_VERSION_NUM >= 150011
#define BPEXT_TRUNCATE_HAS_OLD_BLOCKS 1
#else
#define BPEXT_TRUNCATE_HAS_OLD_BLOCKS 0
#endif

/* The oldest and newest minor releases whose f_smgr bpext has audited. */
#define BPEXT_AUDITED_MIN_VERSION_NUM	150011
#define BPEXT_AUDITED_MAX_VERSION_NUM	159999

/*
 * The f_smgr struct of PostgreSQL 15, in order, as smgrsw[0] initialises it
 * (smgr_shutdown is NULL).  interpose.c looks for exactly this run of
 * pointers in the server's read-only-after-relocation data.
 */
#define BPEXT_MD_SLOTS \
	(void *) mdinit, NULL, (void *) mdopen, (void *) mdclose, \
	(void *) mdcreate, (void *) mdexists, (void *) mdunlink, \
	(void *) mdextend, (void *) mdprefetch, (void *) mdread, \
	(void *) mdwrite, (void *) mdwriteback, (void *) mdnblocks, \
	(void *) mdtruncate, (void *) mdimmedsync

/*
 * Slot indexes (pointer-sized units; every f_smgr member is a function
 * pointer) of the members bpext replaces.  For the majors still to come,
 * read off their source trees and the Debian binaries:
 *
 *					15		16		17		18
 *	create			4		4		4		4
 *	unlink			6		6		6		6
 *	extend			7		7		7		7
 *	zeroextend		-		8		8		8	(16+: ordinary relation growth)
 *	read/readv		9		10		10 (v)	11 (v)
 *	startreadv		-		-		-		12	(18: all buffered reads, AIO)
 *	write/writev	10		11		11 (v)	13 (v)
 *	truncate		13		14		14		16
 *	table size		120		128		136		160 bytes
 *
 * 16 renames RelFileNode to RelFileLocator (smgr_rlocator, spcOid, dbOid,
 * relNumber) and flattens BufferTag; 17 makes smgrread/smgrwrite inline
 * wrappers of the vectored calls; 18 reads through smgr_startreadv and
 * completes in md's AIO callback, so a tier hit must be staged as a
 * synchronous read of the tier file (design.md §4).
 */
#define BPEXT_SLOT_CREATE		4
#define BPEXT_SLOT_UNLINK		6
#define BPEXT_SLOT_EXTEND		7
#define BPEXT_SLOT_READ			9
#define BPEXT_SLOT_WRITE		10
#define BPEXT_SLOT_TRUNCATE		13

/* Relation identity: RelFileNode until 15, RelFileLocator from 16 on. */
typedef RelFileNode BpextRelFile;
typedef RelFileNodeBackend BpextRelFileBackend;

#define BPEXT_SMGR_RELFILE(reln)		((reln)->smgr_rnode.node)
#define BPEXT_SMGR_IS_TEMP(reln)		SmgrIsTemp(reln)
#define BPEXT_BACKEND_IS_TEMP(rfb)		RelFileNodeBackendIsTemp(rfb)
#define BPEXT_BACKEND_RELFILE(rfb)		((rfb).node)
#define BPEXT_RELFILE_SPC(rf)			((rf).spcNode)
#define BPEXT_RELFILE_DB(rf)			((rf).dbNode)
#define BPEXT_RELFILE_NUMBER(rf)		((rf).relNode)
#define BPEXT_RELFILE_EQUAL(a, b)		RelFileNodeEquals(a, b)

/* Buffer tags and headers. */
#define BPEXT_BUFTAG_RELFILE(tag)		((tag).rnode)
#define BPEXT_BUFTAG_FORK(tag)			((tag).forkNum)
#define BPEXT_BUFTAG_BLOCK(tag)			((tag).blockNum)

/* Signatures of the md.c functions bpext wraps. */
#define BPEXT_READ_ARGS \
	SMgrRelation reln, ForkNumber forknum, BlockNumber blocknum, char *buffer
#define BPEXT_WRITE_ARGS \
	SMgrRelation reln, ForkNumber forknum, BlockNumber blocknum, \
	char *buffer, bool skipFsync
#define BPEXT_EXTEND_ARGS BPEXT_WRITE_ARGS
#define BPEXT_UNLINK_ARGS \
	RelFileNodeBackend rlocator, ForkNumber forknum, bool isRedo
#define BPEXT_CREATE_ARGS \
	SMgrRelation reln, ForkNumber forknum, bool isRedo
#if BPEXT_TRUNCATE_HAS_OLD_BLOCKS
#define BPEXT_TRUNCATE_ARGS \
	SMgrRelation reln, ForkNumber forknum, BlockNumber old_blocks, \
	BlockNumber nblocks
#define BPEXT_TRUNCATE_OLD_BLOCKS(old_blocks)	(old_blocks)
#else
#define BPEXT_TRUNCATE_ARGS \
	SMgrRelation reln, ForkNumber forknum, BlockNumber nblocks
#define BPEXT_TRUNCATE_OLD_BLOCKS(old_blocks)	InvalidBlockNumber
#endif

#endif							/* BPEXT_COMPAT_H */

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
 *	  15.11/16.7/17.3, smgr_read became smgr_readv in 17, the buffer state
 *	  word became 64 bits in 19, ...).  Each is a macro or inline shim named
 *	  for what changed, so the rest of bpext reads the same on every major.
 *
 *	- Changes in what a buffer content lock guarantees (19: writing a
 *	  buffer takes a share-exclusive lock, and hint bits are set only under
 *	  one); see BPEXT_BUFFER_LOCK_WRITE_IMAGE.
 *
 * The storage-manager read and write path differs by generation: 15 and
 * 16 read and write one block per call (smgr_wrap_block.c), 16 also grows
 * relations with zeroextend (smgr_wrap.c), 17 reads and writes vectors of
 * blocks (smgr_wrap_vectored.c), 18 does the same but reads shared-buffer
 * misses through asynchronous I/O (smgr_wrap_aio.c, on top of the vectored
 * wrappers), and 19 is 18's generation (its smgr.h, md.h and aio.h are
 * 18's).  BPEXT_SMGR_ZEROEXTEND, BPEXT_SMGR_VECTORED and BPEXT_SMGR_AIO say
 * which are built.
 *
 * db_hooks.c also relies on RmgrTable being writable and on the
 * xl_dbase_create_file_copy_rec / _wal_log_rec / xl_dbase_drop_rec
 * records, both of which exist from 15 on unchanged through 19.
 *
 * 15, 16, 17, 18 and 19 are built and tested (16: 16.2's headers, run on
 * 16.2 and 16.14; see BPEXT_TRUNCATE_SHAPE_AT_START).
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_COMPAT_H
#define BPEXT_COMPAT_H

#include "storage/buf_internals.h"
#include "storage/fd.h"
#include "storage/md.h"
#include "storage/proc.h"
#include "storage/smgr.h"

/*
 * The patched smgr table reaches every process by fork() inheritance from
 * the postmaster; EXEC_BACKEND builds (and so Windows) start children from
 * a fresh executable image that would not have it.
 */
#if defined(EXEC_BACKEND) || defined(WIN32)
#error "bpext needs a fork()-based server: EXEC_BACKEND and Windows builds are not supported"
#endif

#if PG_VERSION_NUM < 150000 || PG_VERSION_NUM >= 200000
#error "bpext supports PostgreSQL 15 to 19; see src/compat.h"
#endif

/* Extensions name their own wait events from 17 on (wait_events.c). */
#define BPEXT_CUSTOM_WAIT_EVENTS (PG_VERSION_NUM >= 170000)

/* PostgreSQL's NUMA queries (port/pg_numa.h) exist from 18 on. */
#define BPEXT_HAS_PG_NUMA (PG_VERSION_NUM >= 180000)

/*
 * smgr_truncate gained an "old_blocks" argument in 15.11, 16.7 and 17.3
 * (with smgrtruncate2, which those releases added).  A server whose minor
 * release is on the other side of that change than the headers we were
 * built with would call our wrapper with the wrong arguments.
 *
 * On 15 and 17, interpose.c refuses to start in that case, and the audited
 * range starts at the change: older minor releases are refused at start.
 *
 * On 16 one build serves both sides (BPEXT_TRUNCATE_SHAPE_AT_START): it
 * has a wrapper of each shape, and interpose.c installs the one of the
 * server it runs in, which it knows from server_version_num and from
 * whether the server exports smgrtruncate2; if those two disagree it
 * refuses to start.  16.2 is what the registries reachable here carry with
 * headers, and every 16 user is on 16.7 or later.  The shape that the
 * headers do not declare is written down here; it is the shape 15.11's and
 * 17.3's headers declare, which their builds check.
 *
 * BPEXT_TRUNCATE_HAS_OLD_BLOCKS is the shape of the headers.
 */
#define BPEXT_TRUNCATE_SHAPE_AT_START (PG_VERSION_NUM >= 160000 && PG_VERSION_NUM < 170000)
#if PG_VERSION_NUM >= 190000
#define BPEXT_TRUNCATE_HAS_OLD_BLOCKS 1
#define BPEXT_TRUNCATE_SPLIT_IN_MINOR 0
#define BPEXT_AUDITED_MIN_VERSION_NUM	190000
#define BPEXT_AUDITED_MAX_VERSION_NUM	199999
#define BPEXT_TRUNCATE_CHANGED_IN		"18.0"
#elif PG_VERSION_NUM >= 180000
#define BPEXT_TRUNCATE_HAS_OLD_BLOCKS 1
#define BPEXT_TRUNCATE_SPLIT_IN_MINOR 0
#define BPEXT_AUDITED_MIN_VERSION_NUM	180000
#define BPEXT_AUDITED_MAX_VERSION_NUM	189999
#define BPEXT_TRUNCATE_CHANGED_IN		"18.0"
#elif PG_VERSION_NUM >= 170000
#define BPEXT_TRUNCATE_HAS_OLD_BLOCKS 1
#define BPEXT_TRUNCATE_SPLIT_IN_MINOR 1
#define BPEXT_AUDITED_MIN_VERSION_NUM	170003
#define BPEXT_AUDITED_MAX_VERSION_NUM	179999
#define BPEXT_TRUNCATE_CHANGED_IN		"17.3"
#elif PG_VERSION_NUM >= 160000
#define BPEXT_TRUNCATE_HAS_OLD_BLOCKS (PG_VERSION_NUM >= 160007)
#define BPEXT_TRUNCATE_SPLIT_IN_MINOR 1
#define BPEXT_AUDITED_MIN_VERSION_NUM	160000
#define BPEXT_AUDITED_MAX_VERSION_NUM	169999
#define BPEXT_TRUNCATE_CHANGED_IN		"16.7"
#define BPEXT_TRUNCATE_CHANGED_AT		160007
#elif PG_VERSION_NUM >= 150011
#define BPEXT_TRUNCATE_HAS_OLD_BLOCKS 1
#define BPEXT_TRUNCATE_SPLIT_IN_MINOR 1
#define BPEXT_AUDITED_MIN_VERSION_NUM	150011
#define BPEXT_AUDITED_MAX_VERSION_NUM	159999
#define BPEXT_TRUNCATE_CHANGED_IN		"15.11"
#else
#define BPEXT_TRUNCATE_HAS_OLD_BLOCKS 0
#define BPEXT_TRUNCATE_SPLIT_IN_MINOR 1
#define BPEXT_AUDITED_MIN_VERSION_NUM	150011
#define BPEXT_AUDITED_MAX_VERSION_NUM	159999
#define BPEXT_TRUNCATE_CHANGED_IN		"15.11"
#endif

/*
 * The f_smgr struct, in order, as smgrsw[0] initialises it (smgr_shutdown
 * is NULL).  interpose.c looks for exactly this run of pointers in the
 * server's read-only-after-relocation data.  Slot indexes are in pointer-
 * sized units (every f_smgr member is a function pointer):
 *
 *					15		16		17		18, 19
 *	create			4		4		4		4
 *	unlink			6		6		6		6
 *	extend			7		7		7		7
 *	zeroextend		-		8		8		8	(16+: ordinary relation growth)
 *	prefetch		8		9		9		9	(17+: a block range)
 *	read/readv		9		10		10 (v)	11 (v)
 *	startreadv		-		-		-		12	(18+: all buffered reads, AIO)
 *	write/writev	10		11		11 (v)	13 (v)
 *	truncate		13		14		14		16
 *	table size		120		128		136		160 bytes
 *
 * 18 adds maxcombine (10), startreadv (12) and fd (19) and completes reads
 * in md's AIO callback: smgr_wrap_aio.c says how a tier hit is completed.
 * 19's table is 18's, slot for slot.  16's table is the same in 16.2 and
 * 16.14 (read off both servers' smgrsw symbol); only the truncate slot's
 * arguments differ (above).
 *
 * Relations grow through zeroextend from 16 on; bpext wraps it in every
 * generation that has it (smgr_wrap.c).
 */
#define BPEXT_SMGR_ZEROEXTEND (PG_VERSION_NUM >= 160000)
#if PG_VERSION_NUM >= 180000
#define BPEXT_SMGR_VECTORED 1
#define BPEXT_SMGR_AIO 1
#define BPEXT_MD_SLOTS \
	(void *) mdinit, NULL, (void *) mdopen, (void *) mdclose, \
	(void *) mdcreate, (void *) mdexists, (void *) mdunlink, \
	(void *) mdextend, (void *) mdzeroextend, (void *) mdprefetch, \
	(void *) mdmaxcombine, (void *) mdreadv, (void *) mdstartreadv, \
	(void *) mdwritev, (void *) mdwriteback, (void *) mdnblocks, \
	(void *) mdtruncate, (void *) mdimmedsync, (void *) mdregistersync, \
	(void *) mdfd
#define BPEXT_SLOT_CREATE		4
#define BPEXT_SLOT_UNLINK		6
#define BPEXT_SLOT_EXTEND		7
#define BPEXT_SLOT_ZEROEXTEND	8
#define BPEXT_SLOT_PREFETCH		9
#define BPEXT_SLOT_MAXCOMBINE	10
#define BPEXT_SLOT_READV		11
#define BPEXT_SLOT_STARTREADV	12
#define BPEXT_SLOT_WRITEV		13
#define BPEXT_SLOT_TRUNCATE		16
#elif PG_VERSION_NUM >= 170000
#define BPEXT_SMGR_VECTORED 1
#define BPEXT_SMGR_AIO 0
#define BPEXT_MD_SLOTS \
	(void *) mdinit, NULL, (void *) mdopen, (void *) mdclose, \
	(void *) mdcreate, (void *) mdexists, (void *) mdunlink, \
	(void *) mdextend, (void *) mdzeroextend, (void *) mdprefetch, \
	(void *) mdreadv, (void *) mdwritev, (void *) mdwriteback, \
	(void *) mdnblocks, (void *) mdtruncate, (void *) mdimmedsync, \
	(void *) mdregistersync
#define BPEXT_SLOT_CREATE		4
#define BPEXT_SLOT_UNLINK		6
#define BPEXT_SLOT_EXTEND		7
#define BPEXT_SLOT_ZEROEXTEND	8
#define BPEXT_SLOT_PREFETCH		9
#define BPEXT_SLOT_READV		10
#define BPEXT_SLOT_WRITEV		11
#define BPEXT_SLOT_TRUNCATE		14
#elif PG_VERSION_NUM >= 160000
#define BPEXT_SMGR_VECTORED 0
#define BPEXT_SMGR_AIO 0
#define BPEXT_MD_SLOTS \
	(void *) mdinit, NULL, (void *) mdopen, (void *) mdclose, \
	(void *) mdcreate, (void *) mdexists, (void *) mdunlink, \
	(void *) mdextend, (void *) mdzeroextend, (void *) mdprefetch, \
	(void *) mdread, (void *) mdwrite, (void *) mdwriteback, \
	(void *) mdnblocks, (void *) mdtruncate, (void *) mdimmedsync
#define BPEXT_SLOT_CREATE		4
#define BPEXT_SLOT_UNLINK		6
#define BPEXT_SLOT_EXTEND		7
#define BPEXT_SLOT_ZEROEXTEND	8
#define BPEXT_SLOT_READ			10
#define BPEXT_SLOT_WRITE		11
#define BPEXT_SLOT_TRUNCATE		14
#else
#define BPEXT_SMGR_VECTORED 0
#define BPEXT_SMGR_AIO 0
#define BPEXT_MD_SLOTS \
	(void *) mdinit, NULL, (void *) mdopen, (void *) mdclose, \
	(void *) mdcreate, (void *) mdexists, (void *) mdunlink, \
	(void *) mdextend, (void *) mdprefetch, (void *) mdread, \
	(void *) mdwrite, (void *) mdwriteback, (void *) mdnblocks, \
	(void *) mdtruncate, (void *) mdimmedsync
#define BPEXT_SLOT_CREATE		4
#define BPEXT_SLOT_UNLINK		6
#define BPEXT_SLOT_EXTEND		7
#define BPEXT_SLOT_READ			9
#define BPEXT_SLOT_WRITE		10
#define BPEXT_SLOT_TRUNCATE		13
#endif

/*
 * Relation identity: RelFileNode until 15, RelFileLocator from 16 on.
 * BPEXT_BUFTAG_RELFILE yields a value (16 flattened BufferTag), so callers
 * copy it into a local before taking its address.
 */
#if PG_VERSION_NUM >= 160000
#include "storage/relfilelocator.h"

typedef RelFileLocator BpextRelFile;
typedef RelFileLocatorBackend BpextRelFileBackend;

#define BPEXT_SMGR_RELFILE(reln)		((reln)->smgr_rlocator.locator)
#define BPEXT_BACKEND_IS_TEMP(rfb)		RelFileLocatorBackendIsTemp(rfb)
#define BPEXT_BACKEND_RELFILE(rfb)		((rfb).locator)
#define BPEXT_RELFILE_SPC(rf)			((rf).spcOid)
#define BPEXT_RELFILE_DB(rf)			((rf).dbOid)
#define BPEXT_RELFILE_NUMBER(rf)		((rf).relNumber)
#define BPEXT_RELFILE_EQUAL(a, b)		RelFileLocatorEquals(a, b)

#define BPEXT_BUFTAG_RELFILE(tag)		BufTagGetRelFileLocator(&(tag))
#define BPEXT_BUFTAG_FORK(tag)			BufTagGetForkNum(&(tag))
#define BPEXT_BUFTAG_BLOCK(tag)			((tag).blockNum)
#define BPEXT_BUFTAG_DB(tag)			((tag).dbOid)
#define BPEXT_BUFTAGS_EQUAL(a, b)		BufferTagsEqual(&(a), &(b))
#else
#include "storage/relfilenode.h"

typedef RelFileNode BpextRelFile;
typedef RelFileNodeBackend BpextRelFileBackend;

#define BPEXT_SMGR_RELFILE(reln)		((reln)->smgr_rnode.node)
#define BPEXT_BACKEND_IS_TEMP(rfb)		RelFileNodeBackendIsTemp(rfb)
#define BPEXT_BACKEND_RELFILE(rfb)		((rfb).node)
#define BPEXT_RELFILE_SPC(rf)			((rf).spcNode)
#define BPEXT_RELFILE_DB(rf)			((rf).dbNode)
#define BPEXT_RELFILE_NUMBER(rf)		((rf).relNode)
#define BPEXT_RELFILE_EQUAL(a, b)		RelFileNodeEquals(a, b)

#define BPEXT_BUFTAG_RELFILE(tag)		((tag).rnode)
#define BPEXT_BUFTAG_FORK(tag)			((tag).forkNum)
#define BPEXT_BUFTAG_BLOCK(tag)			((tag).blockNum)
#define BPEXT_BUFTAG_DB(tag)			((tag).rnode.dbNode)
#define BPEXT_BUFTAGS_EQUAL(a, b)		BUFFERTAGS_EQUAL(a, b)
#endif

#define BPEXT_SMGR_IS_TEMP(reln)		SmgrIsTemp(reln)

/*
 * This process's PGPROC number, which indexes per-process shared arrays
 * (PGPROC.pgprocno became the global MyProcNumber in 17).
 */
#if PG_VERSION_NUM >= 170000
#define BPEXT_MY_PROC_NUMBER()			((int) MyProcNumber)
#else
#define BPEXT_MY_PROC_NUMBER()			(MyProc->pgprocno)
#endif

/*
 * A process leaving with buffer I/O under way must end it before letting
 * go of its pins.  On 15 that is AbortBufferIO(); from 16 on the resource
 * owner tracks buffer I/O and releases it with the pins
 * (ResourceOwnerRelease, RESOURCE_RELEASE_BEFORE_LOCKS).
 */
#if PG_VERSION_NUM >= 160000
#define bpext_abort_buffer_io()			((void) 0)
#else
#define bpext_abort_buffer_io()			AbortBufferIO()
#endif

/*
 * Dropping one clean, unpinned shared buffer.  17 has a public function
 * for it; 15 and 16 have none, so buffer_ops.c does what InvalidateBuffer
 * does, which clears the buffer's tag with CLEAR_BUFFERTAG on 15 and
 * ClearBufferTag on 16.
 */
#if PG_VERSION_NUM >= 160000
#define bpext_clear_buffer_tag(tag)		ClearBufferTag(&(tag))
#else
#define bpext_clear_buffer_tag(tag)		CLEAR_BUFFERTAG(tag)
#endif
#if PG_VERSION_NUM >= 180000
#define BPEXT_HAVE_EVICT_UNPINNED_BUFFER 1
/* 18 also reports whether the buffer had to be written out first. */
static inline bool
bpext_evict_unpinned_buffer(Buffer buffer)
{
	bool		flushed;

	return EvictUnpinnedBuffer(buffer, &flushed);
}
#elif PG_VERSION_NUM >= 170000
#define BPEXT_HAVE_EVICT_UNPINNED_BUFFER 1
#define bpext_evict_unpinned_buffer(buffer)	EvictUnpinnedBuffer(buffer)
#else
#define BPEXT_HAVE_EVICT_UNPINNED_BUFFER 0
#endif

/* Signatures of the md.c functions bpext wraps. */
#if BPEXT_TRUNCATE_HAS_OLD_BLOCKS
#define BPEXT_TRUNCATE_ARGS \
	SMgrRelation reln, ForkNumber forknum, BlockNumber old_blocks, \
	BlockNumber nblocks
#define BPEXT_TRUNCATE_OLD_BLOCKS(old_blocks)	(old_blocks)
#define bpext_mdtruncate(reln, forknum, old_blocks, nblocks) \
	mdtruncate(reln, forknum, old_blocks, nblocks)
#else
#define BPEXT_TRUNCATE_ARGS \
	SMgrRelation reln, ForkNumber forknum, BlockNumber nblocks
#define BPEXT_TRUNCATE_OLD_BLOCKS(old_blocks)	InvalidBlockNumber
#define bpext_mdtruncate(reln, forknum, old_blocks, nblocks) \
	mdtruncate(reln, forknum, nblocks)
#endif

#if BPEXT_TRUNCATE_SHAPE_AT_START
/*
 * 16: smgr_truncate in each of its two shapes, and md's truncate called in
 * either: a server calls bpext's wrapper, and bpext calls mdtruncate, in
 * the shape of that server, which is the headers' shape or the other one.
 * The headers declare one of the two (checked below); the other is 15.11's
 * and 17.3's (with old_blocks) or 16.6's (without).  The casts go through
 * void (*) (void), the type GCC lets convert to any function type.
 */
typedef void (*BpextTruncateWithOldBlocks) (SMgrRelation reln,
											ForkNumber forknum,
											BlockNumber old_blocks,
											BlockNumber nblocks);
typedef void (*BpextTruncateWithoutOldBlocks) (SMgrRelation reln,
											   ForkNumber forknum,
											   BlockNumber nblocks);

StaticAssertDecl(__builtin_types_compatible_p(__typeof__(&mdtruncate),
											  BpextTruncateWithOldBlocks) ==
				 BPEXT_TRUNCATE_HAS_OLD_BLOCKS &&
				 __builtin_types_compatible_p(__typeof__(&mdtruncate),
											  BpextTruncateWithoutOldBlocks) ==
				 !BPEXT_TRUNCATE_HAS_OLD_BLOCKS,
				 "mdtruncate has neither of the shapes 16 has had");

static inline void
bpext_mdtruncate_with_old_blocks(SMgrRelation reln, ForkNumber forknum,
								 BlockNumber old_blocks, BlockNumber nblocks)
{
	BpextTruncateWithOldBlocks md = (BpextTruncateWithOldBlocks) (void (*) (void)) mdtruncate;

	md(reln, forknum, old_blocks, nblocks);
}

static inline void
bpext_mdtruncate_without_old_blocks(SMgrRelation reln, ForkNumber forknum,
									BlockNumber nblocks)
{
	BpextTruncateWithoutOldBlocks md = (BpextTruncateWithoutOldBlocks) (void (*) (void)) mdtruncate;

	md(reln, forknum, nblocks);
}
#endif

/*
 * A relation fork's path, palloc'd.  18 returns it by value in a struct
 * (RelPathStr) instead.
 */
#if PG_VERSION_NUM >= 180000
#define bpext_relpath_perm(rfile, fork)	pstrdup(relpathperm(rfile, fork).str)
#else
#define bpext_relpath_perm(rfile, fork)	relpathperm(rfile, fork)
#endif

/* heap_form_minimal_tuple gained a leading-space argument in 18. */
#if PG_VERSION_NUM >= 180000
#define bpext_form_minimal_tuple(desc, values, nulls) \
	heap_form_minimal_tuple(desc, values, nulls, 0)
#else
#define bpext_form_minimal_tuple(desc, values, nulls) \
	heap_form_minimal_tuple(desc, values, nulls)
#endif

/*
 * The buffer descriptor's state word (flags, usage count, pin count):
 * 32 bits until 18, 64 bits from 19 on, where it also holds the content
 * lock.  bpext_unlock_buf_hdr releases the header spinlock without
 * changing the state (19's UnlockBufHdr takes no state: it only clears
 * BM_LOCKED).
 */
#if PG_VERSION_NUM >= 190000
typedef uint64 BpextBufState;
#define bpext_buf_state_read(desc)			pg_atomic_read_u64(&(desc)->state)
#define bpext_unlock_buf_hdr(desc, state)	UnlockBufHdr(desc)
#else
typedef uint32 BpextBufState;
#define bpext_buf_state_read(desc)			pg_atomic_read_u32(&(desc)->state)
#define bpext_unlock_buf_hdr(desc, state)	UnlockBufHdr(desc, state)
#endif

/*
 * A buffer dirtied while it was being written.  Until 18 its page could
 * change during the write (hint bits, under a share lock), and
 * BM_JUST_DIRTIED kept the buffer dirty afterwards; from 19 on nothing
 * changes a page while it is written (see below), and the flag is gone.
 */
#if PG_VERSION_NUM >= 190000
#define BPEXT_BM_DIRTIED_DURING_WRITE	0
#else
#define BPEXT_BM_DIRTIED_DURING_WRITE	BM_JUST_DIRTIED
#endif

/*
 * The content lock under which a buffer's bytes are what writing it would
 * put in its data file, and which FlushOneBuffer requires.
 *
 * Until 18 that is a share lock.  It keeps out every change but hint
 * bits, which are set under a share lock too: FlushBuffer therefore writes
 * a private copy of the page, and a change in the middle of the copy
 * leaves the buffer dirty (BM_JUST_DIRTIED).  A page copied by bpext under
 * a share lock can carry a hint bit its file lacks; the setter then dirties
 * the buffer, so its next write replaces or invalidates the tier's copy.
 *
 * From 19 on it is BUFFER_LOCK_SHARE_EXCLUSIVE, which conflicts with itself
 * and with exclusive locks.  FlushBuffer holds it and writes straight from
 * shared buffers (FlushOneBuffer asserts it), and hint bits are set only by
 * a holder of it (BufferBeginSetHintBits), so under a share lock alone a
 * hint bit can change during bpext's copy.  Under share-exclusive nothing
 * can: a clean buffer copied under it is exactly its file's image (but for
 * the hints that MarkBufferDirtyHint does not dirty the buffer for, the
 * exception test/t/009_tier_bytes.pl checks).
 */
#if PG_VERSION_NUM >= 190000
#define BPEXT_BUFFER_LOCK_WRITE_IMAGE	BUFFER_LOCK_SHARE_EXCLUSIVE
#else
#define BPEXT_BUFFER_LOCK_WRITE_IMAGE	BUFFER_LOCK_SHARE
#endif

/*
 * Setting a page's checksum in place: PageSetChecksumInplace until 18,
 * PageSetChecksum from 19 on (the copying variant is gone, with the copy
 * FlushBuffer used to make).
 */
#if PG_VERSION_NUM >= 190000
#define bpext_page_set_checksum(page, blkno)	PageSetChecksum(page, blkno)
#else
#define bpext_page_set_checksum(page, blkno)	PageSetChecksumInplace(page, blkno)
#endif

/*
 * The descriptor of the data-file segment that holds a block, if md has it
 * open in this process, and the block's offset in it; -1 otherwise (the
 * segment not opened here yet, or its virtual descriptor closed to stay
 * within max_files_per_process).  md.c's vector of open segments is
 * private, but smgr.h exposes the pointer to it and the count of open
 * segments, and its element has been { File mdfd_vfd; BlockNumber
 * mdfd_segno; } from 15 through 19.  For looking at the page cache only
 * (adaptive_admission.c): never read or write through it.
 */
typedef struct BpextMdfdVec
{
	File		mdfd_vfd;
	BlockNumber mdfd_segno;
} BpextMdfdVec;

static inline int
bpext_md_open_segment_fd(SMgrRelation reln, ForkNumber fork,
						 BlockNumber block, off_t *offset)
{
	BlockNumber segno = block / ((BlockNumber) RELSEG_SIZE);
	const BpextMdfdVec *seg;

	if (reln->md_num_open_segs[fork] <= 0 ||
		segno >= (BlockNumber) reln->md_num_open_segs[fork])
		return -1;
	seg = &((const BpextMdfdVec *) reln->md_seg_fds[fork])[segno];
	if (seg->mdfd_segno != segno || seg->mdfd_vfd <= 0)
		return -1;
	*offset = (off_t) BLCKSZ * (block % ((BlockNumber) RELSEG_SIZE));
	return FileGetRawDesc(seg->mdfd_vfd);
}

/*
 * Page images passed to extend and write (const from 16 on), and the
 * buffer a single-block read fills (void * from 16 on).
 */
#if PG_VERSION_NUM >= 160000
typedef const void *BpextPageIn;
typedef void *BpextPageOut;
#else
typedef char *BpextPageIn;
typedef char *BpextPageOut;
#endif

/*
 * The PGPROC number of another process (a parallel worker's leader), the
 * index of per-process shared arrays.  GetNumberFromPGProc from 17 on.
 */
#if PG_VERSION_NUM >= 170000
#define BPEXT_PROC_NUMBER(proc)			((int) GetNumberFromPGProc(proc))
#else
#define BPEXT_PROC_NUMBER(proc)			((proc)->pgprocno)
#endif

/*
 * Extensions can add their own EXPLAIN options, with hooks that print
 * per plan and per node, from 18 on (RegisterExtensionExplainOption,
 * explain_per_plan_hook, explain_per_node_hook); before that bpext offers
 * a function instead (explain_function.c).  19 gives each option a check
 * for the setting that sets EXPLAIN's defaults.
 */
#define BPEXT_EXPLAIN_OPTIONS (PG_VERSION_NUM >= 180000)
#if PG_VERSION_NUM >= 190000
#define bpext_register_explain_option(name, handler) \
	RegisterExtensionExplainOption(name, handler, GUCCheckBooleanExplainOption)
#elif PG_VERSION_NUM >= 180000
#define bpext_register_explain_option(name, handler) \
	RegisterExtensionExplainOption(name, handler)
#endif

/* ExecutorRun lost its execute_once argument in 18. */
#if PG_VERSION_NUM >= 180000
#define BPEXT_EXECUTOR_RUN_ARGS \
	QueryDesc *queryDesc, ScanDirection direction, uint64 count
#define BPEXT_EXECUTOR_RUN_PASS		queryDesc, direction, count
#define bpext_executor_run_once(queryDesc) \
	ExecutorRun(queryDesc, ForwardScanDirection, 0)
#else
#define BPEXT_EXECUTOR_RUN_ARGS \
	QueryDesc *queryDesc, ScanDirection direction, uint64 count, \
	bool execute_once
#define BPEXT_EXECUTOR_RUN_PASS		queryDesc, direction, count, execute_once
#define bpext_executor_run_once(queryDesc) \
	ExecutorRun(queryDesc, ForwardScanDirection, 0, true)
#endif

/* pg_plan_query takes the ExplainState of an EXPLAIN from 19 on. */
#if PG_VERSION_NUM >= 190000
#define bpext_plan_query(query, text, options) \
	pg_plan_query(query, text, options, NULL, NULL)
#else
#define bpext_plan_query(query, text, options) \
	pg_plan_query(query, text, options, NULL)
#endif

/*
 * A plan node's buffer counts: in its Instrumentation until 18, in the
 * general Instrumentation inside its NodeInstrumentation from 19 on.
 */
#if PG_VERSION_NUM >= 190000
#define BPEXT_NODE_BUFUSAGE(instrument)	(&(instrument)->instr.bufusage)
#else
#define BPEXT_NODE_BUFUSAGE(instrument)	(&(instrument)->bufusage)
#endif

/*
 * Walking a plan-state tree.  16 gave planstate_tree_walker's walker a
 * prototype; 15's parameter has none, which a C23 compiler reads as a
 * function of no arguments.  The cast through void (*) (void), which
 * matches every function type, keeps -Wcast-function-type quiet.
 */
#if PG_VERSION_NUM >= 160000
#define bpext_planstate_tree_walker(planstate, walker, context) \
	planstate_tree_walker(planstate, walker, context)
#else
#define bpext_planstate_tree_walker(planstate, walker, context) \
	planstate_tree_walker(planstate, \
						  (bool (*) ()) (void (*) (void)) (walker), context)
#endif

/*
 * Fails the build unless a wrapper has exactly the type of the md.c
 * function whose slot it takes: a signature change upstream must break the
 * build, not corrupt the stack at run time.
 */
#define BPEXT_ASSERT_WRAPS(wrapper, md_function) \
	StaticAssertDecl(__builtin_types_compatible_p(__typeof__(&(wrapper)), \
												  __typeof__(&(md_function))), \
					 #wrapper " must have exactly the type of " #md_function)

#endif							/* BPEXT_COMPAT_H */

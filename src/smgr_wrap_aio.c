/*-------------------------------------------------------------------------
 *
 * smgr_wrap_aio.c
 *	  The read path of storage managers that read through asynchronous I/O
 *	  (PostgreSQL 18: smgr_maxcombine, smgr_startreadv).  Writes, growth,
 *	  prefetch and the synchronous smgr_readv (left to relation copies)
 *	  are the vectored generation's wrappers (smgr_wrap_vectored.c).
 *
 * In 18 a shared-buffer miss reaches the storage manager as
 * smgrstartreadv() on an AIO handle to which the buffer manager has already
 * attached its completion callbacks (verify each page, mark the buffers
 * valid, wake waiters).  md stages a readv of the data file on the handle;
 * the I/O is then performed by the backend itself (io_method = sync, or a
 * handle flagged synchronous), by an I/O worker that reopens the file
 * through smgr_fd (worker), or by the kernel (io_uring), and the callbacks
 * run wherever it completes.  Callbacks come from a closed table: bpext
 * cannot add its own.
 *
 *	maxcombine	keep each combined read all tier hits or all misses.  The
 *				buffer manager asks how many blocks one I/O may cover
 *				before it starts one; a run of blocks the tier holds ends
 *				at the first it does not, and the other way round.
 *	startreadv	serve the leading run of tier hits in this process and
 *				complete the handle; hand a read that starts with a miss
 *				to mdstartreadv whole (or, with bpext.admission = read,
 *				read it in this process and admit it: below).
 *
 * Serving a run of hits.  Each page is read from the tier into its buffer
 * by tier_serve_page, with the checks of every other major: the slot
 * pinned while it is read, the CRC compared, the slot re-checked after the
 * read (a page invalidated meanwhile is a miss).  The buffers are under
 * the buffer manager's I/O in progress, so no other process reads, writes
 * or evicts them meanwhile.  The handle must still complete, with the
 * buffer manager's own callbacks.  It is given an I/O that changes
 * nothing: a readv of the same length from an empty in-memory file (a
 * hole, read as zeroes) into a scratch page, flagged PGAIO_HF_SYNCHRONOUS,
 * with md's read callback.  (Not /dev/zero: the kernel cuts a /dev/zero
 * read short at a memory page when a signal is pending, a latch wakeup
 * say, and md's callback reports a read of less than one block as a
 * failed read.  Reads of an in-memory file are cut short by nothing but a
 * fatal signal.)  Every io_method
 * performs a synchronous I/O at once, in the process that staged it; its
 * completion runs the callbacks on the pages we filled exactly as after a
 * data-file read: md's checks the length, the buffer manager's verifies
 * each page (its checksum, with data checksums) and marks it valid.  (The
 * tier file's own read is not staged on the handle instead: the callbacks
 * make the buffers valid on completion, before bpext could compare the
 * tier CRC or re-check the slot, and a tier page that failed either would
 * already be visible.)  So under every io_method:
 *
 *	- a tier hit is read, checked and completed in the backend that missed,
 *	  before smgrstartreadv returns; no I/O worker reopens it and no
 *	  io_uring queue sees it, and no I/O is ever issued against a data
 *	  file's descriptor at a tier offset or the other way round;
 *	- a miss is md's own asynchronous read of the data file, performed and
 *	  completed as PostgreSQL would without bpext: the data file is always
 *	  right.
 *
 * If only the first k of n blocks are served (a later one was invalidated
 * or evicted since maxcombine looked, or its read failed), the handle
 * completes with k blocks: the buffer manager's partial-read path marks the
 * rest failed and starts another read for them, which finds them misses or
 * hits anew.  A read whose first block is a miss goes to md whole even if
 * later blocks are hits (possible only if the map changed since
 * maxcombine).
 *
 * A map change between lookup and completion: the only window is between
 * tier_serve_page's re-check of a slot and the (immediate) completion of
 * the handle, and in it nothing can change the block in the data file: its
 * buffer is under I/O in progress, so it cannot be written, and truncation
 * and unlinking wait for that I/O.  This is the guarantee 15 and 17 rely on
 * for their synchronous reads.
 *
 * Read admission.  bpext.admission = read stores each page read from a
 * data file, and must see its image before anyone else can: on 15 and 17
 * it is copied while the buffer is still under I/O in progress, before
 * the buffer manager makes it valid, so no hint bit set by another reader
 * can slip into the copy.  An asynchronous read completes, and its
 * buffers become valid, in PostgreSQL's callbacks, out of bpext's sight.
 * So with admission = read a read that starts with a miss is performed in
 * this process as on 17 (tickets taken, one mdreadv, pages stored: the
 * vectored generation's bpext_read_from_data_file), and the handle is then
 * completed as for a tier hit.  Admission = read therefore gives up the
 * asynchronous data-file read on 18; admission = evict (the default)
 * keeps it.
 *
 * Staged I/O.  A read stream in batch mode stages its data-file reads and
 * submits them only when it is done starting reads, and PostgreSQL's rule
 * is never to wait while holding staged, unsubmitted I/O: another backend
 * that needs one of those buffers waits for the owner to submit.  A tier
 * read is a synchronous read in this process (and admission = read's
 * data-file read too), which a slow or hung device can make long.  So
 * before the first of them, the reads this process has staged are
 * submitted (submit_staged_before_reading): tier_serve_page calls it once
 * its lookup has found and pinned the page, just before the read.  So one
 * lookup per block decides whether the tier is read, and no tier read ever
 * follows without the submission; a read whose first block the lookup
 * found missing goes to md (or to admission = read) whole, its staged
 * read keeping the batch.
 *
 * read_microsec is the time of the read that filled the buffer when this
 * process performed it (tier hits, admitted misses, and every miss under
 * io_method = sync, where md performs the read inside smgrstartreadv);
 * NULL when the read completes elsewhere.
 *
 * Locking: none of its own; the map's protocol (tier_map.c) for every page
 * served.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "smgr_wrap.h"

#if BPEXT_SMGR_AIO

#include <sys/mman.h>
#include <unistd.h>

#include "portability/instr_time.h"
#include "storage/aio.h"
#include "storage/bufmgr.h"
#include "storage/fd.h"

#include "adaptive_admission.h"
#include "descriptors.h"
#include "settings.h"
#include "sizing.h"
#include "stats.h"
#include "tier_io.h"
#include "tier_map.h"

static uint32 bpext_maxcombine(SMgrRelation reln, ForkNumber forknum,
							   BlockNumber blocknum);
static void bpext_startreadv(PgAioHandle *ioh, SMgrRelation reln,
							 ForkNumber forknum, BlockNumber blocknum,
							 void **buffers, BlockNumber nblocks);

BPEXT_ASSERT_WRAPS(bpext_maxcombine, mdmaxcombine);
BPEXT_ASSERT_WRAPS(bpext_startreadv, mdstartreadv);

/*
 * The empty in-memory file (memfd) that the I/O completing a served read
 * reads from, MAX_IO_COMBINE_LIMIT blocks long, made in the postmaster and
 * inherited by every child.  -1 if it could not be made; then nothing is
 * served on the asynchronous path (said once, at start).
 */
static int	completion_fd = -1;

/* Where that I/O's zeroes go (never into a buffer). */
static PGIOAlignedBlock completion_scratch;

/* Blocks whose index lines bpext_maxcombine asks for ahead of its lookups. */
#define MAXCOMBINE_PREFETCH		8

static uint32
bpext_maxcombine(SMgrRelation reln, ForkNumber forknum, BlockNumber blocknum)
{
	const BpextRelFile *rfile = &BPEXT_SMGR_RELFILE(reln);
	uint32		limit = mdmaxcombine(reln, forknum, blocknum);
	bool		first_held;
	uint32		n;

	/*
	 * While admission is paused the tier serves only its probes, which
	 * bpext_startreadv finds on its own.
	 */
	if (!bpext_smgr_serves(reln) || completion_fd < 0 ||
		bpext_admission_paused())
		return limit;

	/* The buffer manager never combines more than this. */
	limit = Min(limit, MAX_IO_COMBINE_LIMIT);

	/*
	 * As bpext_readv (17), the index lines are asked for ahead of the
	 * lookups, but only MAXCOMBINE_PREFETCH blocks ahead: the loop often
	 * stops long before the limit.
	 */
	tier_map_prefetch_run(rfile, forknum, blocknum,
						  Min(limit, MAXCOMBINE_PREFETCH));
	first_held = tier_map_contains(rfile, forknum, blocknum);
	for (n = 1; n < limit; n++)
	{
		if (n + MAXCOMBINE_PREFETCH - 1 < limit)
			tier_map_prefetch_run(rfile, forknum,
								  blocknum + n + MAXCOMBINE_PREFETCH - 1, 1);
		if (tier_map_contains(rfile, forknum, blocknum + n) != first_held)
			break;
	}
	return n;
}

/*
 * Complete the handle of a read whose first nserved of nblocks pages are
 * already in their buffers (from the tier or read here from the data
 * file): see the file header.
 */
static void
complete_served_read(PgAioHandle *ioh, SMgrRelation reln, ForkNumber forknum,
					 BlockNumber blocknum, BlockNumber nblocks,
					 BlockNumber nserved)
{
	struct iovec *iov;
	int			iov_capacity = pgaio_io_get_iovec(ioh, &iov);
	BlockNumber i;

	Assert(nserved > 0 && nserved <= nblocks &&
		   nserved <= (BlockNumber) iov_capacity);
	(void) iov_capacity;
	for (i = 0; i < nserved; i++)
	{
		iov[i].iov_base = completion_scratch.data;
		iov[i].iov_len = BLCKSZ;
	}

	pgaio_io_set_flag(ioh, PGAIO_HF_SYNCHRONOUS);
	pgaio_io_set_target_smgr(ioh, reln, forknum, blocknum, nblocks, false);
	pgaio_io_register_callbacks(ioh, PGAIO_HCB_MD_READV, 0);
	pgaio_io_start_readv(ioh, completion_fd, (int) nserved, 0);
}

/*
 * About to read synchronously in this process (see Staged I/O above):
 * submit what is staged first.
 */
static inline void
submit_staged_before_reading(void)
{
	if (pgaio_have_staged())
		pgaio_submit_staged();
}

/* A read that starts with a miss: md's own, counted as data-file reads. */
static void
start_data_file_read(PgAioHandle *ioh, SMgrRelation reln, ForkNumber forknum,
					 BlockNumber blocknum, void **buffers, BlockNumber nblocks)
{
	bool		timed = io_method == IOMETHOD_SYNC;
	instr_time	start;
	uint64		elapsed = 0;

	if (timed)
		INSTR_TIME_SET_CURRENT(start);
	mdstartreadv(ioh, reln, forknum, blocknum, buffers, nblocks);
	if (timed)
		elapsed = bpext_microseconds_since(start);
	bpext_count_data_file_read(reln, buffers, nblocks, timed, elapsed);
}

static void
bpext_startreadv(PgAioHandle *ioh, SMgrRelation reln, ForkNumber forknum,
				 BlockNumber blocknum, void **buffers, BlockNumber nblocks)
{
	const BpextRelFile *rfile = &BPEXT_SMGR_RELFILE(reln);
	BlockNumber nserved = 0;

	bpext_wake_resting_worker();
	bpext_sizing_note_read(reln, forknum, blocknum, nblocks);
	if (bpext_smgr_serves(reln) && completion_fd >= 0)
	{
		/*
		 * Admission = read's is decided once per read: the worker may pause
		 * or resume read admission meanwhile (adaptive_admission.c).
		 */
		bool		admit_reads = bpext_read_admission_wanted();

		/* See Staged I/O above. */
		while (nserved < nblocks)
		{
			uint64		read_us;

			if (!tier_serve_page(rfile, forknum, blocknum + nserved,
								 buffers[nserved], &read_us,
								 submit_staged_before_reading))
				break;
			bpext_note_buffer_read(buffers[nserved], read_us);
			bpext_adaptive_note_hit(reln, forknum, blocknum + nserved);
			nserved++;
		}
		if (nserved > 0)
		{
			complete_served_read(ioh, reln, forknum, blocknum, nblocks,
								 nserved);
			return;
		}
		/*
		 * The first block's lookup is counted; while admission is paused
		 * the others would not have looked (adaptive_admission.c).
		 */
		if (nblocks > 1 && !bpext_admission_paused())
			BPEXT_COUNT(lookups, nblocks - 1);

		if (admit_reads)
		{
			BlockNumber run;

			submit_staged_before_reading();

			for (nserved = 0; nserved < nblocks; nserved += run)
			{
				run = Min(nblocks - nserved, BPEXT_MAX_MISS_RUN);
				bpext_read_from_data_file(reln, forknum, blocknum + nserved,
										  buffers + nserved, run, true);
			}
			complete_served_read(ioh, reln, forknum, blocknum, nblocks,
								 nblocks);
			return;
		}
	}
	start_data_file_read(ioh, reln, forknum, blocknum, buffers, nblocks);
}

/* Called in the postmaster, from _PG_init. */
void
bpext_fill_aio_read_wrappers(BpextSmgrWrappers *wrappers)
{
	completion_fd = memfd_create("bpext read completion", MFD_CLOEXEC);
	if (completion_fd >= 0 &&
		ftruncate(completion_fd, (off_t) MAX_IO_COMBINE_LIMIT * BLCKSZ) != 0)
	{
		int			save_errno = errno;

		close(completion_fd);
		completion_fd = -1;
		errno = save_errno;
	}
	if (completion_fd < 0)
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("bpext could not create its in-memory read completion file: %m"),
				 errdetail("Tier hits are served only to synchronous reads (relation copies) until the server restarts; buffered reads go to the data files.")));
	wrappers->maxcombine = bpext_maxcombine;
	wrappers->startreadv = bpext_startreadv;
}

#endif							/* BPEXT_SMGR_AIO */

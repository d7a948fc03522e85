/*-------------------------------------------------------------------------
 *
 * scan_pool.c
 *	  The scan worker pool: every scan bpext makes over shared buffers or
 *	  over the tier (the descriptors view, dropping clean buffers, flushing
 *	  a database, invalidating tier pages, shrinking the tier, prewarming)
 *	  is split into tasks run by the backend that asked for it (the leader)
 *	  and by bpext.scan_workers static background workers, as SQL Server
 *	  2022 splits its buffer pool scans.
 *
 * One concern, though near 1,500 lines: the pool's protocol (request
 * slots, claiming tasks, giving them back when a participant fails,
 * handing rows and aggregates over in output buffers) is one set of rules
 * that every kind of scan relies on, and the scan kinds below are only
 * the units it runs.
 *
 * A scan numbers its units (a shared buffer, a piece of the tier map, a
 * range of tier slots, a run of blocks to prewarm) and groups them into
 * tasks.  For a parallel scan the leader puts the task list in a dynamic
 * shared memory segment, posts the segment's handle in one of the pool's
 * request slots and wakes the workers; every participant, leader
 * included, claims tasks until none is left.  Scans that list rows
 * (bpext_buffer_descriptors) have the workers form the rows as minimal
 * tuples in output buffers in the segment, which the leader copies into
 * the function's tuplestore; the leader's own tasks write rows there
 * directly.  A serial scan is the same code with a task list in local
 * memory and no workers.
 *
 * Failure handling:
 *	- A worker that exits (terminated, or an error) gives its task back in
 *	  its exit callback: the units whose rows it has handed over stay done,
 *	  the rest become claimable again.  The leader also checks each running
 *	  task's worker incarnation while it waits, so a task never waits for
 *	  a worker that is gone.  A missing pool finishes the scan serially.
 *	- A leader that errors out (query cancel, statement timeout) detaches
 *	  from the segment; the detach callback marks the scan cancelled and
 *	  wakes the workers, which check between units and leave.  The segment
 *	  lives until the last of them detaches.
 *	- A unit whose rows do not fit an empty output buffer is left to the
 *	  leader, which writes rows without going through one.
 *
 * Aggregating scans (bpext_buffer_summary) emit no row per unit: each
 * participant counts its task's units in memory of its own and emits the
 * task's partial aggregates from end_task, so they are handed over with
 * the task, all or nothing.  If they do not fit an empty output buffer,
 * the task is given back to the leader, as an oversized unit is.  The
 * leader merges partial rows in a sink of the caller's (spec->sink)
 * instead of its tuplestore, and runs tasks itself: few rows reach it.
 *
 * Locking protocol: ScanPool.mutex (a spinlock) covers the request slots
 * and the worker slots' pid/pgprocno; worker incarnations are atomics
 * read without it.  ScanShared.mutex covers a scan's task and output
 * buffer states; an output buffer's contents belong to the process that
 * set it FILLING until it is READY, then to the leader until FREE.  The
 * history ring is under history_lock.
 *
 * The pool is one file, long as it is, because it is one protocol: every
 * path through a scan (claiming, handing over, giving back, reclaiming a
 * lost worker's task, cancelling) must keep to the rules above, while
 * each kind of scan only brings its units and rows (buffer_ops.c,
 * descriptors.c, summary.c, tier_scans.c, prewarm.c).
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "access/htup_details.h"
#include "executor/tuptable.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/pg_bitutils.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/dsm.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/bufmgr.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/pquery.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "buffer_ops.h"
#include "descriptors.h"
#include "prewarm.h"
#include "progress.h"
#include "scan_pool.h"
#include "settings.h"
#include "sql_api.h"
#include "summary.h"
#include "tier_control.h"
#include "tier_map.h"
#include "tier_scans.h"
#include "wait_events.h"
#include "worker.h"

PG_FUNCTION_INFO_V1(bpext_scan_history_1_0);

#define SCAN_MAGIC				0x62707363	/* "bpsc" */
#define MAX_ACTIVE_SCANS		8
#define SCAN_HISTORY_SIZE		64
#define SCAN_OUTBUF_SIZE		(2 * 1024 * 1024)
#define SCAN_MAX_OUTBUFS		8	/* 16 MB of dynamic shared memory */
#define SCAN_MAX_WORKERS		64
#define UNITS_BETWEEN_COLLECTS	64
#define SCAN_POLL_MS			100

/* What each operation does with a unit, and its name in the history. */
typedef struct ScanOpDef
{
	const char *name;
	void		(*run_unit) (BpextScan *scan, uint64 unit);
	void		(*end_task) (BpextScan *scan, bool completed);	/* or NULL */
	bool		aggregates;		/* rows come from end_task only */
} ScanOpDef;

static const ScanOpDef scan_ops[BPEXT_SCAN_NUM_OPS] = {
	[BPEXT_SCAN_DESCRIPTORS] = {"BufferDescriptors", bpext_descriptors_unit, NULL},
	[BPEXT_SCAN_DROP_CLEAN] = {"DropCleanBuffers", bpext_drop_clean_unit, NULL},
	[BPEXT_SCAN_FLUSH] = {"FlushCache", bpext_flush_unit, NULL},
	[BPEXT_SCAN_INVALIDATE] = {"InvalidatePages", bpext_invalidate_unit, NULL},
	[BPEXT_SCAN_SHRINK] = {"ShrinkExtension", bpext_shrink_unit, NULL},
	[BPEXT_SCAN_PREWARM] = {"PrewarmExtension", bpext_prewarm_unit, bpext_prewarm_end_task},
	[BPEXT_SCAN_SUMMARY] = {"BufferSummary", bpext_summary_unit, bpext_summary_end_task, true},
};

/* Shared memory for the whole pool. */
typedef struct ScanPoolWorker
{
	int			pid;			/* 0 while not running */
	int			pgprocno;
	pg_atomic_uint32 incarnation;	/* bumped when it starts and exits */
} ScanPoolWorker;

typedef struct ScanRequest
{
	uint64		scan_id;		/* 0 if the slot is free */
	dsm_handle	handle;
} ScanRequest;

typedef struct ScanHistoryEntry
{
	char		command[NAMEDATALEN];
	BpextScanOp op;
	Oid			dbid;
	uint64		scanned;
	uint64		iterated;
	int			participants;
	double		elapsed_ms;
	double		wait_ms;
	TimestampTz finished_at;
} ScanHistoryEntry;

typedef struct ScanPool
{
	slock_t		mutex;
	uint64		next_scan_id;
	ScanRequest requests[MAX_ACTIVE_SCANS];

	LWLock	   *history_lock;
	uint64		nhistory;		/* scans recorded since start */
	ScanHistoryEntry history[SCAN_HISTORY_SIZE];

	int			nworkers;
	ScanPoolWorker workers[FLEXIBLE_ARRAY_MEMBER];
} ScanPool;

/* One scan's shared state. */
typedef enum ScanTaskState
{
	TASK_WAITING,
	TASK_RUNNING,
	TASK_DONE
} ScanTaskState;

typedef struct ScanTask
{
	uint64		next;			/* first unit not yet done (and handed over) */
	uint64		end;
	ScanTaskState state;
	bool		leader_only;	/* has a unit too big for an output buffer */
	int			worker;			/* pool index running it, -1 the leader */
	uint32		incarnation;	/* of that worker when it claimed the task */
} ScanTask;

typedef enum OutBufState
{
	OUTBUF_FREE,
	OUTBUF_FILLING,
	OUTBUF_READY
} OutBufState;

typedef struct OutBuf
{
	OutBufState state;
	int			task;			/* the task filling it, while FILLING */
	Size		used;
	/* minimal tuples follow, each MAXALIGNed */
} OutBuf;

#define OUTBUF_HEADER	MAXALIGN(sizeof(OutBuf))

typedef struct ScanShared
{
	uint32		magic;
	uint64		scan_id;
	BpextScanOp op;
	BpextScanArgs args;
	int			leader_pgprocno;
	bool		client_leader;	/* led by a client backend */
	pg_atomic_uint32 cancelled;
	pg_atomic_uint64 units_run;	/* for bpext_progress: units run, counted
								 * every UNITS_BETWEEN_COLLECTS (a unit run
								 * again after a worker exits counts twice) */

	Size		tupdesc_offset; /* 0 if the scan emits no rows */
	Size		outbufs_offset;
	int			noutbufs;

	/* Protected by mutex. */
	slock_t		mutex;
	int			first_waiting;	/* no waiting task below this */
	int			ndone;
	uint64		nunits;			/* in all ranges */
	uint64		total_buffers;	/* the spec's, for bpext_progress */
	uint64		scanned;
	uint64		iterated;
	uint64		worker_mask;	/* pool workers that ran a task */
	bool		leader_ran;
	int			ntasks;
	ScanTask	tasks[FLEXIBLE_ARRAY_MEMBER];
} ScanShared;

/* A participant's view of a scan. */
struct BpextScan
{
	ScanShared *shared;
	const ScanOpDef *def;
	int			worker;			/* pool index, or -1 for the leader */
	uint32		incarnation;

	/* Rows: the leader's go to rsinfo, a worker's to its output buffer. */
	ReturnSetInfo *rsinfo;
	void		(*sink) (void *arg, Datum *values, bool *nulls);	/* or NULL */
	void	   *sink_arg;
	TupleTableSlot *slot;		/* leader: for copying workers' rows */
	TupleDesc	desc;			/* worker: the rows' shape */
	OutBuf	   *outbuf;
	bool		overflow;		/* the unit under way did not fit */
	MemoryContext tuple_cxt;

	/* Counts of the task under way not yet added to the shared totals. */
	uint64		scanned;
	uint64		iterated;
	int			task;			/* the task under way, or -1 */
	bool		collected;		/* the leader copied workers' rows */
};

static ScanPool *Pool = NULL;
static int	pool_size = 0;		/* workers registered at start */

/* A scan worker's state, for its exit callback. */
static int	my_worker_index = -1;
static BpextScan *my_scan = NULL;

/* ---------------------------------------------------------------- */
/* The pool's size and shared memory                                */
/* ---------------------------------------------------------------- */

/*
 * The number of scan workers to start.  By default one per CPU, at most
 * eight and at most half of max_worker_processes less the tier worker,
 * leaving room for parallel query and replication.  An explicit setting
 * that max_worker_processes cannot hold is an error at start.
 */
static int
compute_pool_size(void)
{
	long		ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int			size;

	if (bpext_scan_workers >= 0)
	{
		if (bpext_scan_workers + 1 > max_worker_processes)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("bpext.scan_workers (%d) and the bpext tier worker need more background workers than max_worker_processes (%d) allows",
							bpext_scan_workers, max_worker_processes),
					 errhint("Raise max_worker_processes or lower bpext.scan_workers.")));
		return bpext_scan_workers;
	}
	size = (int) Min(Max(ncpu, 1), 8);
	size = Min(size, max_worker_processes / 2 - 1);
	return Max(size, 0);
}

int
bpext_scan_pool_size(void)
{
	return pool_size;
}

Size
bpext_scan_pool_shmem_size(void)
{
	return add_size(offsetof(ScanPool, workers),
					mul_size(pool_size, sizeof(ScanPoolWorker)));
}

void
bpext_scan_pool_shmem_init(bool found)
{
	int			i;

	Pool = ShmemInitStruct("bpext scan pool", bpext_scan_pool_shmem_size(),
						   &found);
	if (found)
		return;
	memset(Pool, 0, bpext_scan_pool_shmem_size());
	SpinLockInit(&Pool->mutex);
	Pool->next_scan_id = 1;
	Pool->history_lock = &GetNamedLWLockTranche("bpext scan pool")[0].lock;
	Pool->nworkers = pool_size;
	for (i = 0; i < pool_size; i++)
	{
		Pool->workers[i].pgprocno = -1;
		pg_atomic_init_u32(&Pool->workers[i].incarnation, 0);
	}
}

void
bpext_register_scan_workers(void)
{
	BackgroundWorker worker;
	int			i;

	pool_size = compute_pool_size();

	bpext_worker_entry(&worker, "bpext_scan_worker_main", "bpext scan worker");
	for (i = 0; i < pool_size; i++)
	{
		snprintf(worker.bgw_name, BGW_MAXLEN, "bpext scan worker %d", i);
		worker.bgw_main_arg = Int32GetDatum(i);
		RegisterBackgroundWorker(&worker);
	}
}

static void
wake_workers(void)
{
	int			i;

	for (i = 0; i < Pool->nworkers; i++)
	{
		int			pgprocno;

		SpinLockAcquire(&Pool->mutex);
		pgprocno = Pool->workers[i].pgprocno;
		SpinLockRelease(&Pool->mutex);
		if (pgprocno >= 0)
			SetLatch(&GetPGProcByNumber(pgprocno)->procLatch);
	}
}

static void
wake_leader(ScanShared *shared)
{
	SetLatch(&GetPGProcByNumber(shared->leader_pgprocno)->procLatch);
}

static bool
scan_cancelled(ScanShared *shared)
{
	return pg_atomic_read_u32(&shared->cancelled) != 0;
}

/* ---------------------------------------------------------------- */
/* What unit functions call                                         */
/* ---------------------------------------------------------------- */

const BpextScanArgs *
bpext_scan_args(BpextScan *scan)
{
	return &scan->shared->args;
}

void
bpext_scan_count(BpextScan *scan, uint64 scanned, uint64 iterated)
{
	scan->scanned += scanned;
	scan->iterated += iterated;
}

/*
 * Emit one row.  The leader puts it in the tuplestore; a worker forms a
 * minimal tuple in its output buffer, or notes that the unit overflowed
 * it (run_task then hands the buffer over and runs the unit again).
 */
void
bpext_scan_emit(BpextScan *scan, Datum *values, bool *nulls)
{
	MemoryContext old;
	MinimalTuple tuple;
	Size		size;

	if (scan->worker < 0)
	{
		if (scan->sink)
			scan->sink(scan->sink_arg, values, nulls);
		else
			tuplestore_putvalues(scan->rsinfo->setResult,
								 scan->rsinfo->setDesc, values, nulls);
		return;
	}
	if (scan->overflow)
		return;
	old = MemoryContextSwitchTo(scan->tuple_cxt);
	tuple = bpext_form_minimal_tuple(scan->desc, values, nulls);
	MemoryContextSwitchTo(old);
	size = MAXALIGN(tuple->t_len);
	if (OUTBUF_HEADER + scan->outbuf->used + size > SCAN_OUTBUF_SIZE)
		scan->overflow = true;
	else
	{
		memcpy((char *) scan->outbuf + OUTBUF_HEADER + scan->outbuf->used,
			   tuple, tuple->t_len);
		scan->outbuf->used += size;
	}
	pfree(tuple);
}

/* ---------------------------------------------------------------- */
/* Tasks and output buffers                                         */
/* ---------------------------------------------------------------- */

static OutBuf *
outbuf_at(ScanShared *shared, int i)
{
	return (OutBuf *) ((char *) shared + shared->outbufs_offset +
					   (Size) i * SCAN_OUTBUF_SIZE);
}

/* Is there a task this participant could claim? */
static bool
claimable_task(BpextScan *scan, int *task, uint64 *start)
{
	ScanShared *shared = scan->shared;
	int			t;

	for (t = shared->first_waiting; t < shared->ntasks; t++)
	{
		ScanTask   *task_p = &shared->tasks[t];

		if (task_p->state != TASK_WAITING)
		{
			if (t == shared->first_waiting)
				shared->first_waiting++;
			continue;
		}
		if (task_p->leader_only && scan->worker >= 0)
			continue;
		*task = t;
		*start = task_p->next;
		return true;
	}
	return false;
}

/* Claim the next waiting task; -1 if there is none for us. */
static int
claim_task(BpextScan *scan, uint64 *start)
{
	ScanShared *shared = scan->shared;
	int			t = -1;

	SpinLockAcquire(&shared->mutex);
	if (claimable_task(scan, &t, start))
	{
		shared->tasks[t].state = TASK_RUNNING;
		shared->tasks[t].worker = scan->worker;
		shared->tasks[t].incarnation = scan->incarnation;
		if (scan->worker >= 0)
			shared->worker_mask |= UINT64CONST(1) << scan->worker;
		else
			shared->leader_ran = true;
		if (scan->outbuf != NULL)
			scan->outbuf->task = t;
	}
	SpinLockRelease(&shared->mutex);
	return t;
}

/*
 * A worker: get a free output buffer, waiting for the leader to empty one
 * if need be.  False if the scan was cancelled or has no work left for
 * us.
 */
static bool
acquire_outbuf(BpextScan *scan)
{
	ScanShared *shared = scan->shared;

	for (;;)
	{
		int			i;
		int			t;
		uint64		start;
		bool		work_left;

		if (scan_cancelled(shared))
			return false;
		SpinLockAcquire(&shared->mutex);
		work_left = claimable_task(scan, &t, &start) || scan->task >= 0;
		for (i = 0; work_left && i < shared->noutbufs; i++)
		{
			OutBuf	   *buf = outbuf_at(shared, i);

			if (buf->state == OUTBUF_FREE)
			{
				buf->state = OUTBUF_FILLING;
				buf->task = scan->task;
				buf->used = 0;
				scan->outbuf = buf;
				break;
			}
		}
		SpinLockRelease(&shared->mutex);
		if (!work_left)
			return false;
		if (scan->outbuf != NULL)
			return true;

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 SCAN_POLL_MS, BPEXT_WAIT_EVENT(BPEXT_WAIT_SCAN_OUTPUT));
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * A worker hands its output buffer to the leader: the task's units before
 * next are done.  With done, the task is finished too.
 */
static void
hand_over(BpextScan *scan, uint64 next, bool done)
{
	ScanShared *shared = scan->shared;
	ScanTask   *task = &shared->tasks[scan->task];

	SpinLockAcquire(&shared->mutex);
	Assert(task->state == TASK_RUNNING && task->worker == scan->worker);
	if (scan->outbuf != NULL)
	{
		scan->outbuf->state = scan->outbuf->used > 0 ? OUTBUF_READY : OUTBUF_FREE;
		scan->outbuf = NULL;
	}
	task->next = next;
	if (done)
	{
		task->state = TASK_DONE;
		shared->ndone++;
	}
	shared->scanned += scan->scanned;
	shared->iterated += scan->iterated;
	SpinLockRelease(&shared->mutex);
	scan->scanned = scan->iterated = 0;
	if (done)
		scan->task = -1;
	if (scan->worker >= 0)
		wake_leader(shared);
}

/*
 * Give a task back unfinished: its units from next on become claimable
 * again (by the leader only, with leader_only).  Used by a worker that
 * stops, and for a unit too large for an output buffer.
 */
static void
give_back(BpextScan *scan, bool leader_only)
{
	ScanShared *shared = scan->shared;

	SpinLockAcquire(&shared->mutex);
	if (scan->task >= 0)
	{
		ScanTask   *task = &shared->tasks[scan->task];

		if (task->state == TASK_RUNNING && task->worker == scan->worker)
		{
			task->state = TASK_WAITING;
			task->leader_only |= leader_only;
			shared->first_waiting = Min(shared->first_waiting, scan->task);
		}
	}
	if (scan->outbuf != NULL)
		scan->outbuf->state = OUTBUF_FREE;

	/*
	 * Rows not handed over will be listed again, so their counts go; what
	 * other operations did is done, and the rerun will not find it again.
	 */
	if (shared->tupdesc_offset == 0)
	{
		shared->scanned += scan->scanned;
		shared->iterated += scan->iterated;
	}
	SpinLockRelease(&shared->mutex);
	scan->outbuf = NULL;
	scan->task = -1;
	scan->scanned = scan->iterated = 0;
	wake_leader(shared);
}

/* The leader: copy the rows of every ready output buffer. */
static bool
consume_ready(BpextScan *scan)
{
	ScanShared *shared = scan->shared;
	bool		any = false;
	int			i;

	for (i = 0; i < shared->noutbufs; i++)
	{
		OutBuf	   *buf = outbuf_at(shared, i);
		OutBufState state;
		Size		off;

		SpinLockAcquire(&shared->mutex);
		state = buf->state;
		SpinLockRelease(&shared->mutex);
		if (state != OUTBUF_READY)
			continue;

		for (off = 0; off < buf->used;)
		{
			MinimalTuple tuple = (MinimalTuple) ((char *) buf + OUTBUF_HEADER + off);

			ExecStoreMinimalTuple(tuple, scan->slot, false);
			if (scan->sink)
			{
				slot_getallattrs(scan->slot);
				scan->sink(scan->sink_arg, scan->slot->tts_values,
						   scan->slot->tts_isnull);
			}
			else
				tuplestore_puttupleslot(scan->rsinfo->setResult, scan->slot);
			off += MAXALIGN(tuple->t_len);
		}
		ExecClearTuple(scan->slot);

		SpinLockAcquire(&shared->mutex);
		buf->state = OUTBUF_FREE;
		SpinLockRelease(&shared->mutex);
		any = true;
	}
	if (any)
	{
		scan->collected = true;
		wake_workers();
	}
	return any;
}

/*
 * Sleep bpext.scan_task_delay (testing), leaving early on cancel.  Only in
 * scans a client backend asked for: the tier worker's own scans must not
 * keep the pool busy under the tests' feet.
 */
static void
task_delay(BpextScan *scan)
{
	TimestampTz until;

	if (scan->worker < 0 || !scan->shared->client_leader ||
		bpext_scan_task_delay_ms <= 0)
		return;
	until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										bpext_scan_task_delay_ms);
	while (!scan_cancelled(scan->shared))
	{
		long		ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), until);

		if (ms <= 0)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min(ms, SCAN_POLL_MS), BPEXT_WAIT_EVENT(BPEXT_WAIT_SCAN_TASK_DELAY));
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * The leader reports the share of the units run as the share of the
 * scan's pages done, if its caller shows the operation in bpext_progress.
 */
static void
report_progress(ScanShared *shared)
{
	uint64		units_run;
	uint64		worker_mask;

	if (!bpext_progress_active() || shared->nunits == 0)
		return;
	units_run = Min(pg_atomic_read_u64(&shared->units_run), shared->nunits);
	SpinLockAcquire(&shared->mutex);
	worker_mask = shared->worker_mask;
	SpinLockRelease(&shared->mutex);
	bpext_progress_update((uint64) ((double) shared->total_buffers *
									units_run / shared->nunits));
	bpext_progress_set_workers(pg_popcount64(worker_mask));
}

/* Add the units run since the last call to the scan's count. */
static void
count_units_run(BpextScan *scan, uint64 *pending)
{
	if (*pending == 0)
		return;
	pg_atomic_fetch_add_u64(&scan->shared->units_run, *pending);
	*pending = 0;
	if (scan->worker < 0)
		report_progress(scan->shared);
}

/*
 * Run the claimed task scan->task from unit start.  Returns false if the
 * scan was cancelled meanwhile (the task is then simply dropped: nobody
 * waits for it).
 */
static bool
run_task(BpextScan *scan, uint64 start)
{
	ScanShared *shared = scan->shared;
	uint64		end = shared->tasks[scan->task].end;
	bool		emits = shared->tupdesc_offset != 0;
	uint64		unit;
	uint64		pending = 0;

	task_delay(scan);
	for (unit = start; unit < end; unit++)
	{
		Size		mark_used = 0;
		uint64		mark_scanned = scan->scanned;
		uint64		mark_iterated = scan->iterated;

		CHECK_FOR_INTERRUPTS();
		if (scan_cancelled(shared))
		{
			if (scan->def->end_task)
				scan->def->end_task(scan, false);
			return false;
		}
		if (pending >= UNITS_BETWEEN_COLLECTS)
			count_units_run(scan, &pending);
		/* The leader keeps the workers' buffers moving. */
		if (scan->worker < 0 && emits &&
			(unit - start) % UNITS_BETWEEN_COLLECTS == 0)
			consume_ready(scan);
		if (scan->worker >= 0 && emits)
			mark_used = scan->outbuf->used;

		scan->def->run_unit(scan, unit);
		pending++;

		if (!scan->overflow)
			continue;

		/* The unit's rows did not fit: hand over what did, and retry. */
		scan->overflow = false;
		scan->outbuf->used = mark_used;
		scan->scanned = mark_scanned;
		scan->iterated = mark_iterated;
		if (mark_used == 0)
		{
			give_back(scan, true);
			return true;
		}
		hand_over(scan, unit, false);
		if (!acquire_outbuf(scan))
			return false;
		unit--;
	}
	count_units_run(scan, &pending);
	if (scan->def->end_task)
	{
		/*
		 * A cancelled leader may have released its relation lock while the
		 * last unit ran: give up rather than finish on a relation that may
		 * be truncating under us (end_task's work may outlive the lock).
		 */
		if (scan_cancelled(shared))
		{
			scan->def->end_task(scan, false);
			return false;
		}
		scan->def->end_task(scan, true);
	}
	if (scan->overflow)
	{
		/*
		 * An aggregating task's rows did not fit an empty output buffer:
		 * none was handed over, and the leader runs the whole task again.
		 */
		Assert(scan->def->aggregates && scan->worker >= 0);
		scan->overflow = false;
		give_back(scan, true);
		return true;
	}
	hand_over(scan, end, true);
	return true;
}

/* ---------------------------------------------------------------- */
/* The leader                                                       */
/* ---------------------------------------------------------------- */

/*
 * Running tasks whose worker has exited (its incarnation moved on) become
 * claimable again, from the first unit whose rows were not handed over.
 */
static bool
reclaim_orphans(ScanShared *shared, uint32 *incarnations)
{
	bool		found = false;
	bool		moved = false;
	int			t;
	int			i;

	/* Cheap test first: has any worker exited since the last look? */
	for (i = 0; i < Pool->nworkers; i++)
	{
		uint32		now = pg_atomic_read_u32(&Pool->workers[i].incarnation);

		moved |= now != incarnations[i];
		incarnations[i] = now;
	}
	if (!moved)
		return false;

	SpinLockAcquire(&shared->mutex);
	for (t = 0; t < shared->ntasks; t++)
	{
		ScanTask   *task = &shared->tasks[t];

		if (task->state != TASK_RUNNING || task->worker < 0 ||
			pg_atomic_read_u32(&Pool->workers[task->worker].incarnation) ==
			task->incarnation)
			continue;
		task->state = TASK_WAITING;
		shared->first_waiting = Min(shared->first_waiting, t);
		for (i = 0; i < shared->noutbufs; i++)
		{
			OutBuf	   *buf = outbuf_at(shared, i);

			if (buf->state == OUTBUF_FILLING && buf->task == t)
				buf->state = OUTBUF_FREE;
		}
		found = true;
	}
	SpinLockRelease(&shared->mutex);
	return found;
}


/* The leader's part: tasks, workers' rows, and waiting. */
static void
lead_scan(BpextScan *scan, double *wait_ms)
{
	ScanShared *shared = scan->shared;
	bool		emits = shared->tupdesc_offset != 0 && shared->noutbufs > 0;
	uint32		incarnations[SCAN_MAX_WORKERS];
	instr_time	last_progress;
	int			i;

	for (i = 0; i < Pool->nworkers; i++)
		incarnations[i] = pg_atomic_read_u32(&Pool->workers[i].incarnation);
	INSTR_TIME_SET_CURRENT(last_progress);

	for (;;)
	{
		uint64		start;
		bool		all_done;
		instr_time	before;
		instr_time	after;

		CHECK_FOR_INTERRUPTS();
		report_progress(shared);
		if (emits && consume_ready(scan))
		{
			INSTR_TIME_SET_CURRENT(last_progress);
			continue;
		}

		SpinLockAcquire(&shared->mutex);
		all_done = shared->ndone == shared->ntasks;
		SpinLockRelease(&shared->mutex);
		if (all_done)
		{
			/* Buffers are handed over before their task is marked done. */
			if (emits)
				consume_ready(scan);
			break;
		}

		/*
		 * While workers fill output buffers, copying their rows is the
		 * leader's bottleneck: it runs tasks itself only when they have
		 * handed nothing over for SCAN_POLL_MS (none joined, all gone, or
		 * busy elsewhere), and always for scans that list no rows.
		 */
		INSTR_TIME_SET_CURRENT(after);
		INSTR_TIME_SUBTRACT(after, last_progress);
		if (!emits || scan->def->aggregates ||
			INSTR_TIME_GET_MILLISEC(after) >= SCAN_POLL_MS)
		{
			scan->task = claim_task(scan, &start);
			if (scan->task >= 0)
			{
				run_task(scan, start);
				continue;
			}
		}
		if (reclaim_orphans(shared, incarnations))
			continue;

		INSTR_TIME_SET_CURRENT(before);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 SCAN_POLL_MS, BPEXT_WAIT_EVENT(BPEXT_WAIT_SCAN_WORKERS));
		ResetLatch(MyLatch);
		INSTR_TIME_SET_CURRENT(after);
		INSTR_TIME_SUBTRACT(after, before);
		*wait_ms += INSTR_TIME_GET_MILLISEC(after);
	}
}

static Size
scan_shared_size(int ntasks)
{
	return MAXALIGN(add_size(offsetof(ScanShared, tasks),
							 mul_size(ntasks, sizeof(ScanTask))));
}

static int
count_tasks(const BpextScanSpec *spec)
{
	uint64		ntasks = 0;
	int			r;

	for (r = 0; r < spec->nranges; r++)
	{
		const BpextScanRange *range = &spec->ranges[r];

		ntasks += (range->nunits + range->units_per_task - 1) /
			Max(range->units_per_task, 1);
	}
	if (ntasks > INT_MAX / 2)
		elog(ERROR, "too many scan tasks: " UINT64_FORMAT, ntasks);
	return (int) ntasks;
}

static void
init_shared(ScanShared *shared, const BpextScanSpec *spec, int ntasks)
{
	uint64		first = 0;
	int			t = 0;
	int			r;

	memset(shared, 0, offsetof(ScanShared, tasks));
	shared->magic = SCAN_MAGIC;
	shared->op = spec->op;
	shared->args = spec->args;
	shared->leader_pgprocno = BPEXT_MY_PROC_NUMBER();
	shared->client_leader = MyBackendType == B_BACKEND;
	pg_atomic_init_u32(&shared->cancelled, 0);
	pg_atomic_init_u64(&shared->units_run, 0);
	shared->total_buffers = spec->total_buffers;
	SpinLockInit(&shared->mutex);
	shared->ntasks = ntasks;
	for (r = 0; r < spec->nranges; r++)
	{
		const BpextScanRange *range = &spec->ranges[r];
		uint64		per_task = Max(range->units_per_task, 1);
		uint64		end = first + range->nunits;

		shared->nunits += range->nunits;
		for (; first < end; first += per_task, t++)
		{
			ScanTask   *task = &shared->tasks[t];

			task->next = first;
			task->end = Min(first + per_task, end);
			task->state = TASK_WAITING;
			task->leader_only = false;
			task->worker = -1;
		}
		first = end;
	}
	Assert(t == ntasks);
}

/* The leader's detach callback: whatever the reason, the scan is over. */
static void
leader_detach(dsm_segment *seg, Datum arg)
{
	ScanShared *shared = (ScanShared *) DatumGetPointer(arg);
	int			i;

	pg_atomic_write_u32(&shared->cancelled, 1);
	if (shared->scan_id == 0)
		return;					/* never posted */
	SpinLockAcquire(&Pool->mutex);
	for (i = 0; i < MAX_ACTIVE_SCANS; i++)
		if (Pool->requests[i].scan_id == shared->scan_id)
			Pool->requests[i].scan_id = 0;
	SpinLockRelease(&Pool->mutex);
	wake_workers();
}

/*
 * Set up a parallel scan: a segment with the tasks (and output buffers
 * and row shape, for a scan that emits), posted in a request slot.  NULL
 * if there is no room (no free request slot, no segment): the caller then
 * runs the scan serially.
 */
static dsm_segment *
start_parallel(const BpextScanSpec *spec, int ntasks, ScanShared **sharedp)
{
	Size		size = scan_shared_size(ntasks);
	Size		tupdesc_offset = 0;
	Size		outbufs_offset = 0;
	int			noutbufs = 0;
	dsm_segment *seg;
	ScanShared *shared;
	int			slot = -1;
	int			i;

	if (spec->rsinfo != NULL)
	{
		tupdesc_offset = size;
		size = add_size(size, MAXALIGN(TupleDescSize(spec->rsinfo->setDesc)));
		outbufs_offset = size;
		noutbufs = Min(2 * Pool->nworkers, SCAN_MAX_OUTBUFS);
		size = add_size(size, mul_size(noutbufs, SCAN_OUTBUF_SIZE));
	}

	seg = dsm_create(size, DSM_CREATE_NULL_IF_MAXSEGMENTS);
	if (seg == NULL)
		return NULL;
	shared = dsm_segment_address(seg);
	init_shared(shared, spec, ntasks);
	if (spec->rsinfo != NULL)
	{
		shared->tupdesc_offset = tupdesc_offset;
		TupleDescCopy((TupleDesc) ((char *) shared + tupdesc_offset),
					  spec->rsinfo->setDesc);
		shared->outbufs_offset = outbufs_offset;
		shared->noutbufs = noutbufs;
		for (i = 0; i < noutbufs; i++)
			outbuf_at(shared, i)->state = OUTBUF_FREE;
	}

	/* Registered first: whatever happens next, the slot is given back. */
	on_dsm_detach(seg, leader_detach, PointerGetDatum(shared));
	SpinLockAcquire(&Pool->mutex);
	for (i = 0; i < MAX_ACTIVE_SCANS; i++)
		if (Pool->requests[i].scan_id == 0)
		{
			slot = i;
			shared->scan_id = Pool->next_scan_id++;
			Pool->requests[i].scan_id = shared->scan_id;
			Pool->requests[i].handle = dsm_segment_handle(seg);
			break;
		}
	SpinLockRelease(&Pool->mutex);
	if (slot < 0)
	{
		dsm_detach(seg);
		return NULL;
	}
	*sharedp = shared;
	wake_workers();
	return seg;
}

/*
 * A range of units over every piece of the tier map, in tasks of about
 * bpext.scan_task_buffers tier pages each.  Returns the pages in the tier.
 */
uint64
bpext_scan_tier_range(BpextScanRange *range)
{
	uint64		used = tier_map_used_slots();
	uint64		pieces = tier_map_pieces();

	range->nunits = pieces;
	range->units_per_task =
		Max(1, Min(pieces, pieces * bpext_scan_task_buffers / Max(used, 1)));
	return used;
}

/*
 * Add, after the scan's first range, a range over the tier's active slots
 * in units of slots_per_unit, in tasks of about bpext.scan_task_buffers
 * slots (the listing and the summary walk the slots in order).
 */
void
bpext_scan_add_slot_range(BpextScanSpec *spec, uint32 slots_per_unit)
{
	uint32		nslots = pg_atomic_read_u32(&BpextCtl->active_slots);

	spec->args.end_slot = nslots;
	spec->nranges = 2;
	spec->ranges[1].nunits = ((uint64) nslots + slots_per_unit - 1) /
		slots_per_unit;
	spec->ranges[1].units_per_task =
		Max(1, bpext_scan_task_buffers / slots_per_unit);
	spec->total_buffers += nslots;
}

/*
 * The units of a scan over shared buffers and the tier: every shared
 * buffer, then (if the tier is on) every piece of the map.
 */
void
bpext_scan_buffers_and_tier(BpextScanSpec *spec)
{
	spec->nranges = 1;
	spec->ranges[0].nunits = NBuffers;
	spec->ranges[0].units_per_task = bpext_scan_task_buffers;
	spec->total_buffers = NBuffers;
	if (bpext_tier_enabled())
	{
		spec->nranges = 2;
		spec->total_buffers += bpext_scan_tier_range(&spec->ranges[1]);
	}
}

/* Is any scan worker running? */
static bool
pool_has_workers(void)
{
	bool		any = false;
	int			i;

	SpinLockAcquire(&Pool->mutex);
	for (i = 0; i < Pool->nworkers && !any; i++)
		any = Pool->workers[i].pid != 0;
	SpinLockRelease(&Pool->mutex);
	return any;
}

/* What the history calls the command behind a scan. */
static const char *
current_command(void)
{
	if (ActivePortal != NULL && ActivePortal->commandTag != CMDTAG_UNKNOWN)
		return GetCommandTagName(ActivePortal->commandTag);
	if (MyBgworkerEntry != NULL)
		return MyBgworkerEntry->bgw_type;
	return "unknown";
}

static void
record_scan(const BpextScanSpec *spec, const BpextScanResult *result)
{
	const char *command = spec->command ? spec->command : current_command();
	ScanHistoryEntry *e;

	LWLockAcquire(Pool->history_lock, LW_EXCLUSIVE);
	e = &Pool->history[Pool->nhistory % SCAN_HISTORY_SIZE];
	strlcpy(e->command, command, sizeof(e->command));
	e->op = spec->op;
	e->dbid = spec->args.dbid;
	e->scanned = result->scanned;
	e->iterated = result->iterated;
	e->participants = result->participants;
	e->elapsed_ms = result->elapsed_ms;
	e->wait_ms = result->wait_ms;
	e->finished_at = GetCurrentTimestamp();
	Pool->nhistory++;
	LWLockRelease(Pool->history_lock);

	if (bpext_log_scan_min_duration_ms >= 0 &&
		result->elapsed_ms >= bpext_log_scan_min_duration_ms)
		ereport(LOG,
				(errmsg("buffer pool scan took %.3f s: database ID %u, command '%s', operation '%s', scanned buffers " UINT64_FORMAT ", total iterated buffers " UINT64_FORMAT ", wait time %.0f ms, parallel tasks %d",
						result->elapsed_ms / 1000.0, spec->args.dbid,
						command, scan_ops[spec->op].name,
						result->scanned, result->iterated,
						result->wait_ms, result->participants)));
}

/*
 * Run a scan, in parallel if bpext.parallel_scan is on, the scan is large
 * enough for two tasks of bpext.scan_task_buffers and the pool has a
 * worker; serially otherwise.  Rows go to spec->rsinfo's tuplestore.
 */
void
bpext_scan_run(const BpextScanSpec *spec, BpextScanResult *result)
{
	int			ntasks = count_tasks(spec);
	dsm_segment *seg = NULL;
	ScanShared *shared = NULL;
	BpextScan	scan;
	instr_time	start;
	instr_time	elapsed;

	INSTR_TIME_SET_CURRENT(start);
	memset(result, 0, sizeof(*result));

	if (bpext_parallel_scan && ntasks >= 2 && Pool != NULL &&
		spec->total_buffers >= 2 * (uint64) bpext_scan_task_buffers &&
		my_worker_index < 0 && pool_has_workers())
		seg = start_parallel(spec, ntasks, &shared);
	if (seg == NULL)
	{
		shared = palloc(scan_shared_size(ntasks));
		init_shared(shared, spec, ntasks);
	}

	memset(&scan, 0, sizeof(scan));
	scan.shared = shared;
	scan.def = &scan_ops[spec->op];
	scan.worker = -1;
	scan.task = -1;
	scan.rsinfo = spec->rsinfo;
	scan.sink = spec->sink;
	scan.sink_arg = spec->sink_arg;
	if (spec->rsinfo != NULL)
		scan.slot = MakeSingleTupleTableSlot(spec->rsinfo->setDesc,
											 &TTSOpsMinimalTuple);

	PG_TRY();
	{
		lead_scan(&scan, &result->wait_ms);
	}
	PG_CATCH();
	{
		/* The segment's detach callback tells the workers to stop. */
		if (scan.task >= 0 && scan.def->end_task)
			scan.def->end_task(&scan, false);
		PG_RE_THROW();
	}
	PG_END_TRY();

	result->scanned = shared->scanned;
	result->iterated = shared->iterated;
	result->participants = pg_popcount64(shared->worker_mask) +
		(shared->leader_ran || scan.collected ? 1 : 0);
	if (scan.slot != NULL)
		ExecDropSingleTupleTableSlot(scan.slot);
	if (seg != NULL)
		dsm_detach(seg);
	else
		pfree(shared);

	INSTR_TIME_SET_CURRENT(elapsed);
	INSTR_TIME_SUBTRACT(elapsed, start);
	result->elapsed_ms = INSTR_TIME_GET_MILLISEC(elapsed);
	if (result->scanned > 0 || spec->record_if_idle)
		record_scan(spec, result);
}

/* ---------------------------------------------------------------- */
/* The workers                                                      */
/* ---------------------------------------------------------------- */

/*
 * A worker on its way out gives its task back, so that the scan does not
 * wait for it, and leaves the pool.
 */
static void
scan_worker_exit(int code, Datum arg)
{
	ScanPoolWorker *me = &Pool->workers[my_worker_index];

	/* As AbortTransaction does: I/O and content locks before pins. */
	LWLockReleaseAll();
	bpext_abort_buffer_io();
	UnlockBuffers();
	if (my_scan != NULL)
	{
		if (my_scan->task >= 0 && my_scan->def->end_task)
			my_scan->def->end_task(my_scan, false);
		give_back(my_scan, false);
		my_scan = NULL;
	}
	if (CurrentResourceOwner != NULL)
		ResourceOwnerRelease(CurrentResourceOwner,
							 RESOURCE_RELEASE_BEFORE_LOCKS, false, true);

	SpinLockAcquire(&Pool->mutex);
	me->pid = 0;
	me->pgprocno = -1;
	SpinLockRelease(&Pool->mutex);
	pg_atomic_fetch_add_u32(&me->incarnation, 1);
}

/*
 * Take part in one scan until it has no task left for us.  The scan state
 * is static: the exit callback uses it after an error has unwound the
 * stack.
 */
static void
work_on_scan(ScanShared *shared, MemoryContext tuple_cxt)
{
	static BpextScan scan;
	bool		emits = shared->tupdesc_offset != 0;

	memset(&scan, 0, sizeof(scan));
	scan.shared = shared;
	scan.def = &scan_ops[shared->op];
	scan.worker = my_worker_index;
	scan.incarnation = pg_atomic_read_u32(&Pool->workers[my_worker_index].incarnation);
	scan.task = -1;
	scan.tuple_cxt = tuple_cxt;
	if (emits)
		scan.desc = (TupleDesc) ((char *) shared + shared->tupdesc_offset);
	my_scan = &scan;

	while (!scan_cancelled(shared))
	{
		uint64		start;

		if (emits && !acquire_outbuf(&scan))
			break;
		scan.task = claim_task(&scan, &start);
		if (scan.task < 0)
			break;
		if (!run_task(&scan, start))
			break;
	}
	if (scan.outbuf != NULL || scan.task >= 0)
		give_back(&scan, false);
	my_scan = NULL;
	MemoryContextReset(tuple_cxt);
}

void
bpext_scan_worker_main(Datum main_arg)
{
	uint64		seen[MAX_ACTIVE_SCANS] = {0};
	MemoryContext tuple_cxt;

	my_worker_index = DatumGetInt32(main_arg);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	CurrentResourceOwner = ResourceOwnerCreate(NULL, "bpext scan worker");
	tuple_cxt = AllocSetContextCreate(TopMemoryContext, "bpext scan rows",
									  ALLOCSET_DEFAULT_SIZES);

	SpinLockAcquire(&Pool->mutex);
	Pool->workers[my_worker_index].pid = MyProcPid;
	Pool->workers[my_worker_index].pgprocno = BPEXT_MY_PROC_NUMBER();
	SpinLockRelease(&Pool->mutex);
	pg_atomic_fetch_add_u32(&Pool->workers[my_worker_index].incarnation, 1);
	before_shmem_exit(scan_worker_exit, 0);

	for (;;)
	{
		int			i;

		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		for (i = 0; i < MAX_ACTIVE_SCANS; i++)
		{
			uint64		scan_id;
			dsm_handle	handle;
			dsm_segment *seg;
			ScanShared *shared;

			SpinLockAcquire(&Pool->mutex);
			scan_id = Pool->requests[i].scan_id;
			handle = Pool->requests[i].handle;
			SpinLockRelease(&Pool->mutex);
			if (scan_id == 0 || scan_id == seen[i])
				continue;
			seen[i] = scan_id;

			/* The leader may be gone already; then so is the segment. */
			seg = dsm_attach(handle);
			if (seg == NULL)
				continue;
			shared = dsm_segment_address(seg);
			if (shared->magic == SCAN_MAGIC && shared->scan_id == scan_id)
				work_on_scan(shared, tuple_cxt);
			dsm_detach(seg);
			i = -1;				/* look at every request again */
		}

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_EXIT_ON_PM_DEATH, -1,
						 BPEXT_WAIT_EVENT(BPEXT_WAIT_SCAN_WORKER_IDLE));
	}
}

/* ---------------------------------------------------------------- */
/* bpext_scan_history                                               */
/* ---------------------------------------------------------------- */

/*
 * bpext_scan_history_1_0(): the last SCAN_HISTORY_SIZE scans, oldest
 * first, with SQL Server's buffer_pool_scan_complete fields.
 */
Datum
bpext_scan_history_1_0(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ScanHistoryEntry *copy;
	uint64		first;
	uint64		n;
	uint64		i;

	bpext_require_preloaded();
	InitMaterializedSRF(fcinfo, 0);

	copy = palloc(sizeof(ScanHistoryEntry) * SCAN_HISTORY_SIZE);
	LWLockAcquire(Pool->history_lock, LW_SHARED);
	n = Min(Pool->nhistory, SCAN_HISTORY_SIZE);
	first = Pool->nhistory - n;
	for (i = 0; i < n; i++)
		copy[i] = Pool->history[(first + i) % SCAN_HISTORY_SIZE];
	LWLockRelease(Pool->history_lock);

	for (i = 0; i < n; i++)
	{
		ScanHistoryEntry *e = &copy[i];
		Datum		values[10];
		bool		nulls[10] = {0};

		values[0] = Int64GetDatum((int64) (first + i + 1));
		values[1] = CStringGetTextDatum(e->command);
		values[2] = CStringGetTextDatum(scan_ops[e->op].name);
		if (OidIsValid(e->dbid))
			values[3] = ObjectIdGetDatum(e->dbid);
		else
			nulls[3] = true;
		values[4] = Int64GetDatum((int64) e->scanned);
		values[5] = Int64GetDatum((int64) e->iterated);
		values[6] = Int32GetDatum(e->participants);
		values[7] = Float8GetDatum(e->elapsed_ms);
		values[8] = Float8GetDatum(e->wait_ms);
		values[9] = TimestampTzGetDatum(e->finished_at);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*-------------------------------------------------------------------------
 *
 * progress.c
 *	  bpext_progress: a small array of progress slots in shared memory,
 *	  one per long operation under way (prewarm, warm load, resize, flush,
 *	  drop clean buffers, the sweep after DROP DATABASE or ALTER DATABASE),
 *	  read by the bpext_progress view.
 *
 * At a terabyte these operations run for minutes.  The process that runs
 * one (the backend that called the function, or the bpext worker for a
 * resize, a sweep or a warm load) takes a slot with bpext_progress_begin,
 * reports the pages done with bpext_progress_update and frees the slot
 * with bpext_progress_end.  When scan workers help, the leader reports
 * for all of them (scan_pool.c does it for every scan).
 *
 * Locking protocol:
 *	- ProgressArray.mutex (a spinlock) covers taking and freeing slots: a
 *	  slot is free while its pid is 0.  Only the owner frees its slot,
 *	  at the end, on transaction abort, or at exit.
 *	- A slot's other fields are written only by its owner, without a
 *	  lock, between two increments of its changecount (odd while a write
 *	  is under way), as PgBackendStatus's st_changecount; readers copy
 *	  the slot and try again until they see the same even changecount
 *	  before and after the copy.  Updates never wait, so they can be made
 *	  as often as the operation likes.
 *	- If the slots are all taken the operation runs unseen: progress is
 *	  never a reason to fail.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "progress.h"
#include "sql_api.h"
#include "tier_control.h"

PG_FUNCTION_INFO_V1(bpext_progress_1_3);

#define PROGRESS_SLOTS		32
#define PROGRESS_COLUMNS	10

static const char *const progress_op_names[BPEXT_PROGRESS_NUM_OPS] = {
	[BPEXT_PROGRESS_PREWARM] = "prewarm",
	[BPEXT_PROGRESS_WARM_LOAD] = "warm load",
	[BPEXT_PROGRESS_RESIZE] = "resize",
	[BPEXT_PROGRESS_FLUSH] = "flush",
	[BPEXT_PROGRESS_DROP_CLEAN] = "drop clean buffers",
	[BPEXT_PROGRESS_SWEEP] = "sweep",
};

typedef struct ProgressSlot
{
	int			pid;			/* 0 if free; under ProgressArray.mutex */
	pg_atomic_uint32 changecount;
	bool		shown;			/* the fields below describe an operation */
	int			owner_pid;
	BpextProgressOp op;
	Oid			dbid;
	Oid			relid;
	char		command[NAMEDATALEN];
	uint64		done;
	uint64		total;
	int			nworkers;
	TimestampTz started_at;
} ProgressSlot;

typedef struct ProgressArray
{
	slock_t		mutex;
	ProgressSlot slots[PROGRESS_SLOTS];
} ProgressArray;

static ProgressArray *Progress = NULL;

/* This process's slot, or NULL. */
static ProgressSlot *my_slot = NULL;
static bool exit_callback_set = false;

Size
bpext_progress_shmem_size(void)
{
	return MAXALIGN(sizeof(ProgressArray));
}

void
bpext_progress_shmem_init(bool found)
{
	int			i;

	Progress = ShmemInitStruct("bpext progress", bpext_progress_shmem_size(),
							   &found);
	if (found)
		return;
	memset(Progress, 0, sizeof(ProgressArray));
	SpinLockInit(&Progress->mutex);
	for (i = 0; i < PROGRESS_SLOTS; i++)
		pg_atomic_init_u32(&Progress->slots[i].changecount, 0);
}

static inline void
write_begin(ProgressSlot *slot)
{
	pg_atomic_fetch_add_u32(&slot->changecount, 1);
	pg_write_barrier();
}

static inline void
write_end(ProgressSlot *slot)
{
	pg_write_barrier();
	pg_atomic_fetch_add_u32(&slot->changecount, 1);
}

static void
progress_exit(int code, Datum arg)
{
	bpext_progress_end();
}

/* An error ended the operation: the slot goes with the transaction. */
static void
progress_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		bpext_progress_end();
}

static void
progress_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						  SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
		bpext_progress_end();
}

/*
 * Show an operation over total pages as under way in this process.  False
 * (and nothing shown) if every slot is taken or one is already ours.
 */
bool
bpext_progress_begin(BpextProgressOp op, uint64 total)
{
	ProgressSlot *slot = NULL;
	int			i;

	if (Progress == NULL || my_slot != NULL)
		return false;
	if (!exit_callback_set)
	{
		before_shmem_exit(progress_exit, 0);
		RegisterXactCallback(progress_xact_callback, NULL);
		RegisterSubXactCallback(progress_subxact_callback, NULL);
		exit_callback_set = true;
	}
	SpinLockAcquire(&Progress->mutex);
	for (i = 0; i < PROGRESS_SLOTS; i++)
		if (Progress->slots[i].pid == 0)
		{
			slot = &Progress->slots[i];
			slot->pid = MyProcPid;
			break;
		}
	SpinLockRelease(&Progress->mutex);
	if (slot == NULL)
		return false;

	write_begin(slot);
	slot->shown = true;
	slot->owner_pid = MyProcPid;
	slot->op = op;
	slot->dbid = InvalidOid;
	slot->relid = InvalidOid;
	slot->command[0] = '\0';
	slot->done = 0;
	slot->total = total;
	slot->nworkers = 0;
	slot->started_at = GetCurrentTimestamp();
	write_end(slot);
	my_slot = slot;
	return true;
}

/* The database and relation it works on, and the command that asked. */
void
bpext_progress_set_target(Oid dbid, Oid relid, const char *command)
{
	if (my_slot == NULL)
		return;
	write_begin(my_slot);
	my_slot->dbid = dbid;
	my_slot->relid = relid;
	strlcpy(my_slot->command, command ? command : "", NAMEDATALEN);
	write_end(my_slot);
}

void
bpext_progress_update(uint64 done)
{
	if (my_slot == NULL)
		return;
	write_begin(my_slot);
	my_slot->done = done;
	write_end(my_slot);

	/* A reconfiguration that takes long is not stuck (reload_and_wait). */
	if (BpextCtl != NULL && MyProcPid == BpextCtl->worker_pid)
		pg_atomic_write_u64(&BpextCtl->worker_progress_at,
							(uint64) GetCurrentTimestamp());
}

/* How many scan workers help the process. */
void
bpext_progress_set_workers(int nworkers)
{
	if (my_slot == NULL || my_slot->nworkers == nworkers)
		return;
	write_begin(my_slot);
	my_slot->nworkers = nworkers;
	write_end(my_slot);
}

void
bpext_progress_end(void)
{
	if (my_slot == NULL || Progress == NULL)
		return;
	write_begin(my_slot);
	my_slot->shown = false;
	write_end(my_slot);
	SpinLockAcquire(&Progress->mutex);
	my_slot->pid = 0;
	SpinLockRelease(&Progress->mutex);
	my_slot = NULL;
}

bool
bpext_progress_active(void)
{
	return my_slot != NULL;
}

/*
 * bpext_progress_1_3(): one row per operation under way, with its rate
 * since it began.
 */
Datum
bpext_progress_1_3(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz now = GetCurrentTimestamp();
	int			i;

	bpext_require_preloaded();
	InitMaterializedSRF(fcinfo, 0);

	for (i = 0; i < PROGRESS_SLOTS; i++)
	{
		ProgressSlot *shared = &Progress->slots[i];
		ProgressSlot copy;
		Datum		values[PROGRESS_COLUMNS];
		bool		nulls[PROGRESS_COLUMNS] = {0};
		long		secs;
		int			usecs;
		double		elapsed;

		for (;;)
		{
			uint32		before = pg_atomic_read_u32(&shared->changecount);

			pg_read_barrier();
			memcpy(&copy, shared, sizeof(copy));
			pg_read_barrier();
			if (before == pg_atomic_read_u32(&shared->changecount) &&
				(before & 1) == 0)
				break;
			CHECK_FOR_INTERRUPTS();
		}
		if (!copy.shown || copy.op >= BPEXT_PROGRESS_NUM_OPS)
			continue;

		values[0] = Int32GetDatum(copy.owner_pid);
		values[1] = CStringGetTextDatum(progress_op_names[copy.op]);
		if (copy.command[0])
			values[2] = CStringGetTextDatum(copy.command);
		else
			nulls[2] = true;
		if (OidIsValid(copy.dbid))
			values[3] = ObjectIdGetDatum(copy.dbid);
		else
			nulls[3] = true;
		if (OidIsValid(copy.relid))
			values[4] = ObjectIdGetDatum(copy.relid);
		else
			nulls[4] = true;
		values[5] = Int64GetDatum((int64) Min(copy.done, copy.total));
		values[6] = Int64GetDatum((int64) copy.total);
		TimestampDifference(copy.started_at, now, &secs, &usecs);
		elapsed = secs + usecs / 1000000.0;
		if (elapsed > 0)
			values[7] = Float8GetDatum(Min(copy.done, copy.total) / elapsed);
		else
			nulls[7] = true;
		values[8] = Int32GetDatum(copy.nworkers);
		values[9] = TimestampTzGetDatum(copy.started_at);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

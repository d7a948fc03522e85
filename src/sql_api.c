/*-------------------------------------------------------------------------
 *
 * sql_api.c
 *	  SQL-callable functions: the configuration and counters behind the
 *	  views, and turning the tier on, off and to another size online.
 *
 * bpext_enable/bpext_disable/bpext_resize are SQL Server's ALTER SERVER
 * CONFIGURATION SET BUFFER POOL EXTENSION ON/OFF: they write bpext.path
 * and bpext.size with ALTER SYSTEM (so the setting persists across
 * restarts), reload the configuration and wait for the bpext worker to
 * have acted on it.  Like ALTER SYSTEM, the change to postgresql.auto.conf
 * is not undone if the calling transaction aborts.
 *
 * C symbols behind views carry the SQL API version (_1_0) so that a later
 * install script can change columns without breaking an old one.
 *
 * Locking: reads BpextControl's descriptive fields under control_lock.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/parsenodes.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "storage/latch.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "free_space.h"
#include "settings.h"
#include "slot_directory.h"
#include "sql_api.h"
#include "stats.h"
#include "tier_control.h"
#include "tier_file.h"
#include "tier_map.h"
#include "tier_readers.h"
#include "wait_events.h"
#include "warm_restart.h"

PG_FUNCTION_INFO_V1(bpext_configuration_1_0);
PG_FUNCTION_INFO_V1(bpext_configuration_1_1);
PG_FUNCTION_INFO_V1(bpext_configuration_1_4);
PG_FUNCTION_INFO_V1(bpext_stats_1_0);
PG_FUNCTION_INFO_V1(bpext_stats_1_2);
PG_FUNCTION_INFO_V1(bpext_stats_1_4);
PG_FUNCTION_INFO_V1(bpext_stats_1_5);
PG_FUNCTION_INFO_V1(bpext_stats_reset);
PG_FUNCTION_INFO_V1(bpext_database_stats_1_0);
PG_FUNCTION_INFO_V1(bpext_database_stats_1_4);
PG_FUNCTION_INFO_V1(bpext_enable);
PG_FUNCTION_INFO_V1(bpext_disable);
PG_FUNCTION_INFO_V1(bpext_resize);

#define APPLY_TIMEOUT_MS		30000

void
bpext_require_preloaded(void)
{
	if (BpextCtl == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("bpext is not loaded"),
				 errhint("Add bpext to shared_preload_libraries in postgresql.conf and restart the server.")));
}

/* The columns bpext_configuration has had since 1.0. */
#define CONFIGURATION_COLUMNS_1_0	10
#define CONFIGURATION_COLUMNS_1_1	13

/*
 * Shared memory reserved at server start per tier page bpext.max_size
 * allows: the map and the slot directory's bitmaps, the two structures
 * sized by the number of slots (what does not grow with the tier, the
 * store queue, the counters and the rest, is left out).
 */
static double
map_bytes_per_page(void)
{
	uint32		max_slots = BpextCtl->max_slots;

	if (max_slots == 0)
		return 0;
	return (double) add_size(tier_map_shmem_size(max_slots),
							 slot_directory_shmem_size(max_slots)) / max_slots;
}

static void
configuration_values(Datum *values, bool *nulls)
{
	BpextState	state;
	char		path[MAXPGPATH];
	char		last_error[256];
	TimestampTz last_error_time;
	uint64		size_bytes;

	LWLockAcquire(BpextCtl->control_lock, LW_SHARED);
	state = pg_atomic_read_u32(&BpextCtl->state);
	strlcpy(path, BpextCtl->path[0] ? BpextCtl->path :
			(bpext_path ? bpext_path : ""), sizeof(path));
	strlcpy(last_error, BpextCtl->last_error, sizeof(last_error));
	last_error_time = BpextCtl->last_error_time;
	size_bytes = BpextCtl->size_bytes;
	LWLockRelease(BpextCtl->control_lock);

	if (path[0])
		values[0] = CStringGetTextDatum(path);
	else
		nulls[0] = true;
	values[1] = Int32GetDatum(1);
	values[2] = Int32GetDatum((int32) state);
	values[3] = CStringGetTextDatum(bpext_state_description(state));
	values[4] = Int64GetDatum(state == BPEXT_STATE_ENABLED ? size_bytes / 1024 : 0);
	values[5] = Int64GetDatum(((int64) BpextCtl->max_slots + 1) * BLCKSZ / 1024);
	values[6] = Int64GetDatum(tier_map_used_slots());
	/* 1.0 to 1.3 show whole bytes; 1.4's view replaces it (below). */
	values[7] = Int32GetDatum((int32) map_bytes_per_page());
	if (last_error[0])
	{
		values[8] = CStringGetTextDatum(last_error);
		values[9] = TimestampTzGetDatum(last_error_time);
	}
	else
		nulls[8] = nulls[9] = true;
}

Datum
bpext_configuration_1_0(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		values[CONFIGURATION_COLUMNS_1_0];
	bool		nulls[CONFIGURATION_COLUMNS_1_0] = {0};

	bpext_require_preloaded();
	InitMaterializedSRF(fcinfo, 0);
	configuration_values(values, nulls);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}

/* The 1.1 columns: those of 1.0 and how the tier started (warm_restart.c). */
static void
configuration_values_1_1(Datum *values, bool *nulls)
{
	BpextStartMode mode;
	char		reason[256];
	uint64		pages_reused;

	configuration_values(values, nulls);
	bpext_warm_status(&mode, reason, sizeof(reason), &pages_reused);
	values[10] = CStringGetTextDatum(mode == BPEXT_START_WARM ? "warm" : "cold");
	if (mode == BPEXT_START_COLD && reason[0])
		values[11] = CStringGetTextDatum(reason);
	else
		nulls[11] = true;
	values[12] = Int64GetDatum((int64) pages_reused);
}

/* 1.1 adds how the tier started. */
Datum
bpext_configuration_1_1(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		values[CONFIGURATION_COLUMNS_1_1];
	bool		nulls[CONFIGURATION_COLUMNS_1_1] = {0};

	bpext_require_preloaded();
	InitMaterializedSRF(fcinfo, 0);
	configuration_values_1_1(values, nulls);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}

/*
 * 1.4: map_bytes_per_page exactly, to two decimals (numeric): whole bytes
 * showed 32 for 32.6.
 */
Datum
bpext_configuration_1_4(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		values[CONFIGURATION_COLUMNS_1_1];
	bool		nulls[CONFIGURATION_COLUMNS_1_1] = {0};

	bpext_require_preloaded();
	InitMaterializedSRF(fcinfo, 0);
	configuration_values_1_1(values, nulls);
	values[7] = DirectFunctionCall2(numeric_round,
									DirectFunctionCall1(float8_numeric,
														Float8GetDatum(map_bytes_per_page())),
									Int32GetDatum(2));
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}

/* Mean time, in seconds, that a tier page has gone without being used. */
typedef struct UnreferencedAcc
{
	uint64		pages;
	uint64		seconds;
} UnreferencedAcc;

static void
add_unreferenced(const TierPageInfo *info, void *arg)
{
	UnreferencedAcc *acc = (UnreferencedAcc *) arg;

	acc->pages++;
	acc->seconds += info->unreferenced_seconds;
}

/* The columns bpext_stats has had since 1.0, since 1.2, and since 1.4. */
#define STATS_COLUMNS_1_0	28
#define STATS_COLUMNS_1_2	30
#define STATS_COLUMNS_1_4	35
#define STATS_COLUMNS_1_5	37

/* Fill the 1.0 columns of bpext_stats. */
static void
stats_values(const BpextCounters *c, TimestampTz reset_at, Datum *values,
			 bool *nulls)
{
	UnreferencedAcc unref = {0, 0};
	uint32		used;
	uint32		active;
	int			i = 0;

	used = tier_map_used_slots();
	active = pg_atomic_read_u32(&BpextCtl->active_slots);
	tier_map_foreach(add_unreferenced, &unref);

	values[i++] = Int64GetDatum(c->page_reads);
	values[i++] = Int64GetDatum(c->page_writes);
	values[i++] = Int64GetDatum(c->page_evictions);
	values[i++] = Int64GetDatum((int64) c->outstanding_io);
	if (unref.pages > 0)
		values[i++] = Float8GetDatum((double) unref.seconds / unref.pages);
	else
		nulls[i++] = true;
	values[i++] = Int64GetDatum(active > used ? active - used : 0);
	values[i++] = Int64GetDatum(used);
	if (active > 0)
		values[i++] = Float8GetDatum(100.0 * Min(used, active) / active);
	else
		nulls[i++] = true;
	values[i++] = Int64GetDatum(c->lookups);
	values[i++] = Int64GetDatum(c->hits);
	values[i++] = Int64GetDatum(c->lookups - Min(c->hits, c->lookups));
	if (c->lookups > 0)
		values[i++] = Float8GetDatum((double) c->hits / c->lookups);
	else
		nulls[i++] = true;
	values[i++] = Int64GetDatum(c->data_file_reads);
	values[i++] = Int64GetDatum(c->data_file_read_calls);
	values[i++] = Float8GetDatum(c->read_time_us / 1000.0);
	values[i++] = Float8GetDatum(c->write_time_us / 1000.0);
	values[i++] = Int64GetDatum(c->page_reads * BLCKSZ);
	values[i++] = Int64GetDatum(c->page_writes * BLCKSZ);
	values[i++] = Int64GetDatum(c->invalidations);
	values[i++] = Int64GetDatum(c->publish_races);
	values[i++] = Int64GetDatum(c->admission_skips);
	values[i++] = Int64GetDatum(c->admitted[BPEXT_SOURCE_EVICT_PUSH]);
	values[i++] = Int64GetDatum(c->admitted[BPEXT_SOURCE_DUAL_WRITE]);
	values[i++] = Int64GetDatum(c->admitted[BPEXT_SOURCE_READ]);
	values[i++] = Int64GetDatum(c->admitted[BPEXT_SOURCE_PREWARM]);
	values[i++] = Int64GetDatum(c->crc_failures);
	values[i++] = Int64GetDatum(c->io_errors);
	values[i++] = TimestampTzGetDatum(reset_at);
	Assert(i == STATS_COLUMNS_1_0);
}

Datum
bpext_stats_1_0(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	BpextCounters c;
	TimestampTz reset_at;
	Datum		values[STATS_COLUMNS_1_0];
	bool		nulls[STATS_COLUMNS_1_0] = {0};

	bpext_require_preloaded();
	InitMaterializedSRF(fcinfo, 0);
	bpext_stats_sum(&c, &reset_at);
	stats_values(&c, reset_at, values, nulls);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}

/*
 * 1.2 adds what the eviction push captured: clean main-fork pages seen
 * leaving shared buffers, and those the tier did not get (evict_push.c).
 */
Datum
bpext_stats_1_2(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	BpextCounters c;
	TimestampTz reset_at;
	Datum		values[STATS_COLUMNS_1_2];
	bool		nulls[STATS_COLUMNS_1_2] = {0};

	bpext_require_preloaded();
	InitMaterializedSRF(fcinfo, 0);
	bpext_stats_sum(&c, &reset_at);
	stats_values(&c, reset_at, values, nulls);
	values[STATS_COLUMNS_1_0] = Int64GetDatum(c.clean_evictions);
	values[STATS_COLUMNS_1_0 + 1] = Int64GetDatum(c.missed_pushes);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}

/*
 * Fill the columns of bpext_stats up to 1.4's.  1.4 added adaptive
 * admission (adaptive_admission.c): whether the worker has paused it, how
 * often it paused and resumed it, and the tier hits it probed, with those
 * whose data-file page the kernel had cached.
 */
static void
stats_values_1_4(Datum *values, bool *nulls)
{
	BpextCounters c;
	TimestampTz reset_at;
	int			i = STATS_COLUMNS_1_2;

	bpext_stats_sum(&c, &reset_at);
	stats_values(&c, reset_at, values, nulls);
	values[STATS_COLUMNS_1_0] = Int64GetDatum(c.clean_evictions);
	values[STATS_COLUMNS_1_0 + 1] = Int64GetDatum(c.missed_pushes);
	values[i++] = BoolGetDatum(bpext_admission_paused());
	values[i++] = Int64GetDatum(c.admission_pauses);
	values[i++] = Int64GetDatum(c.admission_resumes);
	values[i++] = Int64GetDatum(c.hit_probes);
	values[i++] = Int64GetDatum(c.hit_probes_cached);
	Assert(i == STATS_COLUMNS_1_4);
}

Datum
bpext_stats_1_4(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		values[STATS_COLUMNS_1_4];
	bool		nulls[STATS_COLUMNS_1_4] = {0};

	bpext_require_preloaded();
	InitMaterializedSRF(fcinfo, 0);
	stats_values_1_4(values, nulls);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}

/*
 * 1.5 adds the tier reads handed to the reader helpers at this moment:
 * those no helper has taken yet, and those a helper has at the device
 * (tier_readers.c), a view of the queue that extension_outstanding_io,
 * which counts the sessions in a tier read, does not give.
 */
Datum
bpext_stats_1_5(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		values[STATS_COLUMNS_1_5];
	bool		nulls[STATS_COLUMNS_1_5] = {0};
	int			waiting;
	int			at_device;

	bpext_require_preloaded();
	InitMaterializedSRF(fcinfo, 0);
	stats_values_1_4(values, nulls);
	tier_readers_count(&waiting, &at_device);
	values[STATS_COLUMNS_1_4] = Int64GetDatum(waiting);
	values[STATS_COLUMNS_1_4 + 1] = Int64GetDatum(at_device);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}

/* bpext_stats_reset(): zero the counters (superusers only, by GRANT). */
Datum
bpext_stats_reset(PG_FUNCTION_ARGS)
{
	bpext_require_preloaded();
	bpext_stats_reset_all();
	PG_RETURN_VOID();
}

/* The columns bpext_database_stats has had since 1.0, and since 1.4. */
#define DATABASE_STATS_COLUMNS_1_0	4
#define DATABASE_STATS_COLUMNS_1_4	7

/*
 * Per database: pages served from the tier beside pages read from data
 * files, as Aurora shows orcache_blks_hit beside storage_blks_read, and
 * (1.4) the time spent in each, as its orcache_blk_read_time and
 * storage_blk_read_time, with the data-file reads bpext could not time
 * (18's asynchronous reads) so that a mean can be taken over the others.
 * Counted by the database of the process that read them.
 */
static void
database_stats(FunctionCallInfo fcinfo, bool with_read_times)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	BpextDatabaseCounters *dbs;
	int			n;
	int			d;

	bpext_require_preloaded();
	InitMaterializedSRF(fcinfo, 0);

	n = bpext_stats_by_database(&dbs);
	for (d = 0; d < n; d++)
	{
		const BpextReadCounts *r = &dbs[d].reads;
		Datum		values[DATABASE_STATS_COLUMNS_1_4];
		bool		nulls[DATABASE_STATS_COLUMNS_1_4] = {0};
		uint64		total = r->tier_reads + r->data_file_reads;

		values[0] = ObjectIdGetDatum(dbs[d].dbid);
		values[1] = Int64GetDatum(r->tier_reads);
		values[2] = Int64GetDatum(r->data_file_reads);
		if (total > 0)
			values[3] = Float8GetDatum((double) r->tier_reads / total);
		else
			nulls[3] = true;
		if (with_read_times)
		{
			values[DATABASE_STATS_COLUMNS_1_0] =
				Float8GetDatum(r->tier_read_us / 1000.0);
			values[DATABASE_STATS_COLUMNS_1_0 + 1] =
				Float8GetDatum(r->data_file_read_us / 1000.0);
			values[DATABASE_STATS_COLUMNS_1_0 + 2] =
				Int64GetDatum(r->data_file_reads_untimed);
		}
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
}

Datum
bpext_database_stats_1_0(PG_FUNCTION_ARGS)
{
	database_stats(fcinfo, false);
	return (Datum) 0;
}

Datum
bpext_database_stats_1_4(PG_FUNCTION_ARGS)
{
	database_stats(fcinfo, true);
	return (Datum) 0;
}

/* ALTER SYSTEM SET name = value, from C. */
static void
alter_system_set(const char *name, const char *value)
{
	AlterSystemStmt *stmt = makeNode(AlterSystemStmt);
	VariableSetStmt *set = makeNode(VariableSetStmt);
	A_Const    *arg = makeNode(A_Const);

	arg->val.sval.type = T_String;
	arg->val.sval.sval = pstrdup(value);
	arg->location = -1;
	set->kind = VAR_SET_VALUE;
	set->name = pstrdup(name);
	set->args = list_make1(arg);
	stmt->setstmt = set;
	AlterSystemSetConfigFile(stmt);
}

/* Parse a size such as '32GB' the way bpext.size does, in MB. */
static int
parse_size_mb(const char *value)
{
	int			mb;
	const char *hintmsg = NULL;

	if (!parse_int(value, &mb, GUC_UNIT_MB, &hintmsg) || mb < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid tier size: \"%s\"", value),
				 hintmsg ? errhint("%s", _(hintmsg)) :
				 errhint("Give a size with a unit, such as '512MB' or '32GB'.")));
	return mb;
}

/*
 * Refuse a size the map reserved at server start cannot hold, before it
 * reaches postgresql.auto.conf.
 */
static void
require_size_fits(const char *size, int size_mb)
{
	if (!bpext_size_fits(size_mb))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("tier size %s exceeds bpext.max_size", size),
				 errdetail("The server reserved shared memory for at most %d MB.",
						   bpext_reserved_size_mb()),
				 errhint("Choose a smaller size, or raise bpext.max_size and restart the server.")));
}

/*
 * Refuse a size whose preallocation would leave a file system that also
 * holds the cluster's files with less than bpext.min_free_space free
 * (free_space.c), before it reaches postgresql.auto.conf.  The worker
 * checks again right before it grows the file.  The check runs in a
 * helper process that this backend waits for at most bpext.io_timeout: a
 * file system that does not answer is said to, and refuses nothing.
 */
static void
require_free_space(const char *path, int size_mb)
{
	BpextSpaceCheck space;
	uint64		size_bytes = (uint64) size_mb * 1024 * 1024;
	char		reason[MAXPGPATH + 256];
	bool		resizing;
	bool		answered;

	/* The file the worker would create or grow: slots and directory. */
	size_bytes = size_bytes >= 2 * BLCKSZ ?
		(uint64) TIER_FILE_BYTES(size_bytes / BLCKSZ - 1) : BLCKSZ;
	if (path[0] == '\0' || size_mb <= 0)
		return;
	if (bpext_space_check(path, -1, size_bytes, &space, &answered, reason,
						  sizeof(reason)))
	{
		if (!answered)
			ereport(WARNING,
					(errcode(ERRCODE_IO_ERROR),
					 errmsg("bpext could not check the free space for the tier file \"%s\": %s",
							path, reason),
					 errdetail("The bpext worker checks it again before it creates or grows the file.")));
		return;
	}
	bpext_space_reason(&space, reason, sizeof(reason));

	/* The worker resizes the file it holds, or enables one at path. */
	LWLockAcquire(BpextCtl->control_lock, LW_SHARED);
	resizing = pg_atomic_read_u32(&BpextCtl->state) == BPEXT_STATE_ENABLED &&
		strcmp(BpextCtl->path, path) == 0;
	LWLockRelease(BpextCtl->control_lock);
	ereport(ERROR,
			(errcode(ERRCODE_DISK_FULL),
			 resizing ?
			 errmsg("bpext could not resize the tier: %s", reason) :
			 errmsg("bpext could not enable the tier: %s", reason),
			 bpext_space_errdetail(&space),
			 bpext_space_errhint()));
}

/*
 * Reload the configuration and wait until the worker has applied the
 * given path and size.  Returns the state it left the tier in.
 */
static BpextState
reload_and_wait(const char *path, int size_mb)
{
	TimestampTz requested = GetCurrentTimestamp();
	TimestampTz deadline = TimestampTzPlusMilliseconds(requested, APPLY_TIMEOUT_MS);

	if (kill(PostmasterPid, SIGHUP) != 0)
		ereport(ERROR,
				(errmsg("could not send a reload signal to the postmaster: %m")));

	for (;;)
	{
		bool		applied;

		LWLockAcquire(BpextCtl->control_lock, LW_SHARED);
		applied = BpextCtl->config_applied_at >= requested &&
			BpextCtl->applied_size_mb == size_mb &&
			strcmp(BpextCtl->applied_path, path) == 0;
		LWLockRelease(BpextCtl->control_lock);
		if (applied)
			return pg_atomic_read_u32(&BpextCtl->state);

		/*
		 * A shrink of a large tier can outlast the wait: give up only once
		 * the worker has reported no progress for as long.
		 */
		if (GetCurrentTimestamp() >= deadline)
		{
			TimestampTz progress_at = (TimestampTz)
				pg_atomic_read_u64(&BpextCtl->worker_progress_at);

			if (progress_at > requested)
				deadline = TimestampTzPlusMilliseconds(progress_at, APPLY_TIMEOUT_MS);
		}
		if (GetCurrentTimestamp() >= deadline)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("timed out waiting for the bpext worker to apply the new settings"),
					 errdetail("The settings were written to postgresql.auto.conf and take effect when the worker runs."),
					 errhint("The worker starts once the server is consistent; check that it runs (backend_type \"bpext tier worker\" in pg_stat_activity).")));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 10, BPEXT_WAIT_EVENT(BPEXT_WAIT_SETTINGS_APPLIED));
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

static void
require_superuser(const char *function)
{
	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for function %s", function),
				 errdetail("Only superusers can change the bpext tier configuration.")));
}

static text *
finish_state_change(BpextState state, BpextState wanted)
{
	if (state != wanted)
	{
		char		last_error[256];
		bool		hung;

		LWLockAcquire(BpextCtl->control_lock, LW_SHARED);
		strlcpy(last_error, BpextCtl->last_error, sizeof(last_error));
		hung = BpextCtl->last_error_hung;
		LWLockRelease(BpextCtl->control_lock);
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the bpext tier is in state \"%s\"",
						bpext_state_description(state)),
				 last_error[0] ? errdetail("Last error: %s", last_error) : 0,
				 !hung ?
				 errhint("Check bpext.path and bpext.size and the server log.") :
				 bpext_recovery_interval_ms > 0 ?
				 errhint("The device holding the tier file did not answer within bpext.io_timeout. bpext enables the tier by itself once it answers again (bpext.recovery_interval).") :
				 errhint("The device holding the tier file did not answer within bpext.io_timeout. Run SELECT bpext_enable() once it answers again.")));
	}
	return cstring_to_text(bpext_state_description(state));
}

/*
 * bpext_enable(path text DEFAULT NULL, size text DEFAULT NULL) returns text
 *
 * Turn the tier on, with a new file and/or size if given, else with the
 * current settings (which also re-enables a tier in ERROR state).
 */
Datum
bpext_enable(PG_FUNCTION_ARGS)
{
	const char *path;
	const char *size = NULL;
	int			size_mb;

	bpext_require_preloaded();
	require_superuser("bpext_enable");

	if (!PG_ARGISNULL(0))
	{
		path = text_to_cstring(PG_GETARG_TEXT_PP(0));
		if (!is_absolute_path(path))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("tier file path must be absolute: \"%s\"", path)));
	}
	else
		path = bpext_path ? bpext_path : "";

	if (!PG_ARGISNULL(1))
	{
		size = text_to_cstring(PG_GETARG_TEXT_PP(1));
		size_mb = parse_size_mb(size);
		if (size_mb == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("tier size must be greater than zero"),
					 errhint("Use bpext_disable() to turn the tier off.")));
		require_size_fits(size, size_mb);
	}
	else
		size_mb = bpext_size_mb;

	if (path[0] == '\0' || size_mb == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("bpext.path and bpext.size must both be set to enable the tier"),
				 errhint("Call bpext_enable('/path/to/file', '10GB').")));
	require_free_space(path, size_mb);

	/* Only what passed every check reaches postgresql.auto.conf. */
	if (!PG_ARGISNULL(0))
		alter_system_set("bpext.path", path);
	if (size != NULL)
		alter_system_set("bpext.size", size);

	PG_RETURN_TEXT_P(finish_state_change(reload_and_wait(path, size_mb),
										 BPEXT_STATE_ENABLED));
}

/* bpext_disable() returns text: turn the tier off and remove its file. */
Datum
bpext_disable(PG_FUNCTION_ARGS)
{
	bpext_require_preloaded();
	require_superuser("bpext_disable");

	alter_system_set("bpext.size", "0");
	PG_RETURN_TEXT_P(finish_state_change(reload_and_wait(bpext_path ? bpext_path : "", 0),
										 BPEXT_STATE_DISABLED));
}

/* bpext_resize(size text) returns text: change the tier's size online. */
Datum
bpext_resize(PG_FUNCTION_ARGS)
{
	const char *size = text_to_cstring(PG_GETARG_TEXT_PP(0));
	int			size_mb;
	text	   *result;
	uint64		size_bytes;
	char		last_error[256];

	bpext_require_preloaded();
	require_superuser("bpext_resize");

	size_mb = parse_size_mb(size);
	if (size_mb == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("tier size must be greater than zero"),
				 errhint("Use bpext_disable() to turn the tier off.")));
	require_size_fits(size, size_mb);
	require_free_space(bpext_path ? bpext_path : "", size_mb);
	alter_system_set("bpext.size", size);
	result = finish_state_change(reload_and_wait(bpext_path ? bpext_path : "", size_mb),
								 BPEXT_STATE_ENABLED);

	/* The worker keeps the old size if the file could not be resized. */
	LWLockAcquire(BpextCtl->control_lock, LW_SHARED);
	size_bytes = BpextCtl->size_bytes;
	strlcpy(last_error, BpextCtl->last_error, sizeof(last_error));
	LWLockRelease(BpextCtl->control_lock);
	if (size_bytes != (uint64) (((int64) size_mb * 1024 * 1024 / BLCKSZ) * BLCKSZ))
		ereport(ERROR,
				(errcode(ERRCODE_DISK_FULL),
				 errmsg("could not resize the bpext tier to %s; it stays at %llu MB",
						size, (unsigned long long) (size_bytes >> 20)),
				 last_error[0] ? errdetail("Last error: %s", last_error) : 0,
				 errhint("The new size stays in postgresql.auto.conf and is tried again at every reload; call bpext_resize() with the current size to give it up.")));
	PG_RETURN_TEXT_P(result);
}

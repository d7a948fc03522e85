/*-------------------------------------------------------------------------
 *
 * bpext.c
 *	  Module entry point: settings, shared memory, and wiring bpext into
 *	  the server.
 *
 * bpext must be loaded through shared_preload_libraries: it patches the
 * storage-manager table in the postmaster so every process inherits it
 * (interpose.c), sizes its shared memory from bpext.max_size, and
 * registers its background worker.  Loaded any other way (LOAD, CREATE
 * EXTENSION without preloading) it refuses with an error that says what
 * to put in postgresql.conf.
 *
 * Shared memory follows pg_stat_statements' two steps: the request hook
 * asks for the size computed by the same function the startup hook uses,
 * and the startup hook initialises the structures under AddinShmemInitLock
 * the first time (BpextControl in bpext.h, the map in tier_map.c).
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/guc.h"

#include "bpext.h"
#include "db_hooks.h"
#include "descriptors.h"
#include "scan_pool.h"
#include "smgr_wrap.h"
#include "stats.h"
#include "tier_file.h"
#include "tier_map.h"
#include "worker.h"

PG_MODULE_MAGIC;

BpextControl *BpextCtl = NULL;

char	   *bpext_path = NULL;
int			bpext_size_mb = 0;
int			bpext_max_size_mb = 8192;
int			bpext_write_policy = BPEXT_WRITE_DUAL;
int			bpext_admission = BPEXT_ADMIT_EVICT;
bool		bpext_direct_io = false;
int			bpext_push_interval_ms = 10;
int			bpext_push_lookahead = 0;
bool		bpext_log_events = false;

static const struct config_enum_entry write_policy_options[] = {
	{"invalidate", BPEXT_WRITE_INVALIDATE, false},
	{"dual_write", BPEXT_WRITE_DUAL, false},
	{NULL, 0, false}
};

static const struct config_enum_entry admission_options[] = {
	{"evict", BPEXT_ADMIT_EVICT, false},
	{"read", BPEXT_ADMIT_READ, false},
	{NULL, 0, false}
};

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* Slots fixed at server start: the larger of bpext.max_size and bpext.size. */
static uint32 startup_max_slots = 0;

void		_PG_init(void);

static bool
check_tier_path(char **newval, void **extra, GucSource source)
{
	if (*newval == NULL || (*newval)[0] == '\0')
		return true;
	if (!is_absolute_path(*newval))
	{
		GUC_check_errdetail("bpext.path must be an absolute path.");
		return false;
	}
	if (strlen(*newval) >= MAXPGPATH)
	{
		GUC_check_errdetail("bpext.path is longer than %d bytes.", MAXPGPATH - 1);
		return false;
	}
	return true;
}

static void
define_settings(void)
{
	DefineCustomStringVariable("bpext.path",
							   "Path of the tier file, on a fast local disk.",
							   "The file is created if missing (mode 0600); an existing file is used only if it is a bpext tier file of this cluster.",
							   &bpext_path,
							   "",
							   PGC_SIGHUP,
							   0,
							   check_tier_path, NULL, NULL);

	DefineCustomIntVariable("bpext.size",
							"Size of the tier file; 0 turns the tier off.",
							"Changes take effect online, up to bpext.max_size.",
							&bpext_size_mb,
							0,
							0, INT_MAX / 2,
							PGC_SIGHUP,
							GUC_UNIT_MB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bpext.max_size",
							"Largest tier size that bpext.size can be set to without a restart.",
							"Shared memory for the tier's map is reserved for the larger of this and bpext.size at server start.",
							&bpext_max_size_mb,
							8192,
							0, INT_MAX / 2,
							PGC_POSTMASTER,
							GUC_UNIT_MB,
							NULL, NULL, NULL);

	DefineCustomEnumVariable("bpext.write_policy",
							 "What happens to the tier's copy of a page written to its data file.",
							 "dual_write stores the new image in the tier; invalidate only drops the old copy.",
							 &bpext_write_policy,
							 BPEXT_WRITE_DUAL,
							 write_policy_options,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomEnumVariable("bpext.admission",
							 "Which pages enter the tier besides dual writes.",
							 "evict pushes clean pages about to leave shared buffers; read also stores every page read from a data file.",
							 &bpext_admission,
							 BPEXT_ADMIT_EVICT,
							 admission_options,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("bpext.direct_io",
							 "Use O_DIRECT for tier file I/O where the file system supports it.",
							 "Off (the default), the kernel's page cache holds the hottest tier pages within the server's memory, as it holds data-file pages without bpext; on keeps them out of it.",
							 &bpext_direct_io,
							 false,
							 PGC_POSTMASTER,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("bpext.push_interval",
							"Sleep between eviction-push rounds when there was nothing to push.",
							NULL,
							&bpext_push_interval_ms,
							10,
							1, 10000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bpext.push_lookahead",
							"Buffers ahead of the clock hand examined per eviction-push round; 0 means shared_buffers/4.",
							NULL,
							&bpext_push_lookahead,
							0,
							0, INT_MAX,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("bpext.log_events",
							 "Log the tier's page writes, reads and evictions once a second.",
							 "The equivalent of SQL Server's buffer pool extension extended events, aggregated.",
							 &bpext_log_events,
							 false,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("bpext.scan_workers",
							"Background workers that run buffer and tier scans in parallel; -1 sizes the pool to the machine.",
							"-1 means one per CPU, at most 8 and at most half of max_worker_processes less one.",
							&bpext_scan_workers,
							-1,
							-1, 64,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("bpext.parallel_scan",
							 "Split buffer and tier scans over the scan workers.",
							 "Off makes every scan serial, like the trace flag that turns off SQL Server's parallel buffer pool scan.",
							 &bpext_parallel_scan,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("bpext.scan_task_buffers",
							"Buffers or tier pages per parallel scan task.",
							"Scans over fewer than twice this many run serially.",
							&bpext_scan_task_buffers,
							16384,
							64, INT_MAX / 2,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bpext.log_scan_min_duration",
							"Log buffer and tier scans that take at least this long; -1 disables.",
							NULL,
							&bpext_log_scan_min_duration_ms,
							10000,
							-1, INT_MAX,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bpext.scan_task_delay",
							"Developer option: scan workers sleep this long before each task of a scan a client backend asked for.",
							"For testing query cancellation and the loss of a worker during a scan.",
							&bpext_scan_task_delay_ms,
							0,
							0, 60000,
							PGC_SIGHUP,
							GUC_UNIT_MS | GUC_NOT_IN_SAMPLE,
							NULL, NULL, NULL);

	MarkGUCPrefixReserved("bpext");
}

static Size
bpext_shmem_size(void)
{
	Size		size = MAXALIGN(sizeof(BpextControl));

	size = add_size(size, tier_map_shmem_size(startup_max_slots));
	size = add_size(size, bpext_stats_shmem_size());
	size = add_size(size, bpext_descriptors_shmem_size());
	size = add_size(size, bpext_scan_pool_shmem_size());
	return size;
}

static void
bpext_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(bpext_shmem_size());
	RequestNamedLWLockTranche("bpext", tier_map_lwlock_count() + 1);
	RequestNamedLWLockTranche("bpext scan pool", 1);
}

static void
bpext_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	BpextCtl = ShmemInitStruct("bpext control", sizeof(BpextControl), &found);
	if (!found)
	{
		memset(BpextCtl, 0, sizeof(BpextControl));
		pg_atomic_init_u32(&BpextCtl->state, BPEXT_STATE_DISABLED);
		pg_atomic_init_u32(&BpextCtl->map_epoch, 0);
		pg_atomic_init_u32(&BpextCtl->file_incarnation, 0);
		pg_atomic_init_u32(&BpextCtl->active_slots, 0);
		BpextCtl->control_lock =
			&GetNamedLWLockTranche("bpext")[tier_map_lwlock_count()].lock;
		BpextCtl->max_slots = startup_max_slots;
		BpextCtl->applied_size_mb = -1;
	}
	tier_map_shmem_init(startup_max_slots, found);
	bpext_stats_shmem_init(found);
	bpext_descriptors_shmem_init(found);
	bpext_scan_pool_shmem_init(found);
	LWLockRelease(AddinShmemInitLock);
}

void
_PG_init(void)
{
	uint64		max_mb;

	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("bpext must be loaded via shared_preload_libraries"),
				 errhint("Add bpext to shared_preload_libraries in postgresql.conf and restart the server.")));

	/* pg_upgrade's servers touch no tier. */
	if (IsBinaryUpgrade)
		return;

	define_settings();

	max_mb = Max(bpext_max_size_mb, bpext_size_mb);
	startup_max_slots = (uint32) Min(max_mb * 1024 * 1024 / BLCKSZ,
									 (uint64) PG_UINT32_MAX - 1);
	if (startup_max_slots > 0)
		startup_max_slots--;	/* the file header takes one block */

	bpext_install_smgr_wrappers();
	bpext_install_db_hooks();
	bpext_register_worker();
	bpext_register_scan_workers();

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = bpext_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = bpext_shmem_startup;
}

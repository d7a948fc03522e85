/*-------------------------------------------------------------------------
 *
 * bpext.c
 *	  Module entry point: wiring bpext into the server (settings, shared
 *	  memory, the storage-manager wrappers, hooks and workers).  The
 *	  settings live in settings.c, which depends on nothing else, and
 *	  the shared control block in tier_control.c; this file sits on top,
 *	  calls into the rest, and exports nothing but _PG_init.
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
 * the first time (BpextControl in tier_control.h, the map in tier_map.c,
 * the store queue in store_queue.c).  In the postmaster it then decides
 * whether the tier starts warm, before any other process exists
 * (warm_restart.c).
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

#include "db_hooks.h"
#include "descriptors.h"
#include "explain_tier.h"
#include "io_watch.h"
#include "page_crc.h"
#include "progress.h"
#include "query_reads.h"
#include "scan_pool.h"
#include "settings.h"
#include "sizing.h"
#include "slot_directory.h"
#include "smgr_wrap.h"
#include "stats.h"
#include "store_queue.h"
#include "tier_control.h"
#include "tier_file.h"
#include "tier_map.h"
#include "tier_readers.h"
#include "wait_events.h"
#include "warm_restart.h"
#include "worker.h"

PG_MODULE_MAGIC;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/*
 * Slots fixed at server start, from bpext.max_size alone: a bpext.size
 * above it (a typo in postgresql.conf, say) caps the tier with a WARNING
 * from the worker, but must never ask for shared memory the machine does
 * not have and keep the server from starting.
 */
static uint32 startup_max_slots = 0;

void		_PG_init(void);

static Size
bpext_shmem_size(void)
{
	Size		size = MAXALIGN(sizeof(BpextControl));

	size = add_size(size, tier_map_shmem_size(startup_max_slots));
	size = add_size(size, slot_directory_shmem_size(startup_max_slots));
	size = add_size(size, bpext_stats_shmem_size());
	size = add_size(size, bpext_io_watch_shmem_size());
	size = add_size(size, bpext_descriptors_shmem_size());
	size = add_size(size, bpext_scan_pool_shmem_size());
	size = add_size(size, bpext_warm_shmem_size());
	size = add_size(size, bpext_progress_shmem_size());
	size = add_size(size, bpext_sizing_shmem_size());
	size = add_size(size, store_queue_shmem_size());
	size = add_size(size, bpext_query_reads_shmem_size());
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
	RequestNamedLWLockTranche("bpext sizing", 1);
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
		pg_atomic_init_u32(&BpextCtl->warm_loading, 0);
		pg_atomic_init_u32(&BpextCtl->admission_paused, 0);
		pg_atomic_init_u32(&BpextCtl->worker_resting, 0);
		pg_atomic_init_u64(&BpextCtl->worker_progress_at, 0);
		BpextCtl->control_lock =
			&GetNamedLWLockTranche("bpext")[tier_map_lwlock_count()].lock;
		BpextCtl->max_slots = startup_max_slots;
		BpextCtl->worker_tier_fd = -1;
		BpextCtl->applied_size_mb = -1;
	}
	tier_map_shmem_init(startup_max_slots, found);
	slot_directory_shmem_init(startup_max_slots, found);
	bpext_stats_shmem_init(found);
	bpext_io_watch_shmem_init(found);
	bpext_descriptors_shmem_init(found);
	bpext_scan_pool_shmem_init(found);
	bpext_warm_shmem_init(found);
	bpext_progress_shmem_init(found);
	bpext_sizing_shmem_init(found);
	store_queue_shmem_init(found);
	bpext_query_reads_shmem_init(found);
	LWLockRelease(AddinShmemInitLock);

	bpext_register_wait_events();
	bpext_warm_startup();
}

void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("bpext must be loaded via shared_preload_libraries"),
				 errhint("Add bpext to shared_preload_libraries in postgresql.conf and restart the server.")));

	/* pg_upgrade's servers touch no tier. */
	if (IsBinaryUpgrade)
		return;

	bpext_define_settings();

	startup_max_slots = (uint32) Min((uint64) bpext_max_size_mb * 1024 * 1024 / BLCKSZ,
									 (uint64) PG_UINT32_MAX - 1);
	if (startup_max_slots > 0)
		startup_max_slots--;	/* the file header takes one block */

	/* Before any fork: every process inherits the tier readers' region... */
	tier_readers_create();
	/* ... and the page CRC's tables. */
	bpext_page_crc_setup();

	bpext_install_smgr_wrappers();
	bpext_install_db_hooks();
	bpext_install_query_read_hooks();
#if BPEXT_EXPLAIN_OPTIONS
	bpext_install_explain_tier();
#endif
	bpext_register_worker();
	bpext_register_scan_workers();

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = bpext_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = bpext_shmem_startup;
}

/*-------------------------------------------------------------------------
 *
 * tier_control.h
 *	  The tier's shared control block and its state machine
 *	  (tier_control.c).
 *
 * The control block (BpextControl) lives in shared memory and is created
 * once by the postmaster.  Its fields fall into three groups, each with its
 * own protocol:
 *
 *	- state, map_epoch, file_incarnation, active_slots, warm_loading,
 *	  admission_paused and worker_resting are atomics read without a lock
 *	  on every smgr call; state and file_incarnation are only ever changed
 *	  by the bpext worker (tier_control.c), which is the one process that
 *	  opens, creates, resizes and closes the tier file, and
 *	  admission_paused by the worker alone too (adaptive_admission.c).
 *	  map_epoch is also bumped by bpext_drop_clean_buffers
 *	  (tier_map_begin_drop).  worker_resting is set by the worker and
 *	  cleared by whoever wakes it (worker.c).
 *	- path, size and error fields describe the tier for the views; they are
 *	  written by the worker and read by anyone, under control_lock.
 *	- the counters live in stats.c, one slot per process.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_TIER_CONTROL_H
#define BPEXT_TIER_CONTROL_H

#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "utils/timestamp.h"

/*
 * Tier states, numbered as SQL Server numbers them in
 * sys.dm_os_buffer_pool_extension_configuration; BPEXT_STATE_ERROR is ours.
 */
typedef enum BpextState
{
	BPEXT_STATE_DISABLED = 0,
	BPEXT_STATE_DISABLING = 1,
	BPEXT_STATE_ENABLING = 3,
	BPEXT_STATE_ENABLED = 5,
	BPEXT_STATE_ERROR = 7
} BpextState;

#define BPEXT_MAX_SWEEP_REQUESTS	8

typedef struct BpextControl
{
	/* Lock-free fields, see the file header. */
	pg_atomic_uint32 state;		/* BpextState */
	pg_atomic_uint32 map_epoch; /* bumped whenever slots are taken away */
	pg_atomic_uint32 file_incarnation;	/* bumped whenever the file is
										 * (re)opened or replaced */
	pg_atomic_uint32 active_slots;	/* slots usable now (bpext.size) */
	pg_atomic_uint32 warm_loading;	/* the worker is loading a saved map
									 * (warm_restart.c): no slot may be
									 * allocated */
	pg_atomic_uint32 admission_paused;	/* the worker paused admission: the
										 * tier cannot help now
										 * (adaptive_admission.c) */
	pg_atomic_uint32 worker_resting;	/* the worker sleeps long, and the
										 * next shared-buffer miss wakes it
										 * (worker.c) */

	/* Protected by control_lock. */
	LWLock	   *control_lock;
	char		path[MAXPGPATH];	/* the tier file in use, or "" */
	uint64		file_dev;		/* its st_dev and st_ino, so that nobody */
	uint64		file_ino;		/* uses a file put in its place */
	uint64		size_bytes;		/* its size, header included */
	char		last_error[256];
	TimestampTz last_error_time;
	bool		last_error_hung;	/* a device that did not answer */
	TimestampTz config_applied_at;	/* the worker's last reconfiguration */
	pg_atomic_uint64 worker_progress_at;	/* the last time the worker
											 * reported progress
											 * (bpext_progress_update) */
	int			applied_size_mb;	/* bpext.size it acted on */
	char		applied_path[MAXPGPATH];	/* bpext.path it acted on */
	Latch	   *worker_latch;	/* set to wake the worker, or NULL */
	int			worker_pid;
	int			worker_tier_fd; /* the worker's descriptor of the file,
								 * or -1: others open it through /proc */

	/* Slot capacity fixed at server start (bpext.max_size). */
	uint32		max_slots;

	/*
	 * Tier sweeps asked of the worker by DROP DATABASE and ALTER DATABASE
	 * SET TABLESPACE (tier_scans.c), under control_lock.
	 */
	int			nsweeps;
	Oid			sweep_dbid[BPEXT_MAX_SWEEP_REQUESTS];
	char		sweep_command[BPEXT_MAX_SWEEP_REQUESTS][NAMEDATALEN];
} BpextControl;

extern BpextControl *BpextCtl;

/*
 * Is the tier serving and admitting pages?  Cheap enough for every smgr
 * call: one atomic read.  Callers that act on the answer must re-check
 * under the map's locks (see tier_map_index.c).
 */
static inline bool
bpext_tier_enabled(void)
{
	return BpextCtl != NULL &&
		pg_atomic_read_u32(&BpextCtl->state) == BPEXT_STATE_ENABLED;
}

/*
 * Has the worker paused admission because the tier cannot help
 * (adaptive_admission.c)?  Pushes, read admission and dual-write stores
 * stop meanwhile; invalidation never does.
 */
static inline bool
bpext_admission_paused(void)
{
	return pg_atomic_read_u32(&BpextCtl->admission_paused) != 0;
}

extern void bpext_wake_worker(void);

/*
 * A relation read or extension: wake the worker if it is resting (it
 * found the clock hand standing still, worker.c), since shared-buffer
 * misses are what move the hand (a temporary relation's wakes it for
 * nothing).  One atomic read while it is not; the first caller to find it
 * resting wakes it, the others find the flag cleared.
 */
static inline void
bpext_wake_resting_worker(void)
{
	if (unlikely(pg_atomic_read_u32(&BpextCtl->worker_resting) != 0) &&
		pg_atomic_exchange_u32(&BpextCtl->worker_resting, 0) != 0)
		bpext_wake_worker();
}

/* The state machine. */
extern void bpext_apply_configuration(void);
extern void bpext_tier_fail(const char *what, int save_errno);
extern void bpext_tier_fail_hung(const char *what);
extern void bpext_tier_check_file(void);
extern void bpext_tier_recover(void);
extern int	bpext_tier_worker_fd(uint32 *incarnation);
extern const char *bpext_state_description(BpextState state);
extern bool bpext_tier_warm_load_step(void);
extern bool bpext_tier_flush_directory(void);

#endif							/* BPEXT_TIER_CONTROL_H */

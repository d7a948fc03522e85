/*-------------------------------------------------------------------------
 *
 * bpext.h
 *	  Declarations shared by all of bpext: settings, the tier's shared
 *	  control block, its state machine and its counters.
 *
 * The control block (BpextControl) lives in shared memory and is created
 * once by the postmaster.  Its fields fall into three groups, each with its
 * own protocol:
 *
 *	- state, map_epoch, file_incarnation, active_slots, warm_loading and
 *	  admission_paused are atomics read without a lock on every smgr call;
 *	  state and file_incarnation are only ever changed by the bpext worker
 *	  (tier_control.c), which is the one process that opens, creates,
 *	  resizes and closes the tier file, and admission_paused by the worker
 *	  alone too (adaptive_admission.c).  map_epoch is also bumped by
 *	  bpext_drop_clean_buffers (tier_map_begin_drop).
 *	- path, size and error fields describe the tier for the views; they are
 *	  written by the worker and read by anyone, under control_lock.
 *	- the counters live in stats.c, one slot per process.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_H
#define BPEXT_H

#include "port/atomics.h"
#include "portability/instr_time.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "utils/timestamp.h"

#include "stats.h"

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

/* What happens to a page image written to a data file (bpext.write_policy). */
typedef enum BpextWritePolicy
{
	BPEXT_WRITE_INVALIDATE,		/* drop the tier's copy */
	BPEXT_WRITE_DUAL			/* store the new image in the tier too */
} BpextWritePolicy;

/* When pages enter the tier (bpext.admission). */
typedef enum BpextAdmission
{
	BPEXT_ADMIT_EVICT,			/* clean pages about to leave shared buffers */
	BPEXT_ADMIT_READ			/* also every page read from a data file */
} BpextAdmission;

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

	/* Protected by control_lock. */
	LWLock	   *control_lock;
	char		path[MAXPGPATH];	/* the tier file in use, or "" */
	uint64		file_dev;		/* its st_dev and st_ino, so that nobody */
	uint64		file_ino;		/* uses a file put in its place */
	uint64		size_bytes;		/* its size, header included */
	char		last_error[256];
	TimestampTz last_error_time;
	TimestampTz config_applied_at;	/* the worker's last reconfiguration */
	pg_atomic_uint64 worker_progress_at;	/* the last time the worker
											 * reported progress
											 * (bpext_progress_update) */
	int			applied_size_mb;	/* bpext.size it acted on */
	char		applied_path[MAXPGPATH];	/* bpext.path it acted on */
	Latch	   *worker_latch;	/* set to wake the worker, or NULL */
	int			worker_pid;

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

/* Settings (settings.c). */
extern char *bpext_path;
extern int	bpext_size_mb;
extern int	bpext_max_size_mb;
extern int	bpext_write_policy;
extern int	bpext_admission;
extern bool bpext_direct_io;
extern int	bpext_push_interval_ms;
extern int	bpext_push_lookahead;
extern int	bpext_io_timeout_ms;
extern int	bpext_tier_readers;
extern bool bpext_log_events;
extern bool bpext_warm_restart;
extern char *bpext_min_free_space;
extern int	bpext_store_queue_pages;
extern bool bpext_adaptive_admission;

extern void bpext_define_settings(void);
extern bool bpext_size_fits(int size_mb);
extern int	bpext_reserved_size_mb(void);
extern uint64 bpext_min_free_space_bytes(uint64 fs_size);

/*
 * Is the tier serving and admitting pages?  Cheap enough for every smgr
 * call: one atomic read.  Callers that act on the answer must re-check
 * under the map's locks (see tier_map.c).
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

/* Store the pages read from data files (bpext.admission = read)? */
static inline bool
bpext_read_admission_wanted(void)
{
	return bpext_admission == BPEXT_ADMIT_READ && !bpext_admission_paused();
}

/* sql_api.c */
extern void bpext_require_preloaded(void);

/* tier_control.c */
extern void bpext_apply_configuration(void);
extern void bpext_tier_fail(const char *what, int save_errno);
extern void bpext_tier_check_file(void);
extern const char *bpext_state_description(BpextState state);
extern void bpext_wake_worker(void);
extern bool bpext_tier_warm_load_step(void);
extern void bpext_tier_flush_directory(void);

/* Microseconds since start, for the read and write timings. */
static inline uint64
bpext_microseconds_since(instr_time start)
{
	instr_time	now;

	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, start);
	return INSTR_TIME_GET_MICROSEC(now);
}

#endif							/* BPEXT_H */

/*-------------------------------------------------------------------------
 *
 * progress.h
 *	  bpext_progress: long bpext operations (prewarm, warm load, resize,
 *	  flush, drop clean buffers, database sweeps) as they run, as
 *	  pg_stat_progress_* shows PostgreSQL's.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_PROGRESS_H
#define BPEXT_PROGRESS_H

/* The operations; their names are bpext_progress's. */
typedef enum BpextProgressOp
{
	BPEXT_PROGRESS_PREWARM,		/* "prewarm" */
	BPEXT_PROGRESS_WARM_LOAD,	/* "warm load" */
	BPEXT_PROGRESS_RESIZE,		/* "resize" */
	BPEXT_PROGRESS_FLUSH,		/* "flush" */
	BPEXT_PROGRESS_DROP_CLEAN,	/* "drop clean buffers" */
	BPEXT_PROGRESS_SWEEP,		/* "sweep": dead tier pages given back */
	BPEXT_PROGRESS_NUM_OPS
} BpextProgressOp;

extern Size bpext_progress_shmem_size(void);
extern void bpext_progress_shmem_init(bool found);

/*
 * One operation at a time per process: begin, then update as pages are
 * done, then end (also on error: bpext_progress_end is safe to call when
 * nothing is under way, and an exiting process's slot is freed for it).
 */
extern bool bpext_progress_begin(BpextProgressOp op, uint64 total);
extern void bpext_progress_set_target(Oid dbid, Oid relid,
									  const char *command);
extern void bpext_progress_update(uint64 done);
extern void bpext_progress_set_workers(int nworkers);
extern void bpext_progress_end(void);
extern bool bpext_progress_active(void);

#endif							/* BPEXT_PROGRESS_H */

/*-------------------------------------------------------------------------
 *
 * worker.h
 *	  The bpext background worker.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_WORKER_H
#define BPEXT_WORKER_H

#include "postmaster/bgworker.h"

extern void bpext_worker_entry(BackgroundWorker *worker, const char *function,
							   const char *type);
extern void bpext_register_worker(void);
extern bool bpext_is_tier_worker(void);
extern PGDLLEXPORT void bpext_worker_main(Datum main_arg);

#endif							/* BPEXT_WORKER_H */

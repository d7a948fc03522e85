/*-------------------------------------------------------------------------
 *
 * worker_children.h
 *	  The bpext worker's helper processes: its own children, which the
 *	  kernel kills when the worker exits, however it exits.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_WORKER_CHILDREN_H
#define BPEXT_WORKER_CHILDREN_H

#include <sys/types.h>

/* Who forked a child, so that each module can end only its own. */
typedef enum WorkerChildKind
{
	WORKER_CHILD_READER,		/* tier_readers.c */
	WORKER_CHILD_WRITER			/* tier_writer.c */
} WorkerChildKind;

extern pid_t worker_child_fork(WorkerChildKind kind);
extern void worker_children_reap(void);
extern bool worker_child_alive(pid_t pid);
extern void worker_children_kill(WorkerChildKind kind);
extern void worker_child_kill(pid_t pid);

#endif							/* BPEXT_WORKER_CHILDREN_H */

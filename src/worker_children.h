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
	WORKER_CHILD_WRITER,		/* tier_writer.c */
	WORKER_CHILD_FILE,			/* helper_io.c: one piece of work */
	WORKER_CHILD_KEEPER			/* tier_control.c: the last holder */
} WorkerChildKind;

extern pid_t worker_child_fork(WorkerChildKind kind);
extern void worker_children_reap(void);
extern bool worker_child_alive(pid_t pid);
extern void worker_children_kill(WorkerChildKind kind);
extern void worker_child_kill(pid_t pid);
extern void worker_children_set_file(uint64 dev, uint64 ino);
extern int	worker_children_busy(void);
extern uint64 worker_children_late_exits(void);
extern int	worker_children_files(uint64 *devs, uint64 *inos, int max);
extern void worker_children_kill_keepers(uint64 dev, uint64 ino, pid_t except);

#endif							/* BPEXT_WORKER_CHILDREN_H */

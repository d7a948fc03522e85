/*-------------------------------------------------------------------------
 *
 * worker_children.c
 *	  The bpext worker's helper processes (tier_readers.c's, tier_writer.c's):
 *	  its own children, which the kernel kills when the worker exits,
 *	  however it exits.
 *
 * A helper does tier I/O that may never return (a hung SSD), so nothing
 * may wait for it, and it may still be in the kernel when the server stops.
 * It must not outlive the server for longer than that I/O: as soon as the
 * I/O returns, or at once if it is not in the kernel, it must be gone, or
 * it would hold the tier file, the logging collector's pipe and a process
 * slot of the user's for as long as it stayed, and a stuck helper that
 * woke up after a crash restart would find the request region of the new
 * server (tier_readers.c).  A helper cannot see for itself that the server
 * went away while it is blocked in a read or a write; and the worker
 * cannot be counted on to tell it, since an immediate shutdown or a crash
 * restart ends the worker with SIGQUIT or SIGKILL, without its exit
 * callbacks.  So the kernel does it: each helper is a child of the worker
 * with PR_SET_PDEATHSIG set to SIGKILL, which the kernel sends it when the
 * worker exits for whatever reason.  A SIGKILL ends a process at once, or,
 * if it is in an uninterruptible wait in the kernel, as soon as that wait
 * ends, before it returns to user space: so it never acts on anything
 * after that, and what it held is let go as soon as the device lets go.
 *
 * Being the worker's children (not grandchildren), they are the worker's
 * to reap: it does so on every round (worker_children_reap), and a pid in
 * the table is a process the worker has not reaped, so that pid cannot
 * have been reused and is safe to signal.  Children the worker has not
 * reaped when it exits go to init (or the nearest subreaper), which reaps
 * them.  No PostgreSQL process other than the worker has any child of
 * ours.
 *
 * Only the bpext worker forks these, and only it reads or writes the table,
 * which is in its private memory: no locking.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "worker_children.h"

/*
 * Children not yet reaped: every live helper, and those told to go that
 * are still stuck in the kernel.  When it is full, no helper is forked
 * (the tier I/O is then done, or skipped, as without helpers).
 */
#define MAX_CHILDREN		64

typedef struct WorkerChild
{
	pid_t		pid;			/* 0: a free entry */
	WorkerChildKind kind;
} WorkerChild;

static WorkerChild children[MAX_CHILDREN];

/*
 * fork() for a helper: -1 (errno set) in the worker if it could not, the
 * child's pid in the worker, 0 in the child, which dies with the worker.
 */
pid_t
worker_child_fork(WorkerChildKind kind)
{
	pid_t		parent = getpid();
	pid_t		child;
	int			i;

	worker_children_reap();
	for (i = 0; i < MAX_CHILDREN; i++)
		if (children[i].pid == 0)
			break;
	if (i == MAX_CHILDREN)
	{
		errno = EAGAIN;
		return -1;
	}

	fflush(NULL);
	child = fork();
	if (child == 0)
	{
		/* The table is the worker's; this process has no children. */
		memset(children, 0, sizeof(children));

		/*
		 * If the worker exited before the death signal was set, nothing
		 * will send it: then go at once.
		 */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
			_exit(0);
		return 0;
	}
	if (child > 0)
	{
		children[i].pid = child;
		children[i].kind = kind;
	}
	return child;
}

/* Reap the children that have exited. */
void
worker_children_reap(void)
{
	int			i;

	for (i = 0; i < MAX_CHILDREN; i++)
	{
		pid_t		pid = children[i].pid;
		int			status;
		pid_t		r;

		if (pid == 0)
			continue;
		do
			r = waitpid(pid, &status, WNOHANG);
		while (r < 0 && errno == EINTR);

		/* ECHILD: reaped already (SIGCHLD ignored): gone all the same. */
		if (r == pid || (r < 0 && errno == ECHILD))
			children[i].pid = 0;
	}
}

/* Is pid a child of ours that has not been reaped yet? */
bool
worker_child_alive(pid_t pid)
{
	int			i;

	if (pid <= 0)
		return false;
	for (i = 0; i < MAX_CHILDREN; i++)
		if (children[i].pid == pid)
			return true;
	return false;
}

/*
 * SIGKILL one child, if it is ours and not reaped (so the pid is still its
 * own): it ends at once, or when the I/O it is stuck in returns.
 */
void
worker_child_kill(pid_t pid)
{
	if (worker_child_alive(pid))
		(void) kill(pid, SIGKILL);
}

/* SIGKILL every child of that kind. */
void
worker_children_kill(WorkerChildKind kind)
{
	int			i;

	for (i = 0; i < MAX_CHILDREN; i++)
		if (children[i].pid != 0 && children[i].kind == kind)
			(void) kill(children[i].pid, SIGKILL);
}

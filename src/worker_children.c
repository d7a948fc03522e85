/*-------------------------------------------------------------------------
 *
 * worker_children.c
 *	  The bpext worker's helper processes (tier_readers.c's, tier_writer.c's,
 *	  helper_io.c's, and tier_control.c's keepers): its own children, which
 *	  the kernel kills when the worker exits, however it exits (keepers
 *	  excepted: see tier_control.c).
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
 * Each also moves to a session of its own before any signal can act on
 * it, out of the worker's process group, which the postmaster signals as
 * a whole (a fast shutdown's SIGTERM, an immediate one's SIGQUIT): the
 * worker alone decides when a helper ends, and a helper killed by a signal
 * meant for the worker would fail the tier I/O the worker waits on.
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

#include "helper_io.h"
#include "worker_children.h"

/*
 * Children not yet reaped: every live helper, and those told to go that
 * are still stuck in the kernel.  When it is full, no helper is forked,
 * and the tier I/O that needed one fails (the tier goes to ERROR): the
 * worker never does it itself.
 */
#define MAX_CHILDREN		64

typedef struct WorkerChild
{
	pid_t		pid;			/* 0: a free entry */
	WorkerChildKind kind;
	uint64		dev;			/* the tier file it may write to, or 0 */
	uint64		ino;
	uint64		killed_ms;		/* when it was sent SIGKILL, or 0 */
} WorkerChild;

/*
 * A child that ends this long after it was killed was not merely idle: it
 * was stuck in the kernel, and its call has just returned.
 */
#define LATE_EXIT_MS		1000

static uint64 late_exits = 0;

static WorkerChild children[MAX_CHILDREN];

/* The tier file the worker holds now (worker_children_set_file). */
static uint64 current_dev = 0;
static uint64 current_ino = 0;

/* SIGKILL entry i, noting when. */
static void
kill_child(int i)
{
	if (children[i].killed_ms == 0)
		children[i].killed_ms = Max(bpext_monotonic_ms(), 1);
	(void) kill(children[i].pid, SIGKILL);
}

/*
 * fork() for a helper: -1 (errno set) in the worker if it could not, the
 * child's pid in the worker, 0 in the child, which dies with the worker.
 * The child is in a session of its own, with every signal blocked: its
 * first call must be bpext_helper_leave_server.
 */
pid_t
worker_child_fork(WorkerChildKind kind)
{
	pid_t		parent = getpid();
	pid_t		child;
	sigset_t	all;
	sigset_t	before;
	int			save_errno;
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

	/*
	 * The postmaster signals the worker's whole process group (the SIGTERM
	 * of a fast shutdown, say), and a child starts in it.  It must leave
	 * the group before such a signal can reach it with its default action,
	 * or a shutdown that comes as a helper starts kills the helper and
	 * fails the tier I/O it was forked for.  So every signal stays blocked
	 * from before the fork until the child has its own session; one that
	 * reached the child meanwhile was meant for the worker, and
	 * bpext_helper_leave_server drops it.
	 */
	fflush(NULL);
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &before);
	child = fork();
	if (child == 0)
	{
		(void) setsid();

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
	save_errno = errno;
	sigprocmask(SIG_SETMASK, &before, NULL);
	errno = save_errno;
	if (child > 0)
	{
		children[i].pid = child;
		children[i].kind = kind;
		children[i].dev = current_dev;
		children[i].ino = current_ino;
		children[i].killed_ms = 0;
	}
	return child;
}

/*
 * The tier file (st_dev, st_ino) the worker holds from now on, or 0, 0:
 * every child forked meanwhile is taken to touch it.
 */
void
worker_children_set_file(uint64 dev, uint64 ino)
{
	current_dev = dev;
	current_ino = ino;
}

/*
 * How many children are alive (not reaped) that may still do tier I/O:
 * all but the keepers, which only hold a descriptor open.  A child the
 * worker gave up on that is still there has not seen its I/O return: the
 * device has not answered it yet.
 */
int
worker_children_busy(void)
{
	int			n = 0;
	int			i;

	worker_children_reap();
	for (i = 0; i < MAX_CHILDREN; i++)
		if (children[i].pid != 0 && children[i].kind != WORKER_CHILD_KEEPER)
			n++;
	return n;
}

/*
 * The tier files (st_dev, st_ino) that children given up on may still
 * write to (or remove), at most max of them: writer and file helpers that
 * were killed and are still there.  A call of one that is stuck could land
 * whenever the device answers: such a file must not become the tier's
 * file again before they are gone (tier_control.c).  A helper that was
 * merely told to go was idle, and readers only read.
 */
int
worker_children_files(uint64 *devs, uint64 *inos, int max)
{
	int			n = 0;
	int			i;
	int			j;

	worker_children_reap();
	for (i = 0; i < MAX_CHILDREN && n < max; i++)
	{
		bool		seen = false;

		if (children[i].pid == 0 || children[i].killed_ms == 0 ||
			(children[i].kind != WORKER_CHILD_WRITER &&
			 children[i].kind != WORKER_CHILD_FILE) ||
			(children[i].dev == 0 && children[i].ino == 0))
			continue;
		for (j = 0; j < n; j++)
			seen |= devs[j] == children[i].dev && inos[j] == children[i].ino;
		if (seen)
			continue;
		devs[n] = children[i].dev;
		inos[n] = children[i].ino;
		n++;
	}
	return n;
}

/*
 * SIGKILL the keepers of the file (dev, ino) other than except: a newer
 * keeper holds it now (tier_control.c).
 */
void
worker_children_kill_keepers(uint64 dev, uint64 ino, pid_t except)
{
	int			i;

	for (i = 0; i < MAX_CHILDREN; i++)
		if (children[i].pid != 0 && children[i].pid != except &&
			children[i].kind == WORKER_CHILD_KEEPER &&
			children[i].dev == dev && children[i].ino == ino)
			kill_child(i);
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
		{
			if (children[i].killed_ms != 0 &&
				bpext_monotonic_ms() - children[i].killed_ms >= LATE_EXIT_MS)
				late_exits++;
			children[i].pid = 0;
		}
	}
}

/*
 * How many children have ended long after they were killed (stuck in the
 * kernel until their call returned), since the worker started.
 */
uint64
worker_children_late_exits(void)
{
	return late_exits;
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
	int			i;

	if (pid <= 0)
		return;
	for (i = 0; i < MAX_CHILDREN; i++)
		if (children[i].pid == pid)
			kill_child(i);
}

/* SIGKILL every child of that kind. */
void
worker_children_kill(WorkerChildKind kind)
{
	int			i;

	for (i = 0; i < MAX_CHILDREN; i++)
		if (children[i].pid != 0 && children[i].kind == kind)
			kill_child(i);
}

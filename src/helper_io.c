/*-------------------------------------------------------------------------
 *
 * helper_io.c
 *	  Tier-file work done in a helper process that the caller can stop
 *	  waiting for: the postmaster's (a warm start's decision, the save at
 *	  exit), the bpext worker's (opening, creating and removing the tier
 *	  file), a backend's (the free-space check of bpext_enable).
 *
 * On a device that hangs instead of failing (a stuck NVMe controller, a
 * suspended device-mapper table, a file system whose journal waits on a
 * write that never completes) a system call on the tier file (a read, an
 * fsync, an open that creates, an unlink, an fallocate, even an atime
 * update) can sleep in the kernel for ever, where no signal reaches it.
 * In a process PostgreSQL waits for, that would keep the server from
 * starting, from finishing its shutdown, or a session from ever answering.
 * So such calls run in a helper process, and the caller waits for it only
 * while it keeps answering: the helper reports after every call that
 * returned (helper_io_progress), and if bpext.io_timeout passes without a
 * word, the caller kills it (SIGKILL: it dies as soon as the kernel lets
 * go of it) and goes on without the tier.  With no timeout the wait still
 * ends when the caller is asked to stop: a postmaster by a signal that
 * asks it to shut down (blocked meanwhile and left pending for it), a
 * backend or the bpext worker by a termination or cancel request (then
 * served), and every one of them when the postmaster dies.
 *
 * Which process the helper is:
 *
 *	- In the bpext worker, a child of its own (worker_children.c), which
 *	  the kernel kills when the worker exits and which the worker reaps;
 *	  the worker can thus tell when every helper it gave up on has really
 *	  gone (tier_control.c waits for that before the tier comes back).
 *	- Elsewhere, a grandchild: the child forks again and exits at once, so
 *	  that the postmaster never has a child it does not know of (its
 *	  reaper would take one that dies of SIGKILL for a crashed backend),
 *	  and a backend none that it would have to reap.
 *
 * Either way the helper closes every descriptor it inherited but its
 * socket and those the caller names, points standard output and error at
 * /dev/null (the logging collector's pipe must not outlive the server),
 * detaches from shared memory (whose attach count keeps the next
 * postmaster from starting), and takes a process title with the word
 * "helper" in it, so that a process waiting on the tier device can be told
 * from the server's own.  Whatever the work needs must be in its private
 * memory, copied at fork.
 *
 * The socket (a stream socketpair) carries frames: a header (length, type)
 * and that many bytes.  Progress frames are empty; in a grandchild the
 * first frame is its pid; data frames are the result, handed to the
 * caller concatenated; the last frame says the work is done.  A data frame
 * may carry an open descriptor (SCM_RIGHTS): the bpext worker gets its
 * hold on the tier file that way without ever calling open() itself.  The
 * helper keeps its own copy of what it sent until the caller has closed
 * its end of the socket, so that the caller is never the last holder of a
 * descriptor it gave up on before receiving it (see tier_control.c for why
 * the last close of the tier file matters).
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/pg_shmem.h"
#include "utils/ps_status.h"

#include "helper_io.h"
#include "io_watch.h"
#include "test_hooks.h"
#include "wait_events.h"
#include "worker_children.h"

/* How often a waiting caller looks up. */
#define SLICE_MS			100

typedef enum HelperFrameType
{
	FRAME_PROGRESS,
	FRAME_PID,
	FRAME_DATA,
	FRAME_DONE
} HelperFrameType;

typedef struct HelperFrame
{
	uint32		len;
	uint32		type;			/* HelperFrameType */
} HelperFrame;

/* In the helper: its end of the socket, and whether it sent a descriptor. */
static int	helper_sock = -1;
static bool handed_fd = false;

/* Write everything or exit: the caller reads what arrived. */
static void
write_all(const void *data, size_t len)
{
	const char *p = data;

	while (len > 0)
	{
		ssize_t		n = write(helper_sock, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			_exit(1);
		p += n;
		len -= n;
	}
}

/* Send one frame, with fd (if >= 0) riding on its header. */
static void
send_frame(HelperFrameType type, const void *data, size_t len, int fd)
{
	HelperFrame hdr = {.len = (uint32) len,.type = type};

	if (fd >= 0)
	{
		union
		{
			char		buf[CMSG_SPACE(sizeof(int))];
			struct cmsghdr align;
		}			control;
		struct iovec iov = {.iov_base = &hdr,.iov_len = sizeof(hdr)};
		struct msghdr msg;
		struct cmsghdr *cmsg;
		ssize_t		n;

		memset(&msg, 0, sizeof(msg));
		memset(&control, 0, sizeof(control));
		msg.msg_iov = &iov;
		msg.msg_iovlen = 1;
		msg.msg_control = control.buf;
		msg.msg_controllen = sizeof(control.buf);
		cmsg = CMSG_FIRSTHDR(&msg);
		cmsg->cmsg_level = SOL_SOCKET;
		cmsg->cmsg_type = SCM_RIGHTS;
		cmsg->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
		do
			n = sendmsg(helper_sock, &msg, 0);
		while (n < 0 && errno == EINTR);
		if (n <= 0)
			_exit(1);
		write_all((char *) &hdr + n, sizeof(hdr) - n);
	}
	else
		write_all(&hdr, sizeof(hdr));
	if (len > 0)
		write_all(data, len);
}

/* In the helper: a call returned.  Does nothing anywhere else. */
void
helper_io_progress(void)
{
	if (helper_sock >= 0)
		send_frame(FRAME_PROGRESS, NULL, 0, -1);
}

/* In the helper: hand data back to the caller. */
void
helper_io_send(const void *data, size_t len)
{
	Assert(helper_sock >= 0 && len > 0);
	send_frame(FRAME_DATA, data, len, -1);
}

/*
 * In the helper: hand data back together with an open descriptor, which
 * the caller receives as a descriptor of its own (only the last such
 * descriptor of a run is kept).  The helper's copy stays open until the
 * caller has closed the socket.
 */
void
helper_io_send_fd(const void *data, size_t len, int fd)
{
	Assert(helper_sock >= 0 && len > 0);
	send_frame(FRAME_DATA, data, len, fd);
	handed_fd = true;
}

/*
 * First thing in a process just forked to be a helper (this file's,
 * tier_writer.c's, tier_readers.c's, the keeper): nothing of the server
 * process it came from runs in it any more.  Every signal goes back to its
 * default and none is blocked, so that a SIGTERM ends it as it would any
 * process.  The exit callbacks it inherited are forgotten (the
 * postmaster's remove postmaster.pid), an ERROR cannot unwind into a
 * PG_TRY block of the parent's (with no exception stack it becomes FATAL,
 * and proc_exit then just exits), and interrupts the parent had pending
 * are never served.
 */
void
bpext_helper_leave_server(void)
{
	sigset_t	none;
	int			sig;

	/*
	 * No server handler may run from here on, and no signal pending now
	 * may act: it was meant for the parent (ignoring a signal discards it
	 * if it is pending).  SIGCHLD is ignored by default anyway, and while
	 * set to SIG_IGN it would reap the children of a helper that has some.
	 */
	for (sig = 1; sig < NSIG; sig++)
	{
		if (sig == SIGKILL || sig == SIGSTOP)
			continue;
		if (sig != SIGCHLD)
			signal(sig, SIG_IGN);
		signal(sig, SIG_DFL);
	}
	on_exit_reset();
	PG_exception_stack = NULL;
	error_context_stack = NULL;
	HOLD_INTERRUPTS();
	MyProcPid = getpid();
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

/*
 * In a helper process: close every inherited descriptor but standard
 * input and the nkeep in keep, and point standard output and error at
 * /dev/null, so that a helper stuck in the kernel holds none of its
 * parent's sockets or files.  The standard output and error of a server
 * process are the logging collector's pipe when it runs, and the logger
 * exits only when every process holding that pipe has closed it: a helper
 * that kept it would keep the old server's logger running after the server
 * stopped.
 */
void
bpext_close_inherited_fds(const int *keep, int nkeep)
{
	DIR		   *dir = opendir("/proc/self/fd");
	struct dirent *de;
	bool		redirect = true;
	int			devnull;
	int			i;

	/* Standard output and error are replaced unless one is to be kept. */
	for (i = 0; i < nkeep; i++)
		redirect &= (keep[i] > STDERR_FILENO);

	if (dir == NULL)
	{
		/*
		 * No /proc (or no descriptor left to read it): every number, up to
		 * the limit, but no more than 65536 (a container's limit can be a
		 * million, and a postmaster's helper must answer within
		 * bpext.io_timeout).
		 */
		long		max_fd = sysconf(_SC_OPEN_MAX);
		int			fd;

		if (max_fd <= 0 || max_fd > 65536)
			max_fd = 65536;
		for (fd = STDERR_FILENO + 1; fd < max_fd; fd++)
		{
			bool		kept = false;

			for (i = 0; i < nkeep; i++)
				kept |= (fd == keep[i]);
			if (!kept)
				(void) close(fd);
		}
	}
	else
	{
		while ((de = readdir(dir)) != NULL)
		{
			int			fd = atoi(de->d_name);
			bool		kept = false;

			for (i = 0; i < nkeep; i++)
				kept |= (fd == keep[i]);
			if (de->d_name[0] == '.' || fd <= 2 || kept || fd == dirfd(dir))
				continue;
			close(fd);
		}
		closedir(dir);
	}

	devnull = redirect ? open("/dev/null", O_WRONLY | O_CLOEXEC) : -1;
	if (devnull >= 0)
	{
		(void) dup2(devnull, STDOUT_FILENO);
		(void) dup2(devnull, STDERR_FILENO);
		close(devnull);
	}
}

/*
 * In a helper process: its process title, "postgres: [cluster: ]title",
 * whatever update_process_title says, so that ps tells a helper (which
 * may sleep on a hung device) from the server process it came from.
 * ps_status.c changes the title only in a child of the postmaster; a
 * postmaster's helper is one for that purpose.
 */
void
bpext_helper_title(const char *title)
{
	IsUnderPostmaster = true;
	update_process_title = true;
	init_ps_display(title);
}

/* Milliseconds on io_watch.c's clock, for the helpers' deadlines. */
uint64
bpext_monotonic_ms(void)
{
	return bpext_io_watch_clock() / 1000;
}

static void
run_helper(int sock, const HelperIoRun *run)
{
	int			keep[16];
	int			nkeep = 0;
	int			i;
	char		c;

	helper_sock = sock;
	bpext_helper_leave_server();
	keep[nkeep++] = sock;
	for (i = 0; i < run->nkeep && nkeep < lengthof(keep); i++)
		keep[nkeep++] = run->keep[i];
	bpext_close_inherited_fds(keep, nkeep);
	PGSharedMemoryDetach();
	bpext_helper_title(run->title);
	if (!run->worker_child)
	{
		pid_t		pid = getpid();

		send_frame(FRAME_PID, &pid, sizeof(pid), -1);
	}
	run->work(run->arg);
	if (handed_fd && BPEXT_TEST_HELPER_PAUSE_MS() > 0)
		pg_usleep(BPEXT_TEST_HELPER_PAUSE_MS() * 1000L);
	send_frame(FRAME_DONE, NULL, 0, -1);

	/* Keep what was handed over until the caller has it (EOF). */
	for (;;)
	{
		ssize_t		n = read(sock, &c, 1);

		if (n == 0 || (n < 0 && errno != EINTR))
			break;
	}
	_exit(0);
}

/* Start the helper; its pid (0 for a grandchild, known later), or -1. */
static pid_t
start_helper(const HelperIoRun *run, int sock, int helper_end)
{
	pid_t		child;
	pid_t		reaped;
	int			status;

	fflush(NULL);
	if (run->worker_child)
	{
		child = worker_child_fork(WORKER_CHILD_FILE);
		if (child == 0)
		{
			close(sock);
			run_helper(helper_end, run);
		}
		return child;
	}
	child = fork();
	if (child == 0)
	{
		pid_t		grandchild;

		close(sock);
		grandchild = fork();
		if (grandchild == 0)
			run_helper(helper_end, run);
		_exit(grandchild < 0 ? 1 : 0);
	}
	if (child < 0)
		return -1;
	do
		reaped = waitpid(child, &status, 0);
	while (reaped < 0 && errno == EINTR);

	/*
	 * Reaped by someone else (SIGCHLD ignored): whether the helper started
	 * is then for the socket to tell (its pid frame, or EOF at once).
	 */
	if (reaped < 0)
		return errno == ECHILD ? 0 : -1;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
	{
		errno = EAGAIN;
		return -1;
	}
	return 0;
}

/*
 * Read what is there (it may carry a descriptor) into *buf, without
 * waiting.  Returns the bytes read, 0 at EOF, -1 on error (EAGAIN: nothing
 * there yet).
 */
static ssize_t
receive(int sock, char **buf, size_t *buflen, size_t *bufsize, int *fd)
{
	union
	{
		char		buf[CMSG_SPACE(sizeof(int) * 4)];
		struct cmsghdr align;
	}			control;
	struct iovec iov;
	struct msghdr msg;
	struct cmsghdr *cmsg;
	ssize_t		n;

	if (*bufsize - *buflen < 65536)
	{
		char	   *grown = realloc(*buf, *bufsize + 65536 * 4);

		if (grown == NULL)
		{
			errno = ENOMEM;
			return -1;
		}
		*buf = grown;
		*bufsize += 65536 * 4;
	}
	memset(&msg, 0, sizeof(msg));
	iov.iov_base = *buf + *buflen;
	iov.iov_len = *bufsize - *buflen;
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = control.buf;
	msg.msg_controllen = sizeof(control.buf);
	do
		n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);

	/*
	 * A failed recvmsg leaves msg_controllen as we set it, over a buffer
	 * that still holds what an earlier call received there: read as new,
	 * it would close the descriptor already handed over and hand its
	 * number back, closed.  Only a call that succeeded carries any.
	 */
	if (n < 0)
		return n;
	for (cmsg = CMSG_FIRSTHDR(&msg); cmsg != NULL; cmsg = CMSG_NXTHDR(&msg, cmsg))
	{
		int			nfds;
		int			i;

		if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS)
			continue;
		nfds = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (i = 0; i < nfds; i++)
		{
			int			got;

			memcpy(&got, CMSG_DATA(cmsg) + i * sizeof(int), sizeof(int));
			if (*fd >= 0)
				close(*fd);
			*fd = got;
		}
	}
	if (n > 0)
		*buflen += n;
	return n;
}

/* Stop waiting for the helper: it dies as soon as the kernel lets go. */
static void
abandon(const HelperIoRun *run, pid_t helper)
{
	if (helper <= 0)
		return;
	if (run->worker_child)
		worker_child_kill(helper);
	else
		(void) kill(helper, SIGKILL);
}

/* What a wait for the helper ended with. */
typedef enum HelperWait
{
	WAIT_LOOK,					/* look at the socket */
	WAIT_STOP,					/* a postmaster asked to shut down */
	WAIT_INTERRUPT				/* an interrupt to serve */
} HelperWait;

/*
 * Wait up to wait_ms (-1: no limit) for the socket to be readable.  A
 * postmaster is told of a shutdown asked for meanwhile (the signals are
 * blocked by the caller, and stay pending); anyone else, of an interrupt.
 */
static HelperWait
wait_for_helper(int sock, int wait_ms, bool *latch_set)
{
	int			rc;

	if (!IsUnderPostmaster)
	{
		struct pollfd pfd = {.fd = sock,.events = POLLIN};
		sigset_t	pending;

		(void) poll(&pfd, 1, wait_ms < 0 ? SLICE_MS : Min(wait_ms, SLICE_MS));
		sigpending(&pending);
		return sigismember(&pending, SIGTERM) || sigismember(&pending, SIGINT) ||
			sigismember(&pending, SIGQUIT) ? WAIT_STOP : WAIT_LOOK;
	}

	rc = WaitLatchOrSocket(MyLatch,
						   WL_LATCH_SET | WL_SOCKET_READABLE | WL_TIMEOUT |
						   WL_EXIT_ON_PM_DEATH, sock,
						   wait_ms < 0 ? SLICE_MS : Min(wait_ms, SLICE_MS),
						   BPEXT_WAIT_EVENT(BPEXT_WAIT_TIER_HELPER));
	if (rc & WL_LATCH_SET)
	{
		ResetLatch(MyLatch);
		*latch_set = true;
	}
	return INTERRUPTS_PENDING_CONDITION() ? WAIT_INTERRUPT : WAIT_LOOK;
}

/*
 * Run work in a helper process and collect what it sends, as long as it
 * never stays silent for run->timeout_ms (0: as long as it takes), and the
 * caller is not asked to stop.  On success *result (malloc'd, or NULL if
 * nothing came) and *resultlen hold the data frames, and *fd (if not NULL)
 * the last descriptor handed over, or -1.  Otherwise the reason is in
 * why, the helper was killed and abandoned if it had started, and nothing
 * is returned.  An interrupt of a backend or of the bpext worker is served
 * while it waits (an ERROR abandons the helper first).
 */
HelperIoFailure
helper_io_run(const HelperIoRun *run, char **result, size_t *resultlen,
			  int *fd, char *why, size_t whylen)
{
	int			sv[2];
	pid_t		helper;
	char	   *buf = NULL;
	size_t		buflen = 0;
	size_t		bufsize = 0;
	size_t		parsed = 0;
	char	   *out = NULL;
	size_t		outlen = 0;
	int			got_fd = -1;
	uint64		last;
	HelperIoFailure failure = HELPER_IO_DIED;
	HelperWait	wait;
	bool		latch_set = false;
	sigset_t	stop_signals;
	sigset_t	saved_mask;

	*result = NULL;
	*resultlen = 0;
	if (fd != NULL)
		*fd = -1;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
	{
		snprintf(why, whylen, "could not create a socket pair: %m");
		return HELPER_IO_NOT_STARTED;
	}

	/* A postmaster looks for shutdown signals while it waits. */
	if (!IsUnderPostmaster)
	{
		sigemptyset(&stop_signals);
		sigaddset(&stop_signals, SIGTERM);
		sigaddset(&stop_signals, SIGINT);
		sigaddset(&stop_signals, SIGQUIT);
		sigprocmask(SIG_BLOCK, &stop_signals, &saved_mask);
	}

	helper = start_helper(run, sv[0], sv[1]);
	close(sv[1]);
	if (helper < 0)
	{
		snprintf(why, whylen, "could not start a helper process: %m");
		close(sv[0]);
		if (!IsUnderPostmaster)
			sigprocmask(SIG_SETMASK, &saved_mask, NULL);
		return HELPER_IO_NOT_STARTED;
	}

	last = bpext_monotonic_ms();
	for (;;)
	{
		int			wait_ms = -1;
		ssize_t		n;

		if (run->timeout_ms > 0)
		{
			uint64		silent = bpext_monotonic_ms() - last;

			if (silent >= (uint64) run->timeout_ms)
			{
				failure = HELPER_IO_TIMED_OUT;
				break;
			}
			wait_ms = run->timeout_ms - (int) silent;
		}
		wait = wait_for_helper(sv[0], wait_ms, &latch_set);
		if (wait == WAIT_STOP)
		{
			failure = HELPER_IO_INTERRUPTED;
			break;
		}
		if (wait == WAIT_INTERRUPT)
		{
			/* Served here; an error abandons the helper first. */
			PG_TRY();
			{
				CHECK_FOR_INTERRUPTS();
			}
			PG_CATCH();
			{
				abandon(run, helper);
				close(sv[0]);
				free(buf);
				free(out);
				if (got_fd >= 0)
					close(got_fd);
				PG_RE_THROW();
			}
			PG_END_TRY();

			/* Held interrupts end the wait all the same. */
			if (ProcDiePending || QueryCancelPending)
			{
				failure = HELPER_IO_INTERRUPTED;
				break;
			}
		}
		n = receive(sv[0], &buf, &buflen, &bufsize, &got_fd);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			continue;			/* nothing yet */
		if (n == 0 && !run->worker_child)
			helper = 0;			/* gone, and its pid may be reused: no kill */
		if (n <= 0)
			break;				/* EOF: it died without finishing */
		last = bpext_monotonic_ms();

		/* Whole frames. */
		while (buflen - parsed >= sizeof(HelperFrame))
		{
			HelperFrame hdr;
			char	   *body;

			memcpy(&hdr, buf + parsed, sizeof(hdr));
			if (buflen - parsed - sizeof(hdr) < hdr.len)
				break;
			body = buf + parsed + sizeof(hdr);
			if (hdr.type == FRAME_PID && hdr.len == sizeof(pid_t))
				memcpy(&helper, body, sizeof(pid_t));
			else if (hdr.type == FRAME_DATA && hdr.len > 0)
			{
				char	   *grown = realloc(out, outlen + hdr.len);

				if (grown == NULL)
					goto give_up;
				out = grown;
				memcpy(out + outlen, body, hdr.len);
				outlen += hdr.len;
			}
			else if (hdr.type == FRAME_DONE)
			{
				failure = HELPER_IO_OK;
				goto give_up;
			}
			parsed += sizeof(hdr) + hdr.len;
		}
		if (parsed == buflen)
			parsed = buflen = 0;
	}

give_up:
	/* The helper, done, exits once it sees the socket closed. */
	close(sv[0]);
	free(buf);

	/* Whatever woke us meanwhile is for the caller too. */
	if (latch_set)
		SetLatch(MyLatch);
	if (!IsUnderPostmaster)
		sigprocmask(SIG_SETMASK, &saved_mask, NULL);
	if (failure == HELPER_IO_OK)
	{
		*result = out;
		*resultlen = outlen;
		if (fd != NULL)
			*fd = got_fd;
		else if (got_fd >= 0)
			close(got_fd);
		return HELPER_IO_OK;
	}

	abandon(run, helper);
	free(out);
	if (got_fd >= 0)
		close(got_fd);
	switch (failure)
	{
		case HELPER_IO_TIMED_OUT:
			snprintf(why, whylen,
					 "the tier file did not answer within %d ms (bpext.io_timeout)",
					 run->timeout_ms);
			break;
		case HELPER_IO_INTERRUPTED:
			if (!IsUnderPostmaster)
				strlcpy(why, "a shutdown was requested while waiting for the tier file",
						whylen);
			else
				strlcpy(why, "the wait for the tier file was interrupted", whylen);
			break;
		default:
			strlcpy(why, "the process doing the tier file's I/O ended without an answer",
					whylen);
			failure = HELPER_IO_DIED;
			break;
	}
	return failure;
}

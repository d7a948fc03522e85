/*-------------------------------------------------------------------------
 *
 * postmaster_io.c
 *	  Tier-file I/O the postmaster needs done, in a process it can stop
 *	  waiting for.
 *
 * The postmaster touches the tier file twice: at start, to decide whether
 * the saved map may be reused, and at exit, to finish saving it
 * (warm_restart.c).  On a device that hangs instead of failing (a stuck
 * NVMe controller, fsfreeze, a suspended device-mapper table) a read or
 * an fsync can block for ever, and nothing in user space can take it
 * back; in the postmaster that would keep the server from starting, or
 * from finishing its shutdown.  So that I/O runs in a helper process, and
 * the postmaster waits for it only while it keeps answering: the helper
 * reports after every call that returned (postmaster_io_progress), and if
 * bpext.io_timeout passes without a word, the postmaster kills it and goes
 * on without the tier (a cold start, or no saved map).
 *
 * The helper is a grandchild: the child the postmaster forks forks again
 * and exits at once, so the postmaster never has a child it does not know
 * of (its reaper would take one that dies of SIGKILL for a crashed
 * backend).  The helper closes every descriptor it inherited but its pipe
 * and the standard ones, and detaches from shared memory, so that a helper
 * stuck in the kernel keeps neither the postmaster's sockets nor its shared
 * memory (whose attach count keeps the next postmaster from starting).
 * Whatever the work needs must therefore be in its private memory, copied
 * at fork.
 *
 * The pipe carries frames: a uint32 length and that many bytes.  A frame
 * of length zero is progress; the first frame is the helper's pid; the
 * others are the result, handed to the caller concatenated.
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "storage/pg_shmem.h"

#include "postmaster_io.h"

/* In the helper: the pipe's write end. */
static int	helper_fd = -1;

/* Write everything or nothing more: the postmaster reads what arrived. */
static void
write_all(const void *data, size_t len)
{
	const char *p = data;

	while (len > 0)
	{
		ssize_t		n = write(helper_fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			_exit(1);
		p += n;
		len -= n;
	}
}

/* In the helper: a call returned.  Does nothing anywhere else. */
void
postmaster_io_progress(void)
{
	uint32		zero = 0;

	if (helper_fd >= 0)
		write_all(&zero, sizeof(zero));
}

/* In the helper: hand data back to the postmaster. */
void
postmaster_io_send(const void *data, size_t len)
{
	uint32		framelen = (uint32) len;

	Assert(helper_fd >= 0 && len > 0);
	write_all(&framelen, sizeof(framelen));
	write_all(data, len);
}

/*
 * In a tier-I/O helper process (this file's, tier_writer.c's,
 * tier_readers.c's): every signal back to its default and none blocked, so
 * that a SIGTERM ends it as it would any process, whatever PostgreSQL had
 * set.
 */
void
bpext_reset_signals(void)
{
	sigset_t	none;
	int			sig;

	for (sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			signal(sig, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

/*
 * In a helper process (this file's, tier_writer.c's and tier_readers.c's):
 * close every inherited descriptor but standard input and the nkeep in
 * keep, and point standard output and error at /dev/null, so that a
 * helper stuck in the kernel holds none of its parent's sockets or files.
 * The standard output and error of a server process are the logging
 * collector's pipe when it runs, and the logger exits only when every
 * process holding that pipe has closed it: a helper that kept it would
 * keep the old server's logger running after the server stopped.
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
		return;
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

	devnull = redirect ? open("/dev/null", O_WRONLY | O_CLOEXEC) : -1;
	if (devnull >= 0)
	{
		(void) dup2(devnull, STDOUT_FILENO);
		(void) dup2(devnull, STDERR_FILENO);
		close(devnull);
	}
}

static void
run_helper(int fd, PostmasterIoWork work, void *arg)
{
	pid_t		pid = getpid();

	helper_fd = fd;
	bpext_reset_signals();
	bpext_close_inherited_fds(&fd, 1);
	PGSharedMemoryDetach();
	postmaster_io_send(&pid, sizeof(pid));
	work(arg);
	_exit(0);
}

/* Milliseconds on the monotonic clock, for the helpers' deadlines. */
uint64
bpext_monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Run work in a helper process and collect what it sends, as long as it
 * never stays silent for timeout_ms (0: wait as long as it takes).  On
 * success *result (malloc'd, or NULL if nothing came) and *resultlen hold
 * the result frames.  False, with the reason in why, if the helper could
 * not be started, fell silent (it is then killed) or died without a word.
 */
bool
postmaster_io_run(PostmasterIoWork work, void *arg, int timeout_ms,
				  char **result, size_t *resultlen, char *why, size_t whylen)
{
	int			pipefd[2];
	pid_t		child;
	pid_t		helper = 0;
	int			status;
	char	   *buf = NULL;
	size_t		buflen = 0;
	size_t		bufsize = 0;
	size_t		parsed = 0;
	char	   *out = NULL;
	size_t		outlen = 0;
	uint64		last = bpext_monotonic_ms();
	bool		eof = false;

	*result = NULL;
	*resultlen = 0;
	if (pipe(pipefd) != 0)
	{
		snprintf(why, whylen, "could not create a pipe: %m");
		return false;
	}
	fflush(NULL);
	child = fork();
	if (child < 0)
	{
		snprintf(why, whylen, "could not fork: %m");
		close(pipefd[0]);
		close(pipefd[1]);
		return false;
	}
	if (child == 0)
	{
		pid_t		grandchild;

		close(pipefd[0]);
		grandchild = fork();
		if (grandchild == 0)
			run_helper(pipefd[1], work, arg);
		_exit(grandchild < 0 ? 1 : 0);
	}
	close(pipefd[1]);
	while (waitpid(child, &status, 0) < 0 && errno == EINTR)
		;

	while (!eof)
	{
		struct pollfd pfd = {.fd = pipefd[0],.events = POLLIN};
		int			wait_ms = -1;
		ssize_t		n;

		if (timeout_ms > 0)
		{
			uint64		silent = bpext_monotonic_ms() - last;

			if (silent >= (uint64) timeout_ms)
				break;
			wait_ms = timeout_ms - (int) silent;
		}
		n = poll(&pfd, 1, wait_ms);
		if (n < 0 && errno != EINTR)
			break;
		if (n <= 0)
			continue;

		if (bufsize - buflen < 65536)
		{
			char	   *grown = realloc(buf, bufsize + 65536 * 4);

			if (grown == NULL)
				break;
			buf = grown;
			bufsize += 65536 * 4;
		}
		n = read(pipefd[0], buf + buflen, bufsize - buflen);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
		{
			eof = true;
			break;
		}
		buflen += n;
		last = bpext_monotonic_ms();

		/* Whole frames: the pid first, then progress or result. */
		while (buflen - parsed >= sizeof(uint32))
		{
			uint32		framelen;

			memcpy(&framelen, buf + parsed, sizeof(framelen));
			if (buflen - parsed - sizeof(uint32) < framelen)
				break;
			if (helper == 0 && framelen == sizeof(pid_t))
				memcpy(&helper, buf + parsed + sizeof(uint32), sizeof(pid_t));
			else if (framelen > 0)
			{
				char	   *grown = realloc(out, outlen + framelen);

				if (grown == NULL)
				{
					eof = false;
					goto give_up;
				}
				out = grown;
				memcpy(out + outlen, buf + parsed + sizeof(uint32), framelen);
				outlen += framelen;
			}
			parsed += sizeof(uint32) + framelen;
		}
		if (parsed == buflen)
			parsed = buflen = 0;
	}

give_up:
	close(pipefd[0]);
	free(buf);
	if (!eof)
	{
		/* Silent too long (or out of memory): stop waiting for it. */
		if (helper > 0)
			kill(helper, SIGKILL);
		free(out);
		snprintf(why, whylen,
				 "the tier file did not answer within %d ms (bpext.io_timeout)",
				 timeout_ms);
		return false;
	}
	if (helper == 0 || out == NULL)
	{
		free(out);
		snprintf(why, whylen, "the process doing the tier file's I/O ended without an answer");
		return false;
	}
	*result = out;
	*resultlen = outlen;
	return true;
}

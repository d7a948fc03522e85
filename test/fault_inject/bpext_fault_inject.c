/*-------------------------------------------------------------------------
 *
 * bpext_fault_inject.c
 *	  An LD_PRELOAD library that makes the tier file's disk misbehave on
 *	  demand, for test/t/102_faults.pl.
 *
 * The TAP tests run the server as an ordinary user, where no file system
 * can be mounted (no root, no usable /dev/fuse, no sudo), so a small tmpfs
 * or a FUSE file system that fails on request is out of reach.  Instead the
 * server is started with this library preloaded.  It watches the files
 * opened under one directory (BPEXT_FAULT_PREFIX, a path prefix, or several
 * separated by colons; PostgreSQL opens data files by paths relative to the
 * data directory, such as base/) and, while
 * a control file exists in BPEXT_FAULT_CTL, fails their I/O the way a sick
 * or full disk does:
 *
 *	read_eio		 pread() fails with EIO
 *	write_eio		 pwrite()/pwritev() fail with EIO
 *	write_enospc	 pwrite()/pwritev() fail with ENOSPC (the file system is
 *					 full and the write needed new blocks)
 *	write_short		 pwrite()/pwritev() write half of what was asked (a full
 *					 disk part-way through a write)
 *	fallocate_enospc posix_fallocate()/fallocate() fail with ENOSPC
 *	read_sleep		 pread() blocks for as many milliseconds as the control
 *					 file says (10000 if it is empty), then reads: a hung
 *					 device.  Signals do not cut the sleep short, as they
 *					 do not wake a process in uninterruptible disk sleep.
 *					 A second number in the file, "ms N", lets each
 *					 process's first N calls made while the fault is on go
 *					 through unhurt (to hold up a read in the middle of a
 *					 combined read rather than its first).  A read that
 *					 must not wait (preadv2 with RWF_NOWAIT, bpext's first
 *					 try) fails with EAGAIN instead, as on a device that
 *					 does not answer with the page not in the page cache,
 *					 and leaves a mark (read_held.OFFSET) so that the next
 *					 blocking read of that offset, in whatever process
 *					 (bpext's reader helper), blocks until the time the
 *					 read held would have ended: the pid and the count of
 *					 calls let through apply to the process that asked
 *					 first.  A
 *					 read that really blocks is also counted as
 *					 read_blocked.
 *	write_sleep		 the same for pwrite()/pwritev()
 *	truncate_sleep	 the same for ftruncate() and truncate() (md's
 *					 truncation, and its unlink, which truncates first)
 *
 * A third number in a sleep fault's file, "ms N pid", limits it to the
 * process with that pid.
 *
 * Every other file, and every process's other I/O, goes straight through.
 * Each injected failure is counted by appending one line to
 * BPEXT_FAULT_CTL/injected.log, so a test can tell that a fault was really
 * hit.  Creating or removing a control file takes effect at the next call.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAX_TRACKED_FD 65536

#define MAX_PREFIXES 4

static char *fault_prefix[MAX_PREFIXES];
static int	fault_nprefixes;
static const char *fault_ctl;
static unsigned char tracked[MAX_TRACKED_FD];

static int	(*real_open) (const char *, int,...);
static int	(*real_open64) (const char *, int,...);
static int	(*real_openat) (int, const char *, int,...);
static int	(*real___open_2) (const char *, int);
static int	(*real___open64_2) (const char *, int);
static int	(*real_close) (int);
static ssize_t (*real_pread) (int, void *, size_t, off_t);
static ssize_t (*real_pread64) (int, void *, size_t, off_t);
static ssize_t (*real_preadv2) (int, const struct iovec *, int, off_t, int);
static ssize_t (*real_preadv64v2) (int, const struct iovec *, int, off_t, int);
static ssize_t (*real_pwrite) (int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64) (int, const void *, size_t, off_t);
static ssize_t (*real_pwritev) (int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev64) (int, const struct iovec *, int, off_t);
static int	(*real_posix_fallocate) (int, off_t, off_t);
static int	(*real_posix_fallocate64) (int, off_t, off_t);
static int	(*real_fallocate) (int, int, off_t, off_t);
static int	(*real_ftruncate) (int, off_t);
static int	(*real_ftruncate64) (int, off_t);
static int	(*real_truncate) (const char *, off_t);
static int	(*real_truncate64) (const char *, off_t);

#define RESOLVE(name) \
	do { if (real_##name == NULL) real_##name = dlsym(RTLD_NEXT, #name); } while (0)

__attribute__((constructor))
static void
fault_init(void)
{
	/*
	 * Copies: the postmaster reuses the memory of the original environment
	 * for its process title (ps_status.c).
	 */
	const char *prefixes = getenv("BPEXT_FAULT_PREFIX");
	char	   *copy;
	char	   *p;
	char	   *save = NULL;

	fault_ctl = getenv("BPEXT_FAULT_CTL");
	fault_ctl = fault_ctl ? strdup(fault_ctl) : NULL;
	if (prefixes == NULL || (copy = strdup(prefixes)) == NULL)
		return;
	for (p = strtok_r(copy, ":", &save);
		 p != NULL && fault_nprefixes < MAX_PREFIXES;
		 p = strtok_r(NULL, ":", &save))
		fault_prefix[fault_nprefixes++] = p;
}

static int
path_tracked(const char *path)
{
	int			i;

	for (i = 0; i < fault_nprefixes && path != NULL; i++)
		if (strncmp(path, fault_prefix[i], strlen(fault_prefix[i])) == 0)
			return 1;
	return 0;
}

static void
track(int fd, const char *path)
{
	if (fd < 0 || fd >= MAX_TRACKED_FD)
		return;
	tracked[fd] = path_tracked(path);
}

static int
is_tracked(int fd)
{
	return fd >= 0 && fd < MAX_TRACKED_FD && tracked[fd];
}

/* Count one injection of the fault called name, in injected.log. */
static void
log_injection(const char *name, int fd)
{
	char		path[4096];
	int			save_errno = errno;
	int			lfd;

	snprintf(path, sizeof(path), "%s/injected.log", fault_ctl);
	RESOLVE(open);
	RESOLVE(close);
	lfd = real_open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (lfd >= 0)
	{
		char		line[128];
		int			len = snprintf(line, sizeof(line), "%d %s fd %d\n",
								   (int) getpid(), name, fd);

		if (write(lfd, line, len) < 0)
			(void) 0;
		real_close(lfd);
	}
	errno = save_errno;
}

/* Is the fault called name switched on?  Logs it if so. */
static int
fault_on(const char *name, int fd)
{
	char		path[4096];
	int			save_errno = errno;
	int			on;

	if (fault_ctl == NULL)
		return 0;
	snprintf(path, sizeof(path), "%s/%s", fault_ctl, name);
	on = (access(path, F_OK) == 0);
	if (on)
		log_injection(name, fd);
	errno = save_errno;
	return on;
}

static int
open_mode_needed(int flags)
{
	return (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE;
}

int
open(const char *path, int flags,...)
{
	mode_t		mode = 0;
	int			fd;

	RESOLVE(open);
	if (open_mode_needed(flags))
	{
		va_list		ap;

		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	fd = real_open(path, flags, mode);
	track(fd, path);
	return fd;
}

int
open64(const char *path, int flags,...)
{
	mode_t		mode = 0;
	int			fd;

	RESOLVE(open64);
	if (open_mode_needed(flags))
	{
		va_list		ap;

		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	fd = real_open64(path, flags, mode);
	track(fd, path);
	return fd;
}

int
openat(int dirfd, const char *path, int flags,...)
{
	mode_t		mode = 0;
	int			fd;

	RESOLVE(openat);
	if (open_mode_needed(flags))
	{
		va_list		ap;

		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	fd = real_openat(dirfd, path, flags, mode);
	track(fd, path[0] == '/' ? path : NULL);
	return fd;
}

int
__open_2(const char *path, int flags)
{
	int			fd;

	RESOLVE(__open_2);
	fd = real___open_2(path, flags);
	track(fd, path);
	return fd;
}

int
__open64_2(const char *path, int flags)
{
	int			fd;

	RESOLVE(__open64_2);
	fd = real___open64_2(path, flags);
	track(fd, path);
	return fd;
}

int
close(int fd)
{
	RESOLVE(close);
	if (fd >= 0 && fd < MAX_TRACKED_FD)
		tracked[fd] = 0;
	return real_close(fd);
}

/* This process's calls to each sleep fault while it was on. */
static long read_sleep_calls;
static long write_sleep_calls;
static long truncate_sleep_calls;

/*
 * If the fault called name is on (and applies to this process and this
 * call, counted in *calls_seen), the milliseconds to block for, else -1.
 */
static long
sleep_fault_ms(int file_tracked, const char *name, int fd, long *calls_seen)
{
	char		path[4096];
	char		text[32];
	long		ms = 10000;
	long		unhurt_calls = 0;
	long		only_pid = 0;
	int			cfd;
	ssize_t		n;
	int			save_errno = errno;

	if (!file_tracked || fault_ctl == NULL)
		return -1;
	snprintf(path, sizeof(path), "%s/%s", fault_ctl, name);
	RESOLVE(open);
	RESOLVE(close);
	cfd = real_open(path, O_RDONLY | O_CLOEXEC);
	if (cfd < 0)
	{
		errno = save_errno;
		return -1;
	}
	n = read(cfd, text, sizeof(text) - 1);
	if (n > 0)
	{
		char	   *end;

		text[n] = '\0';
		ms = strtol(text, &end, 10);
		unhurt_calls = strtol(end, &end, 10);
		only_pid = strtol(end, NULL, 10);
	}
	real_close(cfd);
	errno = save_errno;
	if (only_pid != 0 && only_pid != (long) getpid())
		return -1;
	if ((*calls_seen)++ < unhurt_calls || !fault_on(name, fd))
		return -1;
	return ms;
}

/* Block for ms milliseconds, whatever signals arrive. */
static void
block_for(long ms)
{
	struct timespec until;
	int			save_errno = errno;

	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += ms / 1000;
	until.tv_nsec += (ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L)
	{
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
		;
	errno = save_errno;
}

/*
 * If the fault called name is on, block for the milliseconds its control
 * file holds, whatever signals arrive; but not on the first calls it lets
 * through, counted in *calls_seen.
 */
static void
sleep_fault_on(int file_tracked, const char *name, int fd, long *calls_seen)
{
	long		ms = sleep_fault_ms(file_tracked, name, fd, calls_seen);

	if (ms >= 0)
		block_for(ms);
}

static void
sleep_fault(const char *name, int fd, long *calls_seen)
{
	sleep_fault_on(is_tracked(fd), name, fd, calls_seen);
}

static long long
monotonic_ms(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (long long) now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/*
 * The mark a read held by read_sleep leaves for the offset: until when
 * (CLOCK_MONOTONIC, in ms) a blocking read of it is held.
 */
static void
held_mark(char *path, size_t len, off_t offset)
{
	snprintf(path, len, "%s/read_held.%lld", fault_ctl, (long long) offset);
}

/*
 * A blocking read of a tracked file: held if a read of its offset that
 * must not wait was held (and read_sleep is still on), else as read_sleep
 * says for this process.
 */
static void
read_sleep_fault(int fd, off_t offset)
{
	char		path[4096];
	char		text[32];
	int			save_errno = errno;
	long		ms = -1;
	int			mfd;
	ssize_t		n;

	if (!is_tracked(fd) || fault_ctl == NULL)
		return;
	held_mark(path, sizeof(path), offset);
	RESOLVE(open);
	RESOLVE(close);
	mfd = real_open(path, O_RDONLY | O_CLOEXEC);
	if (mfd >= 0)
	{
		/* Held until the time the mark gives, fault on or not. */
		n = read(mfd, text, sizeof(text) - 1);
		real_close(mfd);
		unlink(path);
		if (n > 0)
		{
			text[n] = '\0';
			ms = strtoll(text, NULL, 10) - monotonic_ms();
		}
	}
	else
		ms = sleep_fault_ms(1, "read_sleep", fd, &read_sleep_calls);
	errno = save_errno;
	if (ms >= 0)
	{
		log_injection("read_blocked", fd);
		block_for(ms);
	}
}

static ssize_t
faulty_read(ssize_t (*real) (int, void *, size_t, off_t),
			int fd, void *buf, size_t count, off_t offset)
{
	if (is_tracked(fd) && fault_on("read_eio", fd))
	{
		errno = EIO;
		return -1;
	}
	read_sleep_fault(fd, offset);
	return real(fd, buf, count, offset);
}

ssize_t
pread(int fd, void *buf, size_t count, off_t offset)
{
	RESOLVE(pread);
	return faulty_read(real_pread, fd, buf, count, offset);
}

ssize_t
pread64(int fd, void *buf, size_t count, off_t offset)
{
	RESOLVE(pread64);
	return faulty_read(real_pread64, fd, buf, count, offset);
}

static ssize_t
faulty_readv2(ssize_t (*real) (int, const struct iovec *, int, off_t, int),
			  int fd, const struct iovec *iov, int iovcnt, off_t offset,
			  int flags)
{
	if (is_tracked(fd) && fault_on("read_eio", fd))
	{
		errno = EIO;
		return -1;
	}
	if (is_tracked(fd) && (flags & RWF_NOWAIT) != 0)
	{
		long		ms = sleep_fault_ms(1, "read_sleep", fd, &read_sleep_calls);

		if (ms >= 0)
		{
			char		path[4096];
			char		text[32];
			int			mfd;
			int			len = snprintf(text, sizeof(text), "%lld",
										   monotonic_ms() + ms);

			held_mark(path, sizeof(path), offset);
			mfd = real_open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
			if (mfd >= 0)
			{
				if (write(mfd, text, len) < 0)
					(void) 0;
				real_close(mfd);
			}
			errno = EAGAIN;
			return -1;
		}
	}
	else
		read_sleep_fault(fd, offset);
	return real(fd, iov, iovcnt, offset, flags);
}

ssize_t
preadv2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags)
{
	RESOLVE(preadv2);
	return faulty_readv2(real_preadv2, fd, iov, iovcnt, offset, flags);
}

ssize_t
preadv64v2(int fd, const struct iovec *iov, int iovcnt, off_t offset,
		   int flags)
{
	RESOLVE(preadv64v2);
	return faulty_readv2(real_preadv64v2, fd, iov, iovcnt, offset, flags);
}

/* -1 with errno set if a write fault is on, 1 for a short write, else 0. */
static int
write_fault(int fd)
{
	if (!is_tracked(fd))
		return 0;
	sleep_fault("write_sleep", fd, &write_sleep_calls);
	if (fault_on("write_eio", fd))
	{
		errno = EIO;
		return -1;
	}
	if (fault_on("write_enospc", fd))
	{
		errno = ENOSPC;
		return -1;
	}
	if (fault_on("write_short", fd))
		return 1;
	return 0;
}

static ssize_t
faulty_write(ssize_t (*real) (int, const void *, size_t, off_t),
			 int fd, const void *buf, size_t count, off_t offset)
{
	int			f = write_fault(fd);

	if (f < 0)
		return -1;
	if (f > 0 && count > 4096)
		count = (count / 2) & ~(size_t) 4095;
	return real(fd, buf, count, offset);
}

ssize_t
pwrite(int fd, const void *buf, size_t count, off_t offset)
{
	RESOLVE(pwrite);
	return faulty_write(real_pwrite, fd, buf, count, offset);
}

ssize_t
pwrite64(int fd, const void *buf, size_t count, off_t offset)
{
	RESOLVE(pwrite64);
	return faulty_write(real_pwrite64, fd, buf, count, offset);
}

static ssize_t
faulty_writev(ssize_t (*real) (int, const struct iovec *, int, off_t),
			  int fd, const struct iovec *iov, int iovcnt, off_t offset)
{
	int			f = write_fault(fd);

	if (f < 0)
		return -1;
	if (f > 0)
	{
		/* Write the first half of the vectors, or half of a single one. */
		if (iovcnt > 1)
			iovcnt = iovcnt / 2;
		else if (iovcnt == 1 && iov[0].iov_len > 4096)
		{
			struct iovec half = iov[0];

			half.iov_len = (half.iov_len / 2) & ~(size_t) 4095;
			return real(fd, &half, 1, offset);
		}
	}
	return real(fd, iov, iovcnt, offset);
}

ssize_t
pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset)
{
	RESOLVE(pwritev);
	return faulty_writev(real_pwritev, fd, iov, iovcnt, offset);
}

ssize_t
pwritev64(int fd, const struct iovec *iov, int iovcnt, off_t offset)
{
	RESOLVE(pwritev64);
	return faulty_writev(real_pwritev64, fd, iov, iovcnt, offset);
}

int
posix_fallocate(int fd, off_t offset, off_t len)
{
	RESOLVE(posix_fallocate);
	if (is_tracked(fd) && fault_on("fallocate_enospc", fd))
		return ENOSPC;
	return real_posix_fallocate(fd, offset, len);
}

int
posix_fallocate64(int fd, off_t offset, off_t len)
{
	RESOLVE(posix_fallocate64);
	if (is_tracked(fd) && fault_on("fallocate_enospc", fd))
		return ENOSPC;
	return real_posix_fallocate64(fd, offset, len);
}

int
fallocate(int fd, int mode, off_t offset, off_t len)
{
	RESOLVE(fallocate);
	if (is_tracked(fd) && fault_on("fallocate_enospc", fd))
	{
		errno = ENOSPC;
		return -1;
	}
	return real_fallocate(fd, mode, offset, len);
}

int
ftruncate(int fd, off_t length)
{
	RESOLVE(ftruncate);
	sleep_fault("truncate_sleep", fd, &truncate_sleep_calls);
	return real_ftruncate(fd, length);
}

int
ftruncate64(int fd, off_t length)
{
	RESOLVE(ftruncate64);
	sleep_fault("truncate_sleep", fd, &truncate_sleep_calls);
	return real_ftruncate64(fd, length);
}

/* md truncates the first segment of an unlinked fork by name. */
int
truncate(const char *path, off_t length)
{
	RESOLVE(truncate);
	sleep_fault_on(path_tracked(path), "truncate_sleep", -1,
				   &truncate_sleep_calls);
	return real_truncate(path, length);
}

int
truncate64(const char *path, off_t length)
{
	RESOLVE(truncate64);
	sleep_fault_on(path_tracked(path), "truncate_sleep", -1,
				   &truncate_sleep_calls);
	return real_truncate64(path, length);
}

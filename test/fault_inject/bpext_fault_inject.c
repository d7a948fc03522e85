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
 *	call_sleep		 the same for every other call that can wait on a hung
 *					 device: an open() that may write (O_WRONLY, O_RDWR,
 *					 O_CREAT, O_TRUNC), fsync(), fdatasync(),
 *					 sync_file_range(), posix_fallocate(), fallocate(),
 *					 ftruncate(), flock(), fchmod(), unlink(), linkat()
 *					 (to a watched path), stat(),
 *					 lstat(), access() and statvfs() by path.  A read-only
 *					 open is let through: the kernel resolves the path of a
 *					 file something holds open from its cache, with no I/O.
 *
 * A third number in a sleep fault's file, "ms N pid", limits it to the
 * process with that pid.
 *
 * io_uring's reads never pass through these calls, so no fault could reach
 * them: io_uring_setup() made through libc's syscall() fails with ENOSYS,
 * as on a kernel without it, and bpext's reader helpers read with pread.
 * (A real device that hangs, test/hung_device.sh, holds their io_uring
 * reads.)  liburing makes its system calls itself: PostgreSQL 18's
 * io_method = io_uring is neither refused nor reached by these faults.
 *
 * Every other file, and every process's other I/O, goes straight through.
 * A descriptor this library did not see opened (received over a socket,
 * duplicated, opened through /proc/self/fd) is tracked by what it points
 * to.  Each injected failure is counted by appending one line to
 * BPEXT_FAULT_CTL/injected.log: "pid fault fd N title T", T being the
 * process title at that moment, so a test can tell that a fault was really
 * hit, and by which kind of process.  Creating or removing a control file
 * takes effect at the next call.
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
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAX_TRACKED_FD 65536

#define MAX_PREFIXES 4

static char *fault_prefix[MAX_PREFIXES];
static int	fault_nprefixes;
static const char *fault_ctl;

/* Per descriptor: not known yet, a file under a prefix, or another one. */
#define FD_UNKNOWN	0
#define FD_TRACKED	1
#define FD_OTHER	2
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
static int	(*real_fsync) (int);
static int	(*real_fdatasync) (int);
static int	(*real_sync_file_range) (int, off_t, off_t, unsigned int);
static int	(*real_flock) (int, int);
static int	(*real_fchmod) (int, mode_t);
static int	(*real_unlink) (const char *);
static int	(*real_linkat) (int, const char *, int, const char *, int);
static int	(*real_stat) (const char *, struct stat *);
static int	(*real_lstat) (const char *, struct stat *);
static int	(*real_access) (const char *, int);
static int	(*real_statvfs) (const char *, struct statvfs *);
static long (*real_syscall) (long,...);

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
	if (path != NULL && strncmp(path, "/proc/", 6) == 0)
		tracked[fd] = FD_UNKNOWN;	/* resolved on first use */
	else
		tracked[fd] = path_tracked(path) ? FD_TRACKED : FD_OTHER;
}

static int
is_tracked(int fd)
{
	if (fd < 0 || fd >= MAX_TRACKED_FD)
		return 0;
	if (tracked[fd] == FD_UNKNOWN)
	{
		char		link[64];
		char		path[4096];
		int			save_errno = errno;
		ssize_t		n;

		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		n = readlink(link, path, sizeof(path) - 1);
		errno = save_errno;
		if (n <= 0)
			return 0;
		path[n] = '\0';
		tracked[fd] = path_tracked(path) ? FD_TRACKED : FD_OTHER;
	}
	return tracked[fd] == FD_TRACKED;
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
		char		title[128] = "";
		char		line[256];
		int			tfd = real_open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
		int			len;

		if (tfd >= 0)
		{
			ssize_t		n = read(tfd, title, sizeof(title) - 1);
			ssize_t		i;

			for (i = 0; i < n; i++)
				if (title[i] == '\0' || title[i] == '\n')
					title[i] = ' ';
			title[n > 0 ? n : 0] = '\0';
			real_close(tfd);
		}
		len = snprintf(line, sizeof(line), "%d %s fd %d title %s\n",
					   (int) getpid(), name, fd, title);

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

/* This process's calls to each sleep fault while it was on. */
static long read_sleep_calls;
static long write_sleep_calls;
static long truncate_sleep_calls;
static long call_sleep_calls;

static void sleep_fault_on(int file_tracked, const char *name, int fd,
						   long *calls_seen);

/* An open() of a tracked path that may write: call_sleep holds it. */
static void
open_fault(const char *path, int flags)
{
	if ((flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC)) != 0)
		sleep_fault_on(path_tracked(path), "call_sleep", -1, &call_sleep_calls);
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
	open_fault(path, flags);
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
	open_fault(path, flags);
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
	if (path[0] == '/')
		open_fault(path, flags);
	fd = real_openat(dirfd, path, flags, mode);
	track(fd, path[0] == '/' ? path : NULL);
	return fd;
}

int
__open_2(const char *path, int flags)
{
	int			fd;

	RESOLVE(__open_2);
	open_fault(path, flags);
	fd = real___open_2(path, flags);
	track(fd, path);
	return fd;
}

int
__open64_2(const char *path, int flags)
{
	int			fd;

	RESOLVE(__open64_2);
	open_fault(path, flags);
	fd = real___open64_2(path, flags);
	track(fd, path);
	return fd;
}

int
close(int fd)
{
	RESOLVE(close);
	if (fd >= 0 && fd < MAX_TRACKED_FD)
		tracked[fd] = FD_UNKNOWN;
	return real_close(fd);
}

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
	sleep_fault("call_sleep", fd, &call_sleep_calls);
	if (is_tracked(fd) && fault_on("fallocate_enospc", fd))
		return ENOSPC;
	return real_posix_fallocate(fd, offset, len);
}

int
posix_fallocate64(int fd, off_t offset, off_t len)
{
	RESOLVE(posix_fallocate64);
	sleep_fault("call_sleep", fd, &call_sleep_calls);
	if (is_tracked(fd) && fault_on("fallocate_enospc", fd))
		return ENOSPC;
	return real_posix_fallocate64(fd, offset, len);
}

int
fallocate(int fd, int mode, off_t offset, off_t len)
{
	RESOLVE(fallocate);
	sleep_fault("call_sleep", fd, &call_sleep_calls);
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
	sleep_fault("call_sleep", fd, &call_sleep_calls);
	return real_ftruncate(fd, length);
}

int
ftruncate64(int fd, off_t length)
{
	RESOLVE(ftruncate64);
	sleep_fault("truncate_sleep", fd, &truncate_sleep_calls);
	sleep_fault("call_sleep", fd, &call_sleep_calls);
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

/* call_sleep: the other calls that can wait on a hung device. */
int
fsync(int fd)
{
	RESOLVE(fsync);
	sleep_fault("call_sleep", fd, &call_sleep_calls);
	return real_fsync(fd);
}

int
fdatasync(int fd)
{
	RESOLVE(fdatasync);
	sleep_fault("call_sleep", fd, &call_sleep_calls);
	return real_fdatasync(fd);
}

int
sync_file_range(int fd, off_t offset, off_t nbytes, unsigned int flags)
{
	RESOLVE(sync_file_range);
	sleep_fault("call_sleep", fd, &call_sleep_calls);
	return real_sync_file_range(fd, offset, nbytes, flags);
}

int
flock(int fd, int operation)
{
	RESOLVE(flock);
	sleep_fault("call_sleep", fd, &call_sleep_calls);
	return real_flock(fd, operation);
}

int
fchmod(int fd, mode_t mode)
{
	RESOLVE(fchmod);
	sleep_fault("call_sleep", fd, &call_sleep_calls);
	return real_fchmod(fd, mode);
}

int
unlink(const char *path)
{
	RESOLVE(unlink);
	sleep_fault_on(path_tracked(path), "call_sleep", -1, &call_sleep_calls);
	return real_unlink(path);
}

/* bpext links a tier file it made unnamed (O_TMPFILE) at its path. */
int
linkat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
	   int flags)
{
	RESOLVE(linkat);
	sleep_fault_on(path_tracked(newpath), "call_sleep", -1, &call_sleep_calls);
	return real_linkat(olddirfd, oldpath, newdirfd, newpath, flags);
}

int
stat(const char *path, struct stat *buf)
{
	RESOLVE(stat);
	sleep_fault_on(path_tracked(path), "call_sleep", -1, &call_sleep_calls);
	return real_stat(path, buf);
}

int
lstat(const char *path, struct stat *buf)
{
	RESOLVE(lstat);
	sleep_fault_on(path_tracked(path), "call_sleep", -1, &call_sleep_calls);
	return real_lstat(path, buf);
}

int
access(const char *path, int mode)
{
	RESOLVE(access);
	sleep_fault_on(path_tracked(path), "call_sleep", -1, &call_sleep_calls);
	return real_access(path, mode);
}

int
statvfs(const char *path, struct statvfs *buf)
{
	RESOLVE(statvfs);
	sleep_fault_on(path_tracked(path), "call_sleep", -1, &call_sleep_calls);
	return real_statvfs(path, buf);
}

/*
 * syscall(): io_uring_setup is refused (see the file header); every other
 * call goes through unchanged, with the six arguments the kernel takes at
 * most (glibc's own syscall() reads as many whatever the caller passed).
 */
long
syscall(long number,...)
{
	va_list		ap;
	long		arg[6];
	int			i;

	va_start(ap, number);
	for (i = 0; i < 6; i++)
		arg[i] = va_arg(ap, long);
	va_end(ap);
	if (number == SYS_io_uring_setup)
	{
		errno = ENOSYS;
		return -1;
	}
	RESOLVE(syscall);
	return real_syscall(number, arg[0], arg[1], arg[2], arg[3], arg[4],
						arg[5]);
}

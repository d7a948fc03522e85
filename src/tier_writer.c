/*-------------------------------------------------------------------------
 *
 * tier_writer.c
 *	  The bpext worker's I/O on the tier file it holds, done by a helper
 *	  process that the worker can walk away from when the device hangs.
 *
 * Since the store queue (store_queue.c), the bpext worker does every tier
 * write: the pages backends and the startup process wrote to data files
 * (dual writes, read admission), the pages bpext_prewarm read, the pages
 * it pushes ahead of the clock sweep, and the slot directory.  It also
 * starts the kernel's writeback of the file, reads a warm start's slot
 * directory, resizes the file, cuts a saved map off its end, and checks
 * that the file at bpext.path is still the one it holds.  On a device that
 * hangs instead of failing (a stuck NVMe controller, fsfreeze, a suspended
 * device-mapper table, a journal that waits for a write that never
 * completes) any of those calls can sleep in the kernel for ever, where no
 * signal reaches it: a worker stuck there would keep the postmaster's
 * shutdown waiting for it for ever.  So the worker makes none of them: it
 * hands each to a helper process and waits for the answer at most
 * bpext.io_timeout.  A helper that has not answered by then is abandoned:
 * the tier goes to ERROR with one WARNING (bpext_tier_fail), the helper is
 * sent SIGKILL (which ends it as soon as the kernel lets go), and the
 * worker goes on; a later request gets a new helper.  If no helper can be
 * started (fork fails, or the worker's table of children is full of
 * helpers stuck on the device) the request fails, and the tier with it:
 * the worker never does the I/O itself.
 *
 * The helper is a child of the worker that the kernel kills when the
 * worker exits, however it exits (worker_children.c): so it outlives the
 * server by no more than the call it may be stuck in, and the worker reaps
 * it, never waits for it.  It detaches from shared memory at once, so that
 * a helper stuck in the kernel cannot keep the next postmaster from
 * starting.  It keeps three descriptors: the request pipe, the reply pipe,
 * and the tier file (reopened as a description of its own, so that it
 * never holds the worker's flock), and a region of memory shared with the
 * worker only (mapped anonymously by the worker before the fork, and
 * unmapped by the worker when it abandons the helper, so a helper that
 * wakes up late writes what it was given, never a newer page, and reads
 * into memory nobody looks at).  One helper serves one file incarnation:
 * when the worker lets go of the file (tier_control.c's release_tier) or
 * moves to another, the idle helper is told to go (its request pipe is
 * closed) and the next request forks another.
 *
 * Protocol: the worker copies any data into the region, writes one
 * request (operation, offset, length) and waits for one reply (result,
 * errno); one request at a time.  The helper makes exactly one system call
 * per request (a check makes three), so that a short write reaches the
 * caller as it would have.  Nothing here is called from smgr code; it runs
 * only in the bpext worker.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/pg_shmem.h"
#include "storage/pmsignal.h"

#include "helper_io.h"
#include "settings.h"
#include "test_hooks.h"
#include "tier_control.h"
#include "tier_file.h"
#include "tier_writer.h"
#include "worker_children.h"

/*
 * The shared region: the largest write the worker makes in one call (a
 * tier_file_write_pages run of 64 pages; the slot directory writes and
 * reads 32 chunks at most), and a check's path.  Larger writes go through
 * it in pieces.
 */
#define REGION_BYTES		((Size) BLCKSZ * 64)

/* How often the worker looks up from waiting for an answer. */
#define POLL_INTERVAL_MS	100

typedef enum WriterOp
{
	OP_WRITE,					/* pwrite len bytes of the region */
	OP_READ,					/* pread len bytes into the region */
	OP_DATASYNC,				/* fdatasync */
	OP_START_WRITEBACK,			/* sync_file_range(SYNC_FILE_RANGE_WRITE) */
	OP_TRUNCATE,				/* ftruncate to offset */
	OP_ALLOCATE,				/* posix_fallocate(offset, len) */
	OP_CHECK					/* is the file at the region's path ours? */
} WriterOp;

typedef struct WriterRequest
{
	WriterOp	op;
	off_t		offset;
	size_t		len;
} WriterRequest;

typedef struct WriterReply
{
	ssize_t		result;
	int			save_errno;
} WriterReply;

/* What OP_CHECK found, in its result. */
#define CHECK_OK			0
#define CHECK_NO_FSTAT		1
#define CHECK_GONE			2
#define CHECK_REPLACED		3
#define CHECK_TRUNCATED		4
#define CHECK_NO_ACCESS		5

static bool writer_enabled = false;
static pid_t helper_pid = 0;
static uint64 held_dev = 0;		/* the file the helper serves, as the */
static uint64 held_ino = 0;		/* worker took it (its reopen, OP_CHECK) */
static int	request_fd = -1;	/* the worker's end of each pipe */
static int	reply_fd = -1;
static char *region = NULL;
static uint32 helper_incarnation = 0;
static bool in_flight = false;	/* a request has no answer yet */

/* This process (the bpext worker) writes through a helper from now on. */
void
tier_writer_enable(void)
{
	writer_enabled = true;
}

bool
tier_writer_enabled(void)
{
	return writer_enabled;
}

/* Read or write exactly len bytes; false on EOF or error. */
static bool
transfer(int fd, void *buf, size_t len, bool reading)
{
	char	   *p = buf;

	while (len > 0)
	{
		ssize_t		n = reading ? read(fd, p, len) : write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		p += n;
		len -= n;
	}
	return true;
}

/*
 * In the helper: is the file at path the worker's (held_dev, held_ino),
 * at full size (tier_fd, the helper's own descriptor of it, -1 if it could
 * not open one)?  errno says more when it is not.
 */
static ssize_t
check_file(int tier_fd, const char *path, off_t min_size)
{
	struct stat held;
	struct stat named;

	if (lstat(path, &named) != 0)
		return CHECK_GONE;
	if ((uint64) named.st_dev != held_dev || (uint64) named.st_ino != held_ino)
		return CHECK_REPLACED;
	if (tier_fd < 0 || fstat(tier_fd, &held) != 0)
		return CHECK_NO_FSTAT;
	if (held.st_size < min_size)
		return CHECK_TRUNCATED;
	/* Other processes open it by path: they must be able to. */
	if (access(path, R_OK | W_OK) != 0)
		return CHECK_NO_ACCESS;
	return CHECK_OK;
}

/* In the helper: one request's system call. */
static ssize_t
perform(int tier_fd, const WriterRequest *req)
{
	int			rc;

	if (tier_fd < 0 && req->op != OP_CHECK)
		return -1;				/* errno from the reopen */
	switch (req->op)
	{
		case OP_WRITE:
			return pwrite(tier_fd, region, req->len, req->offset);
		case OP_READ:
			return pread(tier_fd, region, req->len, req->offset);
		case OP_DATASYNC:
			return fdatasync(tier_fd);
		case OP_START_WRITEBACK:
#ifdef HAVE_SYNC_FILE_RANGE
			return sync_file_range(tier_fd, 0, 0, SYNC_FILE_RANGE_WRITE);
#else
			return 0;
#endif
		case OP_TRUNCATE:
			return ftruncate(tier_fd, req->offset);
		case OP_ALLOCATE:
			rc = posix_fallocate(tier_fd, req->offset, (off_t) req->len);
			errno = rc;
			return rc == 0 ? 0 : -1;
		case OP_CHECK:
			region[REGION_BYTES - 1] = '\0';
			return check_file(tier_fd, region, req->offset);
	}
	errno = EINVAL;
	return -1;
}

/*
 * The helper: PostgreSQL's signal handlers and shared memory are not for
 * it; it only ever makes the calls it is asked for, and answers.
 */
static void
helper_main(int in, int out, int tier_fd)
{
	const int	keep[3] = {in, out, tier_fd};
	int			reopen_errno;

	bpext_helper_leave_server();

	/*
	 * Test builds: a test may hold the helper here, just forked, while it
	 * signals the worker's process group (040_helper_start_signal.pl).
	 */
	if (OidIsValid(BPEXT_TEST_HOLD_TARGET("writer_start")))
		(void) BPEXT_TEST_HOLD("writer_start", 0);
	bpext_close_inherited_fds(keep, 3);
	PGSharedMemoryDetach();
	bpext_helper_title("bpext writer helper");

	/*
	 * Our own open file description of the tier file: the worker's carries
	 * its flock (tier_file.c), which a helper left stuck in the kernel must
	 * not keep, or the tier could not be enabled on that file again.
	 */
	tier_fd = tier_file_reopen_own(tier_fd, true, held_dev, held_ino);
	reopen_errno = tier_fd < 0 ? errno : 0;

	for (;;)
	{
		WriterRequest req;
		WriterReply reply;

		if (!transfer(in, &req, sizeof(req), true))
			_exit(0);			/* the worker let go of us */
		do
		{
			errno = reopen_errno;
			reply.result = perform(tier_fd, &req);
		} while (reply.result < 0 && errno == EINTR);
		reply.save_errno = reply.result < 0 ||
			(req.op == OP_CHECK && reply.result != CHECK_OK) ? errno : 0;
		if (!transfer(out, &reply, sizeof(reply), false))
			_exit(0);
	}
}

/*
 * Let go of the helper.  If it is in the middle of a call (stuck), it is
 * killed; an idle one exits when it sees its request pipe closed.
 */
static void
abandon_helper(bool stuck)
{
	if (stuck)
		worker_child_kill(helper_pid);
	if (request_fd >= 0)
		close(request_fd);
	if (reply_fd >= 0)
		close(reply_fd);
	if (region != NULL)
		munmap(region, REGION_BYTES);
	request_fd = reply_fd = -1;
	region = NULL;
	helper_pid = 0;
	in_flight = false;
}

/*
 * Start a helper for tier_fd, the file held_dev and held_ino name.  False
 * (nothing held) if we cannot.
 */
static bool
spawn_helper(int tier_fd, uint32 incarnation)
{
	int			to_helper[2];
	int			from_helper[2];
	pid_t		child;

	region = mmap(NULL, REGION_BYTES, PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (region == MAP_FAILED)
	{
		region = NULL;
		return false;
	}
	if (pipe(to_helper) != 0)
	{
		abandon_helper(false);
		return false;
	}
	if (pipe(from_helper) != 0)
	{
		close(to_helper[0]);
		close(to_helper[1]);
		abandon_helper(false);
		return false;
	}
	child = worker_child_fork(WORKER_CHILD_WRITER);
	if (child == 0)
		helper_main(to_helper[0], from_helper[1], tier_fd);
	close(to_helper[0]);
	close(from_helper[1]);
	request_fd = to_helper[1];
	reply_fd = from_helper[0];
	if (child < 0)
	{
		abandon_helper(false);
		return false;
	}
	helper_pid = child;
	helper_incarnation = incarnation;
	return true;
}

/*
 * A helper serving the current file incarnation, started if need be.
 * False, with the tier switched off, if none can be started.
 */
static bool
have_helper(int fd)
{
	uint32		incarnation = pg_atomic_read_u32(&BpextCtl->file_incarnation);
	char		why[256];

	if (helper_pid > 0 && helper_incarnation != incarnation)
		abandon_helper(false);
	if (helper_pid > 0)
		return true;
	if (fd >= 0 &&
		!tier_file_worker_fd_valid(fd, &held_dev, &held_ino, why, sizeof(why)))
	{
		bpext_tier_fail(why, 0);
		errno = ESTALE;
		return false;
	}
	if (fd >= 0 && spawn_helper(fd, incarnation))
		return true;
	bpext_tier_fail("could not start a helper process for the tier file's I/O",
					fd >= 0 ? errno : EBADF);
	errno = EIO;
	return false;
}

/*
 * Hand one request (its data already in the region) to the helper and
 * wait for its answer, at most bpext.io_timeout.  The wait does not end
 * for a shutdown request unless there is no timeout: a call that is merely
 * under way answers within moments, and a directory write cut short would
 * cost the next start its warm restart.
 */
static ssize_t
helper_call(WriterOp op, off_t offset, size_t len)
{
	WriterRequest req = {.op = op,.offset = offset,.len = len};
	WriterReply reply;
	uint64		start = bpext_monotonic_ms();

	if (!transfer(request_fd, &req, sizeof(req), false))
	{
		abandon_helper(false);
		errno = EIO;
		return -1;
	}
	in_flight = true;
	for (;;)
	{
		struct pollfd pfd = {.fd = reply_fd,.events = POLLIN};
		uint64		elapsed;
		int			n;

		n = poll(&pfd, 1, POLL_INTERVAL_MS);
		if (n > 0)
		{
			if (!transfer(reply_fd, &reply, sizeof(reply), true))
			{
				/* It died without an answer. */
				abandon_helper(false);
				errno = EIO;
				return -1;
			}
			in_flight = false;
			errno = reply.save_errno;
			return reply.result;
		}
		if (n < 0 && errno != EINTR)
		{
			abandon_helper(true);
			errno = EIO;
			return -1;
		}
		if (!PostmasterIsAlive())
		{
			abandon_helper(true);
			proc_exit(1);
		}
		elapsed = bpext_monotonic_ms() - start;
		if (bpext_io_timeout_ms > 0 && elapsed >= (uint64) bpext_io_timeout_ms)
		{
			char		what[200];

			snprintf(what, sizeof(what),
					 "a tier %s in process %d has not returned after %llu ms (bpext.io_timeout is %d ms)",
					 op == OP_READ ? "read" : "write", (int) helper_pid,
					 (unsigned long long) elapsed, bpext_io_timeout_ms);
			abandon_helper(true);
			bpext_tier_fail_hung(what);
			errno = ETIMEDOUT;
			return -1;
		}
		if (pg_atomic_read_u32(&BpextCtl->state) == BPEXT_STATE_ERROR)
		{
			/* Someone saw it hang first (io_watch.c), or another failure. */
			abandon_helper(true);
			errno = EIO;
			return -1;
		}
		if (bpext_io_timeout_ms <= 0 && ProcDiePending)
		{
			abandon_helper(true);
			errno = EINTR;
			return -1;
		}
	}
}

/* A request without data, through a helper for fd's file. */
static ssize_t
simple_call(int fd, WriterOp op, off_t offset, size_t len)
{
	if (!have_helper(fd))
		return -1;
	return helper_call(op, offset, len);
}

/*
 * pwritev through the helper: same result, errno and short-write
 * behaviour as pwritev on fd, which must be the worker's descriptor of the
 * current tier file.
 */
ssize_t
tier_writer_pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset)
{
	ssize_t		total = 0;
	size_t		filled = 0;
	int			i;

	if (!have_helper(fd))
		return -1;

	for (i = 0; i <= iovcnt; i++)
	{
		size_t		len = i < iovcnt ? iov[i].iov_len : 0;
		size_t		done_here = 0;

		for (;;)
		{
			size_t		take = Min(REGION_BYTES - filled, len - done_here);
			ssize_t		n;

			if (take > 0)
				memcpy(region + filled, (char *) iov[i].iov_base + done_here,
					   take);
			filled += take;
			done_here += take;

			/* Send when the region is full, and what is left at the end. */
			if (filled < REGION_BYTES && (i < iovcnt || filled == 0))
				break;
			n = helper_call(OP_WRITE, offset + total, filled);
			if (n < 0)
				return total > 0 ? total : -1;
			total += n;
			if ((size_t) n < filled)
				return total;	/* short: the caller decides */
			filled = 0;
			if (done_here == len)
				break;
		}
	}
	return total;
}

/*
 * pread through the helper, len at most a region's worth: same result and
 * errno as pread on fd.
 */
ssize_t
tier_writer_pread(int fd, char *buf, size_t len, off_t offset)
{
	ssize_t		n;

	Assert(len <= REGION_BYTES);
	if (!have_helper(fd))
		return -1;
	n = helper_call(OP_READ, offset, len);
	if (n > 0)
		memcpy(buf, region, n);
	return n;
}

/* fdatasync through the helper: 0, or -1 with errno. */
int
tier_writer_datasync(int fd)
{
	return (int) simple_call(fd, OP_DATASYNC, 0, 0);
}

/*
 * Start the kernel's writeback of the whole file (sync_file_range with
 * SYNC_FILE_RANGE_WRITE), through the helper: 0, or -1 with errno.
 */
int
tier_writer_start_writeback(int fd)
{
	return (int) simple_call(fd, OP_START_WRITEBACK, 0, 0);
}

/* ftruncate through the helper: 0, or -1 with errno. */
int
tier_writer_truncate(int fd, off_t size)
{
	return (int) simple_call(fd, OP_TRUNCATE, size, 0);
}

/* posix_fallocate through the helper: 0 or an errno, as it returns. */
int
tier_writer_allocate(int fd, off_t offset, off_t len)
{
	if (simple_call(fd, OP_ALLOCATE, offset, (size_t) len) == 0)
		return 0;
	return errno != 0 ? errno : EIO;
}

/*
 * Is the file at path still the one fd (the worker's) describes, at least
 * min_size bytes long, and can other processes open it by path?  Catches
 * a tier file deleted, replaced or truncated behind our back.  False with
 * a message in err, also if the helper did not answer (the tier has then
 * been switched off).
 */
bool
tier_writer_check(int fd, const char *path, off_t min_size, char *err,
				  size_t errlen)
{
	ssize_t		found;

	if (!have_helper(fd))
	{
		snprintf(err, errlen, "could not check the tier file \"%s\": %m", path);
		return false;
	}
	strlcpy(region, path, REGION_BYTES);
	found = helper_call(OP_CHECK, min_size, 0);
	switch (found)
	{
		case CHECK_OK:
			return true;
		case CHECK_NO_FSTAT:
			snprintf(err, errlen, "could not stat the tier file: %m");
			break;
		case CHECK_GONE:
			snprintf(err, errlen, "the tier file \"%s\" has disappeared: %m", path);
			break;
		case CHECK_REPLACED:
			snprintf(err, errlen, "the tier file \"%s\" has been replaced", path);
			break;
		case CHECK_TRUNCATED:
			snprintf(err, errlen, "the tier file \"%s\" has been truncated", path);
			break;
		case CHECK_NO_ACCESS:
			snprintf(err, errlen, "the tier file \"%s\" can no longer be opened: %m",
					 path);
			break;
		default:
			snprintf(err, errlen, "could not check the tier file \"%s\": %m", path);
			break;
	}
	return false;
}

/*
 * The worker is exiting, or letting go of the tier file: let the helper go
 * (it exits when it sees its request pipe closed, and with it goes its
 * descriptor of the file), killing it if it is stuck.
 */
void
tier_writer_stop(void)
{
	abandon_helper(in_flight);
}

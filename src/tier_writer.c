/*-------------------------------------------------------------------------
 *
 * tier_writer.c
 *	  The bpext worker's tier writes, done by a helper process that the
 *	  worker can walk away from when the device hangs.
 *
 * Since the store queue (store_queue.c), the bpext worker does every tier
 * write: the pages backends and the startup process wrote to data files
 * (dual writes, read admission), the pages it pushes ahead of the clock
 * sweep, and the slot directory.  A write to a device that hangs instead
 * of failing (a stuck NVMe controller, fsfreeze, a suspended device-mapper
 * table) never returns, and a process in it cannot exit: a worker stuck
 * there would keep the postmaster's shutdown waiting for it for ever.  So
 * the worker hands each write to a helper process and waits for the
 * answer at most bpext.io_timeout.  A helper that has not answered by then
 * is abandoned: the tier goes to ERROR with one WARNING (bpext_tier_fail),
 * the helper is sent SIGKILL (which ends it as soon as the kernel lets
 * go), and the worker goes on; a later write gets a new helper.
 *
 * The helper is a child of the worker that the kernel kills when the
 * worker exits, however it exits (worker_children.c): so it outlives the
 * server by no more than the write it may be stuck in, and the worker reaps
 * it, never waits for it.  It detaches from shared memory at once, so that
 * a helper stuck in the kernel cannot keep the next postmaster from
 * starting.  It keeps three descriptors: the request pipe, the reply pipe,
 * and the tier file (reopened as a description of its own, so that it
 * never holds the worker's flock), and a region of memory shared with the
 * worker only (mapped anonymously by the worker before the fork, and
 * unmapped by the worker when it abandons the helper, so a helper that
 * wakes up late writes what it was given, never a newer page).
 * One helper serves one file incarnation: when the worker lets go of the
 * file (tier_control.c's release_tier) or moves to another, the idle
 * helper is told to go (its request pipe is closed) and the next write
 * forks another.
 *
 * Protocol: the worker copies the data into the region, writes one
 * request (offset, length) and waits for one reply (result, errno); one
 * request at a time.  The helper makes exactly one pwrite per request, so
 * that a short write reaches the caller as it would have.  Nothing here is
 * called from smgr code; it runs only in the bpext worker.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/pg_shmem.h"
#include "storage/pmsignal.h"
#include "utils/ps_status.h"

#include "postmaster_io.h"
#include "settings.h"
#include "tier_control.h"
#include "tier_file.h"
#include "tier_writer.h"
#include "worker_children.h"

/*
 * The shared region: the largest write the worker makes in one call (a
 * tier_file_write_pages run of 64 pages; the slot directory writes 32
 * chunks at most).  Larger writes go through it in pieces.
 */
#define REGION_BYTES		((Size) BLCKSZ * 64)

/* How often the worker looks up from waiting for an answer. */
#define POLL_INTERVAL_MS	100

typedef struct WriterRequest
{
	off_t		offset;
	size_t		len;
} WriterRequest;

typedef struct WriterReply
{
	ssize_t		result;
	int			save_errno;
} WriterReply;

static bool writer_enabled = false;
static pid_t helper_pid = 0;
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
 * The helper: PostgreSQL's signal handlers and shared memory are not for
 * it; it only ever calls pwrite and answers.
 */
static void
helper_main(int in, int out, int tier_fd)
{
	const int	keep[3] = {in, out, tier_fd};

	bpext_reset_signals();

	/*
	 * Out of the worker's process group, which the postmaster signals as a
	 * whole: the worker alone decides when the helper ends.
	 */
	(void) setsid();
	bpext_close_inherited_fds(keep, 3);
	PGSharedMemoryDetach();
	set_ps_display("writer helper");	/* ps tells it from the worker */

	/*
	 * Our own open file description of the tier file: the worker's may
	 * carry its flock (tier_file.c), which a helper left stuck in the kernel
	 * must not keep, or the tier could not be enabled on that file again.
	 */
	tier_fd = tier_file_reopen_own(tier_fd);

	for (;;)
	{
		WriterRequest req;
		WriterReply reply;

		if (!transfer(in, &req, sizeof(req), true))
			_exit(0);			/* the worker let go of us */
		do
			reply.result = pwrite(tier_fd, region, req.len, req.offset);
		while (reply.result < 0 && errno == EINTR);
		reply.save_errno = reply.result < 0 ? errno : 0;
		if (!transfer(out, &reply, sizeof(reply), false))
			_exit(0);
	}
}

/*
 * Let go of the helper.  If it is in the middle of a write (stuck), it is
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

/* Start a helper writing to tier_fd.  False (nothing held) if we cannot. */
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
 * Hand one write of len bytes (already in the region) to the helper and
 * wait for its answer, at most bpext.io_timeout.  The wait does not end
 * for a shutdown request unless there is no timeout: a write that is
 * merely under way answers within microseconds.
 */
static ssize_t
helper_write(size_t len, off_t offset)
{
	WriterRequest req = {.offset = offset,.len = len};
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
					 "a tier write in process %d has not returned after %llu ms (bpext.io_timeout is %d ms)",
					 (int) helper_pid, (unsigned long long) elapsed,
					 bpext_io_timeout_ms);
			abandon_helper(true);
			bpext_tier_fail(what, 0);
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

/*
 * pwritev through the helper: same result, errno and short-write
 * behaviour as pwritev on fd, which must be a descriptor of the current
 * tier file.  Falls back to writing directly if no helper can be started.
 */
ssize_t
tier_writer_pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset)
{
	uint32		incarnation = pg_atomic_read_u32(&BpextCtl->file_incarnation);
	ssize_t		total = 0;
	size_t		filled = 0;
	int			i;

	if (helper_pid > 0 && helper_incarnation != incarnation)
		abandon_helper(false);
	if (helper_pid == 0 && !spawn_helper(fd, incarnation))
		return pwritev(fd, iov, iovcnt, offset);

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
			n = helper_write(filled, offset + total);
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
 * The worker is exiting, or letting go of the tier file: let the helper go
 * (it exits when it sees its request pipe closed, and with it goes its
 * descriptor of the file), killing it if it is stuck.
 */
void
tier_writer_stop(void)
{
	abandon_helper(in_flight);
}

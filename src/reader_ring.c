/*-------------------------------------------------------------------------
 *
 * reader_ring.c
 *	  The io_uring a reader helper keeps several tier reads in flight
 *	  through.
 *
 * A reader helper (tier_readers.c) that did one pread at a time kept at
 * most bpext.tier_readers reads at the device, while an NVMe drive needs
 * tens to reach its rated rate, and a server with many sessions missing at
 * once has them to give.  Through an io_uring one helper queues every
 * request it takes and waits for whichever completes first, so the reads in
 * flight follow the sessions waiting, up to the ring's depth.
 *
 * This is the smallest io_uring that does that, on the raw system calls
 * (no liburing, so that building bpext needs nothing beyond the kernel's
 * headers): one submission queue and one completion queue, each mapped
 * once, used by one process only.  The kernel is the only other party:
 * the submission queue's tail and the completion queue's head are ours,
 * the other two ends the kernel's, and each side publishes its entries
 * before it moves its end (the barriers below).
 *
 * A ring needs the kernel's single mapping of both queues (5.4), no
 * dropped completions (5.5), IORING_OP_READ (5.6) and the timeout of a
 * wait passed to io_uring_enter (5.11).  Where the kernel lacks any of
 * these, or refuses io_uring (the kernel.io_uring_disabled setting, a
 * container's seccomp filter), reader_ring_create fails and the helper
 * reads with pread, one page at a time.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <linux/io_uring.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "port/atomics.h"

#include "reader_ring.h"

/* What a ring needs of the kernel (see the file header). */
#define NEEDED_FEATURES \
	(IORING_FEAT_SINGLE_MMAP | IORING_FEAT_NODROP | IORING_FEAT_EXT_ARG)

struct ReaderRing
{
	int			fd;
	unsigned	sq_entries;
	uint32		sq_mask;
	volatile uint32 *sq_head;	/* the kernel's end */
	volatile uint32 *sq_tail;	/* ours */
	uint32	   *sq_array;
	struct io_uring_sqe *sqes;
	uint32		cq_mask;
	volatile uint32 *cq_head;	/* ours */
	volatile uint32 *cq_tail;	/* the kernel's end */
	struct io_uring_cqe *cqes;
};

/*
 * A ring for depth requests at once, or NULL with *save_errno set (ENOSYS
 * for a kernel that lacks what the ring needs).  A helper that has a ring
 * keeps it until it exits: there is no function to free one.
 */
ReaderRing *
reader_ring_create(unsigned depth, int *save_errno)
{
	struct io_uring_params params;
	ReaderRing *ring;
	size_t		sq_bytes;
	size_t		cq_bytes;
	char	   *queues;
	void	   *sqes;
	int			fd;

	memset(&params, 0, sizeof(params));
	fd = (int) syscall(__NR_io_uring_setup, depth, &params);
	if (fd < 0)
	{
		*save_errno = errno;
		return NULL;
	}
	if ((params.features & NEEDED_FEATURES) != NEEDED_FEATURES)
	{
		close(fd);
		*save_errno = ENOSYS;
		return NULL;
	}

	sq_bytes = params.sq_off.array + params.sq_entries * sizeof(uint32);
	cq_bytes = params.cq_off.cqes +
		params.cq_entries * sizeof(struct io_uring_cqe);
	queues = mmap(NULL, Max(sq_bytes, cq_bytes), PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQ_RING);
	if (queues == MAP_FAILED)
	{
		*save_errno = errno;
		close(fd);
		return NULL;
	}
	sqes = mmap(NULL, params.sq_entries * sizeof(struct io_uring_sqe),
				PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
				IORING_OFF_SQES);
	if (sqes == MAP_FAILED)
	{
		*save_errno = errno;
		munmap(queues, Max(sq_bytes, cq_bytes));
		close(fd);
		return NULL;
	}
	ring = malloc(sizeof(ReaderRing));
	if (ring == NULL)
	{
		*save_errno = ENOMEM;
		munmap(sqes, params.sq_entries * sizeof(struct io_uring_sqe));
		munmap(queues, Max(sq_bytes, cq_bytes));
		close(fd);
		return NULL;
	}

	ring->fd = fd;
	ring->sq_entries = params.sq_entries;
	ring->sq_mask = *(uint32 *) (queues + params.sq_off.ring_mask);
	ring->sq_head = (uint32 *) (queues + params.sq_off.head);
	ring->sq_tail = (uint32 *) (queues + params.sq_off.tail);
	ring->sq_array = (uint32 *) (queues + params.sq_off.array);
	ring->sqes = sqes;
	ring->cq_mask = *(uint32 *) (queues + params.cq_off.ring_mask);
	ring->cq_head = (uint32 *) (queues + params.cq_off.head);
	ring->cq_tail = (uint32 *) (queues + params.cq_off.tail);
	ring->cqes = (struct io_uring_cqe *) (queues + params.cq_off.cqes);
	return ring;
}

/*
 * The next free submission entry, zeroed.  The caller never has more than
 * the ring's depth queued and in flight, so there always is one.
 */
static struct io_uring_sqe *
next_entry(ReaderRing *ring)
{
	uint32		tail = *ring->sq_tail;
	struct io_uring_sqe *sqe = &ring->sqes[tail & ring->sq_mask];

	Assert(tail - *ring->sq_head < ring->sq_entries);
	memset(sqe, 0, sizeof(*sqe));
	return sqe;
}

/* Make the entry filled at the tail the kernel's to take. */
static void
publish_entry(ReaderRing *ring)
{
	uint32		tail = *ring->sq_tail;

	ring->sq_array[tail & ring->sq_mask] = tail & ring->sq_mask;
	pg_write_barrier();
	*ring->sq_tail = tail + 1;
}

/* Queue a read of len bytes at offset of fd into buf. */
void
reader_ring_queue_read(ReaderRing *ring, int fd, void *buf, size_t len,
					   off_t offset, uint64 tag)
{
	struct io_uring_sqe *sqe = next_entry(ring);

	sqe->opcode = IORING_OP_READ;
	sqe->fd = fd;
	sqe->addr = (uint64) (uintptr_t) buf;
	sqe->len = (uint32) len;
	sqe->off = (uint64) offset;
	sqe->user_data = tag;
	publish_entry(ring);
}

/* Queue a wait for fd to become readable (one completion, then gone). */
void
reader_ring_queue_poll_in(ReaderRing *ring, int fd, uint64 tag)
{
	struct io_uring_sqe *sqe = next_entry(ring);

	sqe->opcode = IORING_OP_POLL_ADD;
	sqe->fd = fd;
#ifdef WORDS_BIGENDIAN
	sqe->poll32_events = ((uint32) POLLIN << 16) | ((uint32) POLLIN >> 16);
#else
	sqe->poll32_events = POLLIN;
#endif
	sqe->user_data = tag;
	publish_entry(ring);
}

/*
 * Hand the kernel what is queued, and wait up to ms milliseconds for at
 * least one completion.  0 when that is done, or when the wait ended
 * without a completion (a timeout, a signal); -1 with errno when the
 * kernel took nothing: EAGAIN or EBUSY for want of resources for now (try
 * again a little later), anything else for a ring that no longer works.
 * What the kernel did not take stays queued for the next call.
 */
int
reader_ring_submit_and_wait(ReaderRing *ring, int ms)
{
	struct __kernel_timespec ts = {
		.tv_sec = ms / 1000,
		.tv_nsec = (ms % 1000) * 1000000L
	};
	struct io_uring_getevents_arg arg = {
		.sigmask = 0,
		.sigmask_sz = 0,
		.ts = (uint64) (uintptr_t) &ts
	};
	uint32		to_submit = *ring->sq_tail - *ring->sq_head;
	long		ret;

	ret = syscall(__NR_io_uring_enter, ring->fd, to_submit, 1,
				  IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG,
				  &arg, sizeof(arg));
	if (ret >= 0 || errno == ETIME || errno == EINTR)
		return 0;
	return -1;
}

/*
 * Up to max completions, oldest first, into done; their entries are the
 * kernel's again.  The number taken.
 */
int
reader_ring_reap(ReaderRing *ring, ReaderRingDone *done, int max)
{
	uint32		head = *ring->cq_head;
	uint32		tail = *ring->cq_tail;
	int			n = 0;

	pg_read_barrier();
	while (head != tail && n < max)
	{
		struct io_uring_cqe *cqe = &ring->cqes[head & ring->cq_mask];

		done[n].tag = cqe->user_data;
		done[n].result = cqe->res;
		n++;
		head++;
	}
	if (n > 0)
	{
		/* Our reads of the entries come before the kernel may reuse them. */
		pg_memory_barrier();
		*ring->cq_head = head;
	}
	return n;
}

/*-------------------------------------------------------------------------
 *
 * tier_readers.c
 *	  Tier reads that may have to wait for the device, done by helper
 *	  processes that a backend stops waiting for after bpext.io_timeout.
 *
 * A tier read serves a shared-buffer miss inside smgrread (or smgrreadv,
 * or 18's startreadv), while PostgreSQL holds the buffer's I/O-in-progress
 * flag.  On a device that hangs instead of failing (a stuck NVMe
 * controller, a suspended device-mapper table, a network block device) a
 * pread never returns and cannot be interrupted, and everything that
 * waits on that buffer (DROP or TRUNCATE of the relation, a standby's
 * replay of the block, a fast shutdown) would wait with it.  So a backend
 * never waits on the device itself:
 *
 *	- tier_file.c first reads with preadv2(RWF_NOWAIT), which returns the
 *	  page if it is in the kernel's page cache and EAGAIN instead of
 *	  going to the device (a page-cache hit cannot hang, and fsfreeze does
 *	  not block reads).  That is the common case with buffered tier I/O,
 *	  and costs what pread did;
 *	- anything else comes here: the read is handed to one of a few reader
 *	  helper processes, and the backend waits for the page at most
 *	  bpext.io_timeout.  If none comes by then, the tier goes to ERROR
 *	  with one WARNING (bpext_tier_fail), the read is counted in
 *	  io_errors, and the caller reads the block from its data file: the
 *	  helper stays stuck, not the backend.
 *
 * The requests go through a region of memory that the postmaster maps
 * (MAP_SHARED | MAP_ANONYMOUS) when it loads the library, so that every
 * process it forks has it at the same address.  It is not PostgreSQL's
 * shared memory on purpose: the helpers detach from that, as those of
 * helper_io.c and tier_writer.c do, so that a helper stuck in the
 * kernel cannot keep the next postmaster from starting.  For the same
 * reason they cannot use latches; waits are Linux futexes on the region's
 * words (shared, not FUTEX_PRIVATE_FLAG).
 *
 * The region holds READ_SLOTS request slots, each with a state word, the
 * request, the answer and an aligned page.  A slot's state moves so:
 *
 *	FREE --backend CAS of owner--> FILLING --backend--> PENDING
 *	PENDING --helper CAS--> BUSY (--helper, another incarnation's--> PENDING)
 *	BUSY --helper CAS--> DONE --backend, after copying the page--> FREE
 *	PENDING --backend CAS, on giving up--> FREE
 *	BUSY --backend CAS, on giving up--> ABANDONED --helper, when (if ever)
 *	its read returns--> FREE
 *
 * A backend takes a slot by its owner word (CAS from 0 to its pid), which
 * is cleared only after the slot is FREE again, so a slot's owner is always
 * the backend whose request it holds.
 *
 * So the page is copied out only from DONE, by the backend that asked, and
 * a helper writes only into a slot it holds in BUSY, that is, while the
 * backend that asked still waits for it or has left it for good: no
 * backend ever finds a page it did not ask for.  The page itself is then
 * checked as every tier page is (tier_io.c: the slot pinned, the CRC, the
 * re-check that the slot is still current), so a read that takes long
 * serves nothing stale.
 *
 * Which helper holds a slot is in its claim word, which the helper sets
 * (CAS from 0 to its pid) before it moves the slot from PENDING to BUSY,
 * and undoes if that move fails; whoever puts the slot back to FREE from
 * DONE or ABANDONED clears it first.  So a slot in BUSY or ABANDONED always
 * names its helper, even one that died the moment after it took the
 * request.  A slot whose backend died (a crash restart keeps the region)
 * or whose helper died is put back to FREE by the bpext worker, by CAS
 * from the state it saw, once that process is gone; a claim left by a
 * helper that died before it took the slot is cleared the same way.
 *
 * Helpers: bpext.tier_readers of them per file incarnation, forked by the
 * bpext worker (tier_readers_maintain, every round) as children of its own
 * that the kernel kills when it exits (worker_children.c), so that none
 * outlives the server by more than the read it may be stuck in.  Each
 * closes every inherited descriptor but the tier file and its own wake-up
 * eventfd, reopens the tier file as an open file description of its own
 * (tier_file_reopen_own: never the worker's flock), and detaches from
 * shared memory, so that one stuck in the kernel cannot keep the next
 * postmaster from starting.  A helper
 * serves only requests for its incarnation, and exits when the region's
 * incarnation or its own generation number changes (the worker wants fewer
 * helpers, or another depth; the worker also kills a helper it retires).
 * When the worker lets go of the file, or exits, it kills them all
 * (SIGKILL), so that one stuck in a read does not wake up to serve
 * anything: one in pread ends as soon as its read returns, one with a ring
 * at once (its reads still at the device complete into its own pages).
 * A backend hands a read to the helpers only when the region says helpers
 * serve the incarnation of its own descriptor; otherwise, or when every
 * slot is taken, the block is a plain miss (read from the data file).
 *
 * How many reads a helper keeps at the device: with bpext.tier_read_depth
 * above 1 it takes every request it finds, up to that many, queues them
 * all through an io_uring of its own (reader_ring.c) and answers each as
 * it completes, so that the reads in flight follow the sessions waiting
 * rather than the number of helpers; with 1, or where the kernel refuses
 * io_uring, it preads one page at a time.  The slot protocol above is the
 * same either way: a ring helper reads into pages of its own and copies
 * the page into the slot it holds in BUSY (see HelperRing for why).
 *
 * Waking: an idle helper sleeps on the pending_seq futex, and a backend
 * wakes one.  A helper with reads in flight waits in io_uring_enter, which
 * no futex can end; while it has room for more it puts its pid in its
 * ring_waiting word and keeps a poll of its own eventfd (WakeFds[index])
 * queued, and a backend whose futex wake found no idle helper writes the
 * eventfd of every helper that waits so (and the worker, after it killed
 * a helper that may have been the one a backend woke).  Each side makes its own change
 * with a full barrier (the fetch-add of pending_seq, the exchange of
 * ring_waiting) before it looks at the other's, so either the helper sees
 * the request or the backend sees the helper waiting.  A full helper waits
 * for its reads alone: the request waits for a read to complete.
 *
 * Nothing here allocates or raises an error in a backend: it runs inside
 * smgr calls.  Linux only (futexes, preadv2, io_uring), as bpext is.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <linux/futex.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/pg_shmem.h"
#include "storage/pmsignal.h"
#include "utils/ps_status.h"

#include "helper_io.h"
#include "reader_ring.h"
#include "settings.h"
#include "stats.h"
#include "tier_control.h"
#include "tier_file.h"
#include "tier_readers.h"
#include "worker_children.h"

/* Requests that can be under way at once, in the whole server. */
#define READ_SLOTS			64

StaticAssertDecl(TIER_READ_DEPTH_MAX <= READ_SLOTS,
				 "bpext.tier_read_depth cannot ask for more reads than there are slots");

/*
 * A ring completion that is not a read (whose tag is the helper's page it
 * reads into): the wake-up eventfd's poll.
 */
#define WAKE_TAG			((uint64) TIER_READ_DEPTH_MAX)

/*
 * How often a waiting backend looks up, and an idle helper.  A helper that
 * waits in its ring with room for more reads is woken for every request
 * and every change; its timeout is a backstop, kept well below
 * bpext.io_timeout so that it would save a read even then.
 */
#define BACKEND_SLICE_MS	100
#define HELPER_SLICE_MS		1000
#define RING_WAIT_MAX_MS	60000

typedef enum ReadSlotState
{
	SLOT_FREE = 0,
	SLOT_FILLING,
	SLOT_PENDING,
	SLOT_BUSY,
	SLOT_DONE,
	SLOT_ABANDONED
} ReadSlotState;

typedef struct ReadSlot
{
	pg_atomic_uint32 state;		/* ReadSlotState */
	pg_atomic_uint32 claim;		/* pid of the helper that holds it, or 0 */
	uint32		incarnation;	/* file incarnation of the request */
	off_t		offset;
	ssize_t		result;			/* the read's, in DONE */
	int			save_errno;
	pg_atomic_uint32 owner;		/* pid of the backend whose slot it is,
								 * taken by CAS from 0; 0 while FREE */
} ReadSlot;

typedef struct ReadersRegion
{
	pg_atomic_uint32 incarnation;	/* the helpers serve this file
									 * incarnation; 0: none */
	pg_atomic_uint32 pending_seq;	/* bumped for every request and every
									 * change; idle helpers sleep on it */
	pg_atomic_uint32 ring_waiting[TIER_READERS_MAX];	/* pid of helper i while
														 * it waits in its ring
														 * with room for more
														 * reads; else 0 */
	pg_atomic_uint32 ring_errno;	/* why a helper could not make its ring
									 * (0: none failed); the worker logs it */
	pg_atomic_uint32 ring_failed;	/* errno of a ring that stopped working:
									 * no helper makes one after that */
	pg_atomic_uint32 generation[TIER_READERS_MAX];	/* of each helper */
	ReadSlot	slots[READ_SLOTS];
} ReadersRegion;

#define PAGES_OFFSET	TYPEALIGN(TIER_IO_ALIGN, sizeof(ReadersRegion))
#define REGION_BYTES	(PAGES_OFFSET + (Size) READ_SLOTS * BLCKSZ)

static ReadersRegion *Region = NULL;

/*
 * An eventfd per helper index, which every process inherits from the
 * postmaster, as the region: a backend that finds no idle helper to wake
 * writes those of the helpers waiting in their rings (a futex cannot wake
 * a process waiting in io_uring_enter).  Each helper polls and empties
 * only its own.  -1: none, and that helper reads one page at a time.
 */
static int	WakeFds[TIER_READERS_MAX];

/*
 * In the bpext worker: its helper for each index, 0 for none, and the
 * bpext.tier_read_depth it was started with.
 */
static pid_t helper_pid[TIER_READERS_MAX];
static int	helper_depth[TIER_READERS_MAX];

static inline char *
slot_page(int index)
{
	return (char *) Region + PAGES_OFFSET + (Size) index * BLCKSZ;
}

static inline void
futex_wait(pg_atomic_uint32 *word, uint32 expected, int ms)
{
	struct timespec ts = {.tv_sec = ms / 1000,.tv_nsec = (ms % 1000) * 1000000L};

	(void) syscall(SYS_futex, (uint32 *) &word->value, FUTEX_WAIT, expected,
				   &ts, NULL, 0);
}

/* Wake up to n waiters on word; how many it woke. */
static inline int
futex_wake(pg_atomic_uint32 *word, int n)
{
	return (int) syscall(SYS_futex, (uint32 *) &word->value, FUTEX_WAKE, n,
						 NULL, NULL, 0);
}

/*
 * Wake every helper waiting in its ring with room for more reads: each
 * looks at the slots again, and one that finds nothing waits again.  (A
 * write can only fail with the counter full: the helper is woken anyway.)
 */
static void
wake_ring_waiters(void)
{
	int			i;

	for (i = 0; i < TIER_READERS_MAX; i++)
	{
		if (pg_atomic_read_u32(&Region->ring_waiting[i]) != 0 &&
			WakeFds[i] >= 0)
			(void) eventfd_write(WakeFds[i], 1);
	}
}

/* Has process pid (0: not known yet) certainly exited? */
static inline bool
pid_gone(pid_t pid)
{
	return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
}

/*
 * In the postmaster, when it loads the library: map the region every
 * process it forks inherits.  Without it (out of memory), no read is ever
 * handed to a helper, and every read the page cache cannot serve is a
 * plain miss.
 */
void
tier_readers_create(void)
{
	void	   *region = mmap(NULL, REGION_BYTES, PROT_READ | PROT_WRITE,
							  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int			i;

	for (i = 0; i < TIER_READERS_MAX; i++)
		WakeFds[i] = -1;
	if (region == MAP_FAILED)
	{
		ereport(LOG,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("bpext could not map memory for its tier readers: %m"),
				 errdetail("Tier pages not in the kernel's page cache are read from the data files.")));
		return;
	}
	Region = region;
	pg_atomic_init_u32(&Region->incarnation, 0);
	pg_atomic_init_u32(&Region->pending_seq, 0);
	pg_atomic_init_u32(&Region->ring_errno, 0);
	pg_atomic_init_u32(&Region->ring_failed, 0);
	for (i = 0; i < TIER_READERS_MAX; i++)
	{
		pg_atomic_init_u32(&Region->generation[i], 0);
		pg_atomic_init_u32(&Region->ring_waiting[i], 0);
	}
	for (i = 0; i < READ_SLOTS; i++)
	{
		pg_atomic_init_u32(&Region->slots[i].state, SLOT_FREE);
		pg_atomic_init_u32(&Region->slots[i].claim, 0);
		pg_atomic_init_u32(&Region->slots[i].owner, 0);
	}

	for (i = 0; i < TIER_READERS_MAX; i++)
	{
		WakeFds[i] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (WakeFds[i] < 0)
		{
			ereport(LOG,
					(errcode_for_file_access(),
					 errmsg("bpext could not create an eventfd for its tier readers: %m"),
					 errdetail("Reader helpers without one read one tier page at a time.")));
			break;
		}
	}
}

/* Clear a claim whose helper is gone (a CAS from the pid seen). */
static void
clear_dead_claim(ReadSlot *slot)
{
	uint32		claimer = pg_atomic_read_u32(&slot->claim);

	if (claimer != 0 && pid_gone((pid_t) claimer))
		(void) pg_atomic_compare_exchange_u32(&slot->claim, &claimer, 0);
}

/*
 * The slot, whose state was just made FREE, is nobody's: a backend may
 * take it.  Its owner is cleared only now, so that a backend that takes it
 * (by its owner word) finds it FREE, and the worker never judges a slot by
 * the pid of a backend whose request it no longer holds.
 */
static inline void
disown(ReadSlot *slot)
{
	pg_atomic_write_u32(&slot->owner, 0);
}

/* Put a slot whose request is over back to FREE. */
static void
release_slot(ReadSlot *slot)
{
	pg_atomic_write_u32(&slot->claim, 0);
	(void) pg_atomic_exchange_u32(&slot->state, SLOT_FREE);
	disown(slot);
}

/*
 * The backend gives up on its request: PENDING goes back to FREE, BUSY to
 * ABANDONED.  False if the state moved on meanwhile (it may be DONE now;
 * the caller looks again).
 */
static bool
give_up(ReadSlot *slot, uint32 seen)
{
	if (seen == SLOT_PENDING)
	{
		if (!pg_atomic_compare_exchange_u32(&slot->state, &seen, SLOT_FREE))
			return false;
		disown(slot);
		return true;
	}
	if (seen == SLOT_BUSY)
		return pg_atomic_compare_exchange_u32(&slot->state, &seen,
											  SLOT_ABANDONED);
	return false;
}

/*
 * Read the page at offset of the tier file of this incarnation through a
 * helper, waiting at most bpext.io_timeout (0: as long as it takes, unless
 * an interrupt is pending, such as a termination, a cancel or a recovery
 * conflict, which is served as soon as the read has fallen back to the
 * data file).  A read that does not answer in time switches the tier off.
 */
TierReadResult
tier_readers_read(char *page, off_t offset, uint32 incarnation)
{
	ReadSlot   *slot = NULL;
	int			index = 0;
	uint64		start;
	int			i;

	if (Region == NULL ||
		pg_atomic_read_u32(&Region->incarnation) != incarnation)
		return TIER_READ_UNAVAILABLE;
	for (i = 0; i < READ_SLOTS; i++)
	{
		uint32		unowned = 0;

		index = (MyProcPid + i) % READ_SLOTS;
		if (pg_atomic_compare_exchange_u32(&Region->slots[index].owner,
										   &unowned, (uint32) MyProcPid))
		{
			slot = &Region->slots[index];
			break;
		}
	}
	if (slot == NULL)
		return TIER_READ_UNAVAILABLE;

	/* Owned, so FREE (disown comes after the move to FREE). */
	Assert(pg_atomic_read_u32(&slot->state) == SLOT_FREE);
	pg_atomic_write_u32(&slot->state, SLOT_FILLING);
	slot->incarnation = incarnation;
	slot->offset = offset;
	(void) pg_atomic_exchange_u32(&slot->state, SLOT_PENDING);

	/*
	 * An idle helper if there is one; else those with reads in flight and
	 * room for more.  The fetch-add, and a ring waiter's exchange on its
	 * ring_waiting word before it looks at the slots, are full barriers:
	 * either it sees this request or this sees it waiting.
	 */
	(void) pg_atomic_fetch_add_u32(&Region->pending_seq, 1);
	if (futex_wake(&Region->pending_seq, 1) <= 0)
		wake_ring_waiters();

	start = bpext_monotonic_ms();
	for (;;)
	{
		uint32		seen = pg_atomic_read_u32(&slot->state);
		uint64		elapsed;
		int			wait_ms = BACKEND_SLICE_MS;

		/*
		 * No one but us moves our slot to another state while we wait: the
		 * worker reclaims only the slots of processes that are gone.  Never
		 * loop on a slot that is not ours any more.
		 */
		if (seen != SLOT_PENDING && seen != SLOT_BUSY && seen != SLOT_DONE)
			return TIER_READ_UNAVAILABLE;

		if (seen == SLOT_DONE)
		{
			ssize_t		n;
			int			save_errno;

			pg_read_barrier();
			n = slot->result;
			save_errno = slot->save_errno;
			if (n == BLCKSZ)
				memcpy(page, slot_page(index), BLCKSZ);
			release_slot(slot);
			if (n == BLCKSZ)
				return TIER_READ_OK;
			errno = n < 0 ? save_errno : 0;
			return TIER_READ_FAILED;
		}

		elapsed = bpext_monotonic_ms() - start;
		if (bpext_io_timeout_ms > 0 && elapsed >= (uint64) bpext_io_timeout_ms)
		{
			char		what[200];

			if (!give_up(slot, seen))
				continue;
			snprintf(what, sizeof(what),
					 "a tier read in process %d has not returned after %llu ms (bpext.io_timeout is %d ms)",
					 (int) MyProcPid, (unsigned long long) elapsed,
					 bpext_io_timeout_ms);
			BPEXT_COUNT(io_errors, 1);
			bpext_tier_fail_hung(what);
			return TIER_READ_UNAVAILABLE;
		}

		/*
		 * Someone else saw the device hang first (io_watch.c), or nothing
		 * it did: the helpers were told to go, the one serving us died,
		 * the server is going away.  A plain miss.
		 */
		if (pg_atomic_read_u32(&BpextCtl->state) == BPEXT_STATE_ERROR ||
			(seen == SLOT_PENDING &&
			 pg_atomic_read_u32(&Region->incarnation) != incarnation) ||
			(seen == SLOT_BUSY &&
			 pid_gone((pid_t) pg_atomic_read_u32(&slot->claim))) ||
			(bpext_io_timeout_ms <= 0 && INTERRUPTS_PENDING_CONDITION()) ||
			!PostmasterIsAlive())
		{
			if (!give_up(slot, seen))
				continue;
			return TIER_READ_UNAVAILABLE;
		}

		/* A helper that died as it claimed the request: let another. */
		if (seen == SLOT_PENDING)
			clear_dead_claim(slot);
		if (bpext_io_timeout_ms > 0)
			wait_ms = Min(wait_ms, bpext_io_timeout_ms - (int) elapsed);
		futex_wait(&slot->state, seen, Max(wait_ms, 1));
	}
}

/*
 * In a helper: answer the request in slot index, which it holds (BUSY),
 * with its read's result n (bytes, or -1 with save_errno).
 */
static void
answer(int index, ssize_t n, int save_errno)
{
	ReadSlot   *slot = &Region->slots[index];
	uint32		expected = SLOT_BUSY;

	slot->result = n;
	slot->save_errno = n < 0 ? save_errno : 0;
	if (pg_atomic_compare_exchange_u32(&slot->state, &expected, SLOT_DONE))
		futex_wake(&slot->state, 1);
	else
	{
		/* Abandoned: nobody waits for it any more. */
		release_slot(slot);
	}
}

/*
 * In a helper: take the request in slot i, if it is PENDING and no other
 * helper claims it; false if not.
 */
static bool
take_request(ReadSlot *slot, uint32 me)
{
	uint32		unclaimed = 0;
	uint32		expected = SLOT_PENDING;

	if (pg_atomic_read_u32(&slot->state) != SLOT_PENDING ||
		!pg_atomic_compare_exchange_u32(&slot->claim, &unclaimed, me))
		return false;
	if (pg_atomic_compare_exchange_u32(&slot->state, &expected, SLOT_BUSY))
		return true;
	unclaimed = me;
	(void) pg_atomic_compare_exchange_u32(&slot->claim, &unclaimed, 0);
	return false;
}

/*
 * In a helper: the next request of its incarnation that it takes, looking
 * from slot *next to the last (a pass: the caller starts over from 0), or
 * -1 when there is none.
 */
static int
take_next(uint32 me, uint32 incarnation, int *next)
{
	while (*next < READ_SLOTS)
	{
		int			i = (*next)++;
		ReadSlot   *slot = &Region->slots[i];
		uint32		expected = SLOT_BUSY;

		if (!take_request(slot, me))
			continue;
		if (slot->incarnation == incarnation)
			return i;
		/* Another incarnation's: hand it back. */
		if (pg_atomic_compare_exchange_u32(&slot->state, &expected,
										   SLOT_PENDING))
			pg_atomic_write_u32(&slot->claim, 0);
		else
			release_slot(slot); /* abandoned meanwhile */
	}
	return -1;
}

/* Is helper index to go: a new incarnation, or the worker retired it? */
static bool
helper_retired(int index, uint32 generation, uint32 incarnation)
{
	return pg_atomic_read_u32(&Region->incarnation) != incarnation ||
		pg_atomic_read_u32(&Region->generation[index]) != generation;
}

/* A helper without a ring: one pread at a time. */
static void
read_one_at_a_time(int tier_fd, int index, uint32 generation,
				   uint32 incarnation)
{
	uint32		me = (uint32) getpid();

	for (;;)
	{
		uint32		seq = pg_atomic_read_u32(&Region->pending_seq);
		bool		served = false;
		int			next = 0;
		int			i;

		/* The slots are looked at after seq is read. */
		pg_read_barrier();
		if (helper_retired(index, generation, incarnation))
			_exit(0);
		while ((i = take_next(me, incarnation, &next)) >= 0)
		{
			ssize_t		n;

			do
				n = pread(tier_fd, slot_page(i), BLCKSZ,
						  Region->slots[i].offset);
			while (n < 0 && errno == EINTR);
			answer(i, n, errno);
			served = true;
		}
		if (!served)
			futex_wait(&Region->pending_seq, seq, HELPER_SLICE_MS);
	}
}

/*
 * A helper's ring and what it reads into.  The kernel reads into pages of
 * the helper's own (bounce), never into a slot's page: a helper that ends
 * with reads at the device (killed, or its ring broken) is reaped at once,
 * without waiting for them, and a read that completes after that must not
 * land in a slot that has been reused meanwhile.  The page is copied into
 * its slot when its read completes, just before the slot is answered.
 */
typedef struct HelperRing
{
	ReaderRing *ring;
	int			depth;
	char	   *bounce;			/* depth pages, private to the helper */
	int			slot_of[TIER_READ_DEPTH_MAX];	/* of each page; -1: free */
	int			in_flight;
	bool		poll_armed;		/* a poll of WakeFds[index] is queued */
} HelperRing;

/*
 * Queue reads for the requests found in one pass over the slots, while
 * there is a free page for them.
 */
static void
queue_requests(HelperRing *hr, int tier_fd, uint32 incarnation)
{
	uint32		me = (uint32) MyProcPid;	/* the helper's own (a syscall less) */
	int			next = 0;
	int			page = 0;

	while (hr->in_flight < hr->depth)
	{
		int			i;

		while (hr->slot_of[page] >= 0)
			page++;
		if ((i = take_next(me, incarnation, &next)) < 0)
			break;
		hr->slot_of[page] = i;
		reader_ring_queue_read(hr->ring, tier_fd,
							   hr->bounce + (Size) page * BLCKSZ, BLCKSZ,
							   Region->slots[i].offset, (uint64) page);
		hr->in_flight++;
	}
}

/* Not waiting in the ring for requests any more. */
static void
stop_waiting(int index, uint32 me)
{
	uint32		expected = me;

	(void) pg_atomic_compare_exchange_u32(&Region->ring_waiting[index],
										  &expected, 0);
}

/*
 * A helper with a ring: every request it takes is queued at once, up to
 * depth in flight, and it waits for whichever completes first or, with
 * room for more, for a backend's wake-up (WakeFds[index]).  Idle, it
 * sleeps on the futex as a helper without a ring does, and is woken
 * first.  A ring that stops working ends the helper, and no helper makes
 * one after that: its backends see it gone and read their blocks from the
 * data files, and the worker starts a helper that preads.
 */
static void
read_through_ring(HelperRing *hr, int tier_fd, int index,
				  uint32 generation, uint32 incarnation)
{
	uint32		me = (uint32) getpid();
	ReaderRingDone done[TIER_READ_DEPTH_MAX + 1];
	int			wait_ms = RING_WAIT_MAX_MS;

	if (bpext_io_timeout_ms > 0)
		wait_ms = Max(Min(wait_ms, bpext_io_timeout_ms / 4), 10);
	for (;;)
	{
		uint32		seq = pg_atomic_read_u32(&Region->pending_seq);
		bool		for_requests = false;
		int			n;

		/* The slots are looked at after seq is read. */
		pg_read_barrier();
		if (helper_retired(index, generation, incarnation))
			_exit(0);
		queue_requests(hr, tier_fd, incarnation);
		if (hr->in_flight == 0)
		{
			futex_wait(&Region->pending_seq, seq, HELPER_SLICE_MS);
			continue;
		}

		/*
		 * With room for more: say so, then look once more (a backend that
		 * found no idle helper before we said so left its request for us to
		 * find here), and let a wake-up end the wait too.  Full, no backend
		 * is told to wake us.
		 */
		if (hr->in_flight < hr->depth)
		{
			(void) pg_atomic_exchange_u32(&Region->ring_waiting[index], me);
			queue_requests(hr, tier_fd, incarnation);
			for_requests = hr->in_flight < hr->depth;
			if (!for_requests)
				stop_waiting(index, me);
			else if (!hr->poll_armed)
			{
				reader_ring_queue_poll_in(hr->ring, WakeFds[index], WAKE_TAG);
				hr->poll_armed = true;
			}
		}
		if (reader_ring_submit_and_wait(hr->ring, wait_ms) < 0)
		{
			uint32		none = 0;

			if (errno != EAGAIN && errno != EBUSY)
			{
				(void) pg_atomic_compare_exchange_u32(&Region->ring_failed,
													  &none, (uint32) errno);
				_exit(1);
			}
			pg_usleep(1000L);	/* short of resources: a little later */
		}
		if (for_requests)
			stop_waiting(index, me);

		n = reader_ring_reap(hr->ring, done, lengthof(done));
		for (int k = 0; k < n; k++)
		{
			int			result = done[k].result;
			int			page;
			int			slot;

			if (done[k].tag == WAKE_TAG)
			{
				eventfd_t	count;

				/* Ours alone: emptied, to be polled again. */
				hr->poll_armed = false;
				(void) eventfd_read(WakeFds[index], &count);
				continue;
			}
			page = (int) done[k].tag;
			if (page < 0 || page >= hr->depth || hr->slot_of[page] < 0)
				continue;		/* not a read of ours: cannot happen */
			slot = hr->slot_of[page];

			/* Interrupted, as pread's EINTR: read again (pread's loop). */
			if (result == -EINTR || result == -EAGAIN)
			{
				reader_ring_queue_read(hr->ring, tier_fd,
									   hr->bounce + (Size) page * BLCKSZ,
									   BLCKSZ, Region->slots[slot].offset,
									   (uint64) page);
				continue;
			}
			hr->slot_of[page] = -1;
			hr->in_flight--;
			if (result == BLCKSZ)
				memcpy(slot_page(slot), hr->bounce + (Size) page * BLCKSZ,
					   BLCKSZ);
			answer(slot, result < 0 ? -1 : result, result < 0 ? -result : 0);
		}
	}
}

/*
 * In a helper: its ring of depth reads and the pages they go into, or
 * false when it reads one page at a time (why, in ring_errno, if the
 * kernel refused the ring).
 */
static bool
make_ring(HelperRing *hr, int depth, int index)
{
	int			save_errno = 0;
	uint32		none = 0;

	if (depth <= 1 || WakeFds[index] < 0 ||
		pg_atomic_read_u32(&Region->ring_failed) != 0)
		return false;
	hr->bounce = mmap(NULL, (Size) depth * BLCKSZ, PROT_READ | PROT_WRITE,
					  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (hr->bounce == MAP_FAILED)
		save_errno = errno;
	else
	{
		/* A place for the wake-up's poll beside the reads. */
		hr->ring = reader_ring_create((unsigned) depth + 1, &save_errno);
		if (hr->ring != NULL)
		{
			hr->depth = depth;
			hr->in_flight = 0;
			hr->poll_armed = false;
			for (int page = 0; page < depth; page++)
				hr->slot_of[page] = -1;
			return true;
		}
		munmap(hr->bounce, (Size) depth * BLCKSZ);
	}
	(void) pg_atomic_compare_exchange_u32(&Region->ring_errno, &none,
										  (uint32) save_errno);
	return false;
}

/*
 * A helper: PostgreSQL's signal handlers and shared memory are not for
 * it; it only ever takes requests for its incarnation and reads them,
 * through a ring of bpext.tier_read_depth reads when that is above 1 and
 * the kernel gives one.
 */
static void
helper_main(int index, uint32 generation, int tier_fd, uint32 incarnation,
			uint64 dev, uint64 ino)
{
	int			keep[2] = {tier_fd, WakeFds[index]};
	HelperRing	hr;

	bpext_helper_leave_server();
	bpext_close_inherited_fds(keep, WakeFds[index] >= 0 ? 2 : 1);
	PGSharedMemoryDetach();
	bpext_helper_title("bpext reader helper");

	/* -1 if it could not: every read then fails (EBADF). */
	tier_fd = tier_file_reopen_own(tier_fd, false, dev, ino);

	if (make_ring(&hr, bpext_tier_read_depth, index))
		read_through_ring(&hr, tier_fd, index, generation, incarnation);
	else
		read_one_at_a_time(tier_fd, index, generation, incarnation);
}

/*
 * Start helper index for the file fd of this incarnation, the one dev and
 * ino name.
 */
static void
spawn_helper(int index, int fd, uint32 incarnation, uint64 dev, uint64 ino)
{
	uint32		generation = pg_atomic_add_fetch_u32(&Region->generation[index], 1);
	pid_t		child;

	helper_pid[index] = 0;
	child = worker_child_fork(WORKER_CHILD_READER);
	if (child == 0)
		helper_main(index, generation, fd, incarnation, dev, ino);
	if (child > 0)
	{
		helper_pid[index] = child;
		helper_depth[index] = bpext_tier_read_depth;
	}
}

/*
 * In the bpext worker: put back to FREE the slots whose backend, or whose
 * helper, is gone, by CAS from the state seen, so that a slot that moved
 * on meanwhile is left alone; and clear the claims of helpers that died
 * before they took a request.
 */
static void
reclaim_slots(void)
{
	int			i;

	/* A helper that died while it waited in its ring leaves its word. */
	for (i = 0; i < TIER_READERS_MAX; i++)
	{
		uint32		waiter = pg_atomic_read_u32(&Region->ring_waiting[i]);

		if (waiter != 0 && pid_gone((pid_t) waiter))
			(void) pg_atomic_compare_exchange_u32(&Region->ring_waiting[i],
												  &waiter, 0);
	}

	for (i = 0; i < READ_SLOTS; i++)
	{
		ReadSlot   *slot = &Region->slots[i];
		uint32		seen = pg_atomic_read_u32(&slot->state);
		pid_t		claimer = (pid_t) pg_atomic_read_u32(&slot->claim);
		pid_t		owner = (pid_t) pg_atomic_read_u32(&slot->owner);
		bool		gone;

		switch (seen)
		{
			case SLOT_FREE:
				/* Taken by a backend that died before it filled it. */
				if (owner != 0 && pid_gone(owner))
				{
					uint32		dead = (uint32) owner;

					(void) pg_atomic_compare_exchange_u32(&slot->owner,
														  &dead, 0);
				}
				gone = false;
				break;
			case SLOT_FILLING:
			case SLOT_PENDING:
			case SLOT_DONE:
				gone = pid_gone(owner);
				break;
			case SLOT_BUSY:
				gone = pid_gone(claimer) && pid_gone(owner);
				break;
			case SLOT_ABANDONED:
				gone = pid_gone(claimer);
				break;
			default:
				gone = false;
				break;
		}

		/*
		 * The claim first: once FREE, the slot may be taken again, and a
		 * new claim must not be cleared.
		 */
		if (seen != SLOT_BUSY && seen != SLOT_ABANDONED && seen != SLOT_DONE)
			clear_dead_claim(slot);
		if (!gone)
			continue;
		if (seen == SLOT_BUSY || seen == SLOT_ABANDONED)
			clear_dead_claim(slot);
		else if (seen == SLOT_DONE)
			pg_atomic_write_u32(&slot->claim, 0);	/* its helper is done */
		if (pg_atomic_compare_exchange_u32(&slot->state, &seen, SLOT_FREE))
			disown(slot);
	}
}

/*
 * Say, once in the worker's life, why a helper reads one page at a time
 * although bpext.tier_read_depth asks for more.
 */
static void
report_ring_failure(void)
{
	static bool refusal_reported = false;
	static bool failure_reported = false;
	uint32		ring_errno = pg_atomic_exchange_u32(&Region->ring_errno, 0);
	uint32		ring_failed = pg_atomic_read_u32(&Region->ring_failed);

	if (ring_errno != 0 && !refusal_reported)
	{
		refusal_reported = true;
		errno = (int) ring_errno;
		ereport(LOG,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("bpext reader helpers cannot use io_uring: %m"),
				 errdetail("Such a reader helper reads one tier page at a time, so at most bpext.tier_readers tier reads are at the device at once."),
				 errhint("io_uring needs Linux 5.11 or later, kernel.io_uring_disabled = 0 and no seccomp filter that refuses it; before Linux 5.12 its rings also count against RLIMIT_MEMLOCK.")));
	}
	if (ring_failed != 0 && !failure_reported)
	{
		failure_reported = true;
		errno = (int) ring_failed;
		ereport(LOG,
				(errcode(ERRCODE_SYSTEM_ERROR),
				 errmsg("the io_uring of a bpext reader helper stopped working: %m"),
				 errdetail("The tier reads that helper had under way were read from the data files; reader helpers started from now on read one tier page at a time.")));
	}
}

/*
 * In the bpext worker, every round: bpext.tier_readers helpers serve the
 * file fd of this incarnation (fd < 0: no file is being served, and every
 * helper is told to go).
 */
void
tier_readers_maintain(int fd, uint32 incarnation)
{
	bool		any = false;
	bool		retired = false;
	bool		fd_checked = false;
	uint64		dev = 0;
	uint64		ino = 0;
	char		why[256];
	int			i;

	if (Region == NULL)
		return;
	reclaim_slots();
	report_ring_failure();
	if (fd < 0 || bpext_tier_readers == 0)
	{
		if (pg_atomic_read_u32(&Region->incarnation) != 0)
			tier_readers_stop();
		return;
	}
	if (pg_atomic_read_u32(&Region->incarnation) != incarnation)
	{
		/* The old ones go; the new ones must see theirs at once. */
		tier_readers_stop();
		pg_atomic_write_u32(&Region->incarnation, incarnation);
	}

	for (i = 0; i < TIER_READERS_MAX; i++)
	{
		/*
		 * Not wanted any more, or started with another depth: the helper
		 * goes at once (its reads in flight fall back to the data files),
		 * so that no two helpers ever poll one index's eventfd.
		 */
		if (helper_pid[i] != 0 &&
			(i >= bpext_tier_readers ||
			 helper_depth[i] != bpext_tier_read_depth))
		{
			(void) pg_atomic_fetch_add_u32(&Region->generation[i], 1);
			worker_child_kill(helper_pid[i]);
			helper_pid[i] = 0;
			retired = true;
		}
		if (i >= bpext_tier_readers)
			continue;
		if (!worker_child_alive(helper_pid[i]))
		{
			if (!fd_checked &&
				!tier_file_worker_fd_valid(fd, &dev, &ino, why, sizeof(why)))
			{
				tier_readers_stop();
				bpext_tier_fail(why, 0);
				return;
			}
			fd_checked = true;
			spawn_helper(i, fd, incarnation, dev, ino);
		}
		any |= helper_pid[i] != 0;
	}
	if (!any)
		pg_atomic_write_u32(&Region->incarnation, 0);

	/*
	 * A backend's wake may have gone to a helper just killed: every other
	 * looks at the slots again.
	 */
	if (retired)
	{
		(void) pg_atomic_fetch_add_u32(&Region->pending_seq, 1);
		(void) futex_wake(&Region->pending_seq, INT_MAX);
		wake_ring_waiters();
	}
}

/*
 * For bpext_stats: the requests no helper has taken yet (PENDING), and
 * those a helper has at the device (BUSY, and ABANDONED: their backend
 * gave up, the read goes on).  A snapshot slot by slot, not atomic.
 */
void
tier_readers_count(int *waiting, int *at_device)
{
	int			i;

	*waiting = 0;
	*at_device = 0;
	if (Region == NULL)
		return;
	for (i = 0; i < READ_SLOTS; i++)
	{
		uint32		state = pg_atomic_read_u32(&Region->slots[i].state);

		if (state == SLOT_PENDING)
			(*waiting)++;
		else if (state == SLOT_BUSY || state == SLOT_ABANDONED)
			(*at_device)++;
	}
}

/*
 * In the bpext worker, when it lets go of the tier file or exits: every
 * helper is killed, also those retired earlier that are still stuck.  An
 * idle one ends at once; one stuck in a read ends when (if ever) the read
 * returns, without looking at the region again.  (If the worker is ended
 * without running this, the kernel sends the same signal.)
 */
void
tier_readers_stop(void)
{
	int			i;

	if (Region == NULL)
		return;
	pg_atomic_write_u32(&Region->incarnation, 0);
	for (i = 0; i < TIER_READERS_MAX; i++)
		helper_pid[i] = 0;
	worker_children_kill(WORKER_CHILD_READER);
}

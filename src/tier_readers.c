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
 *	FREE --backend CAS--> FILLING --backend--> PENDING --helper CAS--> BUSY
 *	BUSY --helper CAS--> DONE --backend, after copying the page--> FREE
 *	PENDING --backend CAS, on giving up--> FREE
 *	BUSY --backend CAS, on giving up--> ABANDONED --helper, when (if ever)
 *	its read returns--> FREE
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
 * closes every inherited descriptor but the tier file, which it reopens as
 * an open file description of its own (tier_file_reopen_own: never the
 * worker's flock), and detaches from shared memory, so that one stuck in
 * the kernel cannot keep the next postmaster from starting.  A helper
 * serves only requests for its incarnation, and exits when the region's
 * incarnation or its own generation number changes (the worker wants fewer
 * helpers).  When the worker lets go of the file, or exits, it kills them
 * all (SIGKILL), so that one stuck in a read does not wake up to serve
 * anything: it ends as soon as its read returns.  A backend hands a read
 * to the helpers only when the region says helpers serve the incarnation
 * of its own descriptor; otherwise, or when every slot is taken, the block
 * is a plain miss (read from the data file).
 *
 * Nothing here allocates or raises an error in a backend: it runs inside
 * smgr calls.  Linux only (futexes, preadv2), as bpext is.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/pg_shmem.h"
#include "storage/pmsignal.h"
#include "utils/ps_status.h"

#include "helper_io.h"
#include "settings.h"
#include "stats.h"
#include "tier_control.h"
#include "tier_file.h"
#include "tier_readers.h"
#include "worker_children.h"

/* Requests that can be under way at once, in the whole server. */
#define READ_SLOTS			64

/* How often a waiting backend looks up, and an idle helper. */
#define BACKEND_SLICE_MS	100
#define HELPER_SLICE_MS		1000

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
	ssize_t		result;			/* pread's, in DONE */
	int			save_errno;
	volatile pid_t backend_pid; /* who asked */
} ReadSlot;

typedef struct ReadersRegion
{
	pg_atomic_uint32 incarnation;	/* the helpers serve this file
									 * incarnation; 0: none */
	pg_atomic_uint32 pending_seq;	/* bumped for every request and every
									 * change; idle helpers sleep on it */
	pg_atomic_uint32 generation[TIER_READERS_MAX];	/* of each helper */
	ReadSlot	slots[READ_SLOTS];
} ReadersRegion;

#define PAGES_OFFSET	TYPEALIGN(TIER_IO_ALIGN, sizeof(ReadersRegion))
#define REGION_BYTES	(PAGES_OFFSET + (Size) READ_SLOTS * BLCKSZ)

static ReadersRegion *Region = NULL;

/* In the bpext worker: its helper for each index, 0 for none. */
static pid_t helper_pid[TIER_READERS_MAX];

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

static inline void
futex_wake(pg_atomic_uint32 *word, int n)
{
	(void) syscall(SYS_futex, (uint32 *) &word->value, FUTEX_WAKE, n,
				   NULL, NULL, 0);
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
	for (i = 0; i < TIER_READERS_MAX; i++)
		pg_atomic_init_u32(&Region->generation[i], 0);
	for (i = 0; i < READ_SLOTS; i++)
	{
		pg_atomic_init_u32(&Region->slots[i].state, SLOT_FREE);
		pg_atomic_init_u32(&Region->slots[i].claim, 0);
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
 * The backend gives up on its request: PENDING goes back to FREE, BUSY to
 * ABANDONED.  False if the state moved on meanwhile (it may be DONE now;
 * the caller looks again).
 */
static bool
give_up(ReadSlot *slot, uint32 seen)
{
	if (seen == SLOT_PENDING)
		return pg_atomic_compare_exchange_u32(&slot->state, &seen, SLOT_FREE);
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
		uint32		expected = SLOT_FREE;

		index = (MyProcPid + i) % READ_SLOTS;
		if (pg_atomic_compare_exchange_u32(&Region->slots[index].state,
										   &expected, SLOT_FILLING))
		{
			slot = &Region->slots[index];
			break;
		}
	}
	if (slot == NULL)
		return TIER_READ_UNAVAILABLE;

	slot->incarnation = incarnation;
	slot->offset = offset;
	slot->backend_pid = MyProcPid;
	(void) pg_atomic_exchange_u32(&slot->state, SLOT_PENDING);
	(void) pg_atomic_fetch_add_u32(&Region->pending_seq, 1);
	futex_wake(&Region->pending_seq, 1);

	start = bpext_monotonic_ms();
	for (;;)
	{
		uint32		seen = pg_atomic_read_u32(&slot->state);
		uint64		elapsed;
		int			wait_ms = BACKEND_SLICE_MS;

		if (seen == SLOT_DONE)
		{
			ssize_t		n;
			int			save_errno;

			pg_read_barrier();
			n = slot->result;
			save_errno = slot->save_errno;
			if (n == BLCKSZ)
				memcpy(page, slot_page(index), BLCKSZ);
			pg_atomic_write_u32(&slot->claim, 0);
			(void) pg_atomic_exchange_u32(&slot->state, SLOT_FREE);
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

/* In a helper: serve the request in slot index, which it holds (BUSY). */
static void
serve(int tier_fd, int index)
{
	ReadSlot   *slot = &Region->slots[index];
	uint32		expected = SLOT_BUSY;
	ssize_t		n;

	do
		n = pread(tier_fd, slot_page(index), BLCKSZ, slot->offset);
	while (n < 0 && errno == EINTR);
	slot->result = n;
	slot->save_errno = n < 0 ? errno : 0;
	if (pg_atomic_compare_exchange_u32(&slot->state, &expected, SLOT_DONE))
		futex_wake(&slot->state, 1);
	else
	{
		/* Abandoned: nobody waits for it any more. */
		pg_atomic_write_u32(&slot->claim, 0);
		(void) pg_atomic_exchange_u32(&slot->state, SLOT_FREE);
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
 * A helper: PostgreSQL's signal handlers and shared memory are not for
 * it; it only ever takes requests for its incarnation and preads.
 */
static void
helper_main(int index, uint32 generation, int tier_fd, uint32 incarnation,
			uint64 dev, uint64 ino)
{
	uint32		me = (uint32) getpid();

	bpext_helper_leave_server();
	(void) setsid();			/* out of the worker's process group */
	bpext_close_inherited_fds(&tier_fd, 1);
	PGSharedMemoryDetach();
	bpext_helper_title("bpext reader helper");

	/* -1 with errno: every read then fails with it. */
	tier_fd = tier_file_reopen_own(tier_fd, false, dev, ino);

	for (;;)
	{
		uint32		seq = pg_atomic_read_u32(&Region->pending_seq);
		bool		served = false;
		int			i;

		if (pg_atomic_read_u32(&Region->incarnation) != incarnation ||
			pg_atomic_read_u32(&Region->generation[index]) != generation)
			_exit(0);

		for (i = 0; i < READ_SLOTS; i++)
		{
			ReadSlot   *slot = &Region->slots[i];
			uint32		expected;

			if (!take_request(slot, me))
				continue;
			if (slot->incarnation != incarnation)
			{
				/* Another incarnation's: hand it back. */
				expected = SLOT_BUSY;
				if (pg_atomic_compare_exchange_u32(&slot->state, &expected,
												   SLOT_PENDING))
					pg_atomic_write_u32(&slot->claim, 0);
				else
				{
					pg_atomic_write_u32(&slot->claim, 0);
					(void) pg_atomic_exchange_u32(&slot->state, SLOT_FREE);
				}
				continue;
			}
			serve(tier_fd, i);
			served = true;
		}
		if (served)
			continue;
		futex_wait(&Region->pending_seq, seq, HELPER_SLICE_MS);
	}
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
		helper_pid[index] = child;
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

	for (i = 0; i < READ_SLOTS; i++)
	{
		ReadSlot   *slot = &Region->slots[i];
		uint32		seen = pg_atomic_read_u32(&slot->state);
		pid_t		claimer = (pid_t) pg_atomic_read_u32(&slot->claim);
		bool		gone;

		switch (seen)
		{
			case SLOT_FILLING:
			case SLOT_PENDING:
			case SLOT_DONE:
				gone = pid_gone(slot->backend_pid);
				break;
			case SLOT_BUSY:
				gone = pid_gone(claimer) && pid_gone(slot->backend_pid);
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
		(void) pg_atomic_compare_exchange_u32(&slot->state, &seen, SLOT_FREE);
	}
}

/* Wake every idle helper, to look at the region again. */
static void
wake_helpers(void)
{
	(void) pg_atomic_fetch_add_u32(&Region->pending_seq, 1);
	futex_wake(&Region->pending_seq, INT_MAX);
}

/*
 * In the bpext worker, every round: bpext.tier_readers helpers serve the
 * file fd of this incarnation (fd < 0: no file is being served, and every
 * helper is told to go).
 */
void
tier_readers_maintain(int fd, uint32 incarnation)
{
	bool		retired = false;
	bool		any = false;
	bool		fd_checked = false;
	uint64		dev = 0;
	uint64		ino = 0;
	char		why[256];
	int			i;

	if (Region == NULL)
		return;
	reclaim_slots();
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
		if (i >= bpext_tier_readers)
		{
			if (helper_pid[i] != 0)
			{
				(void) pg_atomic_fetch_add_u32(&Region->generation[i], 1);
				helper_pid[i] = 0;
				retired = true;
			}
			continue;
		}
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
	if (retired)
		wake_helpers();
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

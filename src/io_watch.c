/*-------------------------------------------------------------------------
 *
 * io_watch.c
 *	  Noticing tier I/O that does not return (a hung SSD, a stuck
 *	  controller) and switching the tier off, so that new shared-buffer
 *	  misses go to the data files instead of queueing behind it.
 *
 * A process blocked in pread() on a hung device cannot notice anything
 * itself; another process has to.  So every process stamps the start of
 * each tier read or write in a slot of its own, indexed by its proc number
 * as the counters in stats.c are, and clears the stamp when the call
 * returns.  Before a process starts tier I/O, and on every round of the
 * bpext worker, it looks at everyone's stamps (at most every
 * WATCH_INTERVAL_US, or a quarter of the timeout if that is shorter): a
 * stamp older than bpext.io_timeout means an I/O has been under way that
 * long, and the tier goes to ERROR with one WARNING (bpext_tier_fail).
 * The stuck process stays stuck until the device answers, since nothing in
 * user space can take back a read the kernel is waiting on; what the watch
 * buys is that nobody else joins it.  Both kinds of watcher are needed: the
 * worker notices a hung read while every backend is busy elsewhere, and
 * backends notice when the worker itself is stuck in a push.
 *
 * A stamp names the file incarnation it was taken under, so an I/O still
 * stuck on a file the tier has since left (after the ERROR, the tier may
 * be enabled again on another device) does not switch the new one off.
 *
 * Protocol: a slot is written only by its owner, its start time last (a
 * single 64-bit atomic store, after a write barrier); others only read
 * it, without a lock.  A stale view delays detection by one interval at
 * most.  A stamp cannot be left behind by a process that exits: nothing
 * between bpext_io_watch_begin and bpext_io_watch_end can raise an error,
 * and a process killed in between takes the postmaster through a crash
 * restart, which creates shared memory anew.  Nothing here allocates or
 * raises an error: it runs inside smgr calls.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <time.h>

#include "access/twophase.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/proc.h"
#include "storage/shmem.h"

#include "compat.h"
#include "io_watch.h"
#include "settings.h"
#include "tier_control.h"

/* Look at the other processes' stamps at most this often. */
#define WATCH_INTERVAL_US	(100 * 1000)

typedef struct IoStamp
{
	pg_atomic_uint64 started_us;	/* CLOCK_MONOTONIC start of the tier
									 * I/O under way, or 0 */
	uint32		incarnation;	/* file_incarnation it was started under */
	int			pid;
	bool		writing;
} IoStamp;

typedef union PaddedIoStamp
{
	IoStamp		stamp;
	char		pad[TYPEALIGN(PG_CACHE_LINE_SIZE, sizeof(IoStamp))];
} PaddedIoStamp;

static PaddedIoStamp *Stamps = NULL;
static IoStamp *MyStamp = NULL;
static bool attached = false;
static uint64 last_look_us = 0;

static int
watch_nprocs(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

Size
bpext_io_watch_shmem_size(void)
{
	return mul_size(watch_nprocs(), sizeof(PaddedIoStamp));
}

void
bpext_io_watch_shmem_init(bool found)
{
	Stamps = ShmemInitStruct("bpext tier I/O watch",
							 bpext_io_watch_shmem_size(), &found);
	if (!found)
	{
		int			i;

		for (i = 0; i < watch_nprocs(); i++)
		{
			memset(&Stamps[i], 0, sizeof(PaddedIoStamp));
			pg_atomic_init_u64(&Stamps[i].stamp.started_us, 0);
		}
	}
}

/*
 * Microseconds on a clock that every process shares and that never goes
 * back (unlike the wall clock, which an NTP step could move past the
 * timeout).  The tier read path reads it once before its I/O, for the
 * check, the stamp and its own timing, and once after.
 */
uint64
bpext_io_watch_clock(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Find this process's stamp; a process without a PGPROC has none. */
static void
attach(void)
{
	attached = true;
	if (Stamps == NULL || MyProc == NULL ||
		BPEXT_MY_PROC_NUMBER() >= watch_nprocs())
		return;
	MyStamp = &Stamps[BPEXT_MY_PROC_NUMBER()].stamp;
	pg_atomic_write_u64(&MyStamp->started_us, 0);
}

/*
 * May this process start tier I/O?  False if a tier I/O somewhere has
 * been under way for longer than bpext.io_timeout, in which case the tier
 * has just been switched off (or already was).  Cheap when called often:
 * it looks at the stamps at most once per interval.
 */
bool
bpext_io_watch_check(void)
{
	if (bpext_io_timeout_ms <= 0 || Stamps == NULL)
		return true;
	return bpext_io_watch_check_at(bpext_io_watch_clock());
}

/* bpext_io_watch_check, at time now (bpext_io_watch_clock). */
bool
bpext_io_watch_check_at(uint64 now)
{
	uint64		timeout_us;
	uint32		incarnation;
	int			i;

	if (bpext_io_timeout_ms <= 0 || Stamps == NULL)
		return true;
	timeout_us = (uint64) bpext_io_timeout_ms * 1000;
	if (last_look_us != 0 &&
		now - last_look_us < Min(WATCH_INTERVAL_US, timeout_us / 4))
		return true;
	last_look_us = now;

	incarnation = pg_atomic_read_u32(&BpextCtl->file_incarnation);
	for (i = 0; i < watch_nprocs(); i++)
	{
		IoStamp    *s = &Stamps[i].stamp;
		uint64		started = pg_atomic_read_u64(&s->started_us);
		char		what[200];

		if (started == 0 || now <= started || now - started <= timeout_us)
			continue;
		pg_read_barrier();
		if (s->incarnation != incarnation)
			continue;
		snprintf(what, sizeof(what),
				 "a tier %s in process %d has not returned after %llu ms (bpext.io_timeout is %d ms)",
				 s->writing ? "write" : "read", s->pid,
				 (unsigned long long) ((now - started) / 1000),
				 bpext_io_timeout_ms);
		bpext_tier_fail(what, 0);
		return false;
	}
	return true;
}

/* This process is about to read from or write to the tier file. */
void
bpext_io_watch_begin(bool writing)
{
	if (!attached)
		attach();
	if (MyStamp == NULL || bpext_io_timeout_ms <= 0)
		return;
	bpext_io_watch_begin_at(writing, bpext_io_watch_clock());
}

/* bpext_io_watch_begin, with the I/O's start time (bpext_io_watch_clock). */
void
bpext_io_watch_begin_at(bool writing, uint64 now)
{
	if (!attached)
		attach();
	if (MyStamp == NULL || bpext_io_timeout_ms <= 0)
		return;
	MyStamp->incarnation = pg_atomic_read_u32(&BpextCtl->file_incarnation);
	MyStamp->pid = MyProcPid;
	MyStamp->writing = writing;
	pg_write_barrier();
	pg_atomic_write_u64(&MyStamp->started_us, Max(now, 1));
}

/* The tier I/O begun last has returned. */
void
bpext_io_watch_end(void)
{
	if (MyStamp != NULL)
		pg_atomic_write_u64(&MyStamp->started_us, 0);
}

/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The bpext background worker: applies bpext.path and bpext.size,
 *	  watches the tier file and the age of tier I/O under way, stores the
 *	  pages that data-file writes and reads queued (store_queue.c), and
 *	  pushes clean pages into the tier ahead of the clock sweep.
 *
 * One static worker, started once the server is consistent (a hot standby
 * uses its tier while it replays WAL, see db_hooks.c).  Between push rounds
 * it sleeps on its latch for bpext.push_interval while the clock hand
 * stands still, and less, down to not at all, the faster the hand moves
 * (evict_push.c); once the hand has stood still for a second it rests
 * (Resting, below).  A configuration reload (SIGHUP) makes it re-apply
 * the tier settings; bpext_enable() and friends wait for it to have done
 * so.
 *
 * The worker makes no system call on the tier file that could sleep on
 * its device: every one goes through a helper process that it stops
 * waiting for after bpext.io_timeout (tier_writer.c, helper_io.c), so that
 * a hung device cannot keep the worker, and with it the server's
 * shutdown, stuck; it answers SIGTERM within bpext.io_timeout whatever its
 * helpers are doing (at once with no timeout).  It also keeps the reader
 * helpers that backends hand their tier reads to running for the file it
 * serves (tier_readers.c), and brings a tier that failed back once its
 * file answers again (bpext.recovery_interval, tier_control.c).
 *
 * If the worker dies, the postmaster restarts it after a second; the new
 * incarnation finds the tier in whatever state the old one left, throws
 * the map away and starts from the configuration again.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/bufmgr.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "adaptive_admission.h"
#include "evict_push.h"
#include "io_watch.h"
#include "settings.h"
#include "sizing.h"
#include "stats.h"
#include "store_queue.h"
#include "tier_control.h"
#include "tier_file.h"
#include "tier_map.h"
#include "tier_readers.h"
#include "tier_scans.h"
#include "tier_writer.h"
#include "wait_events.h"
#include "warm_restart.h"
#include "worker.h"
#include "worker_children.h"

/* How often the worker checks that the tier file is still there. */
#define FILE_CHECK_INTERVAL_MS	1000

/*
 * Resting.  While the clock hand stands still nothing leaves shared
 * buffers: there is nothing to push (and the sizing advisor's pass stops
 * by itself once it has nothing to redo, sizing.c).  Once the hand has
 * stood still for HAND_STILL_MS, with no page queued for the tier, no
 * saved map loading and no slot directory chunks left for the next round,
 * the worker sleeps up to REST_MS with worker_resting set, and the next
 * read or extension of a relation wakes it (bpext_wake_resting_worker: a
 * shared-buffer miss, which is what moves the hand; a temporary
 * relation's wakes it for nothing); so does anything that sets its latch
 * as before (a page queued for the tier, a sweep asked for, a reload,
 * SIGTERM).  An idle server then wakes it once a second instead of once
 * per bpext.push_interval.  A miss that wakes it keeps it on its usual
 * rounds for HAND_STILL_MS again, so that misses that do not move the
 * hand (shared buffers still filling from the free list) cannot wake it
 * more often than its rounds did.  What moves the hand without a read
 * (a page zeroed without reading it, a full-page image replayed on a
 * standby) does not wake it: the first rest's worth of those evictions
 * may go unpushed.
 *
 * The worker's own watch of tier I/O under way (io_watch.c) looks every
 * 100 ms at most, or a quarter of bpext.io_timeout; while resting it looks
 * once a rest, which a quarter of bpext.io_timeout bounds too, at most a
 * second: a hung tier read that no other process notices fails the tier
 * up to that much later.  Any miss wakes the worker, and every process
 * that starts tier I/O watches the others' first.
 */
#define HAND_STILL_MS			1000
#define REST_MS					FILE_CHECK_INTERVAL_MS

static uint64 still_hand = 0;	/* the hand's position when last seen */
static TimestampTz hand_still_since = 0;	/* since when it stood there */

/* Is this process the tier worker? */
static bool am_tier_worker = false;

bool
bpext_is_tier_worker(void)
{
	return am_tier_worker;
}

/*
 * What every bpext background worker has in common: shared memory, a
 * pg_stat_activity entry (a connection to no database), a start once the
 * server is consistent and a restart a second after it exits.
 */
void
bpext_worker_entry(BackgroundWorker *worker, const char *function,
				   const char *type)
{
	memset(worker, 0, sizeof(*worker));
	worker->bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker->bgw_start_time = BgWorkerStart_ConsistentState;
	worker->bgw_restart_time = 1;
	strlcpy(worker->bgw_library_name, "bpext", BGW_MAXLEN);
	strlcpy(worker->bgw_function_name, function, BGW_MAXLEN);
	strlcpy(worker->bgw_name, type, BGW_MAXLEN);
	strlcpy(worker->bgw_type, type, BGW_MAXLEN);
}

void
bpext_register_worker(void)
{
	BackgroundWorker worker;

	bpext_worker_entry(&worker, "bpext_worker_main", "bpext tier worker");
	RegisterBackgroundWorker(&worker);
}

/*
 * On the way out, whatever the reason: let go of locks, buffer pins and
 * admission tickets.  A background worker that exits with an error is not
 * a crash, shared memory stays, and a leaked pin would block DROP TABLE on
 * that buffer forever.
 */
static void
worker_detach(int code, Datum arg)
{
	/* As AbortTransaction does: I/O and content locks before pins. */
	LWLockReleaseAll();
	bpext_abort_buffer_io();
	UnlockBuffers();
	bpext_push_abandon();
	store_queue_abandon();
	tier_writer_stop();
	tier_readers_stop();
	if (CurrentResourceOwner != NULL)
		ResourceOwnerRelease(CurrentResourceOwner,
							 RESOURCE_RELEASE_BEFORE_LOCKS, false, true);

	LWLockAcquire(BpextCtl->control_lock, LW_EXCLUSIVE);
	BpextCtl->worker_latch = NULL;
	BpextCtl->worker_pid = 0;
	BpextCtl->worker_tier_fd = -1;
	LWLockRelease(BpextCtl->control_lock);
}

/*
 * A previous worker may have died with the tier enabled: its file
 * descriptor and lock are gone, so start from nothing.
 */
static void
forget_previous_worker(void)
{
	if (pg_atomic_read_u32(&BpextCtl->state) == BPEXT_STATE_DISABLED)
		return;
	bpext_warm_abandon("the bpext worker restarted during the load of the saved map",
					   false);
	pg_atomic_write_u32(&BpextCtl->state, BPEXT_STATE_DISABLING);
	tier_map_clear();
	tier_map_set_active_slots(0);
	pg_atomic_fetch_add_u32(&BpextCtl->file_incarnation, 1);
	LWLockAcquire(BpextCtl->control_lock, LW_EXCLUSIVE);
	BpextCtl->path[0] = '\0';
	BpextCtl->size_bytes = 0;
	LWLockRelease(BpextCtl->control_lock);
	pg_atomic_write_u32(&BpextCtl->state, BPEXT_STATE_DISABLED);
}

/*
 * With bpext.log_events on, one LOG line per interval in which the tier did
 * anything: SQL Server's pages_written / pages_read / pages_evicted
 * extended events, aggregated.
 */
static void
log_events(TimestampTz since, TimestampTz now)
{
	static BpextCounters last;
	static bool have_last = false;
	BpextCounters c;
	TimestampTz reset_at;

	bpext_stats_sum(&c, &reset_at);
	if (have_last && c.page_writes >= last.page_writes &&
		c.page_reads >= last.page_reads &&
		c.page_evictions >= last.page_evictions &&
		(c.page_writes != last.page_writes || c.page_reads != last.page_reads ||
		 c.page_evictions != last.page_evictions))
		ereport(LOG,
				(errmsg("bpext events in the last %.1f s: pages_written %llu, pages_read %llu, pages_evicted %llu",
						(double) (now - since) / USECS_PER_SEC,
						(unsigned long long) (c.page_writes - last.page_writes),
						(unsigned long long) (c.page_reads - last.page_reads),
						(unsigned long long) (c.page_evictions - last.page_evictions))));
	last = c;
	have_last = true;
}

/*
 * bpext.tier_readers helpers read from the file of the enabled tier
 * (tier_readers.c); none while the tier is in any other state.
 */
static void
maintain_readers(void)
{
	uint32		incarnation = 0;
	int			fd = -1;

	if (pg_atomic_read_u32(&BpextCtl->state) == BPEXT_STATE_ENABLED)
		fd = bpext_tier_worker_fd(&incarnation);
	tier_readers_maintain(fd, incarnation);
}

/*
 * How long the worker may rest, or 0 if it may not: the hand has moved
 * within HAND_STILL_MS (see Resting above).
 */
static long
rest_time(TimestampTz now)
{
	uint64		hand = bpext_clock_hand_position();
	long		rest = REST_MS;

	if (hand != still_hand || hand_still_since == 0)
	{
		still_hand = hand;
		hand_still_since = now;
		return 0;
	}
	if (!TimestampDifferenceExceeds(hand_still_since, now, HAND_STILL_MS))
		return 0;
	if (bpext_io_timeout_ms > 0)
		rest = Min(rest, Max(bpext_io_timeout_ms / 4, 1));
	return rest;
}

void
bpext_worker_main(Datum main_arg)
{
	TimestampTz last_check = 0;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	/* No database, but a pg_stat_activity entry like other workers. */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	CurrentResourceOwner = ResourceOwnerCreate(NULL, "bpext tier worker");

	LWLockAcquire(BpextCtl->control_lock, LW_EXCLUSIVE);
	BpextCtl->worker_latch = MyLatch;
	BpextCtl->worker_pid = MyProcPid;
	LWLockRelease(BpextCtl->control_lock);
	before_shmem_exit(worker_detach, 0);

	/*
	 * Every tier-file call of this process goes through a helper process,
	 * which checks headers after it has left shared memory: the system
	 * identifier they carry is copied now.
	 */
	am_tier_worker = true;
	tier_writer_enable();
	tier_file_cache_identity();

	bpext_warm_log_decision();
	store_queue_recover();
	forget_previous_worker();
	bpext_apply_configuration();

	for (;;)
	{
		TimestampTz now;
		long		naptime;
		long		rest;
		bool		loading;
		bool		more_queued;
		bool		more_directory;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			bpext_apply_configuration();
		}

		/*
		 * A tier I/O that has not returned, in any process, even while no
		 * backend is about to start one (io_watch.c).
		 */
		if (bpext_tier_enabled())
			(void) bpext_io_watch_check();

		now = GetCurrentTimestamp();
		if (pg_atomic_read_u32(&BpextCtl->state) == BPEXT_STATE_ERROR ||
			TimestampDifferenceExceeds(last_check, now, FILE_CHECK_INTERVAL_MS))
		{
			bpext_tier_check_file();
			bpext_tier_recover();
			if (tier_map_dead_slots_possible())
				bpext_tier_sweep_dead(InvalidOid, NULL);
			if (bpext_log_events)
				log_events(last_check, now);
			last_check = now;
		}

		/*
		 * The helpers that have exited reaped, and reader helpers for the
		 * file the tier serves, if it does.
		 */
		worker_children_reap();
		maintain_readers();

		/* Sweeps DROP DATABASE and friends asked for, without delay. */
		if (BpextCtl->nsweeps > 0)
			bpext_run_requested_sweeps();

		/* Pages data-file writes and reads queued for the tier. */
		more_queued = store_queue_drain();

		/* A warm start's saved map, a piece per round, without sleeping. */
		loading = bpext_tier_warm_load_step();

		/* The map's changes, onto the SSD (slot_directory.c). */
		more_directory = bpext_tier_flush_directory();

		/* Pause or resume admission (adaptive_admission.c). */
		bpext_adaptive_admission_step();

		naptime = bpext_push_round();

		/*
		 * The file's check, and the way back from ERROR, once a second
		 * whatever bpext.push_interval says: sessions open the file
		 * through the worker's descriptor, so only this check notices a
		 * file replaced behind the tier's back.
		 */
		if (pg_atomic_read_u32(&BpextCtl->state) != BPEXT_STATE_DISABLED)
			naptime = Min(naptime, FILE_CHECK_INTERVAL_MS);

		/* Shared buffers' pages, seen for the sizing advisor (sizing.c). */
		bpext_sizing_sweep_shared_buffers();

		rest = loading || more_queued || more_directory ? 0 : rest_time(now);
		if (rest > 0)
		{
			/*
			 * The flag first, then the hand again: a miss that moved the
			 * hand after rest_time looked either finds the flag set and
			 * wakes us, or is seen here.
			 */
			pg_atomic_write_u32(&BpextCtl->worker_resting, 1);
			pg_memory_barrier();
			if (bpext_clock_hand_position() != still_hand)
			{
				pg_atomic_write_u32(&BpextCtl->worker_resting, 0);
				rest = 0;
			}
			else
				naptime = Max(naptime, rest);
		}
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 loading || more_queued ? 0 : naptime,
						 BPEXT_WAIT_EVENT(BPEXT_WAIT_WORKER_MAIN));
		ResetLatch(MyLatch);

		/* A miss cleared the flag: back to the usual rounds for a while. */
		if (rest > 0 &&
			pg_atomic_exchange_u32(&BpextCtl->worker_resting, 0) == 0)
			hand_still_since = GetCurrentTimestamp();
	}
}

/*-------------------------------------------------------------------------
 *
 * tier_control.c
 *	  The tier's state machine: enabling, disabling, resizing, and the
 *	  error state that any failure drops it into.
 *
 * bpext.path and bpext.size are reloadable settings; the bpext worker is
 * the one process that acts on them, after every configuration reload
 * (bpext_apply_configuration).  It alone opens, creates, resizes, checks
 * and closes the tier file, and it alone moves the state between
 * DISABLED, ENABLING, ENABLED and DISABLING.  Any process may move
 * ENABLED to ERROR (bpext_tier_fail) when a tier I/O fails or a checksum
 * does not match; the compare-and-swap that does it also decides who logs
 * the one WARNING.  The worker then empties the map and closes the file;
 * the next reload (or bpext_enable()) tries again.
 *
 * Locking: state transitions are atomic writes by the worker, or the
 * ENABLED->ERROR compare-and-swap; the descriptive fields (path, size,
 * last error) are written under control_lock.  Processes that use the
 * tier check the state without a lock and re-check it under the map's
 * partition locks where it matters (tier_map.c).
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>

#include <unistd.h>

#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/timestamp.h"

#include "free_space.h"
#include "progress.h"
#include "settings.h"
#include "slot_directory.h"
#include "tier_control.h"
#include "tier_file.h"
#include "tier_map.h"
#include "tier_scans.h"
#include "tier_writer.h"
#include "warm_restart.h"

/* The control block in shared memory (tier_control.h), set up by bpext.c. */
BpextControl *BpextCtl = NULL;

/* The worker's hold on the file while the tier is enabled. */
static int	worker_fd = -1;
static uint32 worker_nslots = 0;

const char *
bpext_state_description(BpextState state)
{
	switch (state)
	{
		case BPEXT_STATE_DISABLED:
			return "BUFFER POOL EXTENSION DISABLED";
		case BPEXT_STATE_DISABLING:
			return "BUFFER POOL EXTENSION DISABLING";
		case BPEXT_STATE_ENABLING:
			return "BUFFER POOL EXTENSION ENABLING";
		case BPEXT_STATE_ENABLED:
			return "BUFFER POOL EXTENSION ENABLED";
		case BPEXT_STATE_ERROR:
			return "BUFFER POOL EXTENSION ERROR";
	}
	return "UNKNOWN";
}

void
bpext_wake_worker(void)
{
	Latch	   *latch = BpextCtl->worker_latch;

	if (latch != NULL)
		SetLatch(latch);
}

static void
record_error(const char *message)
{
	LWLockAcquire(BpextCtl->control_lock, LW_EXCLUSIVE);
	strlcpy(BpextCtl->last_error, message, sizeof(BpextCtl->last_error));
	BpextCtl->last_error_time = GetCurrentTimestamp();
	LWLockRelease(BpextCtl->control_lock);
}

/*
 * A tier operation failed in this process.  Switch the tier off (ERROR)
 * unless someone already did, and if we are the one who did, log it once.
 * Never raises an error: this runs inside smgr calls.
 */
void
bpext_tier_fail(const char *what, int save_errno)
{
	uint32		expected = BPEXT_STATE_ENABLED;
	char		message[256];

	if (save_errno != 0)
		snprintf(message, sizeof(message), "%s: %s", what, strerror(save_errno));
	else
		strlcpy(message, what, sizeof(message));

	if (!pg_atomic_compare_exchange_u32(&BpextCtl->state, &expected,
										BPEXT_STATE_ERROR))
		return;

	record_error(message);

	/*
	 * We may be inside an smgr call: a WARNING must not turn into a query
	 * cancel or termination thrown from there.
	 */
	HOLD_INTERRUPTS();
	ereport(WARNING,
			(errcode(ERRCODE_IO_ERROR),
			 errmsg("bpext tier disabled after an error: %s", message),
			 errdetail("Pages are served from the data files until the tier is enabled again."),
			 errhint("Fix the cause, then run SELECT bpext_enable() or reload the configuration.")));
	RESUME_INTERRUPTS();
	bpext_wake_worker();
}

/* Let go of the file and everything in the map. */
static void
release_tier(void)
{
	bpext_warm_abandon("the tier was switched off during the load of the saved map",
					   false);
	tier_map_clear();
	tier_map_set_active_slots(0);
	if (worker_fd >= 0)
		close(worker_fd);			/* also drops the flock */
	worker_fd = -1;
	worker_nslots = 0;
	pg_atomic_fetch_add_u32(&BpextCtl->file_incarnation, 1);
	slot_directory_forget();
	tier_file_close_local();
	tier_writer_stop();			/* its descriptor of the file, too */
}

/*
 * Turn the tier off (from ENABLED or ERROR).  Like SQL Server, turning the
 * extension off deletes its file: the file bpext created or validated, if
 * it is still the one at that path, never a file put in its place.
 */
static void
disable_tier(void)
{
	char		path[MAXPGPATH];
	uint64		dev;
	uint64		ino;

	pg_atomic_write_u32(&BpextCtl->state, BPEXT_STATE_DISABLING);
	release_tier();

	LWLockAcquire(BpextCtl->control_lock, LW_EXCLUSIVE);
	strlcpy(path, BpextCtl->path, sizeof(path));
	dev = BpextCtl->file_dev;
	ino = BpextCtl->file_ino;
	BpextCtl->path[0] = '\0';
	BpextCtl->size_bytes = 0;
	BpextCtl->file_dev = BpextCtl->file_ino = 0;
	LWLockRelease(BpextCtl->control_lock);

	if (path[0] != '\0' && tier_file_is(path, dev, ino) &&
		unlink(path) != 0 && errno != ENOENT)
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not remove tier file \"%s\": %m", path)));
	pg_atomic_write_u32(&BpextCtl->state, BPEXT_STATE_DISABLED);
}

/* The slot count bpext.size asks for, within what shared memory allows. */
static uint32
wanted_slots(void)
{
	uint64		bytes = (uint64) bpext_size_mb * 1024 * 1024;
	uint64		nslots = bytes / BLCKSZ;

	/* The header takes one slot's worth of the configured size. */
	nslots = nslots > 0 ? nslots - 1 : 0;
	if (nslots > BpextCtl->max_slots)
	{
		ereport(WARNING,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("bpext.size (%d MB) exceeds bpext.max_size; the tier is limited to %d MB",
						bpext_size_mb, bpext_reserved_size_mb()),
				 errhint("Lower bpext.size, or raise bpext.max_size and restart the server.")));
		nslots = BpextCtl->max_slots;
	}
	return (uint32) nslots;
}

/*
 * Make fd, holding nslots slots, the tier's file: publish its identity,
 * and start a new file incarnation and map epoch, so that a store that took
 * its ticket before now, and whose write may still be under way through a
 * descriptor of the previous file, can no longer publish (tier_map_publish
 * checks both).
 */
/*
 * The slot directory's pace (bpext_tier_flush_directory): a round a second
 * of at most this many chunks (64 MB), so that one round never holds the
 * worker for long; with more waiting, the next round follows at once.
 */
#define DIRECTORY_FLUSH_INTERVAL_MS	1000
#define DIRECTORY_FLUSH_MAX_CHUNKS	8192

static void
take_file(int fd, const char *path, uint32 nslots, uint64 dev, uint64 ino,
		  uint64 directory_id)
{
	worker_fd = fd;
	worker_nslots = nslots;
	LWLockAcquire(BpextCtl->control_lock, LW_EXCLUSIVE);
	strlcpy(BpextCtl->path, path, sizeof(BpextCtl->path));
	BpextCtl->size_bytes = TIER_FILE_SIZE(nslots);
	BpextCtl->file_dev = dev;
	BpextCtl->file_ino = ino;
	LWLockRelease(BpextCtl->control_lock);

	pg_atomic_fetch_add_u32(&BpextCtl->file_incarnation, 1);
	tier_map_begin_drop();
	slot_directory_lay_out(nslots, directory_id);
}

/*
 * A warm start (warm_restart.c): take the tier file over as the postmaster
 * checked it, with the saved map still after its last slot, and start
 * loading that map.  False if the file is no longer what the postmaster
 * checked; the saved map is then given up and the tier starts cold.
 */
static bool
enable_tier_warm(const char *path, uint32 nslots)
{
	char		err[512];
	uint32		saved_nslots;
	uint64		dev;
	uint64		ino;
	int			fd;

	fd = bpext_warm_open(&saved_nslots, err, sizeof(err));
	if (fd < 0 || !tier_file_identity(fd, &dev, &ino))
	{
		if (fd >= 0)
		{
			snprintf(err, sizeof(err), "could not stat \"%s\": %m", path);
			close(fd);
		}
		bpext_warm_abandon(err, false);
		return false;
	}
	take_file(fd, path, saved_nslots, dev, ino, bpext_warm_directory_id());

	/*
	 * Slots stay closed to new pages until every saved one is loaded: a
	 * process that sees the tier enabled must see warm_loading set.
	 */
	pg_atomic_write_u32(&BpextCtl->warm_loading, 1);
	pg_write_barrier();
	tier_map_set_active_slots(Min(saved_nslots, nslots));
	pg_write_barrier();
	pg_atomic_write_u32(&BpextCtl->state, BPEXT_STATE_ENABLED);
	ereport(LOG,
			(errmsg("bpext tier enabled: \"%s\", %llu MB, loading the saved map",
					path, (unsigned long long) (TIER_FILE_SIZE(saved_nslots) >> 20))));
	bpext_warm_begin_load(fd);
	return true;
}

static void
enable_tier(const char *path, uint32 nslots)
{
	BpextSpaceCheck space;
	char		err[512];
	int			fd;
	uint64		dev;
	uint64		ino;
	uint64		taken_from;

	pg_atomic_write_u32(&BpextCtl->state, BPEXT_STATE_ENABLING);
	if (bpext_warm_load_pending(path) && enable_tier_warm(path, nslots))
		return;

	/* The backend that asked checked too, but free space moves. */
	if (!bpext_space_allows(path, -1, TIER_FILE_BYTES(nslots), &space))
	{
		bpext_space_reason(&space, err, sizeof(err));
		record_error(err);
		ereport(WARNING,
				(errcode(ERRCODE_DISK_FULL),
				 errmsg("bpext could not enable the tier: %s", err),
				 bpext_space_errdetail(&space),
				 bpext_space_errhint()));
		pg_atomic_write_u32(&BpextCtl->state, BPEXT_STATE_ERROR);
		return;
	}
	fd = tier_file_open(path, nslots, &taken_from, err, sizeof(err));
	if (fd < 0)
	{
		record_error(err);
		ereport(WARNING,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("bpext could not enable the tier: %s", err),
				 errdetail("Pages are served from the data files."),
				 errhint("Check bpext.path and bpext.size, then reload the configuration.")));
		pg_atomic_write_u32(&BpextCtl->state, BPEXT_STATE_ERROR);
		return;
	}

	if (!tier_file_identity(fd, &dev, &ino))
	{
		snprintf(err, sizeof(err), "could not stat \"%s\": %m", path);
		close(fd);
		record_error(err);
		pg_atomic_write_u32(&BpextCtl->state, BPEXT_STATE_ERROR);
		return;
	}
	if (taken_from != 0)
		ereport(LOG,
				(errmsg("bpext: took over \"%s\", the tier file of another cluster (system identifier " UINT64_FORMAT "), and started it empty",
						path, taken_from),
				 errdetail("No server held its lock; it was left by the cluster this one was upgraded or copied from, or by another cluster given the same bpext.path.")));

	/* A new file, then a new epoch; only then may the map take pages. */
	take_file(fd, path, nslots, dev, ino, 0);
	bpext_warm_note_cold_enable();
	tier_map_set_active_slots(nslots);
	pg_atomic_write_u32(&BpextCtl->state, BPEXT_STATE_ENABLED);
	ereport(LOG,
			(errmsg("bpext tier enabled: \"%s\", %llu MB",
					path, (unsigned long long) (TIER_FILE_SIZE(nslots) >> 20))));
}

static void
resize_tier(uint32 nslots)
{
	BpextSpaceCheck space;
	char		path_in_use[MAXPGPATH];
	char		err[512];
	bool		resized;

	LWLockAcquire(BpextCtl->control_lock, LW_SHARED);
	strlcpy(path_in_use, BpextCtl->path, sizeof(path_in_use));
	LWLockRelease(BpextCtl->control_lock);

	/* Growth only, right before it happens: the old size still stands. */
	if (nslots > worker_nslots &&
		!bpext_space_allows(path_in_use, worker_fd, TIER_FILE_BYTES(nslots),
							&space))
	{
		bpext_space_reason(&space, err, sizeof(err));
		ereport(WARNING,
				(errcode(ERRCODE_DISK_FULL),
				 errmsg("bpext could not resize the tier: %s", err),
				 bpext_space_errdetail(&space),
				 bpext_space_errhint()));
		record_error(err);
		return;
	}

	/* Pages: those emptied by a shrink, or those allocated by a growth. */
	bpext_progress_begin(BPEXT_PROGRESS_RESIZE, nslots < worker_nslots ?
						 worker_nslots - nslots : nslots - worker_nslots);
	bpext_progress_set_target(InvalidOid, InvalidOid,
							  nslots < worker_nslots ? "shrink" : "grow");
	PG_TRY();
	{
		if (nslots < worker_nslots)
			bpext_tier_shrink(worker_nslots, nslots);
		resized = tier_file_resize(worker_fd, worker_nslots, nslots, err,
								   sizeof(err));
	}
	PG_FINALLY();
	{
		bpext_progress_end();
	}
	PG_END_TRY();
	if (!resized)
	{
		/* The old size still stands: growth failed before anything used it. */
		if (nslots < worker_nslots)
			worker_nslots = nslots;
		ereport(WARNING,
				(errcode(ERRCODE_DISK_FULL),
				 errmsg("bpext could not resize the tier: %s", err)));
		record_error(err);
		return;
	}
	worker_nslots = nslots;

	/*
	 * The directory moved with the file's end: lay it out anew there, and
	 * write all of it again from the map, in the background.
	 */
	slot_directory_lay_out(nslots, 0);
	slot_directory_mark_all_dirty(0);
	tier_map_set_active_slots(nslots);
	LWLockAcquire(BpextCtl->control_lock, LW_EXCLUSIVE);
	BpextCtl->size_bytes = TIER_FILE_SIZE(nslots);
	LWLockRelease(BpextCtl->control_lock);
	ereport(LOG,
			(errmsg("bpext tier resized to %llu MB",
					(unsigned long long) (TIER_FILE_SIZE(nslots) >> 20))));
}

/*
 * A warm start's load is over (or given up): cut the saved relation table
 * off the end of the file and open the slots to new pages, listing those
 * it left free (bpext_warm_abandon does that if it ended the load).
 */
static void
end_warm_load(void)
{
	bool		was_loading = pg_atomic_read_u32(&BpextCtl->warm_loading) != 0;

	if (worker_fd >= 0 &&
		pg_atomic_read_u32(&BpextCtl->state) == BPEXT_STATE_ENABLED &&
		ftruncate(worker_fd, TIER_FILE_BYTES(worker_nslots)) != 0)
		bpext_tier_fail("could not remove the saved map from the tier file",
						errno);
	pg_atomic_write_u32(&BpextCtl->warm_loading, 0);
	if (was_loading)
		tier_map_list_free_slots();
}

/* Tell the functions waiting in reload_and_wait what was applied. */
static void
note_applied(const char *path)
{
	LWLockAcquire(BpextCtl->control_lock, LW_EXCLUSIVE);
	BpextCtl->config_applied_at = GetCurrentTimestamp();
	BpextCtl->applied_size_mb = bpext_size_mb;
	strlcpy(BpextCtl->applied_path, path, sizeof(BpextCtl->applied_path));
	LWLockRelease(BpextCtl->control_lock);
}

/*
 * Bring the tier in line with bpext.path and bpext.size.  Runs in the
 * worker after every configuration reload, and at its start.
 */
void
bpext_apply_configuration(void)
{
	BpextState	state = pg_atomic_read_u32(&BpextCtl->state);
	const char *path = bpext_path ? bpext_path : "";
	uint32		nslots;
	bool		path_changed;

	nslots = wanted_slots();
	LWLockAcquire(BpextCtl->control_lock, LW_SHARED);
	path_changed = strcmp(BpextCtl->path, path) != 0;
	LWLockRelease(BpextCtl->control_lock);

	/*
	 * A warm start's load keeps the tier as the postmaster found it.  A
	 * reload that changes nothing lets it go on; a new size, a new file or
	 * switching the tier off ends it first (what was loaded stays), so
	 * that bpext_resize, bpext_enable and bpext_disable never wait for a
	 * large map to load.
	 */
	if (pg_atomic_read_u32(&BpextCtl->warm_loading) != 0)
	{
		bool		unchanged;

		LWLockAcquire(BpextCtl->control_lock, LW_SHARED);
		unchanged = BpextCtl->applied_size_mb == bpext_size_mb &&
			strcmp(BpextCtl->applied_path, path) == 0;
		LWLockRelease(BpextCtl->control_lock);
		if (unchanged)
		{
			note_applied(path);
			return;
		}
		/* What was loaded stays unless the new configuration empties it. */
		bpext_warm_abandon("the tier's configuration changed during the load of the saved map",
						   true);
		end_warm_load();
		state = pg_atomic_read_u32(&BpextCtl->state);
	}

	if (state == BPEXT_STATE_ERROR && worker_fd >= 0)
		release_tier();

	if (nslots == 0 || path[0] == '\0')
	{
		if (state == BPEXT_STATE_ENABLED || state == BPEXT_STATE_ERROR)
			disable_tier();
		if (nslots > 0 && path[0] == '\0')
			ereport(WARNING,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("bpext.size is set but bpext.path is empty; the tier stays disabled"),
					 errhint("Set bpext.path to a file on a fast local disk.")));
	}
	else if (state == BPEXT_STATE_ENABLED && !path_changed)
	{
		if (nslots != worker_nslots)
			resize_tier(nslots);
	}
	else
	{
		/* A new file: the old one (if any, and if ours) goes first. */
		if ((state == BPEXT_STATE_ENABLED || state == BPEXT_STATE_ERROR) &&
			path_changed)
			disable_tier();
		enable_tier(path, nslots);
	}

	note_applied(path);
}

/*
 * Periodic check, in the worker: react to an ERROR set by another process,
 * and notice a tier file that was removed, replaced or truncated.
 */
void
bpext_tier_check_file(void)
{
	char		err[512];
	char		path[MAXPGPATH];

	if (pg_atomic_read_u32(&BpextCtl->state) == BPEXT_STATE_ERROR)
	{
		if (worker_fd >= 0)
			release_tier();
		return;
	}
	if (worker_fd < 0 ||
		pg_atomic_read_u32(&BpextCtl->state) != BPEXT_STATE_ENABLED)
		return;

	LWLockAcquire(BpextCtl->control_lock, LW_SHARED);
	strlcpy(path, BpextCtl->path, sizeof(path));
	LWLockRelease(BpextCtl->control_lock);

	if (!tier_file_still_ours(worker_fd, path, worker_nslots, err, sizeof(err)))
	{
		bpext_tier_fail(err, 0);
		release_tier();
	}
}

/*
 * From the worker's loop: load the next part of a saved map.  Once it is
 * all in (or given up), end the load and bring the tier in line with the
 * configuration, which may have been reloaded meanwhile.  Returns whether
 * a load is still under way.
 */
bool
bpext_tier_warm_load_step(void)
{
	if (pg_atomic_read_u32(&BpextCtl->warm_loading) == 0)
		return false;
	if (worker_fd >= 0 && bpext_warm_load_step(worker_fd))
		return true;

	end_warm_load();
	bpext_apply_configuration();
	return false;
}

/*
 * From the worker's loop: write the slot directory's chunks that the map
 * changed, once a second (at once again while more wait), and start the kernel's
 * writeback of the tier file, so that what the save at exit has to write
 * and fsync stays small (slot_directory.c).  Not while a warm start's load
 * runs: the directory is still being read.
 */
void
bpext_tier_flush_directory(void)
{
	static TimestampTz last_flush = 0;
	TimestampTz now;
	uint32		nwritten;
	bool		more;

	if (worker_fd < 0 ||
		pg_atomic_read_u32(&BpextCtl->state) != BPEXT_STATE_ENABLED ||
		pg_atomic_read_u32(&BpextCtl->warm_loading) != 0)
		return;
	now = GetCurrentTimestamp();
	if (!TimestampDifferenceExceeds(last_flush, now, DIRECTORY_FLUSH_INTERVAL_MS))
		return;
	last_flush = now;

	/*
	 * The directory lies past the last slot, so writing it into a file
	 * that was truncated would give the file its size back, and the
	 * worker's check would not see the truncation (the pages in the hole
	 * would read as zeros, which their checksums catch, but only when they
	 * are read).  Check the file first.
	 */
	bpext_tier_check_file();
	if (worker_fd < 0 ||
		pg_atomic_read_u32(&BpextCtl->state) != BPEXT_STATE_ENABLED)
		return;
	if (!slot_directory_flush(worker_fd, DIRECTORY_FLUSH_MAX_CHUNKS,
							  &nwritten, &more))
	{
		bpext_tier_fail("could not write the slot directory", errno);
		return;
	}
	if (more)
		last_flush = 0;			/* the rest in the next round */
#ifdef HAVE_SYNC_FILE_RANGE
	if (nwritten > 0)
		(void) sync_file_range(worker_fd, 0, 0, SYNC_FILE_RANGE_WRITE);
#endif
}

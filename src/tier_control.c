/*-------------------------------------------------------------------------
 *
 * tier_control.c
 *	  The tier's state machine: enabling, disabling, resizing, the error
 *	  state that any failure drops it into, and the way back from it.
 *
 * bpext.path and bpext.size are reloadable settings; the bpext worker is
 * the one process that acts on them, after every configuration reload
 * (bpext_apply_configuration).  It alone has the tier file opened,
 * created, resized, checked and removed, and it alone moves the state
 * between DISABLED, ENABLING, ENABLED and DISABLING.  Any process may move
 * ENABLED to ERROR (bpext_tier_fail) when a tier I/O fails, does not
 * answer, or a checksum does not match; the compare-and-swap that does it
 * also decides who logs the one WARNING.  The worker then empties the map
 * and lets go of the file; the next reload (or bpext_enable()) tries
 * again, and so does the worker by itself every bpext.recovery_interval,
 * backing off while it fails (bpext_tier_recover).
 *
 * The worker never makes a system call on the tier file that could sleep
 * on its device: a device that hangs instead of failing would hold it
 * there, where no signal reaches it, and the server's shutdown with it.
 * Opening, creating, locking, preallocating and removing the file run in
 * a helper process it waits for at most bpext.io_timeout (helper_io.c);
 * everything it does to the file it holds goes through its writer helper
 * (tier_writer.c).  Its own hold on the file is a read-only descriptor that
 * carries the flock, handed over by the helper that opened it (SCM_RIGHTS):
 * closing a read-only description takes no lock of the file system's.  One
 * close can still wait on the device: the last close of a file that has
 * been unlinked, which frees it (a journal transaction, and a wait for its
 * pages under writeback).  So for each file it takes the worker forks a
 * keeper, a helper that holds a descriptor of the file of its own until no
 * other process holds one (a write lease, F_SETLEASE, can only be had
 * then), so that the last close is always the keeper's: never the
 * worker's, nor a backend's that still had the file open when it was
 * removed (keeper_main).  doc/hung-device.md lists every tier-file call
 * and what bounds it.
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
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "storage/latch.h"
#include "storage/pg_shmem.h"
#include "storage/proc.h"
#include "utils/timestamp.h"

#include "free_space.h"
#include "helper_io.h"
#include "progress.h"
#include "settings.h"
#include "slot_directory.h"
#include "stats.h"
#include "tier_control.h"
#include "tier_file.h"
#include "tier_map.h"
#include "tier_readers.h"
#include "tier_scans.h"
#include "tier_writer.h"
#include "warm_restart.h"
#include "worker_children.h"

/*
 * Probing a tier that failed: the first probe comes bpext.recovery_interval
 * after the failure, and the wait doubles after every probe that does not
 * bring it back, up to this.  A tier that fails again within this of
 * coming back goes on from the wait it had reached.
 */
#define RECOVERY_MAX_INTERVAL_MS	(5 * 60 * 1000)

/* The most tier files helpers the worker gave up on may still write to. */
#define MAX_BUSY_FILES				16

/* The control block in shared memory (tier_control.h), set up by bpext.c. */
BpextControl *BpextCtl = NULL;

/* The worker's hold on the file while the tier is enabled. */
static int	worker_fd = -1;
static uint32 worker_nslots = 0;

/* The way back from ERROR (bpext_tier_recover). */
static TimestampTz failed_at = 0;	/* 0: not in ERROR, as far as we know */
static TimestampTz next_probe_at = 0;
static TimestampTz recovered_at = 0;
static int	probe_wait_ms = 0;
static int	probes = 0;
static uint64 late_exits_seen = 0;
static char failure_reason[256];

/* How enable_tier was asked for. */
typedef enum EnableMode
{
	ENABLE_ASKED,				/* a reload, bpext_enable(), a start */
	ENABLE_PROBE				/* bpext_tier_recover */
} EnableMode;

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

/*
 * The error the views show; hung says it is a device that did not answer,
 * which bpext_enable()'s hint then names (sql_api.c).
 */
static void
record_error_as(const char *message, bool hung)
{
	LWLockAcquire(BpextCtl->control_lock, LW_EXCLUSIVE);
	strlcpy(BpextCtl->last_error, message, sizeof(BpextCtl->last_error));
	BpextCtl->last_error_time = GetCurrentTimestamp();
	BpextCtl->last_error_hung = hung;
	LWLockRelease(BpextCtl->control_lock);
}

static void
record_error(const char *message)
{
	record_error_as(message, false);
}

/*
 * A tier operation failed in this process.  Switch the tier off (ERROR)
 * unless someone already did, and if we are the one who did, log it once.
 * hung says the device did not answer in time.  Never raises an error:
 * this runs inside smgr calls.
 */
static void
tier_fail(const char *what, int save_errno, bool hung)
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

	record_error_as(message, hung);

	/*
	 * We may be inside an smgr call: a WARNING must not turn into a query
	 * cancel or termination thrown from there.
	 */
	HOLD_INTERRUPTS();
	ereport(WARNING,
			(errcode(ERRCODE_IO_ERROR),
			 errmsg("bpext tier disabled after an error: %s", message),
			 errdetail("Pages are served from the data files until the tier is enabled again."),
			 bpext_recovery_interval_ms > 0 ?
			 errhint("bpext enables it again by itself once the tier file answers (bpext.recovery_interval), or run SELECT bpext_enable().") :
			 errhint("Fix the cause, then run SELECT bpext_enable() or reload the configuration.")));
	RESUME_INTERRUPTS();
	bpext_wake_worker();
}

void
bpext_tier_fail(const char *what, int save_errno)
{
	tier_fail(what, save_errno, false);
}

/* A tier I/O did not answer within bpext.io_timeout. */
void
bpext_tier_fail_hung(const char *what)
{
	tier_fail(what, 0, true);
}

/*
 * In the keeper (see the file header): hold the file through a description
 * of our own until no other process has it open, then close it, so that
 * the close that frees an unlinked file (and waits on its device) is ours.
 * It does not die with the worker: backends may hold the file longer.
 * Once the postmaster is gone no server process holds it any more; if the
 * kernel grants no lease at all (leases disabled, a file of another
 * owner), that is when it lets go.
 */
static void
keeper_main(int fd)
{
	const int	keep[2] = {fd, postmaster_alive_fds[POSTMASTER_FD_WATCH]};
	pid_t		parent = getppid();
	char		self[64];
	bool		leases = true;
	int			own;

	bpext_helper_leave_server();
	(void) prctl(PR_SET_PDEATHSIG, 0);
	signal(SIGIO, SIG_IGN);		/* a lease break must not end it */
	bpext_close_inherited_fds(keep, 2);
	PGSharedMemoryDetach();
	bpext_helper_title("bpext keeper helper");

	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	own = open(self, O_RDONLY | O_NOATIME | O_CLOEXEC);
	if (own < 0 && errno == EPERM)
		own = open(self, O_RDONLY | O_CLOEXEC);
	close(fd);					/* the worker's description: it holds it too */
	if (own < 0)
		_exit(0);

	for (;;)
	{
		struct pollfd pfd = {.fd = keep[1],.events = POLLIN};
		bool		postmaster_gone;

		/* A second while the worker lives, a tenth once it is gone. */
		postmaster_gone = poll(&pfd, 1, getppid() == parent ? 1000 : 100) > 0;
		if (leases)
		{
			if (fcntl(own, F_SETLEASE, F_WRLCK) == 0)
			{
				(void) fcntl(own, F_SETLEASE, F_UNLCK);
				break;
			}
			leases = errno == EAGAIN || errno == EBUSY;
		}
		if (postmaster_gone)
			break;
		if (!leases)
			(void) poll(&pfd, 1, -1);
	}
	close(own);
	_exit(0);
}

/*
 * Fork the keeper of the file fd (dev, ino) is: the keeper of an earlier
 * incarnation of the same file can go, the new one holds it.  False if
 * none could be started.
 */
static bool
spawn_keeper(int fd, uint64 dev, uint64 ino)
{
	pid_t		child = worker_child_fork(WORKER_CHILD_KEEPER);

	if (child == 0)
		keeper_main(fd);
	if (child < 0)
		return false;
	worker_children_kill_keepers(dev, ino, child);
	return true;
}

/* Let go of the file and everything in the map. */
static void
release_tier(void)
{
	int			fd = worker_fd;

	bpext_warm_abandon("the tier was switched off during the load of the saved map",
					   false);
	tier_map_clear();
	tier_map_set_active_slots(0);
	worker_fd = -1;
	worker_nslots = 0;
	LWLockAcquire(BpextCtl->control_lock, LW_EXCLUSIVE);
	BpextCtl->worker_tier_fd = -1;
	LWLockRelease(BpextCtl->control_lock);
	pg_atomic_fetch_add_u32(&BpextCtl->file_incarnation, 1);
	tier_file_set_worker_fd(-1, 0);
	worker_children_set_file(0, 0);
	slot_directory_forget();
	tier_writer_stop();			/* its descriptor of the file, too */
	tier_readers_stop();

	/*
	 * Read-only, and never the last: the file's keeper holds it (also drops
	 * the flock).  A descriptor that is something else now (the reason a
	 * helper was refused, tier_file_worker_fd_valid) is someone else's
	 * number: forgotten, not closed.
	 */
	if (fd >= 0)
	{
		uint64		dev;
		uint64		ino;
		char		why[256];

		if (tier_file_worker_fd_valid(fd, &dev, &ino, why, sizeof(why)) ||
			errno != ESTALE)
			close(fd);
		else
			ereport(LOG,
					(errmsg("bpext left descriptor %d open: %s", fd, why)));
	}
}

/* What the helper that removes the tier file needs, and its answer. */
typedef struct UnlinkJob
{
	char		path[MAXPGPATH];
	uint64		dev;
	uint64		ino;
} UnlinkJob;

typedef struct UnlinkAnswer
{
	bool		removed;
	int			save_errno;
} UnlinkAnswer;

/* In the helper: remove the file at path if it is the tier's. */
static void
unlink_in_helper(void *arg)
{
	UnlinkJob  *job = (UnlinkJob *) arg;
	UnlinkAnswer answer = {.removed = true,.save_errno = 0};

	if (tier_file_is(job->path, job->dev, job->ino) &&
		unlink(job->path) != 0 && errno != ENOENT)
	{
		answer.removed = false;
		answer.save_errno = errno;
	}
	helper_io_send(&answer, sizeof(answer));
}

/*
 * Turn the tier off (from ENABLED or ERROR).  Like SQL Server, turning the
 * extension off deletes its file: the file bpext created or validated, if
 * it is still the one at that path, never a file put in its place.  A
 * device that does not answer leaves the removal to the helper (it goes
 * on as soon as the device answers) and the tier disabled all the same.
 */
static void
disable_tier(void)
{
	UnlinkJob	job;
	HelperIoRun run;
	UnlinkAnswer *answer = NULL;
	size_t		answerlen;
	HelperIoFailure failure;
	char		why[256];

	pg_atomic_write_u32(&BpextCtl->state, BPEXT_STATE_DISABLING);
	release_tier();

	memset(&job, 0, sizeof(job));
	LWLockAcquire(BpextCtl->control_lock, LW_EXCLUSIVE);
	strlcpy(job.path, BpextCtl->path, sizeof(job.path));
	job.dev = BpextCtl->file_dev;
	job.ino = BpextCtl->file_ino;
	BpextCtl->path[0] = '\0';
	BpextCtl->size_bytes = 0;
	BpextCtl->file_dev = BpextCtl->file_ino = 0;
	LWLockRelease(BpextCtl->control_lock);

	if (job.path[0] != '\0')
	{
		memset(&run, 0, sizeof(run));
		run.title = "bpext file helper";
		run.work = unlink_in_helper;
		run.arg = &job;
		run.timeout_ms = bpext_io_timeout_ms;
		run.worker_child = true;

		/* A removal left stuck may still take that file away later. */
		worker_children_set_file(job.dev, job.ino);
		failure = helper_io_run(&run, (char **) &answer, &answerlen, NULL, why,
								sizeof(why));
		worker_children_set_file(0, 0);
		if (failure != HELPER_IO_OK || answerlen != sizeof(UnlinkAnswer))
			ereport(WARNING,
					(errcode(ERRCODE_IO_ERROR),
					 errmsg("could not remove tier file \"%s\": %s", job.path, why)));
		else if (!answer->removed)
		{
			errno = answer->save_errno;
			ereport(WARNING,
					(errcode_for_file_access(),
					 errmsg("could not remove tier file \"%s\": %m", job.path)));
		}
		free(answer);
	}
	pg_atomic_write_u32(&BpextCtl->state, BPEXT_STATE_DISABLED);
}

/*
 * The slot count bpext.size asks for, within what shared memory allows
 * (said in a WARNING unless quiet).
 */
static uint32
wanted_slots(bool quiet)
{
	uint64		bytes = (uint64) bpext_size_mb * 1024 * 1024;
	uint64		nslots = bytes / BLCKSZ;

	/* The header takes one slot's worth of the configured size. */
	nslots = nslots > 0 ? nslots - 1 : 0;
	if (nslots > BpextCtl->max_slots)
	{
		if (!quiet)
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
 * The slot directory's pace (bpext_tier_flush_directory): a round a second
 * of at most this many chunks (64 MB), so that one round never holds the
 * worker for long; with more waiting, the next round follows at once.
 */
#define DIRECTORY_FLUSH_INTERVAL_MS	1000
#define DIRECTORY_FLUSH_MAX_CHUNKS	8192

/*
 * Make fd, holding nslots slots, the tier's file: publish its identity,
 * and start a new file incarnation and map epoch, so that a store that took
 * its ticket before now, and whose write may still be under way through a
 * descriptor of the previous file, can no longer publish (tier_map_publish
 * checks both).  Every helper forked from now on is taken to touch this
 * file, and the file gets its keeper.  False (the file is let go) if no
 * keeper could be started.
 */
static bool
take_file(int fd, const char *path, uint32 nslots, uint64 dev, uint64 ino,
		  uint64 directory_id, char *err, size_t errlen)
{
	uint32		incarnation;

	worker_children_set_file(dev, ino);
	if (!spawn_keeper(fd, dev, ino))
	{
		snprintf(err, errlen, "could not start a helper process: %m");
		worker_children_set_file(0, 0);
		close(fd);
		return false;
	}
	worker_fd = fd;
	worker_nslots = nslots;
	LWLockAcquire(BpextCtl->control_lock, LW_EXCLUSIVE);
	strlcpy(BpextCtl->path, path, sizeof(BpextCtl->path));
	BpextCtl->size_bytes = TIER_FILE_SIZE(nslots);
	BpextCtl->file_dev = dev;
	BpextCtl->file_ino = ino;
	BpextCtl->worker_tier_fd = fd;
	LWLockRelease(BpextCtl->control_lock);

	incarnation = pg_atomic_add_fetch_u32(&BpextCtl->file_incarnation, 1);
	tier_file_set_worker_fd(fd, incarnation);
	tier_map_begin_drop();
	slot_directory_lay_out(nslots, directory_id);
	return true;
}

/* What the helper that opens the tier file needs, and its answer. */
typedef struct OpenJob
{
	char		path[MAXPGPATH];
	uint32		nslots;
	bool		warm;			/* reopen the file a warm start checked */
	uint64		warm_dev;
	uint64		warm_ino;
	uint64		warm_nonce;
	int			nbusy;
	uint64		busy_devs[MAX_BUSY_FILES];
	uint64		busy_inos[MAX_BUSY_FILES];
} OpenJob;

typedef struct OpenAnswer
{
	bool		opened;
	bool		no_space;		/* refused by bpext.min_free_space */
	BpextSpaceCheck space;
	char		err[512];
	uint32		nslots;			/* a warm start: the file's */
	uint64		dev;
	uint64		ino;
	uint64		taken_from;
} OpenAnswer;

/*
 * In the helper: check the free space, open (or create, lock and
 * preallocate) the file, and hand the worker its read-only hold on it.
 */
static void
open_in_helper(void *arg)
{
	OpenJob    *job = (OpenJob *) arg;
	OpenAnswer	answer;
	int			work_fd = -1;
	int			fd;

	memset(&answer, 0, sizeof(answer));
	if (job->warm)
	{
		fd = tier_file_reopen(job->path, job->warm_dev, job->warm_ino,
							  job->warm_nonce, answer.err, sizeof(answer.err));
		if (fd >= 0 &&
			!tier_file_check_ours(fd, job->path, &answer.nslots, answer.err,
								  sizeof(answer.err)))
		{
			close(fd);
			fd = -1;
		}
	}
	else if (!bpext_space_allows(job->path, -1, TIER_FILE_BYTES(job->nslots),
								 &answer.space))
	{
		answer.no_space = true;
		bpext_space_reason(&answer.space, answer.err, sizeof(answer.err));
		fd = -1;
	}
	else
		fd = tier_file_open(job->path, job->nslots, job->busy_devs,
							job->busy_inos, job->nbusy, &answer.taken_from,
							&work_fd, answer.err, sizeof(answer.err));
	if (fd >= 0 && !tier_file_identity(fd, &answer.dev, &answer.ino))
	{
		snprintf(answer.err, sizeof(answer.err), "could not stat \"%s\": %m",
				 job->path);
		close(fd);
		fd = -1;
	}
	answer.opened = fd >= 0;
	if (fd >= 0)
		helper_io_send_fd(&answer, sizeof(answer), fd);
	else
		helper_io_send(&answer, sizeof(answer));
	/* work_fd, the last writable description, closes as we exit. */
}

/*
 * Run the helper that opens the file.  Returns the worker's descriptor, or
 * -1 with *answer saying why (or err, if the helper did not answer, with
 * *hung set when it was silent too long).
 */
static int
open_through_helper(OpenJob *job, OpenAnswer *answer, bool *hung)
{
	HelperIoRun run;
	OpenAnswer *got = NULL;
	size_t		gotlen;
	HelperIoFailure failure;
	int			fd = -1;

	job->nbusy = worker_children_files(job->busy_devs, job->busy_inos,
									   MAX_BUSY_FILES);
	memset(&run, 0, sizeof(run));
	run.title = "bpext file helper";
	run.work = open_in_helper;
	run.arg = job;
	run.timeout_ms = bpext_io_timeout_ms;
	run.worker_child = true;
	memset(answer, 0, sizeof(*answer));
	failure = helper_io_run(&run, (char **) &got, &gotlen, &fd, answer->err,
							sizeof(answer->err));
	*hung = failure == HELPER_IO_TIMED_OUT;
	if (failure == HELPER_IO_OK && gotlen == sizeof(OpenAnswer))
		*answer = *got;
	else if (failure == HELPER_IO_OK)
		strlcpy(answer->err, "the helper opening the tier file ended without an answer",
				sizeof(answer->err));
	free(got);
	if (fd >= 0 && !answer->opened)
	{
		close(fd);
		fd = -1;
	}
	if (fd < 0 && answer->opened)
	{
		answer->opened = false;
		strlcpy(answer->err, "the helper opening the tier file handed over no descriptor",
				sizeof(answer->err));
	}
	return fd;
}

/*
 * A warm start (warm_restart.c): take the tier file over as the postmaster
 * checked it, with the saved map still after its last slot, and start
 * loading that map.  False if the file is no longer what the postmaster
 * checked, or did not answer; the saved map is then given up and the tier
 * starts cold.
 */
static bool
enable_tier_warm(const char *path, uint32 nslots)
{
	OpenJob		job;
	OpenAnswer	answer;
	bool		hung;
	int			fd;

	memset(&job, 0, sizeof(job));
	job.warm = true;
	bpext_warm_file(job.path, sizeof(job.path), &job.warm_dev, &job.warm_ino,
					&job.warm_nonce);
	fd = open_through_helper(&job, &answer, &hung);
	if (fd < 0)
	{
		bpext_warm_abandon(answer.err, false);
		return false;
	}
	if (!take_file(fd, path, answer.nslots, answer.dev, answer.ino,
				   bpext_warm_directory_id(), answer.err, sizeof(answer.err)))
	{
		bpext_warm_abandon(answer.err, false);
		return false;
	}

	/*
	 * Slots stay closed to new pages until every saved one is loaded: a
	 * process that sees the tier enabled must see warm_loading set.
	 */
	pg_atomic_write_u32(&BpextCtl->warm_loading, 1);
	pg_write_barrier();
	tier_map_set_active_slots(Min(answer.nslots, nslots));
	pg_write_barrier();
	pg_atomic_write_u32(&BpextCtl->state, BPEXT_STATE_ENABLED);
	ereport(LOG,
			(errmsg("bpext tier enabled: \"%s\", %llu MB, loading the saved map",
					path, (unsigned long long) (TIER_FILE_SIZE(answer.nslots) >> 20))));
	bpext_warm_begin_load();
	return true;
}

/*
 * Enable the tier on the file at path, of nslots slots: asked for (a
 * reload, bpext_enable(), the worker's start), or as a probe of a tier
 * that failed (bpext_tier_recover), which says nothing unless it brings
 * the tier back.
 */
static void
enable_tier(const char *path, uint32 nslots, EnableMode mode)
{
	OpenJob		job;
	OpenAnswer	answer;
	bool		hung;
	int			fd;

	pg_atomic_write_u32(&BpextCtl->state, BPEXT_STATE_ENABLING);
	if (mode == ENABLE_ASKED && bpext_warm_load_pending(path) &&
		enable_tier_warm(path, nslots))
		return;

	/* The backend that asked checked the free space too, but it moves. */
	memset(&job, 0, sizeof(job));
	strlcpy(job.path, path, sizeof(job.path));
	job.nslots = nslots;
	fd = open_through_helper(&job, &answer, &hung);
	if (fd >= 0 &&
		!take_file(fd, path, nslots, answer.dev, answer.ino, 0, answer.err,
				   sizeof(answer.err)))
		fd = -1;
	if (fd < 0)
	{
		record_error_as(answer.err, hung);
		pg_atomic_write_u32(&BpextCtl->state, BPEXT_STATE_ERROR);
		if (mode == ENABLE_PROBE)
			ereport(DEBUG1,
					(errmsg_internal("bpext could not enable the tier again: %s",
									 answer.err)));
		else if (answer.no_space)
			ereport(WARNING,
					(errcode(ERRCODE_DISK_FULL),
					 errmsg("bpext could not enable the tier: %s", answer.err),
					 bpext_space_errdetail(&answer.space),
					 bpext_space_errhint()));
		else
			ereport(WARNING,
					(errcode(hung ? ERRCODE_IO_ERROR : ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("bpext could not enable the tier: %s", answer.err),
					 errdetail("Pages are served from the data files."),
					 hung ?
					 (bpext_recovery_interval_ms > 0 ?
					  errhint("The device holding the tier file did not answer in time. bpext enables the tier by itself once it answers (bpext.recovery_interval), or run SELECT bpext_enable().") :
					  errhint("The device holding the tier file did not answer in time. Run SELECT bpext_enable() once it answers.")) :
					 errhint("Check bpext.path and bpext.size, then reload the configuration.")));
		return;
	}
	if (answer.taken_from != 0)
		ereport(LOG,
				(errmsg("bpext: took over \"%s\", the tier file of another cluster (system identifier " UINT64_FORMAT "), and started it empty",
						path, answer.taken_from),
				 errdetail("No server held its lock; it was left by the cluster this one was upgraded or copied from, or by another cluster given the same bpext.path.")));

	/* A new file, then a new epoch; only then may the map take pages. */
	bpext_warm_note_cold_enable();
	tier_map_set_active_slots(nslots);
	pg_atomic_write_u32(&BpextCtl->state, BPEXT_STATE_ENABLED);
	if (mode == ENABLE_PROBE)
	{
		long		secs;
		int			usecs;

		TimestampDifference(failed_at, GetCurrentTimestamp(), &secs, &usecs);
		ereport(LOG,
				(errmsg("bpext tier enabled again: \"%s\", %llu MB, %ld s after it failed",
						path, (unsigned long long) (TIER_FILE_SIZE(nslots) >> 20),
						secs),
				 errdetail("It had failed with: %s. It came back at probe %d.",
						   failure_reason, probes)));
	}
	else
	{
		/* Someone acted: a later failure starts its probes afresh. */
		recovered_at = 0;
		ereport(LOG,
				(errmsg("bpext tier enabled: \"%s\", %llu MB",
						path, (unsigned long long) (TIER_FILE_SIZE(nslots) >> 20))));
	}
}

static void
resize_tier(uint32 nslots)
{
	BpextSpaceCheck space;
	char		path_in_use[MAXPGPATH];
	char		err[512];
	bool		answered;
	bool		resized;

	LWLockAcquire(BpextCtl->control_lock, LW_SHARED);
	strlcpy(path_in_use, BpextCtl->path, sizeof(path_in_use));
	LWLockRelease(BpextCtl->control_lock);

	/* Growth only, right before it happens: the old size still stands. */
	if (nslots > worker_nslots &&
		!bpext_space_check(path_in_use, worker_fd, TIER_FILE_BYTES(nslots),
						   &space, &answered, err, sizeof(err)))
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
	if (nslots > worker_nslots && !answered)
	{
		/* A file system that does not answer is a tier that does not. */
		bpext_tier_fail_hung(err);
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
		/* A call that did not answer has switched the tier off, and said so. */
		if (pg_atomic_read_u32(&BpextCtl->state) != BPEXT_STATE_ENABLED)
			return;
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
		tier_writer_truncate(worker_fd, TIER_FILE_BYTES(worker_nslots)) != 0)
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

	nslots = wanted_slots(false);
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
		enable_tier(path, nslots, ENABLE_ASKED);
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

	if (!tier_writer_check(worker_fd, path, TIER_FILE_BYTES(worker_nslots),
						   err, sizeof(err)))
	{
		bpext_tier_fail(err, 0);
		release_tier();
	}
}

/*
 * From the worker's loop, every round: bring a tier that failed back by
 * itself, once its file answers again (bpext.recovery_interval, 0: never).
 * The first probe comes an interval after the failure; each one that does
 * not bring it back doubles the wait, up to RECOVERY_MAX_INTERVAL_MS, and
 * says nothing (the views show its error).  A probe is the enable itself,
 * cold, in a helper process that the worker waits for at most
 * bpext.io_timeout.  It is not even tried while a helper the worker gave
 * up on is still there: such a helper has not seen its call on the old
 * file return, so the device has not answered everything yet, and a write
 * of its that landed late must not land in a file the tier uses again
 * (the worker reaps its helpers, so it knows when they have gone).  When
 * the last of them ends long after it was killed, its call has just
 * returned: the device answers, and the next probe comes at once.
 */
void
bpext_tier_recover(void)
{
	BpextState	state = pg_atomic_read_u32(&BpextCtl->state);
	const char *path = bpext_path ? bpext_path : "";
	TimestampTz now;
	uint32		nslots;

	if (state != BPEXT_STATE_ERROR)
	{
		failed_at = 0;
		return;
	}
	if (bpext_recovery_interval_ms <= 0)
		return;
	if (worker_fd >= 0)
		release_tier();

	now = GetCurrentTimestamp();
	if (failed_at == 0)
	{
		/* A tier that fails soon after coming back waits longer. */
		if (recovered_at == 0 || probe_wait_ms < bpext_recovery_interval_ms ||
			TimestampDifferenceExceeds(recovered_at, now, RECOVERY_MAX_INTERVAL_MS))
			probe_wait_ms = bpext_recovery_interval_ms;
		failed_at = now;
		probes = 0;
		late_exits_seen = worker_children_late_exits();
		next_probe_at = TimestampTzPlusMilliseconds(now, probe_wait_ms);
		LWLockAcquire(BpextCtl->control_lock, LW_SHARED);
		strlcpy(failure_reason, BpextCtl->last_error, sizeof(failure_reason));
		LWLockRelease(BpextCtl->control_lock);
		return;
	}

	/*
	 * A helper that was stuck in the kernel and has ended at last saw its
	 * call return: the device answers again.  Probe at once, unless the
	 * tier came back and failed again lately.
	 */
	if (worker_children_busy() == 0 &&
		worker_children_late_exits() != late_exits_seen)
	{
		late_exits_seen = worker_children_late_exits();
		if (recovered_at == 0 ||
			TimestampDifferenceExceeds(recovered_at, now, RECOVERY_MAX_INTERVAL_MS))
			next_probe_at = now;
	}
	if (now < next_probe_at)
		return;

	probes++;
	probe_wait_ms = Min(Max(probe_wait_ms, 1) * 2, RECOVERY_MAX_INTERVAL_MS);
	next_probe_at = TimestampTzPlusMilliseconds(now, probe_wait_ms);

	nslots = wanted_slots(true);
	if (worker_children_busy() > 0 || nslots == 0 || path[0] == '\0')
		return;
	enable_tier(path, nslots, ENABLE_PROBE);
	if (pg_atomic_read_u32(&BpextCtl->state) == BPEXT_STATE_ENABLED)
	{
		recovered_at = GetCurrentTimestamp();
		failed_at = 0;
	}
}

/*
 * In the worker: its descriptor of the tier file and the file's
 * incarnation, for the reader helpers it forks (tier_readers.c); -1 if it
 * holds none.
 */
int
bpext_tier_worker_fd(uint32 *incarnation)
{
	*incarnation = pg_atomic_read_u32(&BpextCtl->file_incarnation);
	return worker_fd;
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
 * changed, once a second (at once again while more wait), and start the
 * kernel's writeback of the tier file, so that what the save at exit has
 * to write and fsync stays small (slot_directory.c).  Both through the
 * writer helper.  Not while a warm start's load runs: the directory is
 * still being read.  Returns whether chunks are left for the next round,
 * which the worker then does not rest before.
 */
bool
bpext_tier_flush_directory(void)
{
	static TimestampTz last_flush = 0;
	TimestampTz now;
	uint32		nwritten;
	bool		more;

	if (worker_fd < 0 ||
		pg_atomic_read_u32(&BpextCtl->state) != BPEXT_STATE_ENABLED ||
		pg_atomic_read_u32(&BpextCtl->warm_loading) != 0)
		return false;
	now = GetCurrentTimestamp();
	if (!TimestampDifferenceExceeds(last_flush, now, DIRECTORY_FLUSH_INTERVAL_MS))
		return false;
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
		return false;
	if (!slot_directory_flush(worker_fd, DIRECTORY_FLUSH_MAX_CHUNKS,
							  &nwritten, &more))
	{
		int			save_errno = errno;

		BPEXT_COUNT(io_errors, 1);
		bpext_tier_fail("could not write the slot directory", save_errno);
		return false;
	}
	if (more)
		last_flush = 0;			/* the rest in the next round */
	if (nwritten > 0)
		(void) tier_writer_start_writeback(worker_fd);
	return more;
}

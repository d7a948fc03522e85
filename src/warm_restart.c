/*-------------------------------------------------------------------------
 *
 * warm_restart.c
 *	  Keeping the tier's contents across a clean restart: the map is saved
 *	  into the tier file when the postmaster exits after a clean shutdown,
 *	  and reused at the next start only when nothing can have changed the
 *	  data files in between.
 *
 * Saving.  The map's slots are kept on the SSD as the map changes, in the
 * slot directory after the last slot (slot_directory.c), so the save at
 * exit only finishes it: when the postmaster exits (before_shmem_exit,
 * registered by bpext_warm_startup) every other process has exited, so the
 * map can be read without locks and nothing changes a data file any more.
 * If pg_control says the cluster shut down cleanly (as a primary or as a
 * standby), the postmaster writes the directory chunks the map changed
 * since the worker's last round, then the table of relation entries the
 * directory names (index, identity, generation) and what each one's
 * segment files looked like (stat), fsyncs the file (a standby also
 * flushes its data files, warm_datadir_sync_file_systems), writes a fresh
 * random token into the data directory (WARM_TOKEN_FILE), and last
 * writes the description of the saved map into the file's header block
 * (TierWarmHeader: the system identifier, timeline, checkpoint and CRC of
 * pg_control, the major version, the token, the directory's id).  A crash
 * anywhere before that last write leaves no usable map.  What this costs
 * grows with what changed lately, not with the tier.  Relations that have
 * an init fork (unlogged relations) are left out of the table, so their
 * pages are not loaded: their files are rebuilt from the init fork behind
 * the storage manager whenever the next start goes through recovery.
 *
 * Deciding.  At the next start, the postmaster decides before it forks
 * any process (bpext_warm_startup, from the shmem startup hook), so
 * before recovery, a standby's replay or any backend can touch a data
 * file.  It reuses the map only if pg_control still is exactly what it
 * was at the save (clean shutdown, same checkpoint, timeline, system
 * identifier and CRC: pg_rewind, pg_resetwal, pg_checksums, a restored
 * base backup or a crash all change it), the major version and format
 * are the same, and the data directory's token matches the header's (a
 * copied-back or replaced data directory has none, or an old one).
 * Each saved fork's segment files must also still be what the save found
 * (inode, size, modification and status change times: check_segments),
 * which catches what changes data files but not pg_control (a pg_rewind
 * interrupted before it wrote pg_control, files hard-linked with a cluster
 * that has run); a fork whose files changed is not loaded.  It
 * then consumes the saved map, durably, before anything is served: the
 * header is marked taken (with a nonce the worker checks) and the token
 * file removed, so two servers started from copies of one stopped data
 * directory cannot both trust it, and a later crash starts cold.  Any
 * doubt means a cold start; nothing here can fail the server's start.
 * The decision is logged in one LOG line by the bpext worker when it
 * starts (bpext_warm_log_decision): the postmaster decides before it
 * starts the logging collector, so a line it wrote would go to its
 * stderr, not to the server log.
 *
 * Loading.  The postmaster only makes the saved relation entries again, at
 * their saved indexes, and holds them (tier_map_warm_hold); the bpext
 * worker reads the directory and publishes the saved pages in the
 * background (bpext_warm_load_step).  tier_map.c explains why a page
 * changed after the decision is never published.  The tier serves what is
 * loaded from the start; new pages wait until the load is over.  A chunk
 * whose CRC does not match loads nothing (leaving pages out is always
 * safe); a chunk not published whole is marked to be written again.
 *
 * Locking: the WarmState fields are written by the postmaster before any
 * other process exists and afterwards by the worker alone; the views read
 * mode and reason under control_lock, pages_reused is atomic.
 *
 * Saving, deciding and loading stay in one file: each reads what the one
 * before wrote (the header, the relation table and its segment stats), so
 * the saved map's format and the checks that make it trustworthy are
 * written down in one place.  pg_control, the token and the flush of the
 * data files are warm_datadir.c's.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "access/xlog_internal.h"
#include "access/xlogdefs.h"
#include "catalog/pg_control.h"
#include "miscadmin.h"
#include "port/pg_crc32c.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "helper_io.h"
#include "progress.h"
#include "settings.h"
#include "slot_directory.h"
#include "stats.h"
#include "tier_control.h"
#include "tier_file.h"
#include "tier_map.h"
#include "warm_datadir.h"
#include "warm_restart.h"

/* Directory chunks per load step: 32,704 slots. */
#define WARM_CHUNKS_PER_STEP	64

/* An entry of the relation table saved after the slot directory. */
typedef struct SavedRel
{
	uint32		index;			/* the map's relation entry */
	BpextRelFile rfile;
	int32		fork;
	uint32		generation;
	BlockNumber nblocks;		/* 1 + highest block ever admitted */
	uint32		nsegs;			/* its SavedSegs, in the segment table */
} SavedRel;

/*
 * What one segment file of a saved fork (relpath, relpath.1, ...) looked
 * like at the save, in the segment table that follows the relation table:
 * each relation's nsegs entries in turn.  No device number: it may change
 * across a reboot, which must not cost the warm start.
 */
typedef struct SavedSeg
{
	uint64		size;
	uint64		ino;
	int64		mtime_sec;
	int64		ctime_sec;
	uint32		mtime_nsec;
	uint32		ctime_nsec;
} SavedSeg;

typedef struct WarmState
{
	/* How the tier started; under control_lock once others may read it. */
	BpextStartMode mode;
	char		reason[256];	/* why cold */
	pg_atomic_uint64 pages_reused;

	/* The decision's LOG line, written once by the worker. */
	bool		log_decision;
	bool		decision_logged;
	XLogRecPtr	saved_checkpoint;
	uint32		held_rels;
	uint32		changed_rels;	/* left out: their files changed */
	char		changed_example[MAXPGPATH + 64];

	/* A load the postmaster prepared for the worker. */
	bool		load_pending;
	char		path[MAXPGPATH];
	uint64		dev;
	uint64		ino;
	uint64		nonce;
	uint64		npages;
	uint64		directory_id;

	/* The worker's progress. */
	bool		loading;
	uint32		next_chunk;
	uint32		map_epoch;
	uint32		file_incarnation;
	TimestampTz load_started;
} WarmState;

static WarmState *Warm = NULL;

/* The worker's buffers for a load step. */
#define WARM_STEP_ENTRIES	(TIER_DIR_ENTRIES_PER_CHUNK * WARM_CHUNKS_PER_STEP)
static SlotDirEntry *step_entries = NULL;
static bool *step_valid = NULL;
static bool *step_published = NULL;
static uint32 *step_scratch = NULL;

/*
 * The CRC of a saved relation table and the segment table after it,
 * stored in the warm header.
 */
static pg_crc32c
saved_rels_crc(const SavedRel *rels, uint32 nrels, const SavedSeg *segs,
			   uint32 nsegs)
{
	pg_crc32c	crc;

	INIT_CRC32C(crc);
	if (nrels > 0)
		COMP_CRC32C(crc, rels, sizeof(SavedRel) * nrels);
	if (nsegs > 0)
		COMP_CRC32C(crc, segs, sizeof(SavedSeg) * nsegs);
	FIN_CRC32C(crc);
	return crc;
}

/* The path of a fork's segment file segno: relpath, relpath.1, ... */
static void
segment_path(char *buf, size_t buflen, const char *relpath, uint32 segno)
{
	if (segno == 0)
		strlcpy(buf, relpath, buflen);
	else
		snprintf(buf, buflen, "%s.%u", relpath, segno);
}

/* stat a segment file into *seg; false with errno set if it cannot. */
static bool
stat_segment(const char *path, SavedSeg *seg)
{
	struct stat st;

	if (stat(path, &st) != 0)
		return false;
	memset(seg, 0, sizeof(SavedSeg));
	seg->size = (uint64) st.st_size;
	seg->ino = (uint64) st.st_ino;
	seg->mtime_sec = (int64) st.st_mtim.tv_sec;
	seg->mtime_nsec = (uint32) st.st_mtim.tv_nsec;
	seg->ctime_sec = (int64) st.st_ctim.tv_sec;
	seg->ctime_nsec = (uint32) st.st_ctim.tv_nsec;
	return true;
}

/* The most segment files a fork can have: every block number in one. */
#define WARM_MAX_SEGS	((uint32) (MaxBlockNumber / RELSEG_SIZE + 1))

Size
bpext_warm_shmem_size(void)
{
	return MAXALIGN(sizeof(WarmState));
}

void
bpext_warm_shmem_init(bool found)
{
	Warm = ShmemInitStruct("bpext warm restart", sizeof(WarmState), &found);
	if (found)
		return;
	memset(Warm, 0, sizeof(WarmState));
	Warm->mode = BPEXT_START_COLD;
	pg_atomic_init_u64(&Warm->pages_reused, 0);
}

/* ---------------------------------------------------------------------
 * Saving, in the postmaster once every other process has exited
 * ---------------------------------------------------------------------
 */

typedef struct SaveContext
{
	bool		failed;
	int			save_errno;
	SavedRel   *rels;
	uint32		nrels;
	uint32		rels_allocated;
	SavedSeg   *segs;
	uint32		nsegs;
	uint32		segs_allocated;
} SaveContext;

/*
 * Does the relation have an init fork, i.e. is it unlogged?  When stat
 * cannot tell, say yes: its pages are then not saved.
 */
static bool
has_init_fork(const BpextRelFile *rfile)
{
	char	   *path = bpext_relpath_perm(*rfile, INIT_FORKNUM);
	struct stat st;
	bool		maybe = stat(path, &st) == 0 || errno != ENOENT;

	pfree(path);
	return maybe;
}

/* Room for one more segment in the save's segment table. */
static SavedSeg *
next_saved_seg(SaveContext *cxt)
{
	if (cxt->nsegs == cxt->segs_allocated)
	{
		uint32		grown = Max(cxt->segs_allocated * 2, 1024);
		SavedSeg   *segs = realloc(cxt->segs, sizeof(SavedSeg) * grown);

		if (segs == NULL)
		{
			cxt->failed = true;
			cxt->save_errno = ENOMEM;
			return NULL;
		}
		cxt->segs = segs;
		cxt->segs_allocated = grown;
	}
	return &cxt->segs[cxt->nsegs++];
}

/*
 * Describe every segment file of the fork into the segment table: the
 * next start loads the fork's pages only if they are all still exactly
 * so (check_segments).  Returns how many, or 0 (and nothing added) if the
 * fork has no file or one cannot be examined: then it is not saved.
 */
static uint32
save_segments(SaveContext *cxt, const BpextRelFile *rfile, ForkNumber fork)
{
	char	   *relpath = bpext_relpath_perm(*rfile, fork);
	uint32		first = cxt->nsegs;
	uint32		segno;

	for (segno = 0; segno < WARM_MAX_SEGS; segno++)
	{
		char		path[MAXPGPATH];
		SavedSeg	seg;
		SavedSeg   *saved;

		segment_path(path, sizeof(path), relpath, segno);
		if (!stat_segment(path, &seg))
		{
			if (segno > 0 && errno == ENOENT)
				break;
			cxt->nsegs = first;
			segno = 0;
			break;
		}
		if ((saved = next_saved_seg(cxt)) == NULL)
		{
			segno = 0;
			break;
		}
		*saved = seg;
	}
	pfree(relpath);
	return segno;
}

static void
save_rel(uint32 rel, const BpextRelFile *rfile, ForkNumber fork,
		 uint32 generation, BlockNumber nblocks, void *arg)
{
	SaveContext *cxt = (SaveContext *) arg;
	SavedRel   *saved;
	uint32		nsegs;

	if (cxt->failed || has_init_fork(rfile))
		return;
	if (cxt->nrels == cxt->rels_allocated)
	{
		uint32		grown = Max(cxt->rels_allocated * 2, 1024);
		SavedRel   *rels = realloc(cxt->rels, sizeof(SavedRel) * grown);

		if (rels == NULL)
		{
			cxt->failed = true;
			cxt->save_errno = ENOMEM;
			return;
		}
		cxt->rels = rels;
		cxt->rels_allocated = grown;
	}
	if ((nsegs = save_segments(cxt, rfile, fork)) == 0)
		return;
	saved = &cxt->rels[cxt->nrels++];
	memset(saved, 0, sizeof(SavedRel));
	saved->index = rel;
	saved->rfile = *rfile;
	saved->fork = (int32) fork;
	saved->generation = generation;
	saved->nblocks = nblocks;
	saved->nsegs = nsegs;
}

/*
 * Open the tier file the tier used, if it is still that file, and lock
 * it.  -1 and a reason otherwise.
 */
static int
open_used_tier_file(const char *path, uint64 dev, uint64 ino, const char **why)
{
	uint64		got_dev;
	uint64		got_ino;
	int			fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
	{
		*why = "the tier file could not be opened";
		return -1;
	}
	if (!tier_file_identity(fd, &got_dev, &got_ino) ||
		got_dev != dev || got_ino != ino)
	{
		*why = "the tier file was replaced";
		close(fd);
		return -1;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) != 0)
	{
		*why = "the tier file is locked by another process";
		close(fd);
		return -1;
	}
	return fd;
}

/* What the helper that finishes the save needs (copied at fork). */
typedef struct SaveJob
{
	char		path[MAXPGPATH];
	uint64		dev;
	uint64		ino;
	uint32		nslots;
	SlotDirBatch *batch;
	SavedRel   *rels;
	uint32		nrels;
	SavedSeg   *segs;
	uint32		nsegs;
	TierWarmHeader warm;
} SaveJob;

typedef struct SaveResult
{
	bool		saved;
	char		error[256];
} SaveResult;

/*
 * Write what the postmaster prepared into the tier file fd (opened and
 * locked by save_to_file), durably, header last.  NULL, or why it failed.
 */
static const char *
write_saved_map(SaveJob *job, int fd, char *err, size_t errlen)
{
	uint32		nslots;
	Size		rels_bytes = sizeof(SavedRel) * job->nrels;
	Size		segs_bytes = sizeof(SavedSeg) * job->nsegs;

	if (!tier_file_check_ours(fd, job->path, &nslots, err, errlen))
		return err;
	helper_io_progress();
	if (nslots != job->nslots)
		return "the tier file was resized";
	if (!slot_directory_write_batch(fd, job->batch))
	{
		snprintf(err, errlen, "could not write the slot directory: %m");
		return err;
	}
	if (rels_bytes > 0 &&
		pwrite(fd, job->rels, rels_bytes, job->warm.rels_offset) != (ssize_t) rels_bytes)
	{
		snprintf(err, errlen, "could not write the relation table: %m");
		return err;
	}
	if (segs_bytes > 0 &&
		pwrite(fd, job->segs, segs_bytes, job->warm.rels_offset + rels_bytes) !=
		(ssize_t) segs_bytes)
	{
		snprintf(err, errlen, "could not write the segment table: %m");
		return err;
	}
	helper_io_progress();
	if (fdatasync(fd) != 0)
	{
		snprintf(err, errlen, "could not fsync the tier file: %m");
		return err;
	}
	helper_io_progress();
	if (!tier_file_write_warm(fd, &job->warm))
	{
		snprintf(err, errlen, "could not write the tier file's header: %m");
		return err;
	}
	return NULL;
}

/*
 * The helper's part of the save: the file is opened, locked, written and
 * closed here, before the postmaster has the answer.  The close lets go of
 * the lock: the postmaster exits as soon as it has the answer, and a
 * start that follows at once (pg_ctl restart) must not find the file
 * still locked by this helper, which exits only once it has seen the
 * postmaster's end of the socket closed (helper_io.c), and on a busy
 * machine may take a while to be scheduled for that; the new server's
 * check would take it for another server using the file, and start cold.
 * NULL, or why the save failed.
 */
static const char *
save_to_file(SaveJob *job, char *err, size_t errlen)
{
	const char *why = NULL;
	int			fd;

	fd = open_used_tier_file(job->path, job->dev, job->ino, &why);
	helper_io_progress();
	if (fd < 0)
		return why;
	why = write_saved_map(job, fd, err, errlen);
	if (close(fd) != 0 && why == NULL)
	{
		snprintf(err, errlen, "could not close the tier file: %m");
		why = err;
	}
	helper_io_progress();
	return why;
}

/* In the helper process (helper_io.c). */
static void
save_in_helper(void *arg)
{
	SaveResult	result;
	char		err[256];
	const char *why;

	memset(&result, 0, sizeof(result));
	why = save_to_file((SaveJob *) arg, err, sizeof(err));
	result.saved = (why == NULL);
	if (why != NULL)
		strlcpy(result.error, why, sizeof(result.error));
	helper_io_send(&result, sizeof(result));
}

/*
 * Run work in the postmaster's helper process (helper_io.c), waiting for it
 * at most bpext.io_timeout of silence, or until asked to shut down.
 */
static bool
run_in_helper(HelperIoWork work, void *arg, char **result, size_t *resultlen,
			  char *why, size_t whylen)
{
	HelperIoRun run;

	memset(&run, 0, sizeof(run));
	run.title = "bpext postmaster helper";
	run.work = work;
	run.arg = arg;
	run.timeout_ms = bpext_io_timeout_ms;
	return helper_io_run(&run, result, resultlen, NULL, why, whylen) ==
		HELPER_IO_OK;
}

static void
not_saved(const char *why)
{
	ereport(LOG,
			(errmsg("bpext: the tier map was not saved at shutdown: %s", why)));
}

/*
 * At the postmaster's exit: finish saving the map, so that the next start
 * can reuse it.  The map is read here, while nothing else runs; the tier
 * file is written by a helper process that the postmaster stops waiting
 * for if the device hangs (helper_io.c).
 */
static void
save_map_at_exit(int code, Datum arg)
{
	ControlFileData control;
	SaveJob    *job;
	SaveContext rels;
	SaveResult *result = NULL;
	size_t		resultlen;
	char		why[512];
	instr_time	start;
	uint64		token;

	/* Also called when shared memory is reset after a crash: not then. */
	if (code != 0 || BpextCtl == NULL)
		return;
	if (pg_atomic_read_u32(&BpextCtl->state) != BPEXT_STATE_ENABLED)
		return;
	if (!bpext_warm_restart)
	{
		not_saved("bpext.warm_restart is off");
		return;
	}
	if (!warm_datadir_read_control(&control) || !warm_datadir_clean_shutdown(&control))
	{
		not_saved("the shutdown was not clean");
		return;
	}
	if (pg_atomic_read_u32(&BpextCtl->warm_loading) != 0)
	{
		/* The chunks not yet loaded name pages the map never held. */
		not_saved("the load of the map saved before had not finished");
		return;
	}
	if (!slot_directory_usable())
	{
		not_saved("a write of the slot directory failed earlier");
		return;
	}

	INSTR_TIME_SET_CURRENT(start);
	job = calloc(1, sizeof(SaveJob));
	if (job == NULL)
	{
		not_saved("out of memory");
		return;
	}
	strlcpy(job->path, BpextCtl->path, sizeof(job->path));
	job->dev = BpextCtl->file_dev;
	job->ino = BpextCtl->file_ino;
	job->nslots = slot_directory_nslots();

	/*
	 * The data files first, then the token: both durable before the header
	 * that names the token can be.  And flushed before their segment files
	 * are described below (on some file systems, NFS for one, a file's
	 * modification time is the server's when the write reaches it).
	 */
	if (control.state == DB_SHUTDOWNED_IN_RECOVERY && !warm_datadir_sync_file_systems())
	{
		snprintf(why, sizeof(why), "could not flush the data files: %m");
		not_saved(why);
		goto done;
	}

	/* What the map changed since the worker's last round, and the rels. */
	job->batch = slot_directory_collect_dirty();
	memset(&rels, 0, sizeof(rels));
	tier_map_foreach_rel_at_exit(save_rel, &rels);
	job->rels = rels.rels;
	job->nrels = rels.nrels;
	job->segs = rels.segs;
	job->nsegs = rels.nsegs;
	if (job->batch == NULL || rels.failed)
	{
		not_saved("out of memory");
		goto done;
	}

	if (!pg_strong_random(&token, sizeof(token)) || !warm_datadir_write_token(token))
	{
		snprintf(why, sizeof(why), "could not write \"%s\": %m", WARM_TOKEN_FILE);
		not_saved(why);
		(void) warm_datadir_remove_token();
		goto done;
	}

	job->warm.saved = 1;
	job->warm.pg_major = PG_VERSION_NUM / 100;
	job->warm.timeline = control.checkPointCopy.ThisTimeLineID;
	job->warm.system_identifier = control.system_identifier;
	job->warm.checkpoint = control.checkPoint;
	job->warm.control_crc = control.crc;
	job->warm.nslots = job->nslots;
	job->warm.token = token;
	job->warm.npages = tier_map_used_slots();
	job->warm.nrels = job->nrels;
	job->warm.nsegs = job->nsegs;
	job->warm.rels_crc = saved_rels_crc(job->rels, job->nrels, job->segs,
										job->nsegs);
	job->warm.directory_id = slot_directory_id();
	job->warm.rels_offset = TIER_FILE_BYTES(job->nslots);

	tier_file_cache_identity();
	if (!run_in_helper(save_in_helper, job, (char **) &result, &resultlen,
					   why, sizeof(why)) ||
		resultlen != sizeof(SaveResult) || !result->saved)
	{
		/* Whatever reached the header, no start may trust it now. */
		(void) warm_datadir_remove_token();
		if (result != NULL && resultlen == sizeof(SaveResult))
			not_saved(result->error);
		else
			not_saved(why);
		goto done;
	}
	ereport(LOG,
			(errmsg("bpext: saved the tier map at shutdown: %llu pages of %u relation forks in %llu ms",
					(unsigned long long) job->warm.npages, job->nrels,
					(unsigned long long) (bpext_microseconds_since(start) / 1000)),
			 errdetail_plural("%u slot directory chunk of %u was written at shutdown; the worker had written the others as the tier changed.",
							  "%u slot directory chunks of %u were written at shutdown; the worker had written the others as the tier changed.",
							  job->batch->nchunks,
							  job->batch->nchunks, TIER_DIR_CHUNKS(job->nslots))));

done:
	free(result);
	slot_directory_free_batch(job->batch);
	free(job->rels);
	free(job->segs);
	free(job);
}

/* ---------------------------------------------------------------------
 * Deciding, in the postmaster before it starts any other process
 * ---------------------------------------------------------------------
 */

static void
start_cold(const char *reason, bool log)
{
	Warm->mode = BPEXT_START_COLD;
	Warm->load_pending = false;
	strlcpy(Warm->reason, reason, sizeof(Warm->reason));
	Warm->log_decision = log;
}

/*
 * Check the saved map against pg_control, the token and the file.  Fills
 * warm and *rels (malloc'd: the relation table, then the segment table)
 * and returns NULL if it may be reused; otherwise returns why not, in buf.
 */
static const char *
check_saved_map(int fd, const char *path, TierWarmHeader *warm,
				SavedRel **rels, char *buf, size_t buflen)
{
	ControlFileData control;
	uint32		file_nslots;
	uint64		token;
	struct stat st;
	Size		rels_bytes;
	Size		segs_bytes;

	if (!warm_datadir_read_control(&control))
		return "pg_control could not be read";
	if (!warm_datadir_clean_shutdown(&control))
	{
		snprintf(buf, buflen,
				 "the server did not shut down cleanly (database cluster state \"%s\")",
				 warm_datadir_state_name(control.state));
		return buf;
	}
	if (!tier_file_check_ours(fd, path, &file_nslots, buf, buflen))
		return buf;
	helper_io_progress();
	if (!tier_file_read_warm(fd, warm) || !warm->saved)
		return "no tier map was saved at the last shutdown";
	helper_io_progress();
	if (warm->pg_major != PG_VERSION_NUM / 100)
	{
		snprintf(buf, buflen,
				 "the tier map was saved by PostgreSQL major version %u, and this server is %u",
				 warm->pg_major / 100, PG_VERSION_NUM / 10000);
		return buf;
	}
	if (warm->system_identifier != control.system_identifier)
	{
		snprintf(buf, buflen,
				 "the tier map was saved by another cluster (system identifier " UINT64_FORMAT ", this cluster's is " UINT64_FORMAT ")",
				 warm->system_identifier, control.system_identifier);
		return buf;
	}
	if (warm->checkpoint != control.checkPoint ||
		warm->timeline != control.checkPointCopy.ThisTimeLineID)
	{
		snprintf(buf, buflen,
				 "pg_control's checkpoint (%X/%X on timeline %u) is not the one the tier map was saved at (%X/%X on timeline %u): the data directory was changed while the server was down",
				 LSN_FORMAT_ARGS(control.checkPoint),
				 control.checkPointCopy.ThisTimeLineID,
				 LSN_FORMAT_ARGS(warm->checkpoint), warm->timeline);
		return buf;
	}
	if (warm->control_crc != control.crc)
		return "pg_control was changed after the tier map was saved";
	if (!warm_datadir_read_token(&token) || token != warm->token)
		return "the data directory is not the one the tier map was saved with";
	if (warm->nslots != file_nslots)
		return "the tier file was resized after the map was saved";
	/* The segment table follows the relation table, aligned. */
	StaticAssertStmt(sizeof(SavedRel) % MAXIMUM_ALIGNOF == 0,
					 "SavedRel must keep the segment table aligned");
	rels_bytes = sizeof(SavedRel) * warm->nrels;
	segs_bytes = sizeof(SavedSeg) * warm->nsegs;
	if (fstat(fd, &st) != 0 ||
		(uint64) st.st_size < warm->rels_offset + rels_bytes + segs_bytes ||
		warm->rels_offset != (uint64) TIER_FILE_BYTES(file_nslots))
		return "the saved tier map is incomplete";

	*rels = malloc(Max(rels_bytes + segs_bytes, 1));
	if (*rels == NULL)
		return "out of memory";
	if (rels_bytes + segs_bytes > 0 &&
		pread(fd, *rels, rels_bytes + segs_bytes, warm->rels_offset) !=
		(ssize_t) (rels_bytes + segs_bytes))
		return "the saved tier map could not be read";
	helper_io_progress();
	if (!EQ_CRC32C(saved_rels_crc(*rels, warm->nrels,
								  (SavedSeg *) (*rels + warm->nrels),
								  warm->nsegs),
				   warm->rels_crc))
		return "the saved tier map is damaged";
	return NULL;
}

/*
 * Is the fork's segment file segno still as the save described it?  NULL
 * if so, or what changed.
 */
static const char *
segment_changed(const char *relpath, uint32 segno, const SavedSeg *saved,
				char *path, size_t pathlen)
{
	SavedSeg	now;

	segment_path(path, pathlen, relpath, segno);
	if (!stat_segment(path, &now))
		return errno == ENOENT ? "it is gone" : "it cannot be examined";
	if (now.ino != saved->ino)
		return "it is another file (inode)";
	if (now.size != saved->size)
		return "its size changed";
	if (now.mtime_sec != saved->mtime_sec || now.mtime_nsec != saved->mtime_nsec)
		return "its modification time changed";
	if (now.ctime_sec != saved->ctime_sec || now.ctime_nsec != saved->ctime_nsec)
		return "its status change time changed";
	return NULL;
}

/*
 * Data files that changed while the server was down, with pg_control left
 * alone: a pg_rewind interrupted after it copied blocks (it writes
 * pg_control last), or files hard-linked with a cluster that has run
 * since (pg_upgrade --link, then pg_control.old put back).  Nothing else
 * touches a data file between the save and this decision: the save runs
 * after every other process has exited, and the postmaster decides before
 * it starts any (temporary files are removed, and unlogged relations
 * reset by the startup process, only later, and neither kind is saved).
 * So every segment file of a saved fork must be the same file (inode),
 * with the same size, modification and status change times (to the
 * nanosecond; the status change time cannot be set back from user space),
 * and the fork must have no segment more.  A fork that fails is left out:
 * its relation entry is not held, so none of its pages is loaded, while
 * the forks whose files are as they were load as usual.  Removes the
 * failing entries from rels[], in order; returns how many remain, and
 * counts and describes those left out in result.
 */
static uint32
check_segments(SavedRel *rels, uint32 nrels, const SavedSeg *segs,
			   uint32 nsegs, uint32 *changed, char *example,
			   size_t examplelen)
{
	uint32		kept = 0;
	uint32		seg = 0;
	uint32		i;

	*changed = 0;
	for (i = 0; i < nrels; i++)
	{
		const char *what = NULL;
		char		path[MAXPGPATH];
		char	   *relpath;
		uint32		segno;

		if (rels[i].fork < 0 || rels[i].fork > MAX_FORKNUM ||
			rels[i].nsegs == 0 || rels[i].nsegs > nsegs - seg)
		{
			/* Cannot happen under a matching CRC; leave them all out. */
			*changed += nrels - i;
			strlcpy(example, "the saved segment table is inconsistent",
					examplelen);
			return kept;
		}
		relpath = bpext_relpath_perm(rels[i].rfile, (ForkNumber) rels[i].fork);
		for (segno = 0; what == NULL && segno < rels[i].nsegs; segno++)
			what = segment_changed(relpath, segno, &segs[seg + segno],
								   path, sizeof(path));
		if (what == NULL && rels[i].nsegs < WARM_MAX_SEGS)
		{
			SavedSeg	more;

			segment_path(path, sizeof(path), relpath, rels[i].nsegs);
			if (stat_segment(path, &more) || errno != ENOENT)
				what = "it is new";
		}
		pfree(relpath);
		seg += rels[i].nsegs;
		if (what != NULL)
		{
			if ((*changed)++ == 0)
				snprintf(example, examplelen, "\"%s\": %s", path, what);
		}
		else
			rels[kept++] = rels[i];
		if (i % 1024 == 1023)
			helper_io_progress();
	}
	return kept;
}

/*
 * Mark the saved map taken, durably, so that no later start can use it,
 * with a nonce that the worker checks before it trusts the file.
 */
static const char *
consume_saved_map(int fd, TierWarmHeader *warm)
{
	uint64		nonce;

	if (!pg_strong_random(&nonce, sizeof(nonce)))
		return "no random number for the nonce";
	warm->saved = 0;
	warm->nonce = nonce;
	if (!tier_file_write_warm(fd, warm))
		return "the saved tier map could not be marked as used";
	return NULL;
}

static bool
tier_configured(void)
{
	return bpext_path != NULL && bpext_path[0] != '\0' && bpext_size_mb > 0 &&
		BpextCtl->max_slots > 0;
}

/* What the helper found in the tier file; the saved relations follow. */
typedef struct DecideResult
{
	char		why[512];		/* empty if the saved map may be reused */
	TierWarmHeader warm;
	uint64		dev;
	uint64		ino;
	uint32		nrels;			/* relations sent: those whose files match */
	uint32		changed;		/* those left out */
	char		changed_example[MAXPGPATH + 64];
} DecideResult;

/*
 * In the helper process (helper_io.c): check the saved map and, if it
 * may be reused, consume it; send the verdict, then the relation table.
 */
static void
decide_in_helper(void *arg)
{
	const char *path = (const char *) arg;
	DecideResult result;
	SavedRel   *rels = NULL;
	const char *why;
	int			fd;

	memset(&result, 0, sizeof(result));
	fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	helper_io_progress();
	if (fd < 0)
	{
		if (errno == ENOENT)
			snprintf(result.why, sizeof(result.why),
					 "there is no tier file \"%s\" yet", path);
		else
			snprintf(result.why, sizeof(result.why),
					 "could not open \"%s\": %m", path);
		helper_io_send(&result, sizeof(result));
		return;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) != 0)
		why = "the tier file is in use by another server";
	else
		why = check_saved_map(fd, path, &result.warm, &rels, result.why,
							  sizeof(result.why));
	if (why == NULL)
		why = consume_saved_map(fd, &result.warm);
	helper_io_progress();
	if (why == NULL && !tier_file_identity(fd, &result.dev, &result.ino))
		why = "could not stat the tier file";
	if (why == NULL)
		result.nrels = check_segments(rels, result.warm.nrels,
									  (SavedSeg *) (rels + result.warm.nrels),
									  result.warm.nsegs, &result.changed,
									  result.changed_example,
									  sizeof(result.changed_example));

	/*
	 * Let go of the file (and its lock) before the postmaster has the
	 * answer: the worker it starts next locks the file again, and this
	 * helper exits only once it sees the postmaster's end of the socket
	 * closed (helper_io.c), which may be a while on a busy machine.
	 */
	close(fd);
	helper_io_progress();
	if (why != NULL && why != result.why)
		strlcpy(result.why, why, sizeof(result.why));
	else if (why == NULL)
		result.why[0] = '\0';
	helper_io_send(&result, sizeof(result));
	if (why == NULL && result.nrels > 0)
		helper_io_send(rels, sizeof(SavedRel) * result.nrels);
}

static void
decide(void)
{
	DecideResult *result = NULL;
	SavedRel   *rels;
	size_t		resultlen;
	char		why[512];
	uint32		i;
	uint32		held = 0;
	bool		answered;

	if (!tier_configured())
	{
		start_cold("the tier is not configured (bpext.path, bpext.size)", false);
		(void) warm_datadir_remove_token();
		return;
	}
	if (!bpext_warm_restart)
	{
		start_cold("bpext.warm_restart is off", true);
		(void) warm_datadir_remove_token();
		return;
	}

	/* The tier file's I/O in a helper, which a hung device cannot stall. */
	tier_file_cache_identity();
	answered = run_in_helper(decide_in_helper, bpext_path, (char **) &result,
							 &resultlen, why, sizeof(why));

	/* Whatever happened, no later start may match the old token. */
	if (!warm_datadir_remove_token() && answered && resultlen >= sizeof(DecideResult) &&
		result->why[0] == '\0')
		strlcpy(result->why, "the data directory's token could not be removed",
				sizeof(result->why));

	if (!answered || resultlen < sizeof(DecideResult) || result->why[0] != '\0' ||
		resultlen != sizeof(DecideResult) + sizeof(SavedRel) * result->nrels)
	{
		if (answered && resultlen >= sizeof(DecideResult) && result->why[0] != '\0')
			strlcpy(why, result->why, sizeof(why));
		else if (answered)
			strlcpy(why, "the saved tier map could not be read", sizeof(why));
		start_cold(why, true);
		free(result);
		return;
	}

	/*
	 * Nothing left to load (a copied data directory, say: every file is
	 * another): say so as a cold start, not as a warm start of no pages.
	 */
	if (result->nrels == 0 && result->changed > 0)
	{
		snprintf(why, sizeof(why),
				 "the files of every saved relation fork changed while the server was down (first %s)",
				 result->changed_example);
		start_cold(why, true);
		free(result);
		return;
	}

	/* Saved in index order, as tier_map_warm_hold needs them. */
	rels = (SavedRel *) ((char *) result + sizeof(DecideResult));
	for (i = 0; i < result->nrels; i++)
	{
		if (rels[i].fork < 0 || rels[i].fork > MAX_FORKNUM)
			continue;
		if (tier_map_warm_hold(rels[i].index, &rels[i].rfile,
							   (ForkNumber) rels[i].fork, rels[i].generation,
							   rels[i].nblocks))
			held++;
	}

	Warm->mode = BPEXT_START_WARM;
	Warm->reason[0] = '\0';
	Warm->load_pending = true;
	strlcpy(Warm->path, bpext_path, sizeof(Warm->path));
	Warm->dev = result->dev;
	Warm->ino = result->ino;
	Warm->nonce = result->warm.nonce;
	Warm->npages = result->warm.npages;
	Warm->directory_id = result->warm.directory_id;
	Warm->saved_checkpoint = result->warm.checkpoint;
	Warm->held_rels = held;
	Warm->changed_rels = result->changed;
	strlcpy(Warm->changed_example, result->changed_example,
			sizeof(Warm->changed_example));
	Warm->log_decision = true;
	free(result);
}

/*
 * In the worker, when it starts: the postmaster's decision, in one LOG
 * line, once per start of the server.
 */
void
bpext_warm_log_decision(void)
{
	if (Warm->decision_logged)
		return;
	Warm->decision_logged = true;
	if (!Warm->log_decision)
		return;
	if (Warm->mode == BPEXT_START_WARM)
		ereport(LOG,
				(errmsg("bpext: warm start: reusing the tier map saved at the shutdown checkpoint %X/%X (%llu pages of %u relation forks)",
						LSN_FORMAT_ARGS(Warm->saved_checkpoint),
						(unsigned long long) Warm->npages, Warm->held_rels),
				 Warm->changed_rels > 0 ?
				 errdetail_plural("%u saved relation fork is not loaded because its files changed while the server was down (%s).",
								  "%u saved relation forks are not loaded because their files changed while the server was down (first %s).",
								  Warm->changed_rels, Warm->changed_rels,
								  Warm->changed_example) : 0));
	else
		ereport(LOG, (errmsg("bpext: cold start: %s", Warm->reason)));
}

/*
 * From the shmem startup hook.  In the postmaster, at its first start:
 * decide whether the tier starts warm, and arrange for the map to be
 * saved when the postmaster exits.  A reset of shared memory after a
 * crash starts cold.
 */
void
bpext_warm_startup(void)
{
	static bool started_before = false;

	if (IsUnderPostmaster || !IsPostmasterEnvironment)
		return;
	before_shmem_exit(save_map_at_exit, (Datum) 0);
	if (started_before)
	{
		start_cold("the server restarted after a crash",
				   tier_configured());
		return;
	}
	started_before = true;
	decide();
}

/* ---------------------------------------------------------------------
 * Loading, in the bpext worker
 * ---------------------------------------------------------------------
 */

/* Did the postmaster prepare a load of the tier file at path? */
bool
bpext_warm_load_pending(const char *path)
{
	if (!Warm->load_pending)
		return false;
	if (strcmp(Warm->path, path) != 0)
	{
		bpext_warm_abandon("bpext.path changed before the tier was enabled", false);
		return false;
	}
	return true;
}

/*
 * The file the postmaster checked, for the worker's helper to open as it
 * was left (tier_file_reopen): its path, identity and the nonce the
 * postmaster wrote into it.
 */
void
bpext_warm_file(char *path, size_t pathlen, uint64 *dev, uint64 *ino,
				uint64 *nonce)
{
	strlcpy(path, Warm->path, pathlen);
	*dev = Warm->dev;
	*ino = Warm->ino;
	*nonce = Warm->nonce;
}

/* The directory id of the saved map the worker is about to load. */
uint64
bpext_warm_directory_id(void)
{
	return Warm->directory_id;
}

/*
 * The tier is enabled on the file, its slot directory laid out with the
 * saved map's id, and warm_loading is set: start reading the directory.
 */
void
bpext_warm_begin_load(void)
{
	Warm->load_pending = false;
	if (step_entries == NULL)
	{
		step_entries = MemoryContextAllocHuge(TopMemoryContext,
											  sizeof(SlotDirEntry) *
											  TIER_DIR_ENTRIES_PER_CHUNK *
											  WARM_CHUNKS_PER_STEP);
		step_valid = MemoryContextAlloc(TopMemoryContext,
										sizeof(bool) * WARM_CHUNKS_PER_STEP);
		step_published = MemoryContextAlloc(TopMemoryContext,
											sizeof(bool) * WARM_STEP_ENTRIES);
		step_scratch = MemoryContextAlloc(TopMemoryContext,
										  sizeof(uint32) * 2 * WARM_STEP_ENTRIES);
	}
	Warm->loading = true;
	Warm->next_chunk = 0;
	/* In bpext_progress, as the tier's slots gone through. */
	bpext_progress_begin(BPEXT_PROGRESS_WARM_LOAD, slot_directory_nslots());
	Warm->map_epoch = pg_atomic_read_u32(&BpextCtl->map_epoch);
	Warm->file_incarnation = pg_atomic_read_u32(&BpextCtl->file_incarnation);
	Warm->load_started = GetCurrentTimestamp();
}

static void
finish_load(void)
{
	uint64		reused = pg_atomic_read_u64(&Warm->pages_reused);
	long		secs;
	int			usecs;

	TimestampDifference(Warm->load_started, GetCurrentTimestamp(), &secs, &usecs);
	ereport(LOG,
			(errmsg("bpext: warm start: %llu of %llu saved tier pages reused, loaded in %ld.%03d s",
					(unsigned long long) reused,
					(unsigned long long) Warm->npages, secs, usecs / 1000),
			 reused < Warm->npages ?
			 errdetail("The others were written, truncated or dropped after the server started, or were dead copies the tier had not yet swept.") : 0));
	Warm->loading = false;
	bpext_progress_end();
	tier_map_warm_release_holds();
}

/*
 * Publish the saved pages of the next chunks of the slot directory.
 * Returns true while there is more to load; false once the load is over
 * (finished or given up).
 */
bool
bpext_warm_load_step(int fd)
{
	uint32		total = TIER_DIR_CHUNKS(slot_directory_nslots());
	uint64		published;
	int			nchunks;
	int			i;

	if (!Warm->loading)
		return false;
	if (pg_atomic_read_u32(&BpextCtl->state) != BPEXT_STATE_ENABLED ||
		pg_atomic_read_u32(&BpextCtl->map_epoch) != Warm->map_epoch)
	{
		bpext_warm_abandon("the tier was emptied or switched off during the load",
						   false);
		return false;
	}
	if (Warm->next_chunk >= total)
	{
		finish_load();
		return false;
	}

	nchunks = slot_directory_read(fd, Warm->next_chunk, WARM_CHUNKS_PER_STEP,
								  step_entries, step_valid);
	if (nchunks <= 0)
	{
		char		why[256];

		snprintf(why, sizeof(why), "the saved tier map could not be read: %m");
		bpext_warm_abandon(why, true);
		return false;
	}
	/* A chunk whose CRC failed names nothing. */
	for (i = 0; i < nchunks; i++)
	{
		uint32		j;

		for (j = 0; !step_valid[i] && j < TIER_DIR_ENTRIES_PER_CHUNK; j++)
			step_entries[(Size) i * TIER_DIR_ENTRIES_PER_CHUNK + j].rel =
				TIER_INVALID_INDEX;
	}
	published = tier_map_warm_publish_run(step_entries,
										  Warm->next_chunk * TIER_DIR_ENTRIES_PER_CHUNK,
										  nchunks * TIER_DIR_ENTRIES_PER_CHUNK,
										  Warm->map_epoch, Warm->file_incarnation,
										  step_scratch, step_published);
	for (i = 0; i < nchunks; i++)
	{
		bool		current = true;
		uint32		j;

		for (j = 0; j < TIER_DIR_ENTRIES_PER_CHUNK; j++)
		{
			Size		k = (Size) i * TIER_DIR_ENTRIES_PER_CHUNK + j;

			if (step_entries[k].rel != TIER_INVALID_INDEX && !step_published[k])
				current = false;
		}
		slot_directory_note_loaded(Warm->next_chunk + i, step_valid[i], current);
	}
	Warm->next_chunk += nchunks;
	pg_atomic_fetch_add_u64(&Warm->pages_reused, published);
	bpext_progress_update(Min((uint64) Warm->next_chunk * TIER_DIR_ENTRIES_PER_CHUNK,
							  slot_directory_nslots()));
	return true;
}

/*
 * Give the saved map up (the tier starts, or goes on, cold): release what
 * the postmaster held, and say why.  pages_stay says whether the pages
 * published so far stay in the tier (they are as good as any the tier
 * admitted itself), and so still count as reused, or are being dropped.
 */
void
bpext_warm_abandon(const char *why, bool pages_stay)
{
	bool		was_loading = pg_atomic_read_u32(&BpextCtl->warm_loading) != 0;

	if (!Warm->load_pending && !was_loading && !Warm->loading)
		return;
	Warm->load_pending = false;

	/*
	 * The chunks not read yet name pages the map does not hold: they must
	 * not stay valid on disk.
	 */
	if (Warm->loading)
	{
		slot_directory_mark_all_dirty(Warm->next_chunk);
		bpext_progress_end();
	}
	Warm->loading = false;
	tier_map_warm_release_holds();
	pg_atomic_write_u32(&BpextCtl->warm_loading, 0);
	if (was_loading)
		tier_map_list_free_slots();

	LWLockAcquire(BpextCtl->control_lock, LW_EXCLUSIVE);
	Warm->mode = BPEXT_START_COLD;
	strlcpy(Warm->reason, why, sizeof(Warm->reason));
	LWLockRelease(BpextCtl->control_lock);
	if (!pages_stay)
		pg_atomic_write_u64(&Warm->pages_reused, 0);
	ereport(LOG,
			(errmsg("bpext: cold start: %s", why),
			 pages_stay ?
			 errdetail("The %llu saved pages loaded so far stay in the tier.",
					   (unsigned long long) pg_atomic_read_u64(&Warm->pages_reused)) : 0));
}

/*
 * The tier is being enabled empty, not by a warm start's load: it was
 * switched off (or moved to another file) after a warm start, or after a
 * load given up part way, and is on again.  Nothing of the saved map is in
 * it any more: no page counts as reused, and the view must stop calling
 * its start warm.
 */
void
bpext_warm_note_cold_enable(void)
{
	pg_atomic_write_u64(&Warm->pages_reused, 0);
	if (Warm->mode != BPEXT_START_WARM)
		return;
	LWLockAcquire(BpextCtl->control_lock, LW_EXCLUSIVE);
	Warm->mode = BPEXT_START_COLD;
	strlcpy(Warm->reason,
			"the tier was switched off after a warm start and started again empty",
			sizeof(Warm->reason));
	LWLockRelease(BpextCtl->control_lock);
}

void
bpext_warm_status(BpextStartMode *mode, char *reason, size_t reasonlen,
				  uint64 *pages_reused)
{
	LWLockAcquire(BpextCtl->control_lock, LW_SHARED);
	*mode = Warm->mode;
	strlcpy(reason, Warm->reason, reasonlen);
	LWLockRelease(BpextCtl->control_lock);
	*pages_reused = pg_atomic_read_u64(&Warm->pages_reused);
}

/*-------------------------------------------------------------------------
 *
 * prewarm.c
 *	  bpext_prewarm(regclass, fork): read a relation fork from its data
 *	  file straight into the tier, as pg_prewarm reads one into shared
 *	  buffers, split over the worker pool.
 *
 * The fork is cut into runs of PREWARM_RUN_BLOCKS blocks, each read with
 * one pread from its segment file (a run never straddles two segments).
 * Every block of a run that is not in the tier yet gets its admission
 * ticket before the read, so that a write racing with the read makes the
 * copy fail to publish (tier_map.c); pages are written to the tier in
 * batches.  The backend holds AccessShareLock on the relation for the
 * whole scan, so its files stay where they are while the workers read
 * them.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <unistd.h>

#include "access/relation.h"
#include "access/xlog.h"
#include "catalog/pg_class.h"
#include "common/relpath.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "storage/smgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/wait_event.h"

#include "prewarm.h"
#include "progress.h"
#include "scan_pool.h"
#include "settings.h"
#include "sql_api.h"
#include "stats.h"
#include "tier_control.h"
#include "tier_io.h"
#include "tier_map.h"
#include "wait_events.h"

PG_FUNCTION_INFO_V1(bpext_prewarm);

#define PREWARM_RUN_BLOCKS		16	/* 128 kB per read */
#define PREWARM_BATCH_PAGES		64

StaticAssertDecl(RELSEG_SIZE % PREWARM_RUN_BLOCKS == 0,
				 "a prewarm run must not straddle two segment files");

/* This process's batch, read buffer and open segment file. */
static TierBatch *batch = NULL;
static char *run_buffer = NULL;
static int	segment_fd = -1;
static BlockNumber segment_no = InvalidBlockNumber;

static void
close_segment(void)
{
	if (segment_fd >= 0)
		CloseTransientFile(segment_fd);
	segment_fd = -1;
	segment_no = InvalidBlockNumber;
}

/* The file of the segment holding the task's blocks, opened once per task. */
static int
open_segment(const BpextScanArgs *args, BlockNumber segno)
{
	char	   *path;

	if (segment_fd >= 0 && segment_no == segno)
		return segment_fd;
	close_segment();
	path = bpext_relpath_perm(args->rfile, args->fork);
	if (segno > 0)
	{
		char	   *segpath = psprintf("%s.%u", path, segno);

		pfree(path);
		path = segpath;
	}
	segment_fd = OpenTransientFile(path, O_RDONLY | PG_BINARY);
	if (segment_fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", path)));
	segment_no = segno;
	pfree(path);
	return segment_fd;
}

static void
flush_batch(BpextScan *scan)
{
	int			published = tier_batch_flush(batch);

	bpext_scan_count(scan, published, 0);
}

/* A unit of bpext_prewarm: one run of blocks. */
void
bpext_prewarm_unit(BpextScan *scan, uint64 unit)
{
	const BpextScanArgs *args = bpext_scan_args(scan);
	BlockNumber first = (BlockNumber) (unit * PREWARM_RUN_BLOCKS);
	BlockNumber end = Min(first + PREWARM_RUN_BLOCKS, args->nblocks);
	BlockNumber blocks[PREWARM_RUN_BLOCKS];
	int			n = 0;
	int			i;
	int			fd;
	ssize_t		nread;

	bpext_scan_count(scan, 0, end - first);
	if (!bpext_tier_enabled())
		return;
	if (batch == NULL)
	{
		batch = tier_batch_create(PREWARM_BATCH_PAGES, BPEXT_SOURCE_PREWARM);
		run_buffer = MemoryContextAlloc(TopMemoryContext,
										PREWARM_RUN_BLOCKS * BLCKSZ);
	}
	if (batch->npages + PREWARM_RUN_BLOCKS > batch->capacity)
		flush_batch(scan);

	for (i = 0; first + i < end; i++)
	{
		BlockNumber block = first + i;

		if (tier_map_contains(&args->rfile, args->fork, block) ||
			tier_batch_begin(batch, &args->rfile, args->fork, block) == NULL)
			continue;
		blocks[n++] = block;
	}
	if (n == 0)
		return;

	fd = open_segment(args, first / RELSEG_SIZE);
	pgstat_report_wait_start(WAIT_EVENT_DATA_FILE_READ);
	nread = pg_pread(fd, run_buffer, (Size) (blocks[n - 1] - first + 1) * BLCKSZ,
					 (off_t) (first % RELSEG_SIZE) * BLCKSZ);
	pgstat_report_wait_end();
	if (nread < 0)
	{
		int			save_errno = errno;

		tier_batch_cancel_pending(batch);
		errno = save_errno;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not read blocks %u..%u of relation %s: %m",
						first, blocks[n - 1],
						bpext_relpath_perm(args->rfile, args->fork))));
	}

	for (i = 0; i < n; i++)
	{
		Size		at = (Size) (blocks[i] - first) * BLCKSZ;

		/* A short read: the fork is shorter than the leader saw. */
		if (at + BLCKSZ > (Size) nread)
		{
			tier_batch_cancel_pending(batch);
			break;
		}
		memcpy(batch->pages[batch->npages], run_buffer + at, BLCKSZ);
		tier_batch_add(batch, &args->rfile, args->fork, blocks[i]);
	}
}

/* The end of a task: write what the batch holds, or give it up. */
void
bpext_prewarm_end_task(BpextScan *scan, bool completed)
{
	if (batch != NULL)
	{
		if (completed)
			flush_batch(scan);
		else
			tier_batch_abandon(batch);
	}
	close_segment();
}

/*
 * bpext_prewarm(regclass, fork text) returns bigint
 *
 * Pages already in the tier are skipped; returns the number of pages
 * loaded.
 */
Datum
bpext_prewarm(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	char	   *forkname = text_to_cstring(PG_GETARG_TEXT_PP(1));
	ForkNumber	fork = forkname_to_number(forkname);
	Relation	rel;
	SMgrRelation smgr;
	AclResult	aclresult;
	BpextScanSpec spec;
	BpextScanResult result;

	bpext_require_preloaded();

	rel = relation_open(relid, AccessShareLock);
	aclresult = pg_class_aclcheck(relid, GetUserId(), ACL_SELECT);
	if (aclresult != ACLCHECK_OK)
		aclcheck_error(aclresult, get_relkind_objtype(rel->rd_rel->relkind),
					   get_rel_name(relid));
	if (RelationUsesLocalBuffers(rel))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("temporary relations are never cached in the bpext tier")));

	/*
	 * At promotion an unlogged relation's forks are rebuilt from its init
	 * fork by copying files, behind the storage manager.  Nothing reads
	 * them during recovery, so no tier copy can exist then, but this.
	 */
	if (RecoveryInProgress() &&
		rel->rd_rel->relpersistence == RELPERSISTENCE_UNLOGGED)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("unlogged relation \"%s\" cannot be prewarmed into the tier during recovery",
						RelationGetRelationName(rel)),
				 errdetail("Its files are replaced when the server is promoted.")));
	if (!RELKIND_HAS_STORAGE(rel->rd_rel->relkind))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("relation \"%s\" has no storage",
						RelationGetRelationName(rel))));
	smgr = RelationGetSmgr(rel);
	if (!smgrexists(smgr, fork))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("fork \"%s\" does not exist for relation \"%s\"",
						forkname, RelationGetRelationName(rel))));
	if (!bpext_tier_enabled())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the bpext tier is not enabled"),
				 errhint("Enable it with SELECT bpext_enable('/path/to/file', '10GB').")));

	/*
	 * While a warm start loads the saved map no slot can be taken: wait
	 * for the load (seconds, even for a large tier) rather than read the
	 * relation for nothing.
	 */
	while (pg_atomic_read_u32(&BpextCtl->warm_loading) != 0)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 10, BPEXT_WAIT_EVENT(BPEXT_WAIT_WARM_LOAD));
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}

	memset(&spec, 0, sizeof(spec));
	spec.record_if_idle = true;
	spec.op = BPEXT_SCAN_PREWARM;
	spec.args.dbid = MyDatabaseId;
	spec.args.rfile = BPEXT_SMGR_RELFILE(RelationGetSmgr(rel));
	spec.args.fork = fork;
	spec.args.nblocks = RelationGetNumberOfBlocksInFork(rel, fork);
	spec.nranges = 1;
	spec.ranges[0].nunits = ((uint64) spec.args.nblocks + PREWARM_RUN_BLOCKS - 1) /
		PREWARM_RUN_BLOCKS;
	spec.ranges[0].units_per_task =
		Max(1, bpext_scan_task_buffers / PREWARM_RUN_BLOCKS);
	spec.total_buffers = spec.args.nblocks;
	bpext_progress_begin(BPEXT_PROGRESS_PREWARM, spec.total_buffers);
	bpext_progress_set_target(MyDatabaseId, relid, NULL);
	bpext_scan_run(&spec, &result);
	bpext_progress_end();

	relation_close(rel, AccessShareLock);
	PG_RETURN_INT64((int64) result.scanned);
}

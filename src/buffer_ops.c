/*-------------------------------------------------------------------------
 *
 * buffer_ops.c
 *	  bpext_drop_clean_buffers() and bpext_flush(database): SQL Server's
 *	  DBCC DROPCLEANBUFFERS and DBCC FLUSH, as scans over the worker pool.
 *
 * Dropping a clean buffer is PostgreSQL 17's EvictUnpinnedBuffer, called
 * for buffers that are valid, not dirty, not being read or written and not
 * pinned (one dirtied in between is written out, then dropped).  15 has no
 * such function, so there bpext does what bufmgr.c's InvalidateBuffer does
 * for a dropped relation, restricted to such buffers: under the buffer
 * mapping partition lock
 * held exclusive and the buffer header lock, the tag is cleared, the
 * mapping entry deleted and the buffer put on the free list.  Nobody can
 * pin the buffer meanwhile (ReadBuffer finds it under the mapping lock,
 * ReadRecentBuffer checks its tag under the header lock), and the data
 * file holds its image, so nothing is lost.  The tier
 * is then emptied piece by piece after tier_map_begin_drop has made
 * admissions in flight fail, and after the slot directory was asked for a
 * new id, so that the emptied chunks need not be written to the SSD (the
 * bpext worker writes no chunk until the drop ends, failed or not).
 *
 * Flushing pins each dirty buffer of the database with ReadRecentBuffer,
 * takes the content lock FlushOneBuffer requires (share, or from 19 on
 * share-exclusive: BPEXT_BUFFER_LOCK_WRITE_IMAGE) and writes it, as
 * FlushDatabaseBuffers does (which runs in one process and cannot be
 * split).  ReadRecentBuffer re-checks the tag and, for a first pin, leaves
 * the usage count alone, so flushing does not make pages look hot.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_authid.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/buf_internals.h"
#include "storage/bufmgr.h"
#include "storage/ipc.h"
#include "utils/acl.h"
#include "utils/builtins.h"

#include "buffer_ops.h"
#include "progress.h"
#include "scan_pool.h"
#include "settings.h"
#include "slot_directory.h"
#include "sql_api.h"
#include "tier_map.h"

PG_FUNCTION_INFO_V1(bpext_drop_clean_buffers);
PG_FUNCTION_INFO_V1(bpext_flush);

#define UNDROPPABLE_FLAGS \
	(BM_DIRTY | BPEXT_BM_DIRTIED_DURING_WRITE | BM_IO_IN_PROGRESS)

static bool
droppable(BpextBufState state)
{
	return (state & BM_TAG_VALID) && !(state & UNDROPPABLE_FLAGS) &&
		BUF_STATE_GET_REFCOUNT(state) == 0;
}

/* Take shared buffer i out of the pool if it is clean and unused. */
static bool
drop_clean_buffer(int i)
{
	BufferDesc *desc = GetBufferDescriptor(i);
#if !BPEXT_HAVE_EVICT_UNPINNED_BUFFER
	BufferTag	tag;
	uint32		hash;
	LWLock	   *partition_lock;
	uint32		state;
#endif

	/* Most buffers are ruled out without any lock. */
	if (!droppable(bpext_buf_state_read(desc)))
		return false;
#if BPEXT_HAVE_EVICT_UNPINNED_BUFFER

	/*
	 * It re-checks under the header lock that the buffer is valid and
	 * unpinned; one dirtied since our look is written out first.
	 */
	return bpext_evict_unpinned_buffer(BufferDescriptorGetBuffer(desc));
#else
	state = LockBufHdr(desc);
	tag = desc->tag;
	UnlockBufHdr(desc, state);
	if (!droppable(state))
		return false;

	hash = BufTableHashCode(&tag);
	partition_lock = BufMappingPartitionLock(hash);
	LWLockAcquire(partition_lock, LW_EXCLUSIVE);
	state = LockBufHdr(desc);
	if (!droppable(state) || !BPEXT_BUFTAGS_EQUAL(tag, desc->tag))
	{
		UnlockBufHdr(desc, state);
		LWLockRelease(partition_lock);
		return false;
	}
	bpext_clear_buffer_tag(desc->tag);
	state &= ~(BUF_FLAG_MASK | BUF_USAGECOUNT_MASK);
	UnlockBufHdr(desc, state);
	BufTableDelete(&tag, hash);
	LWLockRelease(partition_lock);
	StrategyFreeBuffer(desc);
	return true;
#endif
}

/*
 * A unit of bpext_drop_clean_buffers: a shared buffer, or (past the
 * buffers) a piece of the tier map.
 */
void
bpext_drop_clean_unit(BpextScan *scan, uint64 unit)
{
	const BpextScanArgs *args = bpext_scan_args(scan);

	if (unit < args->buffer_units)
		bpext_scan_count(scan, drop_clean_buffer((int) unit) ? 1 : 0, 1);
	else
	{
		uint32		dropped;

		dropped = tier_map_unhash_piece((uint32) (unit - args->buffer_units),
										false);
		bpext_scan_count(scan, dropped, dropped);
	}
}

/* A unit of bpext_flush: write shared buffer unit if it is dirty and of
 * the database. */
void
bpext_flush_unit(BpextScan *scan, uint64 unit)
{
	const BpextScanArgs *args = bpext_scan_args(scan);
	BufferDesc *desc = GetBufferDescriptor((int) unit);
	Buffer		buffer = BufferDescriptorGetBuffer(desc);
	BufferTag	tag;
	BpextBufState state;

	bpext_scan_count(scan, 0, 1);
	state = bpext_buf_state_read(desc);
	if ((state & (BM_VALID | BM_DIRTY)) != (BM_VALID | BM_DIRTY))
		return;
	state = LockBufHdr(desc);
	tag = desc->tag;
	bpext_unlock_buf_hdr(desc, state);
	if ((state & (BM_VALID | BM_DIRTY)) != (BM_VALID | BM_DIRTY) ||
		BPEXT_BUFTAG_DB(tag) != args->dbid)
		return;

	/* The buffer may have been reused since: then this pins nothing. */
	if (!ReadRecentBuffer(BPEXT_BUFTAG_RELFILE(tag), BPEXT_BUFTAG_FORK(tag),
						  BPEXT_BUFTAG_BLOCK(tag), buffer))
		return;
	LockBuffer(buffer, BPEXT_BUFFER_LOCK_WRITE_IMAGE);
	if (bpext_buf_state_read(desc) & BM_DIRTY)
	{
		FlushOneBuffer(buffer);
		bpext_scan_count(scan, 1, 0);
	}
	UnlockReleaseBuffer(buffer);
}

/* Has this backend begun a drop of the whole map it has not ended? */
static bool whole_map_drop_running = false;

/*
 * The slot directory may be written again (slot_directory_end_drop): the
 * drop of the whole map is over, done, failed or cancelled.
 */
static void
end_whole_map_drop(void)
{
	if (whole_map_drop_running)
	{
		whole_map_drop_running = false;
		slot_directory_end_drop();
	}
}

/*
 * The same at backend exit (a FATAL error during the drop).  Registered
 * once, and for good: the scan registers exit callbacks of its own, so
 * one pushed and popped around it would not be the latest when popped.
 */
static void
end_whole_map_drop_at_exit(int code, Datum arg)
{
	end_whole_map_drop();
}

/*
 * bpext_drop_clean_buffers() returns bigint
 *
 * Drop every clean, unpinned page from shared buffers and every page from
 * the tier, so that the next reads come from the data files (cold-cache
 * testing).  Returns the number of pages dropped from both.
 */
Datum
bpext_drop_clean_buffers(PG_FUNCTION_ARGS)
{
	static bool exit_callback_registered = false;
	BpextScanSpec spec;
	BpextScanResult result;

	bpext_require_preloaded();
	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to drop clean buffers"),
				 errdetail("Only superusers may call bpext_drop_clean_buffers().")));

	memset(&spec, 0, sizeof(spec));
	spec.record_if_idle = true;
	spec.op = BPEXT_SCAN_DROP_CLEAN;
	spec.args.dbid = InvalidOid;
	spec.args.buffer_units = NBuffers;
	bpext_scan_buffers_and_tier(&spec);
	if (spec.nranges > 1)
	{
		if (!exit_callback_registered)
		{
			before_shmem_exit(end_whole_map_drop_at_exit, (Datum) 0);
			exit_callback_registered = true;
		}
		tier_map_begin_drop();
		whole_map_drop_running = true;
		slot_directory_begin_drop();
	}
	PG_TRY();
	{
		bpext_progress_begin(BPEXT_PROGRESS_DROP_CLEAN, spec.total_buffers);
		bpext_scan_run(&spec, &result);
		bpext_progress_end();
	}
	PG_FINALLY();
	{
		end_whole_map_drop();
	}
	PG_END_TRY();
	PG_RETURN_INT64((int64) result.scanned);
}

/*
 * bpext_flush(database name) returns bigint
 *
 * Write every dirty shared buffer of the database to its data file; as
 * CHECKPOINT, for superusers and members of pg_checkpoint.  Returns the
 * number of buffers written.
 */
Datum
bpext_flush(PG_FUNCTION_ARGS)
{
	char	   *dbname = NameStr(*PG_GETARG_NAME(0));
	BpextScanSpec spec;
	BpextScanResult result;

	bpext_require_preloaded();
	if (!has_privs_of_role(GetUserId(), ROLE_PG_CHECKPOINT))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to flush buffers"),
				 errdetail("Only superusers and roles with privileges of pg_checkpoint may call bpext_flush().")));

	memset(&spec, 0, sizeof(spec));
	spec.record_if_idle = true;
	spec.op = BPEXT_SCAN_FLUSH;
	spec.args.dbid = get_database_oid(dbname, false);
	spec.nranges = 1;
	spec.ranges[0].nunits = NBuffers;
	spec.ranges[0].units_per_task = bpext_scan_task_buffers;
	spec.total_buffers = NBuffers;
	bpext_progress_begin(BPEXT_PROGRESS_FLUSH, spec.total_buffers);
	bpext_progress_set_target(spec.args.dbid, InvalidOid, NULL);
	bpext_scan_run(&spec, &result);
	bpext_progress_end();
	PG_RETURN_INT64((int64) result.scanned);
}

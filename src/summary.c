/*-------------------------------------------------------------------------
 *
 * summary.c
 *	  bpext_buffer_summary: the pages of each relation fork in shared
 *	  buffers (and how many of them are dirty) and in the tier, the
 *	  figures DBAs get from SQL Server's sys.dm_os_buffer_descriptors with
 *	  GROUP BY, counted without listing every page.
 *
 * A 1 TB tier holds 134M pages: listing them all into a tuplestore to
 * group them takes minutes.  This scan runs over the worker pool like the
 * listing (scan_pool.c), but every participant counts the pages of its
 * task in a small hash table of its own, keyed by relation fork, and hands
 * over one partial row per relation fork the task met, from end_task; the
 * leader merges the partial rows in a hash table of its own and returns
 * one row per relation fork.  A task that stops before its end hands over
 * nothing, so every page is counted once.
 *
 * Shared buffers are read as the listing reads them: a buffer's tag and
 * flags under its header spinlock, one buffer at a time.  The tier is
 * read in slot order without its locks (tier_map_count_slots), a few MB
 * of the map per task; its counts are exact on a quiet tier and may be
 * off by the pages that change hands during the scan on a busy one.
 *
 * Locking protocol: none of its own.  The hash tables are private to each
 * process; the buffer header spinlock is held for a tag copy.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "funcapi.h"
#include "storage/buf_internals.h"
#include "storage/bufmgr.h"
#include "utils/memutils.h"
#include "utils/tuplestore.h"

#include "compat.h"
#include "scan_pool.h"
#include "settings.h"
#include "sql_api.h"
#include "summary.h"
#include "tier_control.h"
#include "tier_map.h"

PG_FUNCTION_INFO_V1(bpext_buffer_summary_1_3);

#define SUMMARY_COLUMNS				7

/* Shared buffers per unit, and tier slots per unit. */
#define SUMMARY_BUFFERS_PER_UNIT	256
#define SUMMARY_SLOTS_PER_UNIT		4096

/* A relation fork; no padding, so it can be hashed as bytes. */
typedef struct SummaryKey
{
	Oid			spc;
	Oid			db;
	Oid			relnumber;
	int32		fork;
} SummaryKey;

typedef struct SummaryEntry
{
	SummaryKey	key;
	char		status;			/* simplehash's */
	uint64		ram_pages;
	uint64		ssd_pages;
	uint64		dirty_pages;
} SummaryEntry;

#define SH_PREFIX		counts
#define SH_ELEMENT_TYPE	SummaryEntry
#define SH_KEY_TYPE		SummaryKey
#define SH_KEY			key
#define SH_HASH_KEY(tb, k)	hash_bytes((const unsigned char *) &(k), sizeof(SummaryKey))
#define SH_EQUAL(tb, a, b)	(memcmp(&(a), &(b), sizeof(SummaryKey)) == 0)
#define SH_SCOPE		static inline
#define SH_DECLARE
#define SH_DEFINE
#include "lib/simplehash.h"

/*
 * A hash table of counts, with the entry found last: consecutive buffers
 * and slots often hold pages of the same relation fork.
 */
typedef struct Summary
{
	counts_hash *hash;
	SummaryEntry *last;
} Summary;

/* This process's counts for the task under way. */
static Summary task_counts = {NULL, NULL};

static void
summary_init(Summary *s, MemoryContext cxt)
{
	s->hash = counts_create(cxt, 256, NULL);
	s->last = NULL;
}

static SummaryEntry *
summary_entry(Summary *s, Oid spc, Oid db, Oid relnumber, ForkNumber fork)
{
	SummaryKey	key;
	SummaryEntry *e;
	bool		found;

	if (s->last != NULL && s->last->key.relnumber == relnumber &&
		s->last->key.db == db && s->last->key.spc == spc &&
		s->last->key.fork == (int32) fork)
		return s->last;
	memset(&key, 0, sizeof(key));
	key.spc = spc;
	key.db = db;
	key.relnumber = relnumber;
	key.fork = (int32) fork;
	e = counts_insert(s->hash, key, &found);
	if (!found)
		e->ram_pages = e->ssd_pages = e->dirty_pages = 0;
	/* An insertion may move entries: only the newest pointer is good. */
	s->last = e;
	return e;
}

static void
summary_clear(Summary *s)
{
	counts_reset(s->hash);
	s->last = NULL;
}

/* Count the pages of shared buffers [first, end). */
static uint64
count_buffers(Summary *s, int first, int end)
{
	uint64		pages = 0;
	int			i;

	for (i = first; i < end; i++)
	{
		BufferDesc *desc = GetBufferDescriptor(i);
		BpextBufState state = bpext_buf_state_read(desc);
		BufferTag	tag;
		BpextRelFile rfile;
		SummaryEntry *e;

		/* Most empty buffers are passed over without the lock. */
		if ((state & (BM_VALID | BM_TAG_VALID)) != (BM_VALID | BM_TAG_VALID))
			continue;
		state = LockBufHdr(desc);
		if ((state & (BM_VALID | BM_TAG_VALID)) != (BM_VALID | BM_TAG_VALID))
		{
			bpext_unlock_buf_hdr(desc, state);
			continue;
		}
		tag = desc->tag;
		bpext_unlock_buf_hdr(desc, state);

		rfile = BPEXT_BUFTAG_RELFILE(tag);
		e = summary_entry(s, BPEXT_RELFILE_SPC(rfile), BPEXT_RELFILE_DB(rfile),
						  BPEXT_RELFILE_NUMBER(rfile), BPEXT_BUFTAG_FORK(tag));
		e->ram_pages++;
		if (state & BM_DIRTY)
			e->dirty_pages++;
		pages++;
	}
	return pages;
}

typedef struct TierCount
{
	Summary    *summary;
	uint64		pages;
} TierCount;

static void
count_tier_run(const BpextRelFile *rfile, ForkNumber fork, uint64 pages,
			   void *arg)
{
	TierCount  *tc = (TierCount *) arg;
	SummaryEntry *e;

	e = summary_entry(tc->summary, BPEXT_RELFILE_SPC(*rfile),
					  BPEXT_RELFILE_DB(*rfile), BPEXT_RELFILE_NUMBER(*rfile),
					  fork);
	e->ssd_pages += pages;
	tc->pages += pages;
}

/*
 * A unit of the summary scan: SUMMARY_BUFFERS_PER_UNIT shared buffers, or
 * (past the buffers) SUMMARY_SLOTS_PER_UNIT tier slots.
 */
void
bpext_summary_unit(BpextScan *scan, uint64 unit)
{
	const BpextScanArgs *args = bpext_scan_args(scan);

	if (task_counts.hash == NULL)
		summary_init(&task_counts, TopMemoryContext);

	if (unit < args->buffer_units)
	{
		int			first = (int) (unit * SUMMARY_BUFFERS_PER_UNIT);
		int			end = Min(first + SUMMARY_BUFFERS_PER_UNIT, NBuffers);

		bpext_scan_count(scan, count_buffers(&task_counts, first, end),
						 end - first);
	}
	else
	{
		uint64		first = (unit - args->buffer_units) * SUMMARY_SLOTS_PER_UNIT;
		uint64		end = Min(first + SUMMARY_SLOTS_PER_UNIT, args->end_slot);
		TierCount	tc = {&task_counts, 0};

		tier_map_count_slots((uint32) first, (uint32) end, count_tier_run, &tc);
		bpext_scan_count(scan, tc.pages, end - first);
	}
}

static void
entry_values(const SummaryEntry *e, Datum *values, bool *nulls)
{
	memset(nulls, 0, sizeof(bool) * SUMMARY_COLUMNS);
	values[0] = ObjectIdGetDatum(e->key.db);
	values[1] = ObjectIdGetDatum(e->key.spc);
	values[2] = ObjectIdGetDatum(e->key.relnumber);
	values[3] = Int16GetDatum((int16) e->key.fork);
	values[4] = Int64GetDatum((int64) e->ram_pages);
	values[5] = Int64GetDatum((int64) e->ssd_pages);
	values[6] = Int64GetDatum((int64) e->dirty_pages);
}

/*
 * The end of a task: hand over one partial row per relation fork it met,
 * or, if it did not finish, forget its counts (its units will be counted
 * again by whoever runs it next).
 */
void
bpext_summary_end_task(BpextScan *scan, bool completed)
{
	counts_iterator it;
	SummaryEntry *e;

	if (task_counts.hash == NULL)
		return;
	if (completed)
	{
		Datum		values[SUMMARY_COLUMNS];
		bool		nulls[SUMMARY_COLUMNS];

		counts_start_iterate(task_counts.hash, &it);
		while ((e = counts_iterate(task_counts.hash, &it)) != NULL)
		{
			entry_values(e, values, nulls);
			bpext_scan_emit(scan, values, nulls);
		}
	}
	summary_clear(&task_counts);
}

/* The leader: add a task's partial row to the totals. */
static void
merge_partial(void *arg, Datum *values, bool *nulls)
{
	Summary    *totals = (Summary *) arg;
	SummaryEntry *e;

	e = summary_entry(totals, DatumGetObjectId(values[1]),
					  DatumGetObjectId(values[0]), DatumGetObjectId(values[2]),
					  (ForkNumber) DatumGetInt16(values[3]));
	e->ram_pages += (uint64) DatumGetInt64(values[4]);
	e->ssd_pages += (uint64) DatumGetInt64(values[5]);
	e->dirty_pages += (uint64) DatumGetInt64(values[6]);
}

/*
 * bpext_buffer_summary_1_3(): one row per relation fork with pages in
 * shared buffers or in the tier: its pages in each, and its dirty pages
 * (tier pages are never dirty).
 */
Datum
bpext_buffer_summary_1_3(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	BpextScanSpec spec;
	BpextScanResult result;
	Summary		totals;
	counts_iterator it;
	SummaryEntry *e;

	bpext_require_preloaded();
	InitMaterializedSRF(fcinfo, 0);
	summary_init(&totals, CurrentMemoryContext);

	memset(&spec, 0, sizeof(spec));
	spec.op = BPEXT_SCAN_SUMMARY;
	spec.record_if_idle = true;
	spec.args.dbid = InvalidOid;
	spec.args.buffer_units = ((uint64) NBuffers + SUMMARY_BUFFERS_PER_UNIT - 1) /
		SUMMARY_BUFFERS_PER_UNIT;
	spec.nranges = 1;
	spec.ranges[0].nunits = spec.args.buffer_units;
	spec.ranges[0].units_per_task =
		Max(1, bpext_scan_task_buffers / SUMMARY_BUFFERS_PER_UNIT);
	spec.total_buffers = NBuffers;
	if (bpext_tier_enabled())
		bpext_scan_add_slot_range(&spec, SUMMARY_SLOTS_PER_UNIT);
	spec.rsinfo = rsinfo;
	spec.sink = merge_partial;
	spec.sink_arg = &totals;
	bpext_scan_run(&spec, &result);

	counts_start_iterate(totals.hash, &it);
	while ((e = counts_iterate(totals.hash, &it)) != NULL)
	{
		Datum		values[SUMMARY_COLUMNS];
		bool		nulls[SUMMARY_COLUMNS];

		entry_values(e, values, nulls);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*-------------------------------------------------------------------------
 *
 * descriptors.c
 *	  bpext_buffer_descriptors: one row per page held in shared buffers or
 *	  in the tier, with SQL Server's sys.dm_os_buffer_descriptors columns
 *	  and pg_buffercache's.
 *
 * Shared buffers are read as pg_buffercache reads them: the header under
 * its spinlock, one buffer at a time, so the view never blocks the server.
 * The content-derived columns (page_type, page_level, row_count,
 * free_space_in_bytes) come from the page header and special space copied
 * without the content lock; the tag is checked again afterwards and rows
 * for buffers that changed meanwhile are left out.  A page being modified
 * at that moment may show slightly stale figures: this is monitoring.
 *
 * Tier pages are listed from the map's slot array in slot order, without
 * the map's locks (tier_map_foreach_slot), a range of slots per unit of
 * the scan: at a terabyte (134M pages) following the index entries cost a
 * cache miss per row.  Consistency under concurrent change: every tier
 * row is a page its slot held, current (its relation's generation had
 * not moved on), at some moment during the scan; a dead page is never
 * listed.  A page published, evicted or invalidated while the scan runs
 * may be listed or not, and slots beyond the tier's size when the scan
 * starts (a shrink in progress) are not listed.  On a quiet tier the
 * listing is exact.  Their content columns are NULL unless asked for
 * (bpext_buffer_descriptors(true)), which reads each page as a tier read
 * does (the slot pinned, the CRC checked, an I/O error or a mismatch
 * switching the tier off) without counting it as one.
 *
 * read_microsec is recorded by the smgr read wrapper for every shared
 * buffer it fills, in a per-buffer array in shared memory written only by
 * the process doing the read (which holds the buffer's I/O in progress).
 *
 * numa_node is asked of the kernel for each shared buffer listed, on 18
 * (PostgreSQL's NUMA support); NULL before 18 and for tier pages.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "access/brin_page.h"
#include "access/gist.h"
#include "access/hash.h"
#include "access/nbtree.h"
#include "access/spgist_private.h"
#include "funcapi.h"
#include "storage/buf_internals.h"
#include "storage/bufmgr.h"
#include "storage/bufpage.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "compat.h"
#include "descriptors.h"
#include "scan_pool.h"
#include "settings.h"
#include "sql_api.h"
#include "tier_control.h"
#include "tier_file.h"
#include "tier_io.h"
#include "tier_map.h"

#if BPEXT_HAS_PG_NUMA
#include "port/pg_numa.h"
#endif

PG_FUNCTION_INFO_V1(bpext_buffer_descriptors_1_0);

#define DESCRIPTOR_COLUMNS	20

/*
 * Tier slots per unit of the scan: a unit's rows (about 100 bytes each)
 * must fit a worker's output buffer.
 */
#define DESCRIPTOR_SLOTS_PER_UNIT	1024

/* Magic number in a sequence page's special space (sequence.c). */
#define SEQUENCE_PAGE_MAGIC	0x1717

/* Microseconds the read that filled each shared buffer took. */
static pg_atomic_uint32 *buffer_read_us = NULL;

Size
bpext_descriptors_shmem_size(void)
{
	return mul_size(NBuffers, sizeof(pg_atomic_uint32));
}

void
bpext_descriptors_shmem_init(bool found)
{
	buffer_read_us = ShmemInitStruct("bpext buffer read times",
									 bpext_descriptors_shmem_size(), &found);
	if (!found)
	{
		int			i;

		for (i = 0; i < NBuffers; i++)
			pg_atomic_init_u32(&buffer_read_us[i], 0);
	}
}

/* buffer_read_us value of a page whose read bpext could not time. */
#define READ_TIME_UNKNOWN	PG_UINT32_MAX

static void
record_read_time(const char *buffer, uint32 value)
{
	uintptr_t	offset = (uintptr_t) buffer - (uintptr_t) BufferBlocks;

	if (buffer_read_us == NULL || buffer < BufferBlocks ||
		offset >= (uintptr_t) NBuffers * BLCKSZ || offset % BLCKSZ != 0)
		return;
	pg_atomic_write_u32(&buffer_read_us[offset / BLCKSZ], value);
}

/*
 * Record how long the read into this page took, if the page is a shared
 * buffer (smgr reads also go to private and local buffers).
 */
void
bpext_note_buffer_read(const char *buffer, uint64 microseconds)
{
	record_read_time(buffer,
					 (uint32) Min(microseconds, READ_TIME_UNKNOWN - 1));
}

/*
 * The page is being read by an I/O that completes out of bpext's sight
 * (PostgreSQL 18's asynchronous reads): its read_microsec is NULL.
 */
void
bpext_note_buffer_read_untimed(const char *buffer)
{
	record_read_time(buffer, READ_TIME_UNKNOWN);
}

/* What the content says about a page. */
typedef struct PageFacts
{
	const char *type;
	int			level;			/* btree level, or -1 */
	int			row_count;		/* line pointers, or -1 */
	int			free_space;		/* bytes between pd_lower and pd_upper, or
								 * -1 */
} PageFacts;

/*
 * Classify a page from its header and special space, as pageinspect would
 * per access method, without knowing the access method: the size and the
 * magic numbers of the special space tell them apart.  Only the first
 * SizeOfPageHeaderData bytes and the last 16 need to be valid in page.
 */
static PageFacts
classify_page(const char *page, ForkNumber fork)
{
	PageHeader	ph = (PageHeader) page;
	PageFacts	f = {"unknown", -1, -1, -1};
	Size		special;
	uint16		tail_id;

	if (fork == FSM_FORKNUM)
		f.type = "fsm";
	else if (fork == VISIBILITYMAP_FORKNUM)
		f.type = "vm";
	if (PageIsNew((Page) page))
	{
		f.type = "new";
		return f;
	}
	if (ph->pd_lower < SizeOfPageHeaderData || ph->pd_lower > ph->pd_upper ||
		ph->pd_upper > ph->pd_special || ph->pd_special > BLCKSZ ||
		ph->pd_special != MAXALIGN(ph->pd_special))
		return f;

	f.row_count = (ph->pd_lower - SizeOfPageHeaderData) / sizeof(ItemIdData);
	f.free_space = ph->pd_upper - ph->pd_lower;
	if (fork == FSM_FORKNUM || fork == VISIBILITYMAP_FORKNUM)
		return f;

	special = BLCKSZ - ph->pd_special;
	tail_id = *(const uint16 *) (page + BLCKSZ - sizeof(uint16));
	if (special == 0)
		f.type = "heap";
	else if (special == MAXALIGN(sizeof(BTPageOpaqueData)) &&
			 tail_id == HASHO_PAGE_ID)
		f.type = "hash";
	else if (special == MAXALIGN(sizeof(GISTPageOpaqueData)) &&
			 tail_id == GIST_PAGE_ID)
		f.type = "gist";
	else if (special == MAXALIGN(sizeof(BTPageOpaqueData)))
	{
		const BTPageOpaqueData *bt =
			(const BTPageOpaqueData *) (page + ph->pd_special);

		if (bt->btpo_flags & BTP_META)
			f.type = "btree_meta";
		else if (bt->btpo_flags & (BTP_DELETED | BTP_HALF_DEAD))
			f.type = "btree_deleted";
		else
		{
			f.type = (bt->btpo_flags & BTP_LEAF) ? "btree_leaf" : "btree_internal";
			f.level = (int) bt->btpo_level;
		}
	}
	else if (special == MAXALIGN(sizeof(uint32)) &&
			 *(const uint32 *) (page + ph->pd_special) == SEQUENCE_PAGE_MAGIC)
		f.type = "sequence";
	else if (special == MAXALIGN(sizeof(SpGistPageOpaqueData)) &&
			 tail_id == SPGIST_PAGE_ID)
		f.type = "spgist";
	else if (special == MAXALIGN(sizeof(BrinSpecialSpace)) &&
			 tail_id >= BRIN_PAGETYPE_META && tail_id <= BRIN_PAGETYPE_REGULAR)
		f.type = "brin";
	else if (special == MAXALIGN(sizeof(uint64)))
		f.type = "gin";
	return f;
}

typedef struct DescriptorRow
{
	bool		in_tier;
	uint64		bufferid;
	BpextRelFile rfile;
	ForkNumber	fork;
	BlockNumber block;
	bool		dirty;
	int			usage;
	int			pins;
	bool		has_read_time;
	uint64		read_us;
	int			numa_node;		/* -1 if not known */
	bool		has_facts;
	PageFacts	facts;
} DescriptorRow;

/*
 * The text datum for a page type name (one of classify_page's literals),
 * made once per process: a million rows need not mean a million pallocs.
 */
static Datum
page_type_datum(const char *type)
{
	static struct
	{
		const char *name;
		Datum		datum;
	}			cache[32];
	static int	ncached = 0;
	int			i;
	MemoryContext old;

	for (i = 0; i < ncached; i++)
		if (cache[i].name == type)
			return cache[i].datum;
	old = MemoryContextSwitchTo(TopMemoryContext);
	cache[ncached].name = type;
	cache[ncached].datum = CStringGetTextDatum(type);
	MemoryContextSwitchTo(old);
	return cache[ncached++].datum;
}

static void
put_row(BpextScan *scan, const DescriptorRow *row)
{
	Datum		values[DESCRIPTOR_COLUMNS];
	bool		nulls[DESCRIPTOR_COLUMNS] = {0};
	int			i = 0;

	values[i++] = ObjectIdGetDatum(BPEXT_RELFILE_DB(row->rfile));	/* database_id */
	values[i++] = Int32GetDatum((int32) row->fork); /* file_id */
	values[i++] = Int64GetDatum((int64) row->block);	/* page_id */
	if (row->has_facts && row->facts.level >= 0)	/* page_level */
		values[i++] = Int32GetDatum(row->facts.level);
	else
		nulls[i++] = true;
	values[i++] = ObjectIdGetDatum(BPEXT_RELFILE_NUMBER(row->rfile));	/* allocation_unit_id */
	if (row->has_facts)			/* page_type */
		values[i++] = page_type_datum(row->facts.type);
	else
		nulls[i++] = true;
	if (row->has_facts && row->facts.row_count >= 0)	/* row_count */
		values[i++] = Int32GetDatum(row->facts.row_count);
	else
		nulls[i++] = true;
	if (row->has_facts && row->facts.free_space >= 0)	/* free_space_in_bytes */
		values[i++] = Int32GetDatum(row->facts.free_space);
	else
		nulls[i++] = true;
	values[i++] = BoolGetDatum(row->dirty); /* is_modified */
	if (row->numa_node >= 0)	/* numa_node */
		values[i++] = Int32GetDatum(row->numa_node);
	else
		nulls[i++] = true;
	if (row->has_read_time)		/* read_microsec */
		values[i++] = Int64GetDatum((int64) row->read_us);
	else
		nulls[i++] = true;
	values[i++] = BoolGetDatum(row->in_tier);	/* is_in_bpool_extension */
	values[i++] = Int64GetDatum((int64) row->bufferid);
	values[i++] = ObjectIdGetDatum(BPEXT_RELFILE_SPC(row->rfile));
	values[i++] = ObjectIdGetDatum(BPEXT_RELFILE_DB(row->rfile));
	values[i++] = ObjectIdGetDatum(BPEXT_RELFILE_NUMBER(row->rfile));
	values[i++] = Int16GetDatum((int16) row->fork);
	values[i++] = Int64GetDatum((int64) row->block);
	values[i++] = Int16GetDatum((int16) row->usage);
	values[i++] = Int32GetDatum(row->pins);
	Assert(i == DESCRIPTOR_COLUMNS);

	bpext_scan_emit(scan, values, nulls);
}

/*
 * The NUMA node of the memory holding a shared buffer's page, or -1 where
 * it is not known: before 18, on a server built without NUMA support, on a
 * system without NUMA.  PostgreSQL's pg_numa_query_pages (move_pages(2)),
 * one call per buffer, as the view lists one buffer at a time; the page's
 * header was just read, so its memory is mapped.
 */
static int
buffer_numa_node(const char *page)
{
#if BPEXT_HAS_PG_NUMA
	static int	numa_known = 0; /* 0: not asked yet, 1: yes, -1: no */
	void	   *os_page;
	int			node = -1;

	if (numa_known == 0)
		numa_known = (pg_numa_init() == -1) ? -1 : 1;
	if (numa_known < 0)
		return -1;
	os_page = (void *) TYPEALIGN_DOWN(sysconf(_SC_PAGESIZE), page);
	if (pg_numa_query_pages(0, 1, &os_page, &node) != 0 || node < 0)
		return -1;
	return node;
#else
	(void) page;
	return -1;
#endif
}

/* The row of shared buffer i, if it holds a valid page: true if listed. */
static bool
put_shared_buffer(BpextScan *scan, int i)
{
	char		copy[BLCKSZ];
	BufferDesc *desc = GetBufferDescriptor(i);
	const char *page = BufferBlocks + (Size) i * BLCKSZ;
	DescriptorRow row;
	BufferTag	tag;
	BpextBufState state;
	bool		unchanged;

	state = LockBufHdr(desc);
	if ((state & (BM_VALID | BM_TAG_VALID)) != (BM_VALID | BM_TAG_VALID))
	{
		bpext_unlock_buf_hdr(desc, state);
		return false;
	}
	tag = desc->tag;
	bpext_unlock_buf_hdr(desc, state);

	/* Header and special space only: what classify_page looks at. */
	memcpy(copy, page, SizeOfPageHeaderData);
	memcpy(copy + BLCKSZ - 16, page + BLCKSZ - 16, 16);

	state = LockBufHdr(desc);
	unchanged = (state & BM_VALID) && BPEXT_BUFTAGS_EQUAL(tag, desc->tag);
	bpext_unlock_buf_hdr(desc, state);
	if (!unchanged)
		return false;

	memset(&row, 0, sizeof(row));
	row.in_tier = false;
	row.bufferid = i + 1;
	row.rfile = BPEXT_BUFTAG_RELFILE(tag);
	row.fork = BPEXT_BUFTAG_FORK(tag);
	row.block = BPEXT_BUFTAG_BLOCK(tag);
	row.dirty = (state & BM_DIRTY) != 0;
	row.usage = BUF_STATE_GET_USAGECOUNT(state);
	row.pins = BUF_STATE_GET_REFCOUNT(state);
	row.read_us = pg_atomic_read_u32(&buffer_read_us[i]);
	row.has_read_time = row.read_us != READ_TIME_UNKNOWN;
	row.numa_node = buffer_numa_node(page);
	row.has_facts = true;
	row.facts = classify_page(copy, row.fork);
	put_row(scan, &row);
	return true;
}

/*
 * The row of one tier page, as tier_map_foreach_slot hands it over (no
 * map lock is held): its content columns only if asked for, read back as
 * a tier read does.
 */
typedef struct TierRowsArg
{
	BpextScan  *scan;
	bool		with_contents;
	char	   *page;			/* aligned buffer for with_contents */
	uint64		listed;
} TierRowsArg;

static void
put_tier_page(const TierPageInfo *info, void *arg)
{
	TierRowsArg *ta = (TierRowsArg *) arg;
	DescriptorRow row;

	memset(&row, 0, sizeof(row));
	row.in_tier = true;
	row.numa_node = -1;
	row.bufferid = info->slot;
	row.rfile = info->rfile;
	row.fork = info->fork;
	row.block = info->block;
	row.usage = info->usage;
	row.pins = info->pins;

	/*
	 * A page that cannot be read back intact shows no facts (and if the
	 * tier is damaged, the read switches it off).
	 */
	if (ta->with_contents &&
		tier_inspect_page(&info->rfile, info->fork, info->block, ta->page))
	{
		row.has_facts = true;
		row.facts = classify_page(ta->page, info->fork);
	}
	put_row(ta->scan, &row);
	ta->listed++;
}

/* The rows of tier slots [first, end), in slot order. */
static void
put_tier_slots(BpextScan *scan, uint32 first, uint32 end, bool with_contents)
{
	static char *page = NULL;
	TierRowsArg ta;

	if (with_contents && page == NULL)
		page = (char *) TYPEALIGN(TIER_IO_ALIGN,
								  MemoryContextAlloc(TopMemoryContext,
													 BLCKSZ + TIER_IO_ALIGN));
	ta.scan = scan;
	ta.with_contents = with_contents;
	ta.page = page;
	ta.listed = 0;
	tier_map_foreach_slot(first, end, put_tier_page, &ta);
	bpext_scan_count(scan, ta.listed, end - first);
}

/*
 * A unit of the descriptors scan: a shared buffer, or (past the buffers)
 * DESCRIPTOR_SLOTS_PER_UNIT tier slots.
 */
void
bpext_descriptors_unit(BpextScan *scan, uint64 unit)
{
	const BpextScanArgs *args = bpext_scan_args(scan);

	if (unit < args->buffer_units)
		bpext_scan_count(scan, put_shared_buffer(scan, (int) unit) ? 1 : 0, 1);
	else
	{
		uint64		first = (unit - args->buffer_units) * DESCRIPTOR_SLOTS_PER_UNIT;
		uint64		end = Min(first + DESCRIPTOR_SLOTS_PER_UNIT, args->end_slot);

		put_tier_slots(scan, (uint32) first, (uint32) end,
					   args->with_contents);
	}
}

/*
 * bpext_buffer_descriptors_1_0(with_contents bool): every page in shared
 * buffers, then every page in the tier, listed by a scan over the worker
 * pool.
 */
Datum
bpext_buffer_descriptors_1_0(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	BpextScanSpec spec;
	BpextScanResult result;

	bpext_require_preloaded();
	InitMaterializedSRF(fcinfo, 0);

	memset(&spec, 0, sizeof(spec));
	spec.record_if_idle = true;
	spec.op = BPEXT_SCAN_DESCRIPTORS;
	spec.args.dbid = InvalidOid;
	spec.args.with_contents = PG_GETARG_BOOL(0);
	spec.args.buffer_units = NBuffers;
	spec.nranges = 1;
	spec.ranges[0].nunits = NBuffers;
	spec.ranges[0].units_per_task = bpext_scan_task_buffers;
	spec.total_buffers = NBuffers;
	if (bpext_tier_enabled())
		bpext_scan_add_slot_range(&spec, DESCRIPTOR_SLOTS_PER_UNIT);
	spec.rsinfo = rsinfo;
	bpext_scan_run(&spec, &result);
	return (Datum) 0;
}

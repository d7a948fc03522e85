/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  bpext's counters, kept per process so that the read path never
 *	  writes to a cache line another process writes to.
 *
 * Protocol.  Every process that has a PGPROC owns the counter slot of its
 * pgprocno and is the only writer of it: plain 64-bit additions, no locks,
 * no atomic read-modify-write.  Readers (the views) sum all slots without
 * a lock; a 64-bit aligned load cannot be torn on the platforms PostgreSQL
 * supports, and a sum that is a few increments behind is fine.  Slots are
 * never cleared: a new process reusing a pgprocno keeps adding to them.
 *
 * Per-database figures (the tier reads and data-file reads of processes
 * connected to a database and their read times, as pg_stat_database counts
 * blks_read and blk_read_time) come from the same counters: a slot records
 * the database it counts for and its read counts (BpextReadCounts) when it
 * started to, and when it starts counting for another database, the
 * difference is folded into a shared per-database table under
 * control_lock.  Every read is counted, time included, after that check,
 * so a read is never split between two databases.
 *
 * Resets never write other processes' slots: bpext_stats_reset() stores
 * the current sums as a baseline, and the views report the difference.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/twophase.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "storage/shmem.h"

#include "compat.h"
#include "stats.h"
#include "tier_control.h"

#define BPEXT_MAX_DATABASES 256

typedef struct ProcCounters
{
	BpextCounters c;
	Oid			dbid;			/* database the counters below count for */
	BpextReadCounts db_base;	/* read counts when it started to */
} ProcCounters;

typedef union PaddedProcCounters
{
	ProcCounters pc;
	char		pad[TYPEALIGN(PG_CACHE_LINE_SIZE, sizeof(ProcCounters))];
} PaddedProcCounters;

typedef struct StatsShared
{
	int			nprocs;
	TimestampTz reset_at;		/* under control_lock */
	BpextCounters reset_base;	/* under control_lock */
	int			ndatabases;		/* under control_lock */
	BpextDatabaseCounters databases[BPEXT_MAX_DATABASES];	/* folded */
	BpextDatabaseCounters db_reset_base[BPEXT_MAX_DATABASES];
	int			ndb_reset_base;
	PaddedProcCounters procs[FLEXIBLE_ARRAY_MEMBER];
} StatsShared;

BpextCounters *BpextMyCounters = NULL;

static StatsShared *Stats = NULL;
static ProcCounters *MySlot = NULL;

/* Where counts go in a process that has no PGPROC (none does I/O). */
static BpextCounters orphan_counters;

static int
stats_nprocs(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

Size
bpext_stats_shmem_size(void)
{
	return add_size(offsetof(StatsShared, procs),
					mul_size(stats_nprocs(), sizeof(PaddedProcCounters)));
}

void
bpext_stats_shmem_init(bool found)
{
	Stats = ShmemInitStruct("bpext counters", bpext_stats_shmem_size(), &found);
	if (!found)
	{
		memset(Stats, 0, bpext_stats_shmem_size());
		Stats->nprocs = stats_nprocs();
		Stats->reset_at = GetCurrentTimestamp();
	}
}

/* A slot's read counts (as bpext_stats_sample_reads takes its own). */
static void
slot_read_counts(volatile ProcCounters *slot, BpextReadCounts *counts)
{
	counts->tier_reads = slot->c.page_reads;
	counts->data_file_reads = slot->c.data_file_reads;
	counts->tier_read_us = slot->c.read_time_us;
	counts->data_file_read_us = slot->c.data_file_read_time_us;
	counts->data_file_reads_untimed = slot->c.data_file_reads_untimed;
}

static BpextDatabaseCounters *
find_database(BpextDatabaseCounters *table, int *n, int max, Oid dbid,
			  bool create)
{
	int			i;

	for (i = 0; i < *n; i++)
		if (table[i].dbid == dbid)
			return &table[i];
	if (!create || *n >= max)
		return NULL;
	table[*n].dbid = dbid;
	memset(&table[*n].reads, 0, sizeof(BpextReadCounts));
	return &table[(*n)++];
}

/* Has the slot counted any read since it started counting for its database? */
static bool
read_counts_differ(const BpextReadCounts *a, const BpextReadCounts *b)
{
	return memcmp(a, b, sizeof(BpextReadCounts)) != 0;
}

/*
 * Start counting this slot's reads for the database we are connected to,
 * folding what it counted for another one into the shared table.
 */
static void
count_for_database(ProcCounters *slot)
{
	BpextDatabaseCounters *db;
	BpextReadCounts now;

	slot_read_counts(slot, &now);
	LWLockAcquire(BpextCtl->control_lock, LW_EXCLUSIVE);
	if (read_counts_differ(&now, &slot->db_base))
	{
		db = find_database(Stats->databases, &Stats->ndatabases,
						   BPEXT_MAX_DATABASES, slot->dbid, true);
		/* A full table loses the figures of the 257th database. */
		if (db != NULL)
			bpext_read_counts_add_diff(&db->reads, &now, &slot->db_base);
	}
	slot->dbid = MyDatabaseId;
	slot->db_base = now;
	LWLockRelease(BpextCtl->control_lock);
}

/* Find this process's slot; called on its first count. */
void
bpext_stats_attach(void)
{
	if (Stats == NULL || MyProc == NULL || BPEXT_MY_PROC_NUMBER() >= Stats->nprocs)
	{
		BpextMyCounters = &orphan_counters;
		return;
	}
	MySlot = &Stats->procs[BPEXT_MY_PROC_NUMBER()].pc;
	BpextMyCounters = &MySlot->c;
}

/* Before counting a read: make sure it counts for our database. */
static inline void
check_database(void)
{
	if (BpextMyCounters == NULL)
		bpext_stats_attach();
	if (MySlot != NULL && MySlot->dbid != MyDatabaseId)
		count_for_database(MySlot);
}

/*
 * Count a tier read for a shared-buffer miss that reached the tier file:
 * its time whether or not it served the page (a slot invalidated during
 * the read, a checksum mismatch), the page if it did.
 */
void
bpext_stats_count_tier_read(bool served, uint64 elapsed_us)
{
	check_database();
	BpextMyCounters->read_time_us += elapsed_us;
	if (served)
		BpextMyCounters->page_reads++;
}

/*
 * Count one storage-manager read of npages shared-buffer misses from a
 * data file, timed here (elapsed_us) or completed elsewhere (18's
 * asynchronous I/O, not timed).
 */
void
bpext_stats_count_data_file_read(uint32 npages, bool timed, uint64 elapsed_us)
{
	check_database();
	BpextMyCounters->data_file_reads += npages;
	BpextMyCounters->data_file_read_calls++;
	if (timed)
		BpextMyCounters->data_file_read_time_us += elapsed_us;
	else
		BpextMyCounters->data_file_reads_untimed += npages;
}

/*
 * Sum of every process's counters, as they are: never lowered by a reset,
 * for those who compare one sum with a later one (adaptive_admission.c).
 */
void
bpext_stats_raw_sum(BpextCounters *total)
{
	uint64	   *sum = (uint64 *) total;
	int			p;
	int			i;

	memset(total, 0, sizeof(BpextCounters));
	for (p = 0; p < Stats->nprocs; p++)
	{
		const volatile uint64 *c = (const volatile uint64 *) &Stats->procs[p].pc.c;

		for (i = 0; i < (int) BPEXT_NUM_COUNTERS; i++)
			sum[i] += c[i];
	}
}

/* Sum of every process's counters, less the reset baseline. */
void
bpext_stats_sum(BpextCounters *total, TimestampTz *reset_at)
{
	BpextCounters base;
	uint64	   *sum = (uint64 *) total;
	uint64	   *basev = (uint64 *) &base;
	int			i;

	bpext_stats_raw_sum(total);
	LWLockAcquire(BpextCtl->control_lock, LW_SHARED);
	base = Stats->reset_base;
	*reset_at = Stats->reset_at;
	LWLockRelease(BpextCtl->control_lock);

	/* outstanding_io is a gauge, not reset. */
	base.outstanding_io = 0;
	for (i = 0; i < (int) BPEXT_NUM_COUNTERS; i++)
		sum[i] = sum[i] >= basev[i] ? sum[i] - basev[i] : 0;
}

/*
 * Per-database totals (folded plus what live slots count), without the
 * reset baseline.  Returns a palloc'd array.
 */
static int
database_totals(BpextDatabaseCounters **result)
{
	BpextDatabaseCounters *dbs;
	int			n;
	int			p;

	dbs = palloc(sizeof(BpextDatabaseCounters) * (BPEXT_MAX_DATABASES + Stats->nprocs));
	LWLockAcquire(BpextCtl->control_lock, LW_SHARED);
	n = Stats->ndatabases;
	memcpy(dbs, Stats->databases, sizeof(BpextDatabaseCounters) * n);
	for (p = 0; p < Stats->nprocs; p++)
	{
		volatile ProcCounters *slot = &Stats->procs[p].pc;
		BpextReadCounts now;
		BpextReadCounts base;
		BpextDatabaseCounters *db;

		slot_read_counts(slot, &now);
		base = slot->db_base;
		if (!read_counts_differ(&now, &base))
			continue;
		db = find_database(dbs, &n, BPEXT_MAX_DATABASES + Stats->nprocs,
						   slot->dbid, true);
		bpext_read_counts_add_diff(&db->reads, &now, &base);
	}
	LWLockRelease(BpextCtl->control_lock);
	*result = dbs;
	return n;
}

/* Per-database counters since the last reset; returns a palloc'd array. */
int
bpext_stats_by_database(BpextDatabaseCounters **result)
{
	BpextDatabaseCounters *dbs;
	int			n = database_totals(&dbs);
	int			i;

	LWLockAcquire(BpextCtl->control_lock, LW_SHARED);
	for (i = 0; i < n; i++)
	{
		int			nbase = Stats->ndb_reset_base;
		BpextDatabaseCounters *base = find_database(Stats->db_reset_base,
													&nbase, 0, dbs[i].dbid,
													false);

		if (base != NULL)
		{
			uint64	   *v = (uint64 *) &dbs[i].reads;
			const uint64 *b = (const uint64 *) &base->reads;
			int			f;

			for (f = 0; f < (int) BPEXT_NUM_READ_COUNTS; f++)
				v[f] -= Min(v[f], b[f]);
		}
	}
	LWLockRelease(BpextCtl->control_lock);
	*result = dbs;
	return n;
}

/* Make the current sums the new zero. */
void
bpext_stats_reset_all(void)
{
	BpextCounters total;
	BpextDatabaseCounters *dbs;
	int			n;

	bpext_stats_raw_sum(&total);
	n = Min(database_totals(&dbs), BPEXT_MAX_DATABASES);

	LWLockAcquire(BpextCtl->control_lock, LW_EXCLUSIVE);
	Stats->reset_base = total;
	Stats->reset_at = GetCurrentTimestamp();
	memcpy(Stats->db_reset_base, dbs, sizeof(BpextDatabaseCounters) * n);
	Stats->ndb_reset_base = n;
	LWLockRelease(BpextCtl->control_lock);
	pfree(dbs);
}

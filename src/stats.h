/*-------------------------------------------------------------------------
 *
 * stats.h
 *	  bpext's counters: cumulative, per process, summed by the views.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_STATS_H
#define BPEXT_STATS_H

#include "port/atomics.h"
#include "portability/instr_time.h"
#include "utils/timestamp.h"

/* Where a page entering the tier came from. */
typedef enum BpextAdmitSource
{
	BPEXT_SOURCE_EVICT_PUSH,	/* clean page ahead of the clock hand */
	BPEXT_SOURCE_DUAL_WRITE,	/* image just written to its data file */
	BPEXT_SOURCE_READ,			/* image just read from its data file */
	BPEXT_SOURCE_PREWARM,		/* bpext_prewarm() */
	BPEXT_NUM_SOURCES
} BpextAdmitSource;

/*
 * The counters.  Names follow SQL Server's Buffer Manager "Extension ..."
 * counters where one exists.  Every field is a uint64; BpextCounterArray
 * lets the summing code treat the struct as an array.
 */
typedef struct BpextCounters
{
	uint64		lookups;		/* shared-buffer misses that asked the tier */
	uint64		hits;			/* lookups that found a current copy */
	uint64		page_reads;		/* pages served from the tier */
	uint64		data_file_reads;	/* misses read from a data file instead */
	uint64		data_file_read_calls;	/* md read calls that read them */
	uint64		page_writes;	/* pages written into the tier */
	uint64		page_evictions; /* live pages evicted to make room */
	uint64		invalidations;	/* live pages dropped because their data
								 * file changed */
	uint64		publish_races;	/* copies discarded because the page changed
								 * while being copied */
	uint64		admission_skips;	/* pages not admitted for want of room */
	uint64		admitted[BPEXT_NUM_SOURCES];	/* pages published */
	uint64		clean_evictions;	/* clean main-fork pages seen leaving
									 * shared buffers (evict_push.c) */
	uint64		missed_pushes;	/* those the tier did not hold then */
	uint64		hit_probes;		/* tier hits whose data-file page was looked
								 * for in the page cache
								 * (adaptive_admission.c) */
	uint64		hit_probes_cached;	/* of those, the pages found there */
	uint64		admission_pauses;	/* times the worker paused admission */
	uint64		admission_resumes;	/* and resumed it */
	uint64		crc_failures;
	uint64		io_errors;
	uint64		read_time_us;	/* tier reads for shared-buffer misses */
	uint64		write_time_us;
	uint64		data_file_read_time_us; /* data-file reads timed here */
	uint64		data_file_reads_untimed;	/* data-file reads completed
											 * elsewhere (18+: asynchronous
											 * I/O), so not timed */
	uint64		outstanding_io; /* a gauge: tier I/Os under way */
} BpextCounters;

#define BPEXT_NUM_COUNTERS	(sizeof(BpextCounters) / sizeof(uint64))

/* This process's counters; see stats.c for the protocol. */
extern BpextCounters *BpextMyCounters;

extern void bpext_stats_attach(void);
extern void bpext_stats_count_tier_read(bool served, uint64 elapsed_us);
extern void bpext_stats_count_data_file_read(uint32 npages, bool timed,
											 uint64 elapsed_us);

#define BPEXT_COUNT(field, n) \
	do { \
		if (BpextMyCounters == NULL) \
			bpext_stats_attach(); \
		BpextMyCounters->field += (n); \
	} while (0)

/*
 * What a process's shared-buffer misses cost, split between the tier and
 * the data files: the figures EXPLAIN (TIER), the statement log and the
 * per-database view report (as differences of two samples).  Every field
 * is a uint64.
 */
typedef struct BpextReadCounts
{
	uint64		tier_reads;		/* pages served from the tier */
	uint64		data_file_reads;	/* pages read from data files */
	uint64		tier_read_us;	/* time in tier reads (served or not) */
	uint64		data_file_read_us;	/* time in the data-file reads timed */
	uint64		data_file_reads_untimed;	/* data-file reads not timed */
} BpextReadCounts;

#define BPEXT_NUM_READ_COUNTS	(sizeof(BpextReadCounts) / sizeof(uint64))

/*
 * This process's read counts so far, from its own counters: a few loads
 * of memory only this process writes.
 */
static inline void
bpext_stats_sample_reads(BpextReadCounts *counts)
{
	if (BpextMyCounters == NULL)
		bpext_stats_attach();
	counts->tier_reads = BpextMyCounters->page_reads;
	counts->data_file_reads = BpextMyCounters->data_file_reads;
	counts->tier_read_us = BpextMyCounters->read_time_us;
	counts->data_file_read_us = BpextMyCounters->data_file_read_time_us;
	counts->data_file_reads_untimed = BpextMyCounters->data_file_reads_untimed;
}

/* dst += end - start, field by field. */
static inline void
bpext_read_counts_add_diff(BpextReadCounts *dst, const BpextReadCounts *end,
						   const BpextReadCounts *start)
{
	uint64	   *d = (uint64 *) dst;
	const uint64 *e = (const uint64 *) end;
	const uint64 *s = (const uint64 *) start;
	int			i;

	for (i = 0; i < (int) BPEXT_NUM_READ_COUNTS; i++)
		d[i] += e[i] - s[i];
}

/* Counters of one database, for the per-database view. */
typedef struct BpextDatabaseCounters
{
	Oid			dbid;
	BpextReadCounts reads;
} BpextDatabaseCounters;

extern Size bpext_stats_shmem_size(void);
extern void bpext_stats_shmem_init(bool found);
extern void bpext_stats_sum(BpextCounters *total, TimestampTz *reset_at);
extern void bpext_stats_raw_sum(BpextCounters *total);
extern void bpext_stats_reset_all(void);
extern int	bpext_stats_by_database(BpextDatabaseCounters **result);

/* Microseconds since start, for the read and write timings. */
static inline uint64
bpext_microseconds_since(instr_time start)
{
	instr_time	now;

	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, start);
	return INSTR_TIME_GET_MICROSEC(now);
}

#endif							/* BPEXT_STATS_H */

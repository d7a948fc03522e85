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
	uint64		read_time_us;
	uint64		write_time_us;
	uint64		outstanding_io; /* a gauge: tier I/Os under way */
} BpextCounters;

#define BPEXT_NUM_COUNTERS	(sizeof(BpextCounters) / sizeof(uint64))

/* This process's counters; see stats.c for the protocol. */
extern BpextCounters *BpextMyCounters;

extern void bpext_stats_attach(void);
extern void bpext_stats_count_read(bool from_tier);

#define BPEXT_COUNT(field, n) \
	do { \
		if (BpextMyCounters == NULL) \
			bpext_stats_attach(); \
		BpextMyCounters->field += (n); \
	} while (0)

/* Counters of one database, for the per-database view. */
typedef struct BpextDatabaseCounters
{
	Oid			dbid;
	uint64		tier_reads;		/* pages served from the tier */
	uint64		data_file_reads;	/* pages read from data files */
} BpextDatabaseCounters;

extern Size bpext_stats_shmem_size(void);
extern void bpext_stats_shmem_init(bool found);
extern void bpext_stats_sum(BpextCounters *total, TimestampTz *reset_at);
extern void bpext_stats_raw_sum(BpextCounters *total);
extern void bpext_stats_reset_all(void);
extern int	bpext_stats_by_database(BpextDatabaseCounters **result);

#endif							/* BPEXT_STATS_H */

/*-------------------------------------------------------------------------
 *
 * scan_pool.h
 *	  The scan worker pool: scans over shared buffers or the tier split
 *	  into tasks and run by the calling backend and the pool's workers.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_SCAN_POOL_H
#define BPEXT_SCAN_POOL_H

#include "nodes/execnodes.h"

#include "compat.h"

/* The operations a scan can do; their names are bpext_scan_history's. */
typedef enum BpextScanOp
{
	BPEXT_SCAN_DESCRIPTORS,		/* list buffers and tier pages */
	BPEXT_SCAN_DROP_CLEAN,		/* evict clean buffers, empty the tier */
	BPEXT_SCAN_FLUSH,			/* write a database's dirty buffers */
	BPEXT_SCAN_INVALIDATE,		/* unlink dead tier slots */
	BPEXT_SCAN_SHRINK,			/* empty the slots beyond a new tier size */
	BPEXT_SCAN_PREWARM,			/* read a relation fork into the tier */
	BPEXT_SCAN_SUMMARY,			/* count pages per relation fork */
	BPEXT_SCAN_NUM_OPS
} BpextScanOp;

/*
 * What a scan works on.  Plain data: it is copied to the workers.  Each
 * operation uses the fields it needs.
 */
typedef struct BpextScanArgs
{
	Oid			dbid;			/* the database concerned, or InvalidOid */
	bool		with_contents;	/* descriptors: read tier pages back */
	uint64		buffer_units;	/* descriptors, drop clean, summary: units
								 * below are shared buffers, the rest tier
								 * pieces or slot ranges */
	BpextRelFile rfile;			/* prewarm: the relation fork */
	ForkNumber	fork;
	BlockNumber nblocks;
	uint32		first_slot;		/* shrink: the slots taken away; */
	uint32		end_slot;		/* descriptors, summary: end_slot only,
								 * the tier's size in slots */
} BpextScanArgs;

/*
 * The units of a scan are numbered 0..n-1 and handed out in tasks.  A scan
 * lists its units as ranges, each with its own task size, so that (say)
 * shared buffers and tier pieces are split differently.
 */
typedef struct BpextScanRange
{
	uint64		nunits;
	uint64		units_per_task;
} BpextScanRange;

#define BPEXT_SCAN_MAX_RANGES	2

typedef struct BpextScanSpec
{
	BpextScanOp op;
	BpextScanArgs args;
	int			nranges;
	BpextScanRange ranges[BPEXT_SCAN_MAX_RANGES];
	uint64		total_buffers;	/* buffers or slots the scan will look at,
								 * for the serial/parallel decision */
	ReturnSetInfo *rsinfo;		/* where rows go, for scans that emit */
	bool		record_if_idle; /* list in the history even if it found
								 * nothing to act on */
	const char *command;		/* the history's command, if not the
								 * current statement's */

	/*
	 * Where the leader puts rows instead of rsinfo's tuplestore (which
	 * still gives their shape): an aggregating scan merges the partial
	 * rows of its tasks here.
	 */
	void		(*sink) (void *arg, Datum *values, bool *nulls);
	void	   *sink_arg;
} BpextScanSpec;

/* The figures a scan reports, as bpext_scan_history shows them. */
typedef struct BpextScanResult
{
	uint64		scanned;		/* buffers or pages acted on or listed */
	uint64		iterated;		/* buffers or slots looked at */
	int			participants;	/* processes that ran tasks, and the
								 * leader if it collected their rows */
	double		elapsed_ms;
	double		wait_ms;
} BpextScanResult;

/* A running scan, as an operation's unit function sees it. */
typedef struct BpextScan BpextScan;

extern const BpextScanArgs *bpext_scan_args(BpextScan *scan);
extern void bpext_scan_count(BpextScan *scan, uint64 scanned, uint64 iterated);
extern void bpext_scan_emit(BpextScan *scan, Datum *values, bool *nulls);

extern int	bpext_scan_pool_size(void);
extern Size bpext_scan_pool_shmem_size(void);
extern void bpext_scan_pool_shmem_init(bool found);
extern void bpext_register_scan_workers(void);
extern PGDLLEXPORT void bpext_scan_worker_main(Datum main_arg);

extern uint64 bpext_scan_tier_range(BpextScanRange *range);
extern void bpext_scan_add_slot_range(BpextScanSpec *spec,
									  uint32 slots_per_unit);
extern void bpext_scan_buffers_and_tier(BpextScanSpec *spec);
extern void bpext_scan_run(const BpextScanSpec *spec, BpextScanResult *result);

#endif							/* BPEXT_SCAN_POOL_H */

/*-------------------------------------------------------------------------
 *
 * query_reads.h
 *	  A statement's shared-buffer misses split between the tier and the
 *	  data files: per plan node for EXPLAIN (TIER) and bpext_explain_tier,
 *	  per statement for bpext.log_tier_reads_min_duration.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_QUERY_READS_H
#define BPEXT_QUERY_READS_H

#include "executor/execdesc.h"
#include "nodes/execnodes.h"

#include "stats.h"

/* One query whose plan nodes count their reads (opaque). */
typedef struct QueryReads QueryReads;

/*
 * While positive, ExecutorStart counts per node the reads of every query
 * that runs with instrumentation (EXPLAIN ANALYZE): explain_tier.c raises
 * it around an EXPLAIN with the TIER option.
 */
extern int	bpext_query_reads_explaining;

extern void bpext_install_query_read_hooks(void);
extern Size bpext_query_reads_shmem_size(void);
extern void bpext_query_reads_shmem_init(bool found);

extern QueryReads *bpext_query_reads_begin(QueryDesc *queryDesc);
extern QueryReads *bpext_query_reads_of(EState *estate);
extern bool bpext_query_reads_node(QueryReads *query, PlanState *planstate,
								   BpextReadCounts *counts);
extern QueryReads *bpext_query_reads_of_plan(PlannedStmt *plannedstmt,
											 BpextReadCounts *counts);
extern bool bpext_query_reads_workers_counted(QueryReads *query);

#endif							/* BPEXT_QUERY_READS_H */

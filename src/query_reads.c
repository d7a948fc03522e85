/*-------------------------------------------------------------------------
 *
 * query_reads.c
 *	  A statement's shared-buffer misses, split between the pages the tier
 *	  served and the pages read from data files, with the time spent in
 *	  each: per plan node for EXPLAIN (ANALYZE, TIER) (explain_tier.c) and
 *	  bpext_explain_tier() (explain_function.c), per statement for
 *	  bpext.log_tier_reads_min_duration.
 *
 * Every figure is a difference of two samples of the process's own
 * counters (bpext_stats_sample_reads: the read path adds to them anyway),
 * so counting costs the read path nothing more.  Per node, the sample is
 * taken around each call of the node's ExecProcNode, as PostgreSQL's
 * instrumentation takes its buffer counts: the node's own
 * ExecProcNodeReal is replaced by exec_node_counted after ExecutorStart,
 * so that EXPLAIN's wrapper (ExecProcNodeInstr) still runs outside it, and
 * only for queries asked about (nothing is wrapped otherwise).  A node's
 * counts include those of the nodes it calls, as BUFFERS does.  Nodes run
 * through MultiExecProcNode (Hash, Bitmap Index Scan, BitmapAnd, BitmapOr)
 * never pass through ExecProcNode: they are not counted on their own, and
 * their reads are in their parent's counts.  A node whose function is
 * replaced after ExecutorStart (a Parallel Hash Join, when the leader sets
 * up its shared state) is not counted either.  Time is the time of the
 * reads bpext performs; on 18 and later a data-file read that completes
 * in an I/O worker or in the kernel (io_method = worker, io_uring) is
 * counted as a read but not timed (data_file_reads_untimed).
 *
 * Parallel workers count their own reads the same way and hand them to
 * their leader through shared memory: each leader (by PGPROC number) has
 * a slot here, and a query counted per node whose plan may use workers
 * publishes in it a dynamic shared memory segment (PlanReadsShared) with
 * room for every node, under an identity (the hash of the query text,
 * which the workers receive too).  A worker whose leader published its
 * query adds, when it finishes (ExecutorFinish, as PostgreSQL's workers
 * report their buffer usage), its per-node counts to the segment and its
 * total under the node it ran at the top, which the leader adds to the
 * Gather above it; so a node's figures are the leader's and the workers'
 * together, as BUFFERS's are.  Workers of other queries of the leader (a
 * parallel query inside a function the plan calls) add their total to the
 * slot's "unattributed" counts, which the leader's per-node samples
 * include: such a query finishes, and its workers with it, inside the call
 * of the node that ran it.  Every worker also adds its total to the
 * slot's "all" counts, from which a statement's total is taken for the
 * log.  A slot holds a few publications at once (a query counted per node
 * inside another).  A query that gets no segment (none left) publishes
 * without one, and its workers count nothing; one that finds no free
 * publication (five deep) cannot tell its workers from others, which then
 * count as unattributed, in whatever node of the leader runs when they
 * finish.  Either says that its workers' reads are not counted.
 *
 * Locking: a slot's publications are read and written under its
 * spinlock; its unattributed and all counts are atomics, added to by the
 * workers and read by the leader; a segment's counts are added to and read
 * under the segment's spinlock.  The list of queries being counted is
 * backend-local.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/parallel.h"
#include "common/hashfn.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "portability/instr_time.h"
#include "storage/dsm.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/tcopprot.h"
#include "utils/memutils.h"

#include "settings.h"
#include "compat.h"
#include "query_reads.h"

/* Queries of one leader that can publish their plans at once. */
#define PUBLICATIONS_PER_LEADER	4

#define PLAN_READS_MAGIC		0x62707172	/* "bpqr" */

typedef struct Publication
{
	int			pid;			/* the leader's, while published; else 0 */
	uint32		identity;		/* hash of the query text */
	dsm_handle	handle;			/* its PlanReadsShared, or
								 * DSM_HANDLE_INVALID: workers count nothing */
} Publication;

typedef struct LeaderSlot
{
	slock_t		mutex;			/* protects publications */
	Publication publications[PUBLICATIONS_PER_LEADER];
	pg_atomic_uint64 unattributed[BPEXT_NUM_READ_COUNTS];
	pg_atomic_uint64 all[BPEXT_NUM_READ_COUNTS];
} LeaderSlot;

typedef union PaddedLeaderSlot
{
	LeaderSlot	slot;
	char		pad[TYPEALIGN(PG_CACHE_LINE_SIZE, sizeof(LeaderSlot))];
} PaddedLeaderSlot;

typedef struct QueryReadsShared
{
	int			nslots;
	PaddedLeaderSlot slots[FLEXIBLE_ARRAY_MEMBER];
} QueryReadsShared;

/*
 * A published plan's counts, in its own dynamic shared memory segment:
 * counts[id] for plan node id, counts[nnodes + id] for the totals of the
 * workers that ran node id at the top of their tree.
 */
typedef struct PlanReadsShared
{
	uint32		magic;
	uint32		identity;
	int			leader_pid;
	int			nnodes;
	slock_t		mutex;
	BpextReadCounts counts[FLEXIBLE_ARRAY_MEMBER];
} PlanReadsShared;

typedef struct NodeReads
{
	ExecProcNodeMtd real;		/* the node's function; NULL: not counted */
	BpextReadCounts counts;
} NodeReads;

struct QueryReads
{
	QueryDesc  *queryDesc;
	EState	   *estate;
	bool		leader;			/* false in a parallel worker */
	int			nnodes;			/* plan node ids are below this */
	NodeReads  *nodes;			/* by plan node id; NULL: not per node */
	dsm_segment *segment;		/* a published plan's, or a worker's */
	PlanReadsShared *shared;	/* its address */
	int			publication;	/* our cell in the leader slot, or -1 */
	bool		workers_counted;
	bool		logging;		/* bpext.log_tier_reads_min_duration */
	BpextReadCounts log_start;
	instr_time	log_start_time;
	MemoryContextCallback on_free;
	QueryReads *next;
};

int			bpext_query_reads_explaining = 0;

static QueryReadsShared *Shared = NULL;

/* The queries this process counts, most recent first. */
static QueryReads *counted_queries = NULL;

/* A parallel worker's query: what its leader asked for. */
static struct
{
	QueryDesc  *queryDesc;		/* NULL: none */
	LeaderSlot *slot;			/* the leader's */
	bool		claimed;		/* a publication of the leader is ours */
	bool		running;
	BpextReadCounts start;
	QueryReads *query;			/* per node, when claimed with a segment */
} worker;

static ExecutorStart_hook_type prev_ExecutorStart = NULL;
static ExecutorRun_hook_type prev_ExecutorRun = NULL;
static ExecutorFinish_hook_type prev_ExecutorFinish = NULL;
static ExecutorEnd_hook_type prev_ExecutorEnd = NULL;

Size
bpext_query_reads_shmem_size(void)
{
	return add_size(offsetof(QueryReadsShared, slots),
					mul_size(MaxBackends, sizeof(PaddedLeaderSlot)));
}

void
bpext_query_reads_shmem_init(bool found)
{
	int			i;
	int			f;

	Shared = ShmemInitStruct("bpext query reads",
							 bpext_query_reads_shmem_size(), &found);
	if (found)
		return;
	memset(Shared, 0, bpext_query_reads_shmem_size());
	Shared->nslots = MaxBackends;
	for (i = 0; i < Shared->nslots; i++)
	{
		LeaderSlot *slot = &Shared->slots[i].slot;

		SpinLockInit(&slot->mutex);
		for (f = 0; f < (int) BPEXT_NUM_READ_COUNTS; f++)
		{
			pg_atomic_init_u64(&slot->unattributed[f], 0);
			pg_atomic_init_u64(&slot->all[f], 0);
		}
	}
}

/* The slot of the process with this PGPROC, or NULL. */
static LeaderSlot *
slot_of(PGPROC *proc)
{
	int			procno;

	if (Shared == NULL || proc == NULL)
		return NULL;
	procno = BPEXT_PROC_NUMBER(proc);
	if (procno < 0 || procno >= Shared->nslots)
		return NULL;
	return &Shared->slots[procno].slot;
}

static void
read_atomic_counts(pg_atomic_uint64 *atomics, BpextReadCounts *counts)
{
	uint64	   *c = (uint64 *) counts;
	int			f;

	for (f = 0; f < (int) BPEXT_NUM_READ_COUNTS; f++)
		c[f] = pg_atomic_read_u64(&atomics[f]);
}

static void
add_atomic_counts(pg_atomic_uint64 *atomics, const BpextReadCounts *counts)
{
	const uint64 *c = (const uint64 *) counts;
	int			f;

	for (f = 0; f < (int) BPEXT_NUM_READ_COUNTS; f++)
		if (c[f] != 0)
			pg_atomic_fetch_add_u64(&atomics[f], (int64) c[f]);
}

static void
add_counts(BpextReadCounts *dst, const BpextReadCounts *add)
{
	uint64	   *d = (uint64 *) dst;
	const uint64 *a = (const uint64 *) add;
	int			f;

	for (f = 0; f < (int) BPEXT_NUM_READ_COUNTS; f++)
		d[f] += a[f];
}

/*
 * The sample a node's counts are taken from: this process's reads, and in
 * a leader the reads its workers of other queries handed over (see the
 * file header).
 */
static inline void
sample(const QueryReads *query, BpextReadCounts *counts)
{
	bpext_stats_sample_reads(counts);
	if (query->leader)
	{
		LeaderSlot *slot = slot_of(MyProc);
		BpextReadCounts handed;

		if (slot != NULL)
		{
			read_atomic_counts(slot->unattributed, &handed);
			add_counts(counts, &handed);
		}
	}
}

/* This process's reads and all its workers' so far, for the log. */
static void
sample_statement(BpextReadCounts *counts)
{
	LeaderSlot *slot = slot_of(MyProc);

	bpext_stats_sample_reads(counts);
	if (slot != NULL)
	{
		BpextReadCounts handed;

		read_atomic_counts(slot->all, &handed);
		add_counts(counts, &handed);
	}
}

QueryReads *
bpext_query_reads_of(EState *estate)
{
	QueryReads *query;

	for (query = counted_queries; query != NULL; query = query->next)
		if (query->estate == estate)
			return query;
	return NULL;
}

static QueryReads *
query_reads_of_desc(QueryDesc *queryDesc)
{
	QueryReads *query;

	for (query = counted_queries; query != NULL; query = query->next)
		if (query->queryDesc == queryDesc)
			return query;
	return NULL;
}

/*
 * A node's ExecProcNode while its reads are counted: the node's own
 * function between two samples.
 */
static TupleTableSlot *
exec_node_counted(PlanState *node)
{
	QueryReads *query = bpext_query_reads_of(node->state);
	NodeReads  *reads;
	BpextReadCounts before;
	BpextReadCounts after;
	TupleTableSlot *result;

	if (unlikely(query == NULL))
		elog(ERROR, "bpext lost the read counts of a plan node");
	reads = &query->nodes[node->plan->plan_node_id];
	sample(query, &before);
	result = reads->real(node);
	sample(query, &after);
	bpext_read_counts_add_diff(&reads->counts, &after, &before);
	return result;
}

/* Does this node go through ExecProcNode (see the file header)? */
static bool
counted_node_type(PlanState *planstate)
{
	return !IsA(planstate, HashState) &&
		!IsA(planstate, BitmapIndexScanState) &&
		!IsA(planstate, BitmapAndState) &&
		!IsA(planstate, BitmapOrState);
}

static bool
find_max_node_id(PlanState *planstate, void *context)
{
	int		   *max_id = (int *) context;

	*max_id = Max(*max_id, planstate->plan->plan_node_id);
	return bpext_planstate_tree_walker(planstate, find_max_node_id, context);
}

static bool
wrap_node(PlanState *planstate, void *context)
{
	QueryReads *query = (QueryReads *) context;
	int			id = planstate->plan->plan_node_id;

	if (id >= 0 && id < query->nnodes && counted_node_type(planstate) &&
		planstate->ExecProcNodeReal != exec_node_counted)
	{
		query->nodes[id].real = planstate->ExecProcNodeReal;
		planstate->ExecProcNodeReal = exec_node_counted;
	}
	return bpext_planstate_tree_walker(planstate, wrap_node, context);
}

/* The plan node ids of a query are below this. */
static int
plan_node_limit(QueryDesc *queryDesc)
{
	int			max_id = -1;
	ListCell   *lc;

	find_max_node_id(queryDesc->planstate, &max_id);
	foreach(lc, queryDesc->estate->es_subplanstates)
		find_max_node_id((PlanState *) lfirst(lc), &max_id);
	return max_id + 1;
}

/* Count the reads of every node of the query, from its next call on. */
static void
wrap_nodes(QueryReads *query)
{
	ListCell   *lc;

	wrap_node(query->queryDesc->planstate, query);
	foreach(lc, query->estate->es_subplanstates)
		wrap_node((PlanState *) lfirst(lc), query);
}

static uint32
query_identity(const char *sourceText)
{
	if (sourceText == NULL)
		return 0;
	return hash_bytes((const unsigned char *) sourceText,
					  (int) strlen(sourceText));
}

/* Take our publication out of the leader slot. */
static void
unpublish(QueryReads *query)
{
	LeaderSlot *slot = slot_of(MyProc);

	if (query->publication < 0 || slot == NULL)
		return;
	SpinLockAcquire(&slot->mutex);
	slot->publications[query->publication].pid = 0;
	SpinLockRelease(&slot->mutex);
	query->publication = -1;
}

/*
 * The segment went away under us (the resource owner released it at an
 * error): workers must no longer find it, nor we use it.
 */
static void
segment_detached(dsm_segment *segment, Datum arg)
{
	QueryReads *query = (QueryReads *) DatumGetPointer(arg);

	if (query->leader)
		unpublish(query);
	query->segment = NULL;
	query->shared = NULL;
}

/*
 * The query's executor state is going away (ExecutorEnd, or an error):
 * stop counting it, take its publication back and let go of its segment.
 */
static void
query_reads_free(void *arg)
{
	QueryReads *query = (QueryReads *) arg;
	QueryReads **link;

	for (link = &counted_queries; *link != NULL; link = &(*link)->next)
	{
		if (*link == query)
		{
			*link = query->next;
			break;
		}
	}
	if (query->leader)
		unpublish(query);
	if (query->segment != NULL)
	{
		dsm_segment *segment = query->segment;

		cancel_on_dsm_detach(segment, segment_detached, PointerGetDatum(query));
		query->segment = NULL;
		query->shared = NULL;
		dsm_detach(segment);
	}
	if (worker.query == query)
		worker.query = NULL;
}

/* Start counting a query, in its executor state's memory. */
static QueryReads *
query_reads_create(QueryDesc *queryDesc, bool leader)
{
	EState	   *estate = queryDesc->estate;
	QueryReads *query;

	query = MemoryContextAllocZero(estate->es_query_cxt, sizeof(QueryReads));
	query->queryDesc = queryDesc;
	query->estate = estate;
	query->leader = leader;
	query->publication = -1;
	query->workers_counted = true;
	query->on_free.func = query_reads_free;
	query->on_free.arg = query;
	MemoryContextRegisterResetCallback(estate->es_query_cxt, &query->on_free);
	query->next = counted_queries;
	counted_queries = query;
	return query;
}

static void
allocate_nodes(QueryReads *query, int nnodes)
{
	query->nnodes = nnodes;
	query->nodes = MemoryContextAllocZero(query->estate->es_query_cxt,
										  sizeof(NodeReads) * Max(nnodes, 1));
}

/*
 * Make the plan's per-node counts reachable by its parallel workers: a
 * segment for them, published in our leader slot (see the file header for
 * what happens without either).
 */
static void
publish_plan(QueryReads *query)
{
	LeaderSlot *slot = slot_of(MyProc);
	uint32		identity = query_identity(query->queryDesc->sourceText);
	Size		size;
	dsm_segment *segment;
	PlanReadsShared *shared = NULL;
	int			cell = -1;
	int			i;

	if (slot == NULL)
	{
		query->workers_counted = false;
		return;
	}
	size = add_size(offsetof(PlanReadsShared, counts),
					mul_size(2 * query->nnodes, sizeof(BpextReadCounts)));
	segment = dsm_create(size, DSM_CREATE_NULL_IF_MAXSEGMENTS);
	if (segment != NULL)
	{
		shared = dsm_segment_address(segment);
		memset(shared, 0, size);
		shared->magic = PLAN_READS_MAGIC;
		shared->identity = identity;
		shared->leader_pid = MyProcPid;
		shared->nnodes = query->nnodes;
		SpinLockInit(&shared->mutex);
	}

	SpinLockAcquire(&slot->mutex);
	for (i = 0; i < PUBLICATIONS_PER_LEADER; i++)
	{
		Publication *p = &slot->publications[i];

		if (p->pid != MyProcPid)
		{
			p->pid = MyProcPid;
			p->identity = identity;
			p->handle = segment != NULL ? dsm_segment_handle(segment) :
				DSM_HANDLE_INVALID;
			cell = i;
			break;
		}
	}
	SpinLockRelease(&slot->mutex);

	query->publication = cell;
	if (cell < 0 || segment == NULL)
	{
		query->workers_counted = false;
		if (segment != NULL)
			dsm_detach(segment);
		return;
	}
	query->segment = segment;
	query->shared = shared;
	on_dsm_detach(segment, segment_detached, PointerGetDatum(query));
}

/*
 * Count the reads of every node of a query that ExecutorStart has just
 * set up (in a leader), from its first row on.  Returns the query's
 * counts, new or already being kept.
 */
QueryReads *
bpext_query_reads_begin(QueryDesc *queryDesc)
{
	QueryReads *query = query_reads_of_desc(queryDesc);

	if (query == NULL)
		query = query_reads_create(queryDesc, true);
	if (query->nodes != NULL)
		return query;
	allocate_nodes(query, plan_node_limit(queryDesc));
	wrap_nodes(query);
	if (queryDesc->plannedstmt->parallelModeNeeded)
		publish_plan(query);
	return query;
}

/* Context of add_gather_totals. */
typedef struct GatherTotals
{
	int			nnodes;
	const BpextReadCounts *worker_totals;	/* by the node they ran at the
											 * top */
	BpextReadCounts *counts;
} GatherTotals;

/*
 * Add what the workers of every Gather in this subtree read, as
 * PostgreSQL's instrumentation counts it in the Gather and all the nodes
 * above it.
 */
static bool
add_gather_totals(PlanState *planstate, void *arg)
{
	GatherTotals *totals = (GatherTotals *) arg;

	if ((IsA(planstate, GatherState) || IsA(planstate, GatherMergeState)) &&
		outerPlanState(planstate) != NULL)
	{
		int			top = outerPlanState(planstate)->plan->plan_node_id;

		if (top >= 0 && top < totals->nnodes)
			add_counts(totals->counts, &totals->worker_totals[top]);
	}
	return bpext_planstate_tree_walker(planstate, add_gather_totals, arg);
}

/*
 * A node's reads so far, its descendants' included, with what parallel
 * workers read: in the node itself when they ran it, everything they read
 * when it is (or is above) their Gather.  False if the node's reads are
 * not counted on their own.
 */
bool
bpext_query_reads_node(QueryReads *query, PlanState *planstate,
					   BpextReadCounts *counts)
{
	int			id = planstate->plan->plan_node_id;

	if (query->nodes == NULL || id < 0 || id >= query->nnodes ||
		query->nodes[id].real == NULL ||
		planstate->ExecProcNodeReal != exec_node_counted)
		return false;
	*counts = query->nodes[id].counts;
	if (query->shared != NULL)
	{
		PlanReadsShared *shared = query->shared;
		Size		size = mul_size(2 * shared->nnodes, sizeof(BpextReadCounts));
		BpextReadCounts *workers = palloc(size);
		GatherTotals totals;

		SpinLockAcquire(&shared->mutex);
		memcpy(workers, shared->counts, size);
		SpinLockRelease(&shared->mutex);

		add_counts(counts, &workers[id]);
		totals.nnodes = shared->nnodes;
		totals.worker_totals = &workers[shared->nnodes];
		totals.counts = counts;
		add_gather_totals(planstate, &totals);
		pfree(workers);
	}
	return true;
}

/*
 * The query counted per node that runs this plan, with its top node's
 * reads (the plan's); NULL if there is none or its top node is not
 * counted.
 */
QueryReads *
bpext_query_reads_of_plan(PlannedStmt *plannedstmt, BpextReadCounts *counts)
{
	QueryReads *query;

	for (query = counted_queries; query != NULL; query = query->next)
		if (query->leader && query->nodes != NULL &&
			query->queryDesc->plannedstmt == plannedstmt)
			return bpext_query_reads_node(query, query->queryDesc->planstate,
										  counts) ? query : NULL;
	return NULL;
}

/* Are the parallel workers' reads in the query's node counts? */
bool
bpext_query_reads_workers_counted(QueryReads *query)
{
	return query->workers_counted;
}

/*
 * In a parallel worker, at ExecutorStart: is our leader counting this
 * query per node?  Claim its publication and attach its segment if so.
 */
static void
worker_start(QueryDesc *queryDesc)
{
	PGPROC	   *leader = MyProc != NULL ? MyProc->lockGroupLeader : NULL;
	LeaderSlot *slot;
	Publication publications[PUBLICATIONS_PER_LEADER];
	bool		any = false;
	uint32		identity;
	dsm_handle	handle = DSM_HANDLE_INVALID;
	dsm_segment *segment;
	PlanReadsShared *shared;
	int			i;

	memset(&worker, 0, sizeof(worker));
	if (leader == NULL || leader == MyProc || (slot = slot_of(leader)) == NULL)
		return;
	worker.queryDesc = queryDesc;
	worker.slot = slot;

	SpinLockAcquire(&slot->mutex);
	memcpy(publications, slot->publications, sizeof(publications));
	SpinLockRelease(&slot->mutex);
	for (i = 0; i < PUBLICATIONS_PER_LEADER; i++)
		any |= publications[i].pid == leader->pid;
	if (!any)
		return;

	identity = query_identity(queryDesc->sourceText);
	for (i = 0; i < PUBLICATIONS_PER_LEADER; i++)
	{
		if (publications[i].pid == leader->pid &&
			publications[i].identity == identity)
		{
			worker.claimed = true;
			handle = publications[i].handle;
			break;
		}
	}
	if (handle == DSM_HANDLE_INVALID)
		return;

	segment = dsm_attach(handle);
	if (segment == NULL)
		return;
	shared = dsm_segment_address(segment);
	if (shared->magic != PLAN_READS_MAGIC || shared->identity != identity ||
		shared->leader_pid != leader->pid)
	{
		dsm_detach(segment);
		return;
	}
	worker.query = query_reads_create(queryDesc, false);
	worker.query->segment = segment;
	worker.query->shared = shared;
	on_dsm_detach(segment, segment_detached, PointerGetDatum(worker.query));
	allocate_nodes(worker.query, shared->nnodes);
}

/*
 * In a parallel worker, before its plan runs: start counting, and wrap
 * its nodes now that ExecParallelInitializeWorker has set them up (it may
 * have replaced a node's function).  PostgreSQL counts a worker's buffer
 * usage from here on too.
 */
static void
worker_run(QueryDesc *queryDesc)
{
	if (worker.queryDesc != queryDesc || worker.running)
		return;
	if (worker.query != NULL)
		wrap_nodes(worker.query);
	bpext_stats_sample_reads(&worker.start);
	worker.running = true;
}

/*
 * In a parallel worker, its plan done: hand the reads to the leader (see
 * the file header).
 */
static void
worker_finish(QueryDesc *queryDesc)
{
	BpextReadCounts end;
	BpextReadCounts total = {0};
	QueryReads *query = worker.query;

	if (worker.queryDesc != queryDesc || !worker.running)
		return;
	bpext_stats_sample_reads(&end);
	bpext_read_counts_add_diff(&total, &end, &worker.start);
	add_atomic_counts(worker.slot->all, &total);
	if (!worker.claimed)
		add_atomic_counts(worker.slot->unattributed, &total);
	else if (query != NULL && query->shared != NULL)
	{
		PlanReadsShared *shared = query->shared;
		int			top = queryDesc->planstate->plan->plan_node_id;
		int			id;

		SpinLockAcquire(&shared->mutex);
		for (id = 0; id < query->nnodes; id++)
			if (query->nodes[id].real != NULL)
				add_counts(&shared->counts[id], &query->nodes[id].counts);
		if (top >= 0 && top < shared->nnodes)
			add_counts(&shared->counts[shared->nnodes + top], &total);
		SpinLockRelease(&shared->mutex);
	}
	worker.queryDesc = NULL;
	worker.running = false;
}

/* One line for a statement that took at least the setting's time. */
static void
log_statement_reads(const char *sourceText, const BpextReadCounts *start,
					instr_time start_time)
{
	BpextReadCounts end;
	BpextReadCounts reads = {0};
	instr_time	duration;
	double		ms;

	INSTR_TIME_SET_CURRENT(duration);
	INSTR_TIME_SUBTRACT(duration, start_time);
	ms = INSTR_TIME_GET_MILLISEC(duration);
	if (ms < bpext_log_tier_reads_min_duration_ms)
		return;
	sample_statement(&end);
	bpext_read_counts_add_diff(&reads, &end, start);
	ereport(LOG,
			(errmsg("duration: %.3f ms  tier hits: %llu (%.3f ms)  data-file reads: %llu (%.3f ms, %llu not timed)  statement: %s",
					ms,
					(unsigned long long) reads.tier_reads,
					reads.tier_read_us / 1000.0,
					(unsigned long long) reads.data_file_reads,
					reads.data_file_read_us / 1000.0,
					(unsigned long long) reads.data_file_reads_untimed,
					sourceText != NULL ? sourceText : "<unknown>"),
			 errhidestmt(true)));
}

/*
 * Counting begins here: for the log, before the executor starts (its
 * reads are the statement's too); per node, once it has set the plan up.
 * A statement is one the client sent: its text is the one being run
 * (debug_query_string), which the queries a function runs do not have.
 */
static void
bpext_ExecutorStart(QueryDesc *queryDesc, int eflags)
{
	bool		logging = false;
	BpextReadCounts log_start;
	instr_time	log_start_time;

	if (bpext_log_tier_reads_min_duration_ms >= 0 && !IsParallelWorker() &&
		queryDesc->sourceText == debug_query_string &&
		!(eflags & EXEC_FLAG_EXPLAIN_ONLY))
	{
		logging = true;
		sample_statement(&log_start);
		INSTR_TIME_SET_CURRENT(log_start_time);
	}

	if (prev_ExecutorStart)
		prev_ExecutorStart(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);

	if (IsParallelWorker())
	{
		worker_start(queryDesc);
		return;
	}
	if (logging)
	{
		QueryReads *query = query_reads_create(queryDesc, true);

		query->logging = true;
		query->log_start = log_start;
		query->log_start_time = log_start_time;
	}
	if (bpext_query_reads_explaining > 0 &&
		queryDesc->instrument_options != 0 &&
		!(eflags & EXEC_FLAG_EXPLAIN_ONLY))
		bpext_query_reads_begin(queryDesc);
}

static void
bpext_ExecutorRun(BPEXT_EXECUTOR_RUN_ARGS)
{
	if (IsParallelWorker())
		worker_run(queryDesc);
	if (prev_ExecutorRun)
		prev_ExecutorRun(BPEXT_EXECUTOR_RUN_PASS);
	else
		standard_ExecutorRun(BPEXT_EXECUTOR_RUN_PASS);
}

static void
bpext_ExecutorFinish(QueryDesc *queryDesc)
{
	if (prev_ExecutorFinish)
		prev_ExecutorFinish(queryDesc);
	else
		standard_ExecutorFinish(queryDesc);
	if (IsParallelWorker())
		worker_finish(queryDesc);
}

/*
 * The log line is written once the executor has ended: a Gather shut
 * down only now (a cursor's) has its workers' reads in by then.
 */
static void
bpext_ExecutorEnd(QueryDesc *queryDesc)
{
	QueryReads *query = counted_queries != NULL ?
		query_reads_of_desc(queryDesc) : NULL;
	bool		logging = query != NULL && query->logging;
	BpextReadCounts log_start;
	instr_time	log_start_time;

	if (logging)
	{
		log_start = query->log_start;
		log_start_time = query->log_start_time;
	}
	if (prev_ExecutorEnd)
		prev_ExecutorEnd(queryDesc);
	else
		standard_ExecutorEnd(queryDesc);
	if (logging)
		log_statement_reads(queryDesc->sourceText, &log_start, log_start_time);
}

/* Called in the postmaster, from _PG_init. */
void
bpext_install_query_read_hooks(void)
{
	prev_ExecutorStart = ExecutorStart_hook;
	ExecutorStart_hook = bpext_ExecutorStart;
	prev_ExecutorRun = ExecutorRun_hook;
	ExecutorRun_hook = bpext_ExecutorRun;
	prev_ExecutorFinish = ExecutorFinish_hook;
	ExecutorFinish_hook = bpext_ExecutorFinish;
	prev_ExecutorEnd = ExecutorEnd_hook;
	ExecutorEnd_hook = bpext_ExecutorEnd;
}

/*-------------------------------------------------------------------------
 *
 * explain_function.c
 *	  bpext_explain_tier(query): run one statement, as EXPLAIN ANALYZE
 *	  does, and return a row per plan node with the shared-buffer misses
 *	  the tier served and those read from data files, the time spent in
 *	  each, and PostgreSQL's own shared read count for the node.
 *
 * It is EXPLAIN (ANALYZE, TIER) for the majors where an extension cannot
 * add EXPLAIN options (15 to 17), and works on every major.  The counting
 * is query_reads.c's, the same as EXPLAIN's; this file plans and runs the
 * statement the way ExplainOnePlan does (a copy of the active snapshot
 * with a new command id, output discarded, a command counter increment
 * after), with row and buffer instrumentation so that each node's
 * shared_read can be set beside its split.  Rows come in EXPLAIN's order
 * (a node, then its init plans, children and subplans); the first, the
 * top node, holds the plan's totals.
 *
 * Locking: none of its own.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/executor.h"
#include "executor/instrument.h"
#include "funcapi.h"
#include "nodes/nodeFuncs.h"
#include "parser/parsetree.h"
#include "tcop/dest.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/tuplestore.h"

#include "sql_api.h"
#include "compat.h"
#include "query_reads.h"

PG_FUNCTION_INFO_V1(bpext_explain_tier_1_4);

#define EXPLAIN_TIER_COLUMNS	11

typedef struct RowContext
{
	ReturnSetInfo *rsinfo;
	QueryReads *query;
	PlannedStmt *plannedstmt;
	int			parent;			/* plan node id, or -1 at the top */
	int			level;
} RowContext;

/* A node's name as EXPLAIN prints it, without its details. */
static const char *
node_type_name(Plan *plan)
{
	switch (nodeTag(plan))
	{
		case T_Result:
			return "Result";
		case T_ProjectSet:
			return "ProjectSet";
		case T_ModifyTable:
			switch (((ModifyTable *) plan)->operation)
			{
				case CMD_INSERT:
					return "Insert";
				case CMD_UPDATE:
					return "Update";
				case CMD_DELETE:
					return "Delete";
				case CMD_MERGE:
					return "Merge";
				default:
					return "ModifyTable";
			}
		case T_Append:
			return "Append";
		case T_MergeAppend:
			return "Merge Append";
		case T_RecursiveUnion:
			return "Recursive Union";
		case T_BitmapAnd:
			return "BitmapAnd";
		case T_BitmapOr:
			return "BitmapOr";
		case T_SeqScan:
			return "Seq Scan";
		case T_SampleScan:
			return "Sample Scan";
		case T_IndexScan:
			return "Index Scan";
		case T_IndexOnlyScan:
			return "Index Only Scan";
		case T_BitmapIndexScan:
			return "Bitmap Index Scan";
		case T_BitmapHeapScan:
			return "Bitmap Heap Scan";
		case T_TidScan:
			return "Tid Scan";
		case T_TidRangeScan:
			return "Tid Range Scan";
		case T_SubqueryScan:
			return "Subquery Scan";
		case T_FunctionScan:
			return "Function Scan";
		case T_TableFuncScan:
			return "Table Function Scan";
		case T_ValuesScan:
			return "Values Scan";
		case T_CteScan:
			return "CTE Scan";
		case T_NamedTuplestoreScan:
			return "Named Tuplestore Scan";
		case T_WorkTableScan:
			return "WorkTable Scan";
		case T_ForeignScan:
			return "Foreign Scan";
		case T_CustomScan:
			return "Custom Scan";
		case T_NestLoop:
			return "Nested Loop";
		case T_MergeJoin:
			return "Merge Join";
		case T_HashJoin:
			return "Hash Join";
		case T_Material:
			return "Materialize";
		case T_Memoize:
			return "Memoize";
		case T_Sort:
			return "Sort";
		case T_IncrementalSort:
			return "Incremental Sort";
		case T_Group:
			return "Group";
		case T_Agg:
			switch (((Agg *) plan)->aggstrategy)
			{
				case AGG_SORTED:
					return "GroupAggregate";
				case AGG_HASHED:
					return "HashAggregate";
				case AGG_MIXED:
					return "MixedAggregate";
				default:
					return "Aggregate";
			}
		case T_WindowAgg:
			return "WindowAgg";
		case T_Unique:
			return "Unique";
		case T_Gather:
			return "Gather";
		case T_GatherMerge:
			return "Gather Merge";
		case T_Hash:
			return "Hash";
		case T_SetOp:
			return "SetOp";
		case T_LockRows:
			return "LockRows";
		case T_Limit:
			return "Limit";
		default:
			return "?";
	}
}

/* The relation a scan or a table modification works on, or InvalidOid. */
static Oid
node_relation(Plan *plan, PlannedStmt *plannedstmt)
{
	Index		rti = 0;
	RangeTblEntry *rte;

	switch (nodeTag(plan))
	{
		case T_SeqScan:
		case T_SampleScan:
		case T_IndexScan:
		case T_IndexOnlyScan:
		case T_BitmapHeapScan:
		case T_TidScan:
		case T_TidRangeScan:
		case T_ForeignScan:
		case T_CustomScan:
			rti = ((Scan *) plan)->scanrelid;
			break;
		case T_ModifyTable:
			rti = ((ModifyTable *) plan)->nominalRelation;
			break;
		default:
			break;
	}
	if (rti == 0 || rti > (Index) list_length(plannedstmt->rtable))
		return InvalidOid;
	rte = rt_fetch(rti, plannedstmt->rtable);
	return rte->rtekind == RTE_RELATION ? rte->relid : InvalidOid;
}

/* One row for this node, then its descendants'. */
static bool
add_node_rows(PlanState *planstate, void *arg)
{
	RowContext *ctx = (RowContext *) arg;
	Plan	   *plan = planstate->plan;
	Datum		values[EXPLAIN_TIER_COLUMNS];
	bool		nulls[EXPLAIN_TIER_COLUMNS] = {0};
	BpextReadCounts counts;
	Oid			relid = node_relation(plan, ctx->plannedstmt);
	int			saved_parent = ctx->parent;
	bool		done;

	values[0] = Int32GetDatum(plan->plan_node_id);
	if (ctx->parent >= 0)
		values[1] = Int32GetDatum(ctx->parent);
	else
		nulls[1] = true;
	values[2] = Int32GetDatum(ctx->level);
	values[3] = CStringGetTextDatum(psprintf("%s%s",
											 plan->parallel_aware ? "Parallel " : "",
											 node_type_name(plan)));
	if (OidIsValid(relid))
		values[4] = ObjectIdGetDatum(relid);
	else
		nulls[4] = true;
	if (bpext_query_reads_node(ctx->query, planstate, &counts))
	{
		values[5] = Int64GetDatum((int64) counts.tier_reads);
		values[6] = Int64GetDatum((int64) counts.data_file_reads);
		values[7] = Float8GetDatum(counts.tier_read_us / 1000.0);
		values[8] = Float8GetDatum(counts.data_file_read_us / 1000.0);
		values[9] = Int64GetDatum((int64) counts.data_file_reads_untimed);
	}
	else
		nulls[5] = nulls[6] = nulls[7] = nulls[8] = nulls[9] = true;
	if (planstate->instrument != NULL)
		values[10] = Int64GetDatum(BPEXT_NODE_BUFUSAGE(planstate->instrument)->shared_blks_read);
	else
		nulls[10] = true;
	tuplestore_putvalues(ctx->rsinfo->setResult, ctx->rsinfo->setDesc,
						 values, nulls);

	ctx->parent = plan->plan_node_id;
	ctx->level++;
	done = bpext_planstate_tree_walker(planstate, add_node_rows, arg);
	ctx->level--;
	ctx->parent = saved_parent;
	return done;
}

/* The one plannable statement in sql. */
static PlannedStmt *
plan_statement(const char *sql)
{
	List	   *raw = pg_parse_query(sql);
	List	   *queries;
	Query	   *query;

	if (list_length(raw) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("bpext_explain_tier takes exactly one statement")));
	queries = pg_analyze_and_rewrite_fixedparams(linitial_node(RawStmt, raw),
												 sql, NULL, 0, NULL);
	query = linitial_node(Query, queries);
	if (list_length(queries) != 1 || query->commandType == CMD_UTILITY)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("bpext_explain_tier runs only a statement with a single plan"),
				 errhint("SELECT, INSERT, UPDATE, DELETE and MERGE have one, unless a rule adds more; utility statements have none.")));
	return bpext_plan_query(query, sql, CURSOR_OPT_PARALLEL_OK);
}

/*
 * bpext_explain_tier(query text): the statement is run (its changes are
 * kept, as with EXPLAIN ANALYZE) and each node's reads returned.
 */
Datum
bpext_explain_tier_1_4(PG_FUNCTION_ARGS)
{
	char	   *sql = text_to_cstring(PG_GETARG_TEXT_PP(0));
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	PlannedStmt *plannedstmt;
	QueryDesc  *queryDesc;
	RowContext	ctx;

	bpext_require_preloaded();
	InitMaterializedSRF(fcinfo, 0);
	plannedstmt = plan_statement(sql);

	PushCopiedSnapshot(GetActiveSnapshot());
	UpdateActiveSnapshotCommandId();
	queryDesc = CreateQueryDesc(plannedstmt, sql, GetActiveSnapshot(),
								InvalidSnapshot, None_Receiver, NULL, NULL,
								INSTRUMENT_ROWS | INSTRUMENT_BUFFERS);
	ExecutorStart(queryDesc, 0);
	ctx.query = bpext_query_reads_begin(queryDesc);
	bpext_executor_run_once(queryDesc);
	ExecutorFinish(queryDesc);

	if (!bpext_query_reads_workers_counted(ctx.query))
		ereport(NOTICE,
				(errmsg("the reads of the statement's parallel workers are not counted"),
				 errdetail("No dynamic shared memory segment could be had to collect them, or several statements of this session were being counted at once.")));
	ctx.rsinfo = rsinfo;
	ctx.plannedstmt = plannedstmt;
	ctx.parent = -1;
	ctx.level = 0;
	add_node_rows(queryDesc->planstate, &ctx);

	ExecutorEnd(queryDesc);
	FreeQueryDesc(queryDesc);
	PopActiveSnapshot();
	CommandCounterIncrement();
	return (Datum) 0;
}

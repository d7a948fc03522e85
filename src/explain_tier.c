/*-------------------------------------------------------------------------
 *
 * explain_tier.c
 *	  EXPLAIN (ANALYZE, TIER): for the plan and for each node, the shared-
 *	  buffer misses the tier served and those read from data files, and the
 *	  time spent in each (PostgreSQL 18 and later, which let an extension
 *	  add EXPLAIN options; before that, bpext_explain_tier() in
 *	  explain_function.c gives the same figures).
 *
 * PostgreSQL counts a block that comes from the tier as a shared-buffer
 * read, like one from the data file: hit + data-file read, per node, is
 * BUFFERS' shared read (but for the cases doc/monitoring.md lists).  The
 * counting is query_reads.c's; this file registers the option, tells
 * query_reads.c to count per node while an EXPLAIN that asked for TIER
 * runs (ProcessUtility_hook: the executor's hooks cannot see EXPLAIN's
 * options), and prints the figures from the per-node and per-plan hooks.
 * The per-plan figures are those of the plan's top node, with a note when
 * the parallel workers' reads could not be counted.
 *
 * Locking: none; the state is backend-local.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "compat.h"
#include "explain_tier.h"

#if BPEXT_EXPLAIN_OPTIONS

#include "commands/defrem.h"
#include "commands/explain.h"
#include "commands/explain_format.h"
#include "commands/explain_state.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"

#include "query_reads.h"

typedef struct TierOptions
{
	bool		tier;
} TierOptions;

static int	explain_extension_id;

static explain_per_node_hook_type prev_explain_per_node_hook = NULL;
static explain_per_plan_hook_type prev_explain_per_plan_hook = NULL;
static explain_validate_options_hook_type prev_explain_validate_options_hook = NULL;
static ProcessUtility_hook_type prev_ProcessUtility_hook = NULL;

static bool
tier_asked(ExplainState *es)
{
	TierOptions *options = GetExplainExtensionState(es, explain_extension_id);

	return options != NULL && options->tier;
}

/* EXPLAIN (TIER [boolean]) */
static void
tier_option_handler(ExplainState *es, DefElem *opt, ParseState *pstate)
{
	TierOptions *options = GetExplainExtensionState(es, explain_extension_id);

	if (options == NULL)
	{
		options = palloc0(sizeof(TierOptions));
		SetExplainExtensionState(es, explain_extension_id, options);
	}
	options->tier = defGetBoolean(opt);
}

/* TIER counts what a run reads: without ANALYZE nothing runs. */
static void
tier_validate_options(ExplainState *es, List *options, ParseState *pstate)
{
	if (prev_explain_validate_options_hook)
		prev_explain_validate_options_hook(es, options, pstate);
	if (tier_asked(es) && !es->analyze)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("EXPLAIN option %s requires ANALYZE", "TIER")));
}

/* Does this EXPLAIN statement ask for TIER? */
static bool
explain_asks_for_tier(ExplainStmt *stmt)
{
	ListCell   *lc;
	bool		tier = false;

	foreach(lc, stmt->options)
	{
		DefElem    *opt = lfirst_node(DefElem, lc);

		if (strcmp(opt->defname, "tier") == 0)
			tier = defGetBoolean(opt);
	}
	return tier;
}

static void
next_process_utility(PlannedStmt *pstmt, const char *queryString,
					 bool readOnlyTree, ProcessUtilityContext context,
					 ParamListInfo params, QueryEnvironment *queryEnv,
					 DestReceiver *dest, QueryCompletion *qc)
{
	if (prev_ProcessUtility_hook)
		prev_ProcessUtility_hook(pstmt, queryString, readOnlyTree, context,
								 params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
}

/*
 * While an EXPLAIN with TIER runs, the queries it runs with
 * instrumentation are counted per node (query_reads.c).
 */
static void
tier_process_utility(PlannedStmt *pstmt, const char *queryString,
					 bool readOnlyTree, ProcessUtilityContext context,
					 ParamListInfo params, QueryEnvironment *queryEnv,
					 DestReceiver *dest, QueryCompletion *qc)
{
	if (!IsA(pstmt->utilityStmt, ExplainStmt) ||
		!explain_asks_for_tier((ExplainStmt *) pstmt->utilityStmt))
	{
		next_process_utility(pstmt, queryString, readOnlyTree, context,
							 params, queryEnv, dest, qc);
		return;
	}

	bpext_query_reads_explaining++;
	PG_TRY();
	{
		next_process_utility(pstmt, queryString, readOnlyTree, context,
							 params, queryEnv, dest, qc);
	}
	PG_FINALLY();
	{
		bpext_query_reads_explaining--;
	}
	PG_END_TRY();
}

/*
 * A node's or the plan's figures.  Text shows, as BUFFERS does, only what
 * is not zero; the other formats show every field.
 */
static void
show_tier_reads(const char *label, const BpextReadCounts *c, ExplainState *es)
{
	uint64		timed = c->data_file_reads - c->data_file_reads_untimed;

	if (es->format != EXPLAIN_FORMAT_TEXT)
	{
		ExplainPropertyUInteger("Tier Hit Blocks", NULL, c->tier_reads, es);
		ExplainPropertyUInteger("Tier Data-File Read Blocks", NULL,
								c->data_file_reads, es);
		if (es->timing)
		{
			ExplainPropertyFloat("Tier Hit Time", "ms",
								 c->tier_read_us / 1000.0, 3, es);
			ExplainPropertyFloat("Tier Data-File Read Time", "ms",
								 c->data_file_read_us / 1000.0, 3, es);
			ExplainPropertyUInteger("Tier Data-File Reads Not Timed", NULL,
									c->data_file_reads_untimed, es);
		}
		return;
	}

	if (c->tier_reads == 0 && c->data_file_reads == 0)
		return;
	ExplainIndentText(es);
	appendStringInfo(es->str, "%s:", label);
	if (c->tier_reads > 0)
		appendStringInfo(es->str, " hit=%llu",
						 (unsigned long long) c->tier_reads);
	if (c->data_file_reads > 0)
		appendStringInfo(es->str, " data-file read=%llu",
						 (unsigned long long) c->data_file_reads);
	appendStringInfoChar(es->str, '\n');
	if (!es->timing)
		return;

	ExplainIndentText(es);
	appendStringInfo(es->str, "%s I/O Timings:", label);
	if (c->tier_reads > 0)
		appendStringInfo(es->str, " hit=%.3f", c->tier_read_us / 1000.0);
	if (timed > 0)
		appendStringInfo(es->str, " data-file read=%.3f",
						 c->data_file_read_us / 1000.0);
	if (c->data_file_reads_untimed > 0)
		appendStringInfo(es->str, timed > 0 ? " (%llu not timed)" :
						 " data-file read not timed",
						 (unsigned long long) c->data_file_reads_untimed);
	appendStringInfoChar(es->str, '\n');
}

static void
tier_explain_per_node(PlanState *planstate, List *ancestors,
					  const char *relationship, const char *plan_name,
					  ExplainState *es)
{
	QueryReads *query;
	BpextReadCounts counts;

	if (prev_explain_per_node_hook)
		prev_explain_per_node_hook(planstate, ancestors, relationship,
								   plan_name, es);
	if (!tier_asked(es))
		return;
	query = bpext_query_reads_of(planstate->state);
	if (query != NULL && bpext_query_reads_node(query, planstate, &counts))
		show_tier_reads("Tier", &counts, es);
}

/*
 * The plan's figures (its top node's), and what they leave out: the
 * workers' reads when they could not be counted, everything when no node
 * was counted (another extension's ProcessUtility_hook did not pass the
 * EXPLAIN on to ours).
 */
static void
tier_explain_per_plan(PlannedStmt *plannedstmt, IntoClause *into,
					  ExplainState *es, const char *queryString,
					  ParamListInfo params, QueryEnvironment *queryEnv)
{
	QueryReads *query = NULL;
	BpextReadCounts counts;
	bool		counted = false;

	if (prev_explain_per_plan_hook)
		prev_explain_per_plan_hook(plannedstmt, into, es, queryString,
								   params, queryEnv);
	if (!tier_asked(es))
		return;

	query = bpext_query_reads_of_plan(plannedstmt, &counts);
	counted = query != NULL;
	if (counted)
		show_tier_reads("Tier Total", &counts, es);
	else
		ExplainPropertyText("Tier Total", "not counted", es);
	if (counted && !bpext_query_reads_workers_counted(query))
		ExplainPropertyText("Tier Parallel Workers", "not counted", es);
}

/* Called in the postmaster, from _PG_init. */
void
bpext_install_explain_tier(void)
{
	explain_extension_id = GetExplainExtensionId("bpext");
	bpext_register_explain_option("tier", tier_option_handler);

	prev_explain_per_node_hook = explain_per_node_hook;
	explain_per_node_hook = tier_explain_per_node;
	prev_explain_per_plan_hook = explain_per_plan_hook;
	explain_per_plan_hook = tier_explain_per_plan;
	prev_explain_validate_options_hook = explain_validate_options_hook;
	explain_validate_options_hook = tier_validate_options;
	prev_ProcessUtility_hook = ProcessUtility_hook;
	ProcessUtility_hook = tier_process_utility;
}

#endif							/* BPEXT_EXPLAIN_OPTIONS */

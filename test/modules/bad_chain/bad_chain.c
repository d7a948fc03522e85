/*-------------------------------------------------------------------------
 *
 * bad_chain.c
 *	  A test module for test/t/016_hook_order.pl: a ProcessUtility_hook
 *	  that calls standard_ProcessUtility directly instead of the hook it
 *	  replaced, as some extensions do.  Loaded after bpext in
 *	  shared_preload_libraries, it hides every utility command from
 *	  bpext's ProcessUtility_hook.
 *
 * Never installed or packaged: the test builds it into its temporary
 * directory and preloads it by absolute path.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "tcop/utility.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

static void
bad_chain_process_utility(PlannedStmt *pstmt, const char *queryString,
						  bool readOnlyTree, ProcessUtilityContext context,
						  ParamListInfo params, QueryEnvironment *queryEnv,
						  DestReceiver *dest, QueryCompletion *qc)
{
	/* Deliberately not the previous hook. */
	standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
							params, queryEnv, dest, qc);
}

void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	ProcessUtility_hook = bad_chain_process_utility;
}

/*-------------------------------------------------------------------------
 *
 * db_hooks.c
 *	  Invalidate a whole database's pages when its files change without
 *	  going through the storage manager.
 *
 * CREATE DATABASE ... STRATEGY FILE_COPY copies files (copydir), DROP
 * DATABASE removes them (rmtree), ALTER DATABASE SET TABLESPACE moves them
 * (movedb): none of it calls smgr, so smgr_wrap.c never sees it.  CREATE
 * and DROP are caught through object_access_hook on pg_database
 * (post-create, drop), which invalidates the database's relations in the
 * tier at once; ALTER DATABASE ... SET TABLESPACE is recognised in
 * ProcessUtility_hook (other ALTER DATABASE forms change no files).  In
 * every case the invalidation is repeated after the utility command has
 * finished, when the files are in their final state.  Invalidating twice
 * costs a scan of the relation table; missing one would serve a stale
 * page.  On a standby the same file operations come from WAL replay: the
 * database resource manager's redo function is wrapped (RmgrTable is
 * writable since PostgreSQL 15) to invalidate around each record.
 *
 * Locking: none of its own (tier_map_invalidate_database takes the map's
 * relation lock).  The list of databases to invalidate after the command
 * is backend-local.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/dbcommands_xlog.h"
#include "nodes/parsenodes.h"
#include "nodes/pg_list.h"
#include "tcop/utility.h"
#include "utils/memutils.h"

#include "bpext.h"
#include "db_hooks.h"
#include "tier_map.h"
#include "tier_scans.h"

static object_access_hook_type prev_object_access_hook = NULL;
static void (*prev_dbase_redo) (XLogReaderState *record) = NULL;
static ProcessUtility_hook_type prev_ProcessUtility_hook = NULL;

/* Databases touched by the utility command under way. */
static List *touched_databases = NIL;

static void
remember_database(Oid dbid)
{
	if (!list_member_oid(touched_databases, dbid))
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		touched_databases = lappend_oid(touched_databases, dbid);
		MemoryContextSwitchTo(old);
	}
}

static void
bpext_object_access(ObjectAccessType access, Oid classId, Oid objectId,
					int subId, void *arg)
{
	if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);

	if (classId != DatabaseRelationId || BpextCtl == NULL)
		return;
	if (access != OAT_POST_CREATE && access != OAT_DROP)
		return;

	tier_map_invalidate_database(objectId);
	remember_database(objectId);
}

/* Is this ALTER DATABASE ... SET TABLESPACE (which moves files)? */
static bool
moves_database(Node *parsetree)
{
	ListCell   *lc;

	if (!IsA(parsetree, AlterDatabaseStmt))
		return false;
	foreach(lc, ((AlterDatabaseStmt *) parsetree)->options)
	{
		DefElem    *opt = (DefElem *) lfirst(lc);

		if (strcmp(opt->defname, "tablespace") == 0)
			return true;
	}
	return false;
}

static void
invalidate_touched_databases(void)
{
	ListCell   *lc;

	foreach(lc, touched_databases)
		tier_map_invalidate_database(lfirst_oid(lc));
	list_free(touched_databases);
	touched_databases = NIL;
}

static void
bpext_process_utility(PlannedStmt *pstmt, const char *queryString,
					  bool readOnlyTree, ProcessUtilityContext context,
					  ParamListInfo params, QueryEnvironment *queryEnv,
					  DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;
	Oid			removed_db = InvalidOid;	/* whose files go away */

	if (BpextCtl != NULL && moves_database(parsetree))
	{
		removed_db = get_database_oid(((AlterDatabaseStmt *) parsetree)->dbname,
									  true);
		if (OidIsValid(removed_db))
		{
			tier_map_invalidate_database(removed_db);
			remember_database(removed_db);
		}
	}
	else if (BpextCtl != NULL && IsA(parsetree, DropdbStmt))
		removed_db = get_database_oid(((DropdbStmt *) parsetree)->dbname, true);

	PG_TRY();
	{
		if (prev_ProcessUtility_hook)
			prev_ProcessUtility_hook(pstmt, queryString, readOnlyTree, context,
									 params, queryEnv, dest, qc);
		else
			standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
									params, queryEnv, dest, qc);
	}
	PG_FINALLY();
	{
		/* Files may have changed even if the command failed half-way. */
		if (touched_databases != NIL && BpextCtl != NULL)
			invalidate_touched_databases();
	}
	PG_END_TRY();

	/*
	 * The database's tier pages are dead already; have the worker give
	 * their slots back now, as SQL Server scans its buffer pool at DROP
	 * DATABASE.  Not here: the files are gone, an error (a cancel) would
	 * leave the database half dropped.
	 */
	if (OidIsValid(removed_db) && bpext_tier_enabled())
		bpext_request_sweep(removed_db,
							IsA(parsetree, DropdbStmt) ? "DROP DATABASE" :
							"ALTER DATABASE");
}

/*
 * WAL replay of CREATE DATABASE (both strategies), DROP DATABASE and
 * ALTER DATABASE SET TABLESPACE (a create and a drop) copies and removes
 * whole directories without going through the storage manager: invalidate
 * the database before and after the record is replayed, as the hooks above
 * do on the primary.
 */
static void
bpext_dbase_redo(XLogReaderState *record)
{
	uint8		info = XLogRecGetInfo(record) & ~XLR_INFO_MASK;
	Oid			dbid = InvalidOid;

	if (info == XLOG_DBASE_CREATE_FILE_COPY)
		dbid = ((xl_dbase_create_file_copy_rec *) XLogRecGetData(record))->db_id;
	else if (info == XLOG_DBASE_CREATE_WAL_LOG)
		dbid = ((xl_dbase_create_wal_log_rec *) XLogRecGetData(record))->db_id;
	else if (info == XLOG_DBASE_DROP)
		dbid = ((xl_dbase_drop_rec *) XLogRecGetData(record))->db_id;

	if (OidIsValid(dbid))
		tier_map_invalidate_database(dbid);
	prev_dbase_redo(record);
	if (OidIsValid(dbid))
		tier_map_invalidate_database(dbid);
}

void
bpext_install_db_hooks(void)
{
	/* In the postmaster: the startup process inherits the table. */
	prev_dbase_redo = RmgrTable[RM_DBASE_ID].rm_redo;
	RmgrTable[RM_DBASE_ID].rm_redo = bpext_dbase_redo;

	prev_object_access_hook = object_access_hook;
	object_access_hook = bpext_object_access;
	prev_ProcessUtility_hook = ProcessUtility_hook;
	ProcessUtility_hook = bpext_process_utility;
}

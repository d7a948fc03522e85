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
 * finished, when the files are in their final state.
 *
 * ProcessUtility_hook is not enough for the move: an extension loaded
 * after bpext may call standard_ProcessUtility without chaining to us.  So
 * the move is also caught in the object-access hook: movedb (15 to 18)
 * fires OAT_POST_ALTER on the database after copydir has written the new
 * files and after updating its pg_database row, with no command counter
 * increment in between, so the row seen through the catalog cache still
 * has the old tablespace and the one seen with SnapshotSelf the new one.
 * Only when they differ (RENAME, OWNER TO and the other ALTER DATABASE
 * forms fire the same hook but move nothing) is the database invalidated
 * there, and again at the end of movedb's transaction (a transaction
 * callback, since our utility post-step may not run), which also asks the
 * worker for the sweep.  Invalidating twice
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

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/dbcommands_xlog.h"
#include "nodes/parsenodes.h"
#include "nodes/pg_list.h"
#include "tcop/utility.h"
#include "utils/fmgroids.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "db_hooks.h"
#include "tier_control.h"
#include "tier_map.h"
#include "tier_scans.h"

static object_access_hook_type prev_object_access_hook = NULL;
static void (*prev_dbase_redo) (XLogReaderState *record) = NULL;
static ProcessUtility_hook_type prev_ProcessUtility_hook = NULL;

/* Databases touched by the utility command under way. */
static List *touched_databases = NIL;

/* The database our ProcessUtility_hook is moving, if any. */
static Oid	utility_moving_db = InvalidOid;

/* Databases moved without our ProcessUtility_hook, until transaction end. */
static List *moved_databases = NIL;

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

/*
 * Is the post-alter hook firing for movedb?  The catalog cache still shows
 * the row as it was before the command (no command counter increment yet),
 * SnapshotSelf shows the row as the command left it.
 */
static bool
database_tablespace_changed(Oid dbid)
{
	HeapTuple	tuple;
	Oid			before;
	Oid			after = InvalidOid;
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;

	tuple = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(dbid));
	if (!HeapTupleIsValid(tuple))
		return false;
	before = ((Form_pg_database) GETSTRUCT(tuple))->dattablespace;
	ReleaseSysCache(tuple);

	rel = table_open(DatabaseRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_database_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(dbid));
	scan = systable_beginscan(rel, DatabaseOidIndexId, true, SnapshotSelf,
							  1, &key);
	while (HeapTupleIsValid(tuple = systable_getnext(scan)))
		after = ((Form_pg_database) GETSTRUCT(tuple))->dattablespace;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);

	return OidIsValid(after) && after != before;
}

static void
bpext_object_access(ObjectAccessType access, Oid classId, Oid objectId,
					int subId, void *arg)
{
	if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);

	if (classId != DatabaseRelationId || BpextCtl == NULL)
		return;

	if (access == OAT_POST_ALTER)
	{
		if (!database_tablespace_changed(objectId))
			return;
		tier_map_invalidate_database(objectId);
		if (objectId != utility_moving_db &&
			!list_member_oid(moved_databases, objectId))
		{
			MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

			moved_databases = lappend_oid(moved_databases, objectId);
			MemoryContextSwitchTo(old);
		}
		return;
	}
	if (access != OAT_POST_CREATE && access != OAT_DROP)
		return;

	tier_map_invalidate_database(objectId);
	remember_database(objectId);
}

/*
 * The end of the transaction that moved a database past our utility hook:
 * its files are final (the old directory goes only after the commit, and
 * nothing can copy its pages into the tier any more), invalidate again and
 * have the worker give the dead slots back.
 */
static void
bpext_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (moved_databases == NIL ||
		(event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT))
		return;
	foreach(lc, moved_databases)
	{
		Oid			dbid = lfirst_oid(lc);

		if (BpextCtl == NULL)
			break;
		tier_map_invalidate_database(dbid);
		if (bpext_tier_enabled())
			bpext_request_sweep(dbid, "ALTER DATABASE");
	}
	list_free(moved_databases);
	moved_databases = NIL;
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
			utility_moving_db = removed_db;
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
		utility_moving_db = InvalidOid;
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
	RegisterXactCallback(bpext_xact_callback, NULL);
	prev_ProcessUtility_hook = ProcessUtility_hook;
	ProcessUtility_hook = bpext_process_utility;
}

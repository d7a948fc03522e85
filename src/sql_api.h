/*-------------------------------------------------------------------------
 *
 * sql_api.h
 *	  What the SQL-callable functions share (sql_api.c).
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_SQL_API_H
#define BPEXT_SQL_API_H

extern void bpext_require_preloaded(void);

#endif							/* BPEXT_SQL_API_H */

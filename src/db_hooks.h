/*-------------------------------------------------------------------------
 *
 * db_hooks.h
 *	  Database-wide invalidation for CREATE/DROP/ALTER DATABASE.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_DB_HOOKS_H
#define BPEXT_DB_HOOKS_H

extern void bpext_install_db_hooks(void);

#endif							/* BPEXT_DB_HOOKS_H */

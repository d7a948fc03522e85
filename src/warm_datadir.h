/*-------------------------------------------------------------------------
 *
 * warm_datadir.h
 *	  A warm restart's ties to the data directory (warm_datadir.c).
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_WARM_DATADIR_H
#define BPEXT_WARM_DATADIR_H

#include "catalog/pg_control.h"

/* In the data directory: ties a saved map to the directory it was saved in. */
#define WARM_TOKEN_FILE			"bpext_warm_token"
#define WARM_TOKEN_TEMP_FILE	"bpext_warm_token.tmp"

extern bool warm_datadir_read_control(ControlFileData *control);
extern bool warm_datadir_clean_shutdown(const ControlFileData *control);
extern const char *warm_datadir_state_name(DBState state);
extern bool warm_datadir_read_token(uint64 *token);
extern bool warm_datadir_write_token(uint64 token);
extern bool warm_datadir_remove_token(void);
extern bool warm_datadir_sync_file_systems(void);

#endif							/* BPEXT_WARM_DATADIR_H */

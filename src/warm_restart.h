/*-------------------------------------------------------------------------
 *
 * warm_restart.h
 *	  Keeping the tier's contents across a clean restart.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_WARM_RESTART_H
#define BPEXT_WARM_RESTART_H

/* How the tier started, for bpext_configuration. */
typedef enum BpextStartMode
{
	BPEXT_START_COLD,
	BPEXT_START_WARM
} BpextStartMode;

extern Size bpext_warm_shmem_size(void);
extern void bpext_warm_shmem_init(bool found);

/* The postmaster: decide at start, save at exit. */
extern void bpext_warm_startup(void);

/* The worker: say what was decided, take over the file, load the map. */
extern void bpext_warm_log_decision(void);
extern bool bpext_warm_load_pending(const char *path);
extern void bpext_warm_file(char *path, size_t pathlen, uint64 *dev,
							uint64 *ino, uint64 *nonce);
extern uint64 bpext_warm_directory_id(void);
extern void bpext_warm_begin_load(void);
extern bool bpext_warm_load_step(int fd);
extern void bpext_warm_abandon(const char *why, bool pages_stay);
extern void bpext_warm_note_cold_enable(void);

/* The views. */
extern void bpext_warm_status(BpextStartMode *mode, char *reason,
							  size_t reasonlen, uint64 *pages_reused);

#endif							/* BPEXT_WARM_RESTART_H */

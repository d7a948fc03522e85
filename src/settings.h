/*-------------------------------------------------------------------------
 *
 * settings.h
 *	  bpext's settings, the bpext.* GUCs (settings.c).
 *
 * The variables are per process, set by the GUC machinery.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_SETTINGS_H
#define BPEXT_SETTINGS_H

/* What happens to a page image written to a data file (bpext.write_policy). */
typedef enum BpextWritePolicy
{
	BPEXT_WRITE_INVALIDATE,		/* drop the tier's copy */
	BPEXT_WRITE_DUAL			/* store the new image in the tier too */
} BpextWritePolicy;

/* When pages enter the tier (bpext.admission). */
typedef enum BpextAdmission
{
	BPEXT_ADMIT_EVICT,			/* clean pages about to leave shared buffers */
	BPEXT_ADMIT_READ			/* also every page read from a data file */
} BpextAdmission;

extern char *bpext_path;
extern int	bpext_size_mb;
extern int	bpext_max_size_mb;
extern int	bpext_write_policy;
extern int	bpext_admission;
extern bool bpext_direct_io;
extern int	bpext_push_interval_ms;
extern int	bpext_push_lookahead;
extern int	bpext_io_timeout_ms;
extern int	bpext_recovery_interval_ms;
extern int	bpext_tier_readers;
extern int	bpext_tier_read_depth;
extern bool bpext_log_events;
extern bool bpext_warm_restart;
extern char *bpext_min_free_space;
extern int	bpext_store_queue_pages;
extern bool bpext_adaptive_admission;

/* The worker pool's (scan_pool.c). */
extern int	bpext_scan_workers;
extern bool bpext_parallel_scan;
extern int	bpext_scan_task_buffers;
extern int	bpext_log_scan_min_duration_ms;
extern int	bpext_scan_task_delay_ms;

/* The sizing sample's (sizing.c). */
extern bool bpext_sizing;
extern int	bpext_sizing_memory_kb;
extern double bpext_sizing_sample_rate;
extern int	bpext_sizing_samples_per_second;
extern int	bpext_log_tier_reads_min_duration_ms;

extern void bpext_define_settings(void);
extern bool bpext_size_fits(int size_mb);
extern int	bpext_reserved_size_mb(void);
extern uint64 bpext_min_free_space_bytes(uint64 fs_size);


#endif							/* BPEXT_SETTINGS_H */

/*-------------------------------------------------------------------------
 *
 * wait_events.h
 *	  The wait events bpext reports in pg_stat_activity.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_WAIT_EVENTS_H
#define BPEXT_WAIT_EVENTS_H

typedef enum BpextWaitEvent
{
	BPEXT_WAIT_TIER_READ,		/* a page read from the tier file */
	BPEXT_WAIT_TIER_WRITE,		/* pages written to the tier file */
	BPEXT_WAIT_SCAN_OUTPUT,		/* a scan waits for room for its rows */
	BPEXT_WAIT_SCAN_WORKERS,	/* ... for the pool to finish a scan */
	BPEXT_WAIT_SCAN_TASK_DELAY, /* bpext.scan_task_delay */
	BPEXT_WAIT_SCAN_WORKER_IDLE,	/* a pool worker waits for scans */
	BPEXT_WAIT_WORKER_MAIN,		/* the tier worker between push rounds */
	BPEXT_WAIT_SETTINGS_APPLIED,	/* a backend waits for the worker to
									 * apply new settings */
	BPEXT_WAIT_WARM_LOAD,		/* bpext_prewarm waits for a warm start's
								 * load */
	BPEXT_WAIT_CHAIN_CUTS,		/* a shrink or a clear waits for a drop's
								 * cut chains to be unhashed */
	BPEXT_WAIT_TIER_HELPER,		/* a helper process's tier-file work
								 * (helper_io.c) */
	BPEXT_WAIT_STORE_QUEUE,		/* bpext_prewarm waits for room in the store
								 * queue, or for its pages to be stored */
	BPEXT_WAIT_EVENT_COUNT
} BpextWaitEvent;

extern uint32 bpext_wait_event_info[BPEXT_WAIT_EVENT_COUNT];

extern void bpext_register_wait_events(void);

/* The wait_event_info to report for one of them. */
#define BPEXT_WAIT_EVENT(which) (bpext_wait_event_info[(which)])

#endif							/* BPEXT_WAIT_EVENTS_H */

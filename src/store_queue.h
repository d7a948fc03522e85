/*-------------------------------------------------------------------------
 *
 * store_queue.h
 *	  Pages on their way into the tier from inside smgr calls, handed to
 *	  the bpext worker through a bounded shared-memory queue.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_STORE_QUEUE_H
#define BPEXT_STORE_QUEUE_H

#include "stats.h"
#include "tier_map.h"


extern Size store_queue_shmem_size(void);
extern void store_queue_shmem_init(bool found);

/* Producers (smgr wrappers). */
extern void store_queue_put(const BpextRelFile *rfile, ForkNumber fork,
							BlockNumber block, const char *page,
							TierAdmitTicket *ticket, BpextAdmitSource source);

/* The consumer (the bpext worker). */
extern bool store_queue_drain(void);
extern void store_queue_abandon(void);
extern void store_queue_recover(void);

#endif							/* BPEXT_STORE_QUEUE_H */

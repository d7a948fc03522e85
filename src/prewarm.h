/*-------------------------------------------------------------------------
 *
 * prewarm.h
 *	  bpext_prewarm: reading a relation fork into the tier.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_PREWARM_H
#define BPEXT_PREWARM_H

#include "scan_pool.h"

extern void bpext_prewarm_unit(BpextScan *scan, uint64 unit);
extern void bpext_prewarm_end_task(BpextScan *scan, bool completed);

#endif							/* BPEXT_PREWARM_H */

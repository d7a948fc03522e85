/*-------------------------------------------------------------------------
 *
 * tier_scans.h
 *	  Scans over the tier map: unlinking dead slots and shrinking.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_TIER_SCANS_H
#define BPEXT_TIER_SCANS_H

#include "scan_pool.h"

extern void bpext_invalidate_unit(BpextScan *scan, uint64 unit);
extern void bpext_shrink_unit(BpextScan *scan, uint64 unit);

extern void bpext_tier_sweep_dead(Oid dbid, const char *command);
extern void bpext_request_sweep(Oid dbid, const char *command);
extern int	bpext_run_requested_sweeps(void);
extern void bpext_tier_shrink(uint32 old_slots, uint32 new_slots);

#endif							/* BPEXT_TIER_SCANS_H */

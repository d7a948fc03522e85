/*-------------------------------------------------------------------------
 *
 * summary.h
 *	  bpext_buffer_summary: pages in shared buffers and in the tier per
 *	  relation fork, counted inside the scan pool's tasks.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_SUMMARY_H
#define BPEXT_SUMMARY_H

#include "scan_pool.h"

extern void bpext_summary_unit(BpextScan *scan, uint64 unit);
extern void bpext_summary_end_task(BpextScan *scan, bool completed);

#endif							/* BPEXT_SUMMARY_H */

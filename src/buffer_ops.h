/*-------------------------------------------------------------------------
 *
 * buffer_ops.h
 *	  bpext_drop_clean_buffers and bpext_flush: scans over shared buffers
 *	  that change them.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_BUFFER_OPS_H
#define BPEXT_BUFFER_OPS_H

#include "scan_pool.h"

extern void bpext_drop_clean_unit(BpextScan *scan, uint64 unit);
extern void bpext_flush_unit(BpextScan *scan, uint64 unit);

#endif							/* BPEXT_BUFFER_OPS_H */

/*-------------------------------------------------------------------------
 *
 * explain_tier.h
 *	  EXPLAIN (ANALYZE, TIER), on the majors that let extensions add
 *	  EXPLAIN options (BPEXT_EXPLAIN_OPTIONS).
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_EXPLAIN_TIER_H
#define BPEXT_EXPLAIN_TIER_H

#include "compat.h"

#if BPEXT_EXPLAIN_OPTIONS
extern void bpext_install_explain_tier(void);
#endif

#endif							/* BPEXT_EXPLAIN_TIER_H */

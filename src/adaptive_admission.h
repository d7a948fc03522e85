/*-------------------------------------------------------------------------
 *
 * adaptive_admission.h
 *	  Pausing admission to the tier while it cannot help
 *	  (adaptive_admission.c).
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_ADAPTIVE_ADMISSION_H
#define BPEXT_ADAPTIVE_ADMISSION_H

#include "storage/smgr.h"

/* Backends, before looking a shared-buffer miss up in a paused tier. */
extern bool bpext_adaptive_look_in_tier(void);

/* Backends, after serving a block from the tier. */
extern void bpext_adaptive_note_hit(SMgrRelation reln, ForkNumber fork,
									BlockNumber block);

/* The bpext worker, on every round. */
extern void bpext_adaptive_admission_step(void);

#endif							/* BPEXT_ADAPTIVE_ADMISSION_H */

/*-------------------------------------------------------------------------
 *
 * evict_push.h
 *	  Pushing clean pages into the tier ahead of the clock sweep.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_EVICT_PUSH_H
#define BPEXT_EVICT_PUSH_H

extern uint64 bpext_clock_hand_position(void);
extern long bpext_push_round(void);
extern void bpext_push_abandon(void);

#endif							/* BPEXT_EVICT_PUSH_H */

/*-------------------------------------------------------------------------
 *
 * sizing_mini.h
 *	  Miniature simulations of the tier's own replacement for the sizing
 *	  advisor (sizing_mini.c): its CLOCK run on the sampled pages at a
 *	  series of sizes scaled by the sampling rate.
 *
 * Everything here is called by sizing.c with the advisor's lock held
 * exclusive (the snapshot: shared or exclusive), and names a sampled page
 * by the index of its entry there.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_SIZING_MINI_H
#define BPEXT_SIZING_MINI_H

/* Tier sizes simulated: NBuffers / 8 pages, doubling. */
#define SIZING_MINI_SIZES	16

typedef struct SizingMini SizingMini;

/* What the views need of the miniatures, copied under the lock. */
typedef struct SizingMiniSnapshot
{
	double		pages[SIZING_MINI_SIZES];	/* tier size simulated */
	double		hit_weight[SIZING_MINI_SIZES];	/* misses it served */
	bool		modelled[SIZING_MINI_SIZES];	/* big enough to say */
} SizingMiniSnapshot;

/* How a page comes into the tier, for what it does to a page held. */
typedef enum SizingMiniAdmit
{
	SIZING_MINI_DEPARTURE,		/* leaving shared buffers: a held page
								 * gains a count */
	SIZING_MINI_STORE,			/* dual write: stored anew, at count 1 */
	SIZING_MINI_READ			/* read admission: a held page was served */
} SizingMiniAdmit;

extern Size sizing_mini_shmem_size(uint32 capacity);
extern SizingMini *sizing_mini_init(char *base, uint32 capacity);
extern void sizing_mini_clear(SizingMini *mini, double rate);
extern void sizing_mini_forget(SizingMini *mini, uint32 entry);
extern void sizing_mini_rate_lowered(SizingMini *mini, double rate);
extern void sizing_mini_lookup(SizingMini *mini, uint32 entry, double weight);
extern void sizing_mini_admit(SizingMini *mini, uint32 entry,
							  SizingMiniAdmit how);
extern void sizing_mini_invalidate(SizingMini *mini, uint32 entry);
extern void sizing_mini_snapshot(const SizingMini *mini,
								 SizingMiniSnapshot *snap);

#endif							/* BPEXT_SIZING_MINI_H */

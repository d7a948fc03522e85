/*-------------------------------------------------------------------------
 *
 * sizing.h
 *	  The tier sizing advisor (sizing.c): a sampled reuse-distance histogram
 *	  of the shared-buffer miss stream, from which bpext_sizing estimates
 *	  the tier's hit ratio at every size at once.
 *
 * The smgr wrappers call bpext_sizing_note_read for every shared-buffer
 * miss and bpext_sizing_note_write for every data-file write.  What they
 * cost for a page that is not sampled (nearly all of them) is one hash,
 * one compare, and a look at one register of the page counter (below);
 * see sizing.c for the sampled path and its locking.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_SIZING_H
#define BPEXT_SIZING_H

#include "port/atomics.h"
#include "port/pg_bitutils.h"
#include "storage/block.h"
#include "storage/smgr.h"

#include "compat.h"
#include "settings.h"

/*
 * The sampling threshold: a page is sampled when its hash is at most this.
 * NULL until shared memory is attached, and when bpext.sizing_memory = 0.
 */
extern pg_atomic_uint32 *BpextSizingThreshold;

/*
 * The page counter: a HyperLogLog sketch of every page missed, written or
 * seen in shared buffers in the window (not only the sampled ones), from
 * which sizing.c corrects the sample's scale when the sample is small.
 * A register is raised, never lowered, with a compare-and-swap; it
 * changes a few times per register per window, so nearly every call only
 * reads it.  NULL like the threshold.
 */
#define SIZING_COUNTER_BITS		14
#define SIZING_COUNTER_REGISTERS	(1 << SIZING_COUNTER_BITS)
extern pg_atomic_uint32 *BpextSizingCounter;

extern Size bpext_sizing_shmem_size(void);
extern void bpext_sizing_shmem_init(bool found);
extern void bpext_sizing_sweep_shared_buffers(void);
extern void bpext_sizing_sampled(const BpextRelFile *rfile, ForkNumber fork,
								 BlockNumber block, uint32 hash, bool miss);
extern void bpext_sizing_pushed(const BpextRelFile *rfile, ForkNumber fork,
								BlockNumber block);

/*
 * The sampling hash of a page: murmur3's 64-bit finaliser over the page
 * identity, independent of the map's bucket hash.  Spatial sampling needs
 * every block of every relation to fall under the threshold with the same
 * probability, so consecutive blocks must hash far apart.
 */
static inline uint64
bpext_sizing_hash64(const BpextRelFile *rfile, ForkNumber fork,
					BlockNumber block)
{
	uint64		a = ((uint64) BPEXT_RELFILE_NUMBER(*rfile) << 32) | block;
	uint64		b = ((uint64) BPEXT_RELFILE_DB(*rfile) << 32) |
		((uint32) BPEXT_RELFILE_SPC(*rfile) ^ ((uint32) fork << 29));
	uint64		x = a ^ (b * UINT64CONST(0x9E3779B97F4A7C15));

	x ^= x >> 33;
	x *= UINT64CONST(0xff51afd7ed558ccd);
	x ^= x >> 33;
	x *= UINT64CONST(0xc4ceb9fe1a85ec53);
	x ^= x >> 33;
	return x;
}

/* The sampling hash is the low half; the page counter uses the high one. */
static inline uint32
bpext_sizing_hash(const BpextRelFile *rfile, ForkNumber fork,
				  BlockNumber block)
{
	return (uint32) bpext_sizing_hash64(rfile, fork, block);
}

/* Count a page (its hash64) in the page counter. */
static inline void
bpext_sizing_count(uint64 hash64)
{
	uint32		high = (uint32) (hash64 >> 32);
	uint32		rest = high >> SIZING_COUNTER_BITS;
	uint32		rank;
	pg_atomic_uint32 *reg;
	uint32		old;

	/* Leading zeros of the 18 remaining bits, plus one. */
	rank = rest == 0 ? 33 - SIZING_COUNTER_BITS :
		32 - SIZING_COUNTER_BITS - pg_leftmost_one_pos32(rest);
	reg = &BpextSizingCounter[high & (SIZING_COUNTER_REGISTERS - 1)];
	old = pg_atomic_read_u32(reg);
	while (old < rank && !pg_atomic_compare_exchange_u32(reg, &old, rank))
		;
}

static inline void
bpext_sizing_note(SMgrRelation reln, ForkNumber fork, BlockNumber block,
				  BlockNumber nblocks, bool miss)
{
	BlockNumber i;

	if (!bpext_sizing || BpextSizingThreshold == NULL ||
		BPEXT_SMGR_IS_TEMP(reln))
		return;
	for (i = 0; i < nblocks; i++)
	{
		uint64		hash64 = bpext_sizing_hash64(&BPEXT_SMGR_RELFILE(reln),
												 fork, block + i);
		uint32		hash = (uint32) hash64;

		bpext_sizing_count(hash64);
		if (hash <= pg_atomic_read_u32(BpextSizingThreshold))
			bpext_sizing_sampled(&BPEXT_SMGR_RELFILE(reln), fork, block + i,
								 hash, miss);
	}
}

/* nblocks shared-buffer misses (served by the tier or not). */
#define bpext_sizing_note_read(reln, fork, block, nblocks) \
	bpext_sizing_note((reln), (fork), (block), (nblocks), true)

/* nblocks pages written to their data file: they (re-)enter the tier. */
#define bpext_sizing_note_write(reln, fork, block, nblocks) \
	bpext_sizing_note((reln), (fork), (block), (nblocks), false)

#endif							/* BPEXT_SIZING_H */

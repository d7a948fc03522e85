/*-------------------------------------------------------------------------
 *
 * tier_map_internal.h
 *	  The structures the map's files share (tier_map.c and
 *	  tier_map_*.c): the map, its slots and relation entries, and the
 *	  inline functions every part of it uses.  Nothing outside the map
 *	  includes this.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_TIER_MAP_INTERNAL_H
#define BPEXT_TIER_MAP_INTERNAL_H

#include <time.h>

#include "common/hashfn.h"
#include "storage/lwlock.h"
#include "storage/spin.h"

#include "tier_map.h"

#define BPEXT_MAP_PARTITIONS	128
#define BPEXT_MAP_MIN_PIECES_PER_PARTITION	16

/*
 * The page index (tier_map_index.c): buckets of one cache line, each with
 * up to TIER_BUCKET_ENTRIES slot numbers and a one-byte tag per entry,
 * grouped by TIER_GROUP_BUCKETS consecutive buckets (256 bytes, never
 * across a page boundary) whose entries may go to any bucket of the group.
 * TIER_GROUP_SLOTS_FULL is how many slots a full map has per group: the
 * groups are sized from bpext.max_size so that a full map fills them to
 * about 81%, which keeps the index at 6.6 bytes per tier page.
 */
#define TIER_BUCKET_ENTRIES		12
#define TIER_GROUP_BUCKETS		4
#define TIER_GROUP_SLOTS_FULL	39
#define TIER_GROUP_ALIGN		256		/* a group's bytes */

/*
 * Groups per piece of a whole-map walk at most (about 2500 slots at a
 * full map), so that a walk holds a partition lock for milliseconds even
 * at a terabyte, where a sixteenth of a partition is 65,000 slots.
 */
#define BPEXT_MAP_PIECE_GROUPS	64
#define BPEXT_WRITE_COUNTERS	65536	/* power of two */

#define SLOT_REFCOUNT_ONE	1U
#define SLOT_REFCOUNT_MASK	0x0000FFFFU
#define SLOT_USAGE_ONE		(1U << 16)
#define SLOT_USAGE_MASK		(3U << 16)
#define SLOT_USAGE_MAX		3
#define SLOT_LISTED			(1U << 28)
#define SLOT_FILLING		(1U << 29)
#define SLOT_HASHED			(1U << 30)

#define SLOT_REFCOUNT(s)	((s) & SLOT_REFCOUNT_MASK)
#define SLOT_USAGE(s)		(((s) & SLOT_USAGE_MASK) >> 16)

typedef struct TierSlot
{
	uint32		rel;			/* TierRel index, or TIER_INVALID_INDEX */
	BlockNumber block;			/* the page's block; on the free stack, the
								 * next slot there (tier_map_slots.c) */
	uint32		generation;		/* TierRel generation at admission */
	pg_crc32c	crc;			/* tier_page_crc() of the slot's content */
	pg_atomic_uint32 state;
	uint32		last_access;	/* seconds since map creation of the last
								 * publish or hit, for the views */
} TierSlot;

/*
 * A bucket of the page index, one cache line (see tier_map_index.c).  All
 * zeroes is an empty bucket, so that new shared memory needs no setting up.
 */
typedef struct TierBucket
{
	uint32		slots[TIER_BUCKET_ENTRIES];	/* slot + 1, or 0: empty */
	uint8		tags[TIER_BUCKET_ENTRIES];	/* of each entry's page */
	uint32		meta;			/* bits 2i, 2i + 1: the position in the group
								 * of entry i's home bucket; bits 24-31: how
								 * many entries whose home this is are kept
								 * in other buckets of the group */
} TierBucket;

typedef struct TierRel
{
	BpextRelFile rfile;
	ForkNumber	fork;
	pg_atomic_uint32 generation;
	pg_atomic_uint32 refcount;
	pg_atomic_uint32 nblocks_hint;	/* 1 + highest block ever admitted */
	uint32		next;			/* rel hash chain, or free list */
	bool		warm_held;		/* held for a warm-restart load */
	uint32		warm_generation;	/* its generation when it was held */
} TierRel;

/* An atomic on a cache line of its own, away from read-mostly fields. */
typedef union PaddedAtomic
{
	pg_atomic_uint32 value;
	char		pad[PG_CACHE_LINE_SIZE];
} PaddedAtomic;

/* The free-slot stack (see "Free slots" above), on a cache line of its own. */
typedef union FreeStack
{
	struct
	{
		slock_t		lock;
		uint32		head;		/* top slot, or TIER_INVALID_INDEX */
		uint32		count;		/* slots on the stack */
	}			s;
	char		pad[PG_CACHE_LINE_SIZE];
} FreeStack;

typedef struct TierMap
{
	/* Read-mostly: set at startup. */
	uint32		max_slots;
	uint32		nbuckets;		/* TIER_GROUP_BUCKETS per group */
	uint32		ngroups;		/* a multiple of BPEXT_MAP_PARTITIONS */
	uint32		nrels;
	uint32		rel_nbuckets;	/* power of two */
	uint32		pieces_per_partition;	/* power of two */
	LWLock	   *rel_lock;
	LWLockPadded *partition_locks;
	TierBucket *buckets;		/* cache-line aligned */
	uint32	   *rel_buckets;
	TierRel    *rels;
	TierSlot   *slots;
	pg_atomic_uint32 *write_generations;
	uint32		rel_free;		/* free-list head, under rel_lock */
	uint32		rel_unused;		/* entries from here on were never made;
								 * under rel_lock */
	uint32		slots_ready;	/* slots below this are made; the worker's */
	pg_time_t	created_at;		/* origin of TierSlot.last_access */

	/* Written often, each on its own cache line. */
	PaddedAtomic clock_hand;
	PaddedAtomic next_generation;
	PaddedAtomic used_slots;	/* HASHED slots, plus publications under way */
	PaddedAtomic generation_bumps;	/* relation-level invalidations, which
									 * leave dead slots for the sweep */
	PaddedAtomic chain_cuts;	/* pieces whose chains were cut off their
								 * buckets (unhash_piece_all) */
	PaddedAtomic cuts_in_flight;	/* of those, the ones whose slots are
									 * not all unhashed yet */
	FreeStack	free;
} TierMap;

/* Key hashed to find a page's bucket; no padding, so hash_bytes is safe. */
typedef struct TierPageKey
{
	BpextRelFile rfile;
	int32		fork;
	BlockNumber block;
} TierPageKey;

/*
 * What the map's files share is hidden from the dynamic linker, as it was
 * while it was static in one file: in 15 a module's global symbols are
 * visible to every library the server loads (16 and later hide them), and
 * a hidden one is reached without going through the GOT or PLT.
 */
#ifdef __GNUC__
#define TIER_MAP_PRIVATE __attribute__((visibility("hidden")))
#else
#define TIER_MAP_PRIVATE
#endif

/* The map in shared memory (tier_map.c). */
extern TIER_MAP_PRIVATE TierMap *Map;

static inline uint32
page_hash(const BpextRelFile *rfile, ForkNumber fork, BlockNumber block)
{
	TierPageKey key;

	key.rfile = *rfile;
	key.fork = (int32) fork;
	key.block = block;
	return hash_bytes((const unsigned char *) &key, sizeof(key));
}

/*
 * The page's home bucket: the hash scaled to the bucket count (multiply
 * and shift, so the count need not be a power of two).
 */
static inline uint32
bucket_of(uint32 hash)
{
	return (uint32) (((uint64) hash * Map->nbuckets) >> 32);
}

/*
 * The page's tag in its bucket: the bits of the hash that bucket_of's
 * scaling drops, so that pages of one bucket differ in it as much as the
 * 32-bit hash allows.
 */
static inline uint8
tag_of(uint32 hash)
{
	return (uint8) ((uint32) ((uint64) hash * Map->nbuckets) >> 24);
}

/* Ask for a bucket's cache line before writing it (the warm load, a shrink). */
static inline void
bucket_prefetch(uint32 bucket)
{
#if defined(__GNUC__) || defined(__clang__)
	__builtin_prefetch(&Map->buckets[bucket], 1);
#endif
}

/*
 * The same before reading it (lookups): shared, so that the line is not
 * taken away from the other processes' caches.
 */
static inline void
bucket_prefetch_read(uint32 bucket)
{
#if defined(__GNUC__) || defined(__clang__)
	__builtin_prefetch(&Map->buckets[bucket], 0);
#endif
}

/* The partition of a bucket: that of its group, so a group has one lock. */
static inline uint32
partition_of(uint32 bucket)
{
	return (bucket / TIER_GROUP_BUCKETS) % BPEXT_MAP_PARTITIONS;
}

static inline LWLock *
partition_lock(uint32 bucket)
{
	return &Map->partition_locks[partition_of(bucket)].lock;
}

static inline pg_atomic_uint32 *
write_generation(uint32 hash)
{
	return &Map->write_generations[hash & (BPEXT_WRITE_COUNTERS - 1)];
}

static inline uint32
map_clock(void)
{
	return (uint32) ((pg_time_t) time(NULL) - Map->created_at);
}

static inline bool
slot_is_current(const TierSlot *s)
{
	return s->generation == pg_atomic_read_u32(&Map->rels[s->rel].generation);
}

/* The page index (tier_map_index.c). */
extern TIER_MAP_PRIVATE bool tier_index_unhash_slot(uint32 bucket, uint32 slot,
													 bool *owned);
extern TIER_MAP_PRIVATE void tier_index_remove_page(const BpextRelFile *rfile,
													ForkNumber fork,
													BlockNumber block,
													uint32 hash);

/* Relation entries (tier_map_rels.c). */
extern TIER_MAP_PRIVATE void tier_rel_release(uint32 rel);

#endif							/* BPEXT_TIER_MAP_INTERNAL_H */

/*-------------------------------------------------------------------------
 *
 * tier_map.c
 *	  The tier's shared-memory map: a chained hash from page identity to
 *	  tier-file slot, a CLOCK replacement hand over the slots, and the
 *	  generation counters that keep a slot from outliving the data-file
 *	  image it copies.
 *
 * Layout.  Each slot of the tier file has a TierSlot (28 bytes): the block
 * number, the index of its relation entry (TierRel), the relation
 * generation it was admitted under, the CRC of its content, the next slot
 * in its hash chain (or on the free stack), an atomic state word and the time of its last use.
 * Relation identity (the RelFileNode and fork) is kept once per relation
 * in a TierRel, so the map costs about 32 bytes per 8 kB tier page (bucket
 * array and relation table included; 31.3 at a terabyte, where the
 * relation table stops growing).
 *
 * Slot state word: a pin count (readers copying the slot out of the file),
 * a CLOCK usage count, and three flags: HASHED (the slot is in a hash chain
 * and may be served), FILLING (a process owns the slot and is writing it)
 * and LISTED (the slot is free and on the free stack).  A slot whose word
 * is zero is free but not listed: it was made and not listed yet (a warm
 * load is under way), it is past the active slots, or its last pin is
 * being dropped (see tier_map_unpin).
 *
 * Free slots.  A slot freed while the tier is in use goes on a stack of
 * free slots threaded through the slots' hash-chain links (a free slot is
 * in no chain, so TierSlot.next is unused), under one spinlock with the
 * stack's head and length; allocation pops from it before the CLOCK hand
 * moves, so that no live page is evicted while a slot is free.  Writes,
 * dual writes and invalidations free slots all over the tier: with only
 * the hand to find them, a TPC-B run evicted 8,389 live pages while 4,510
 * slots were free.  Only the owner of a slot (FILLING) pushes it, and it
 * becomes LISTED in the same critical section; only a pop, under the same
 * lock, takes a LISTED slot (to FILLING), and nothing else changes a
 * LISTED word (the hand, the warm load and the pins only act on words
 * that are zero or HASHED), so a slot is on the stack at most once and is
 * handed out once per push.  The stack holds only slots below
 * active_slots: a push past them leaves the slot unlisted (checked under
 * the lock, which a shrink takes after lowering active_slots to cut the
 * stack), and growth, a cold enable and the end of a warm load list the
 * slots that became usable.
 *
 * Locking protocol.
 *
 *	- Hash chains are protected by BPEXT_MAP_PARTITIONS LWLocks; bucket b
 *	  belongs to partition b % BPEXT_MAP_PARTITIONS.  Lookups hold the lock
 *	  shared while they pin a slot; anything that links or unlinks a slot
 *	  holds it exclusive.  A slot can only become unhashed under the
 *	  exclusive lock, and pins are only taken under the shared lock, so an
 *	  evictor holding the exclusive lock and seeing no pins can take the
 *	  slot.  Unpinning needs no lock.
 *	- A slot's rel/block/generation/crc fields are written only by the
 *	  process that owns it in FILLING state, before it is published, and
 *	  are stable while it is HASHED.
 *	- TierRels are reference counted (one reference per slot naming it,
 *	  plus one per in-flight admission); the rel hash and free list are
 *	  protected by rel_lock.  A TierRel's key never changes while it is
 *	  referenced, so slots may read it without the lock.
 *	- Generations: every TierRel has one, bumped by unlink, create,
 *	  truncation and database-wide events; a slot records the generation it
 *	  was admitted under and is dead once they differ.  Writes bump one of
 *	  BPEXT_WRITE_COUNTERS hashed per-block counters instead.  Admitters
 *	  sample both before copying a page and publish only if neither moved,
 *	  checked under the partition lock, so invalidation (bump, then unlink
 *	  under the same lock) and publication are serialised.
 *	- map_epoch (in BpextControl) is bumped whenever slots are taken away
 *	  wholesale (by the worker on disable, error and shrink, by
 *	  bpext_drop_clean_buffers in any backend) and when the worker enables
 *	  a file; publication checks it too, and the file incarnation the copy
 *	  was written to.
 *	  Whole-map walks go piece by piece (a share of a partition's buckets,
 *	  at most BPEXT_MAP_PIECE_BUCKETS, under its lock), so that a scan can
 *	  be split over the worker pool and no walk holds a lock for long.
 *	  Emptying the map (bpext_drop_clean_buffers, disable) only cuts a
 *	  piece's chains off their buckets under the lock, and unhashes their
 *	  slots after releasing it: no lookup can reach them any more, so none
 *	  can pin them, and anyone else who finds such a slot (the CLOCK hand,
 *	  a shrink, an invalidation) looks for it in its chain under the lock
 *	  and leaves it.  Because an invalidation cannot unhash such a slot, a
 *	  reader that pinned it before the cut must not trust its re-check:
 *	  every cut bumps chain_cuts under the lock, and a read that a cut
 *	  overlapped is a miss (tier_map_pin_still_valid).  Nor can a shrink
 *	  (tier_map_drop_slots) or tier_map_clear unhash such a slot, which
 *	  would stay HASHED past the file's new end, or in a map said to be
 *	  empty, until the walk reaches it: so every cut also counts in
 *	  cuts_in_flight, raised under the partition lock with chain_cuts and
 *	  lowered once the walk has unhashed all the cut slots.  A shrink that
 *	  finds a slot HASHED but in no chain, and every clear after its own
 *	  pass, wait (wait_for_cuts) until no cut is in flight, holding no
 *	  lock: a walk takes only rel_lock (to free a relation's last slot)
 *	  and the free stack's spinlock, so the wait ends.  Then every slot
 *	  they looked for is either in its chain, where they unhashed it, or
 *	  unhashed by the walk.  A clear's wait cannot be prolonged by new
 *	  cuts, as no publication refills the chains it emptied; a shrink's
 *	  only by new drops.
 *	- Every publication and unlinking of a slot is reported to the slot
 *	  directory (slot_directory.c) once the slot's fields are final, so
 *	  that its copy on the SSD is written again.
 *
 * Start-up cost.  A terabyte tier has 134 million slots (3.7 GB) and up to
 * 4 million relation entries.  The postmaster, which must start accepting
 * connections quickly, only sets up the relation buckets (8 MB at a
 * terabyte): page buckets read as empty from zeroed memory (bucket_head),
 * relation entries are made when first taken (rel_unused), and slots by
 * the worker when it makes them usable (tier_map_set_active_slots,
 * slots_ready), which then lists them on the free stack, a second pass
 * over them.  Nothing
 * reads a slot or relation entry that was never made: lookups only follow
 * hash chains, and relation walks stop at rel_unused.
 *
 * Nothing here raises an error or allocates memory: these functions run
 * inside smgr calls, some of them in critical sections.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <time.h>

#include "common/hashfn.h"
#include "miscadmin.h"
#include "port/pg_bitutils.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/wait_event.h"

#include "bpext.h"
#include "page_crc.h"
#include "slot_directory.h"
#include "test_hooks.h"
#include "tier_map.h"
#include "wait_events.h"

#define BPEXT_MAP_PARTITIONS	128
#define BPEXT_MAP_MIN_PIECES_PER_PARTITION	16

/*
 * Buckets per piece of a whole-map walk at most (about 4096 slots at a
 * full map), so that a walk holds a partition lock for milliseconds even
 * at a terabyte: a sixteenth of a partition is 65,000 slots there, and
 * bpext_drop_clean_buffers held lookups up for seconds.
 */
#define BPEXT_MAP_PIECE_BUCKETS	2048
#define BPEXT_WRITE_COUNTERS	65536	/* power of two */

/* Drop a relation's slots one by one on unlink if it has at most this many
 * blocks cached; larger ones are left to the CLOCK hand as dead slots. */
#define BPEXT_EAGER_INVALIDATE_BLOCKS	8192

/* Slots listed per critical section of the free stack's spinlock. */
#define FREE_LIST_BATCH		4096

/* Most slots the CLOCK hand looks at for one allocation. */
#define ALLOC_MAX_TRIES		4096

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
	BlockNumber block;
	uint32		next;			/* next slot in the hash chain, or on the
								 * free stack */
	uint32		generation;		/* TierRel generation at admission */
	pg_crc32c	crc;			/* tier_page_crc() of the slot's content */
	pg_atomic_uint32 state;
	uint32		last_access;	/* seconds since map creation of the last
								 * publish or hit, for the views */
} TierSlot;

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
	uint32		nbuckets;		/* power of two */
	uint32		nrels;
	uint32		rel_nbuckets;	/* power of two */
	uint32		pieces_per_partition;	/* power of two */
	LWLock	   *rel_lock;
	LWLockPadded *partition_locks;
	uint32	   *buckets;
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

typedef struct TierRelKey
{
	BpextRelFile rfile;
	int32		fork;
} TierRelKey;

static TierMap *Map = NULL;

static uint32 rel_nblocks_hint(uint32 rel);
static uint32 rel_make_locked(void);
static uint32 rel_insert_locked(uint32 b, const BpextRelFile *rfile,
								ForkNumber fork);
static bool publish_slot(TierAdmitTicket *ticket, uint32 slot, pg_crc32c crc,
						 uint32 file_incarnation);
static bool slot_unhash_locked(uint32 slot, uint32 prev, uint32 bucket);
static bool slot_unhash_detached(uint32 slot);
static void slot_release_owned(uint32 slot);
static void rel_release(uint32 rel);

static inline uint32
page_hash(const BpextRelFile *rfile, ForkNumber fork, BlockNumber block)
{
	TierPageKey key;

	key.rfile = *rfile;
	key.fork = (int32) fork;
	key.block = block;
	return hash_bytes((const unsigned char *) &key, sizeof(key));
}

static inline uint32
rel_hash(const BpextRelFile *rfile, ForkNumber fork)
{
	TierRelKey	key;

	key.rfile = *rfile;
	key.fork = (int32) fork;
	return hash_bytes((const unsigned char *) &key, sizeof(key));
}

static inline uint32
bucket_of(uint32 hash)
{
	return hash & (Map->nbuckets - 1);
}

/*
 * A bucket holds its first slot's index plus one, so that zero, what a new
 * shared memory segment holds, is an empty chain: PostgreSQL creates the
 * segment anew at every start and after every crash (anonymous mmap, SysV
 * and huge pages all come zeroed), so the postmaster does not have to
 * write the bucket array, 256 MB at a terabyte, before it can accept
 * connections.
 */
static inline uint32
bucket_head(uint32 bucket)
{
	return Map->buckets[bucket] - 1;
}

static inline void
set_bucket_head(uint32 bucket, uint32 slot)
{
	Map->buckets[bucket] = slot + 1;
}

/* Ask for a bucket's cache line before it is needed (the warm load). */
static inline void
bucket_prefetch(uint32 bucket)
{
#if defined(__GNUC__) || defined(__clang__)
	__builtin_prefetch(&Map->buckets[bucket], 1);
#endif
}

static inline LWLock *
partition_lock(uint32 bucket)
{
	return &Map->partition_locks[bucket % BPEXT_MAP_PARTITIONS].lock;
}

static inline pg_atomic_uint32 *
write_generation(uint32 hash)
{
	return &Map->write_generations[hash & (BPEXT_WRITE_COUNTERS - 1)];
}

/* Does the slot (which must be HASHED or pinned) hold this page? */
static inline bool
slot_matches(const TierSlot *s, const BpextRelFile *rfile, ForkNumber fork,
			 BlockNumber block)
{
	const TierRel *r;

	if (s->block != block)
		return false;
	r = &Map->rels[s->rel];
	return r->fork == fork && BPEXT_RELFILE_EQUAL(r->rfile, *rfile);
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

/*
 * slot_is_current() for a slot we hold no lock or pin on: another process
 * may take it meanwhile and clear its relation, so read that once.
 */
static inline bool
slot_is_current_unlocked(const TierSlot *s)
{
	uint32		rel = ((const volatile TierSlot *) s)->rel;

	return rel != TIER_INVALID_INDEX &&
		s->generation == pg_atomic_read_u32(&Map->rels[rel].generation);
}

/* Is the slot a copy its relation has since moved on from? */
static bool
slot_is_dead(const TierSlot *s)
{
	return !slot_is_current(s);
}

/* ---------------------------------------------------------------------
 * Shared memory
 * ---------------------------------------------------------------------
 */

/*
 * A relation entry per 16 slots, at least 1024 and at most
 * BPEXT_MAP_MAX_RELS: an entry is taken per relation fork with pages in
 * the tier, and 4 million forks is more than any cluster has, while the
 * 8 million a terabyte's 16th would be cost 1.25 bytes per tier page.
 */
#define BPEXT_MAP_MAX_RELS		(4U * 1024 * 1024)

static void
map_dimensions(uint32 max_slots, uint32 *nbuckets, uint32 *nrels,
			   uint32 *rel_nbuckets)
{
	*nbuckets = pg_nextpower2_32(Max(max_slots / 2, 16));
	*nrels = Min(Max(max_slots / 16, 1024), BPEXT_MAP_MAX_RELS);
	*rel_nbuckets = pg_nextpower2_32(*nrels / 2);
}

int
tier_map_lwlock_count(void)
{
	return BPEXT_MAP_PARTITIONS + 1;
}

Size
tier_map_shmem_size(uint32 max_slots)
{
	uint32		nbuckets,
				nrels,
				rel_nbuckets;
	Size		size;

	map_dimensions(max_slots, &nbuckets, &nrels, &rel_nbuckets);
	size = MAXALIGN(sizeof(TierMap));
	size = add_size(size, MAXALIGN(mul_size(nbuckets, sizeof(uint32))));
	size = add_size(size, MAXALIGN(mul_size(rel_nbuckets, sizeof(uint32))));
	size = add_size(size, MAXALIGN(mul_size(nrels, sizeof(TierRel))));
	size = add_size(size, MAXALIGN(mul_size(max_slots, sizeof(TierSlot))));
	size = add_size(size, MAXALIGN(mul_size(BPEXT_WRITE_COUNTERS,
											sizeof(pg_atomic_uint32))));
	return size;
}

void
tier_map_shmem_init(uint32 max_slots, bool found)
{
	char	   *p;
	uint32		i;
	LWLockPadded *locks;

	p = ShmemInitStruct("bpext tier map", tier_map_shmem_size(max_slots),
						&found);
	Map = (TierMap *) p;
	locks = GetNamedLWLockTranche("bpext");

	if (found)
		return;

	map_dimensions(max_slots, &Map->nbuckets, &Map->nrels, &Map->rel_nbuckets);
	Map->pieces_per_partition =
		pg_nextpower2_32(Max(BPEXT_MAP_MIN_PIECES_PER_PARTITION,
							 Map->nbuckets / BPEXT_MAP_PARTITIONS /
							 BPEXT_MAP_PIECE_BUCKETS));
	Map->max_slots = max_slots;
	pg_atomic_init_u32(&Map->clock_hand.value, 0);
	pg_atomic_init_u32(&Map->next_generation.value, 1);
	pg_atomic_init_u32(&Map->used_slots.value, 0);
	pg_atomic_init_u32(&Map->generation_bumps.value, 0);
	pg_atomic_init_u32(&Map->chain_cuts.value, 0);
	pg_atomic_init_u32(&Map->cuts_in_flight.value, 0);
	SpinLockInit(&Map->free.s.lock);
	Map->free.s.head = TIER_INVALID_INDEX;
	Map->free.s.count = 0;
	Map->created_at = (pg_time_t) time(NULL);
	Map->rel_lock = &locks[BPEXT_MAP_PARTITIONS].lock;
	Map->partition_locks = locks;

	p += MAXALIGN(sizeof(TierMap));
	Map->buckets = (uint32 *) p;
	p += MAXALIGN(Map->nbuckets * sizeof(uint32));
	Map->rel_buckets = (uint32 *) p;
	p += MAXALIGN(Map->rel_nbuckets * sizeof(uint32));
	Map->rels = (TierRel *) p;
	p += MAXALIGN(Map->nrels * sizeof(TierRel));
	Map->slots = (TierSlot *) p;
	p += MAXALIGN(max_slots * sizeof(TierSlot));
	Map->write_generations = (pg_atomic_uint32 *) p;

	/* The buckets need no setting up (bucket_head); TIER_INVALID_INDEX is
	 * all ones. */
	memset(Map->rel_buckets, 0xFF, Map->rel_nbuckets * sizeof(uint32));
	Map->rel_free = TIER_INVALID_INDEX;
	Map->rel_unused = 0;
	Map->slots_ready = 0;
	for (i = 0; i < BPEXT_WRITE_COUNTERS; i++)
		pg_atomic_init_u32(&Map->write_generations[i], 0);
}

pg_crc32c
tier_page_crc(const BpextRelFile *rfile, ForkNumber fork, BlockNumber block,
			  const char *page)
{
	TierPageKey key;

	key.rfile = *rfile;
	key.fork = (int32) fork;
	key.block = block;
	return bpext_page_crc(&key, sizeof(key), page);
}

/* ---------------------------------------------------------------------
 * Serving reads
 * ---------------------------------------------------------------------
 */

/*
 * Find a current copy of the page and pin its slot, so that it cannot be
 * reused while the caller reads it from the tier file.  Returns the slot
 * and its stored CRC, or TIER_INVALID_INDEX.  *chain_cuts is what
 * tier_map_pin_still_valid needs to know whether the slot's chain was cut
 * off meanwhile.  Counts towards the slot's CLOCK usage.
 */
uint32
tier_map_lookup_pin(const BpextRelFile *rfile, ForkNumber fork,
					BlockNumber block, pg_crc32c *crc, uint32 *chain_cuts)
{
	uint32		bucket = bucket_of(page_hash(rfile, fork, block));
	LWLock	   *lock = partition_lock(bucket);
	uint32		slot;

	if (pg_atomic_read_u32(&Map->used_slots.value) == 0)
		return TIER_INVALID_INDEX;

	LWLockAcquire(lock, LW_SHARED);
	for (slot = bucket_head(bucket); slot != TIER_INVALID_INDEX;
		 slot = Map->slots[slot].next)
	{
		TierSlot   *s = &Map->slots[slot];
		uint32		old_state;

		if (!slot_matches(s, rfile, fork, block))
			continue;
		if (!slot_is_current(s))
			break;

		old_state = pg_atomic_read_u32(&s->state);
		for (;;)
		{
			uint32		new_state = old_state + SLOT_REFCOUNT_ONE;

			if (SLOT_USAGE(old_state) < SLOT_USAGE_MAX)
				new_state += SLOT_USAGE_ONE;
			if (pg_atomic_compare_exchange_u32(&s->state, &old_state,
											   new_state))
				break;
		}
		*crc = s->crc;
		*chain_cuts = pg_atomic_read_u32(&Map->chain_cuts.value);
		s->last_access = map_clock();
		LWLockRelease(lock);
		return slot;
	}
	LWLockRelease(lock);
	return TIER_INVALID_INDEX;
}

/*
 * After the caller has read a pinned slot: is it still the current copy?
 * A slot can be unhashed while pinned (invalidation, disable, shrink); the
 * pin only keeps it from being reused.  A slot on a chain that was cut off
 * its bucket stays HASHED until the walk that cut it reaches it, and
 * meanwhile neither an invalidation nor a shrink can find it to unhash
 * it: so a read that a cut may have overlapped (chain_cuts moved since the
 * pin, which was taken under the partition lock the cut holds) is not
 * trusted either.  Cuts happen only while the map is emptied, when such
 * a read is one more miss.
 */
bool
tier_map_pin_still_valid(uint32 slot, uint32 chain_cuts)
{
	TierSlot   *s = &Map->slots[slot];

	pg_memory_barrier();
	return (pg_atomic_read_u32(&s->state) & SLOT_HASHED) != 0 &&
		pg_atomic_read_u32(&Map->chain_cuts.value) == chain_cuts &&
		slot_is_current(s) &&
		pg_atomic_read_u32(&BpextCtl->state) == BPEXT_STATE_ENABLED;
}

/*
 * Drop a pin.  The last pin on a slot that was unlinked while pinned
 * leaves its word zero: take the slot then and free it, unless the CLOCK
 * hand took it first.
 */
void
tier_map_unpin(uint32 slot)
{
	TierSlot   *s = &Map->slots[slot];
	uint32		state;

	state = pg_atomic_sub_fetch_u32(&s->state, SLOT_REFCOUNT_ONE);
	if (state == 0 &&
		pg_atomic_compare_exchange_u32(&s->state, &state, SLOT_FILLING))
		tier_map_free_slot(slot);
}

/* Is a current copy of the page in the tier?  (No pin taken.) */
bool
tier_map_contains(const BpextRelFile *rfile, ForkNumber fork,
				  BlockNumber block)
{
	uint32		bucket = bucket_of(page_hash(rfile, fork, block));
	LWLock	   *lock = partition_lock(bucket);
	uint32		slot;
	bool		found = false;

	if (pg_atomic_read_u32(&Map->used_slots.value) == 0)
		return false;

	LWLockAcquire(lock, LW_SHARED);
	for (slot = bucket_head(bucket); slot != TIER_INVALID_INDEX;
		 slot = Map->slots[slot].next)
	{
		TierSlot   *s = &Map->slots[slot];

		if (slot_matches(s, rfile, fork, block))
		{
			found = slot_is_current(s);
			break;
		}
	}
	LWLockRelease(lock);
	return found;
}

/* ---------------------------------------------------------------------
 * Relation entries
 * ---------------------------------------------------------------------
 */

/* Find the relation's entry in the rel hash; caller holds rel_lock. */
static uint32
rel_find_locked(uint32 bucket, const BpextRelFile *rfile, ForkNumber fork)
{
	uint32		rel;

	for (rel = Map->rel_buckets[bucket]; rel != TIER_INVALID_INDEX;
		 rel = Map->rels[rel].next)
	{
		TierRel    *r = &Map->rels[rel];

		if (r->fork == fork && BPEXT_RELFILE_EQUAL(r->rfile, *rfile))
			return rel;
	}
	return TIER_INVALID_INDEX;
}

/*
 * Make the first entry never used so far, and take it (caller holds
 * rel_lock exclusive, or is the postmaster, alone).
 */
static uint32
rel_make_locked(void)
{
	uint32		rel = Map->rel_unused++;
	TierRel    *r = &Map->rels[rel];

	memset(r, 0, sizeof(TierRel));
	pg_atomic_init_u32(&r->generation, 0);
	pg_atomic_init_u32(&r->refcount, 0);
	pg_atomic_init_u32(&r->nblocks_hint, 0);
	r->next = TIER_INVALID_INDEX;
	return rel;
}

/*
 * Make a new entry for the relation fork, with one reference, in rel hash
 * bucket b.  The caller holds rel_lock exclusive (or is the postmaster,
 * alone, see tier_map_warm_hold).  TIER_INVALID_INDEX if the table is full.
 */
static uint32
rel_insert_locked(uint32 b, const BpextRelFile *rfile, ForkNumber fork)
{
	uint32		rel = Map->rel_free;
	TierRel    *r;

	if (rel != TIER_INVALID_INDEX)
		Map->rel_free = Map->rels[rel].next;
	else if (Map->rel_unused < Map->nrels)
		rel = rel_make_locked();
	else
		return rel;
	r = &Map->rels[rel];
	r->rfile = *rfile;
	r->fork = fork;
	pg_atomic_write_u32(&r->generation,
						pg_atomic_fetch_add_u32(&Map->next_generation.value, 1));
	pg_atomic_write_u32(&r->refcount, 1);
	pg_atomic_write_u32(&r->nblocks_hint, 0);
	r->warm_held = false;
	r->next = Map->rel_buckets[b];
	Map->rel_buckets[b] = rel;
	return rel;
}

/*
 * Find the relation's entry, optionally creating it, and take a reference.
 * Returns TIER_INVALID_INDEX if it does not exist and create is false, or if
 * the table is full.  Finding takes rel_lock shared (references may be
 * taken under a shared lock: the last release frees under an exclusive
 * one); only creating takes it exclusive.
 */
static uint32
rel_acquire(const BpextRelFile *rfile, ForkNumber fork, bool create)
{
	uint32		b = rel_hash(rfile, fork) & (Map->rel_nbuckets - 1);
	uint32		rel;

	LWLockAcquire(Map->rel_lock, LW_SHARED);
	rel = rel_find_locked(b, rfile, fork);
	if (rel != TIER_INVALID_INDEX)
		pg_atomic_fetch_add_u32(&Map->rels[rel].refcount, 1);
	LWLockRelease(Map->rel_lock);
	if (rel != TIER_INVALID_INDEX || !create)
		return rel;

	LWLockAcquire(Map->rel_lock, LW_EXCLUSIVE);
	rel = rel_find_locked(b, rfile, fork);
	if (rel != TIER_INVALID_INDEX)
		pg_atomic_fetch_add_u32(&Map->rels[rel].refcount, 1);
	else
		rel = rel_insert_locked(b, rfile, fork);
	LWLockRelease(Map->rel_lock);
	return rel;
}

/* Drop a reference; the last one returns the entry to the free list. */
static void
rel_release(uint32 rel)
{
	TierRel    *r = &Map->rels[rel];
	uint32		old = pg_atomic_read_u32(&r->refcount);
	uint32		b;
	uint32	   *link;

	/* Fast path: not the last reference. */
	while (old > 1)
	{
		if (pg_atomic_compare_exchange_u32(&r->refcount, &old, old - 1))
			return;
	}

	LWLockAcquire(Map->rel_lock, LW_EXCLUSIVE);
	if (pg_atomic_sub_fetch_u32(&r->refcount, 1) > 0)
	{
		/* Someone found it in the hash meanwhile. */
		LWLockRelease(Map->rel_lock);
		return;
	}
	b = rel_hash(&r->rfile, r->fork) & (Map->rel_nbuckets - 1);
	for (link = &Map->rel_buckets[b]; *link != TIER_INVALID_INDEX;
		 link = &Map->rels[*link].next)
	{
		if (*link == rel)
		{
			*link = r->next;
			break;
		}
	}
	r->next = Map->rel_free;
	Map->rel_free = rel;
	LWLockRelease(Map->rel_lock);
}

static void
rel_bump_generation(uint32 rel)
{
	pg_atomic_fetch_add_u32(&Map->generation_bumps.value, 1);
	pg_atomic_write_u32(&Map->rels[rel].generation,
						pg_atomic_fetch_add_u32(&Map->next_generation.value, 1));
	pg_memory_barrier();
}

/*
 * Is the caller's reference the only one?  Then no slot holds a page of
 * the relation and no admission of one is under way.
 */
static bool
rel_only_ours(uint32 rel)
{
	return pg_atomic_read_u32(&Map->rels[rel].refcount) == 1;
}

static uint32
rel_nblocks_hint(uint32 rel)
{
	return pg_atomic_read_u32(&Map->rels[rel].nblocks_hint);
}

/* ---------------------------------------------------------------------
 * Admitting pages
 * ---------------------------------------------------------------------
 */

/*
 * Prepare to copy a page into the tier: pin its relation entry and sample
 * the generations the copy must not outlive.  Call this before taking the
 * copy.  Returns false (nothing held) if the relation table is full.
 */
bool
tier_map_begin_admit(const BpextRelFile *rfile, ForkNumber fork,
					 BlockNumber block, TierAdmitTicket *ticket)
{
	uint32		rel = rel_acquire(rfile, fork, true);
	uint32		hint;

	if (rel == TIER_INVALID_INDEX)
	{
		BPEXT_COUNT(admission_skips, 1);
		return false;
	}
	/*
	 * Advertise the block before sampling, so that a truncation that does
	 * not see it in nblocks_hint cannot race with this admission.
	 */
	hint = pg_atomic_read_u32(&Map->rels[rel].nblocks_hint);
	while (hint <= block &&
		   !pg_atomic_compare_exchange_u32(&Map->rels[rel].nblocks_hint,
										   &hint, block + 1))
		;
	pg_memory_barrier();

	ticket->rel = rel;
	ticket->block = block;
	ticket->hash = page_hash(rfile, fork, block);
	ticket->map_epoch = pg_atomic_read_u32(&BpextCtl->map_epoch);
	ticket->rel_generation = pg_atomic_read_u32(&Map->rels[rel].generation);
	ticket->write_generation =
		pg_atomic_read_u32(write_generation(ticket->hash));
	pg_memory_barrier();
	return true;
}

void
tier_map_cancel_admit(TierAdmitTicket *ticket)
{
	rel_release(ticket->rel);
	ticket->rel = TIER_INVALID_INDEX;
}

/*
 * Take the slot on top of the free stack, in FILLING state, or return
 * TIER_INVALID_INDEX if the stack is empty.  The length is peeked at
 * without the lock: a stack found empty that was not only sends this one
 * allocation to the CLOCK hand.
 */
static uint32
free_stack_pop(void)
{
	uint32		slot;

	if (((volatile FreeStack *) &Map->free)->s.count == 0)
		return TIER_INVALID_INDEX;
	SpinLockAcquire(&Map->free.s.lock);
	slot = Map->free.s.head;
	if (slot != TIER_INVALID_INDEX)
	{
		Map->free.s.head = Map->slots[slot].next;
		Map->free.s.count--;
		Assert(pg_atomic_read_u32(&Map->slots[slot].state) == SLOT_LISTED);
		pg_atomic_write_u32(&Map->slots[slot].state, SLOT_FILLING);
	}
	SpinLockRelease(&Map->free.s.lock);
	if (slot != TIER_INVALID_INDEX)
		Map->slots[slot].next = TIER_INVALID_INDEX;
	return slot;
}

/*
 * Put a slot the caller owns (FILLING, its relation released) on the free
 * stack, or, past the active slots, leave it free and unlisted.
 */
static void
free_stack_push(uint32 slot)
{
	TierSlot   *s = &Map->slots[slot];

	SpinLockAcquire(&Map->free.s.lock);
	if (slot < pg_atomic_read_u32(&BpextCtl->active_slots))
	{
		s->next = Map->free.s.head;
		pg_atomic_write_u32(&s->state, SLOT_LISTED);
		Map->free.s.head = slot;
		Map->free.s.count++;
		SpinLockRelease(&Map->free.s.lock);
		return;
	}
	SpinLockRelease(&Map->free.s.lock);
	s->next = TIER_INVALID_INDEX;
	/* Whoever takes the free word next must see the slot's fields final. */
	pg_write_barrier();
	pg_atomic_write_u32(&s->state, 0);
}

/*
 * Put a chain of n LISTED slots that the caller took off the stack or
 * never put on it (head to tail through their next links) on top of it.
 * The caller makes sure they are all below active_slots.
 */
static void
free_stack_splice(uint32 head, uint32 tail, uint32 n)
{
	if (n == 0)
		return;
	SpinLockAcquire(&Map->free.s.lock);
	Map->slots[tail].next = Map->free.s.head;
	Map->free.s.head = head;
	Map->free.s.count += n;
	SpinLockRelease(&Map->free.s.lock);
}

/*
 * List the slots of [first, end) whose word is zero (made, free, not
 * listed) on the free stack, lowest on top, so that allocation takes them
 * in order and the writer can write runs of them at once.  They must be
 * below active_slots.  Each is taken from zero with a compare-and-swap,
 * like the CLOCK hand does, and its relation reference dropped (a slot
 * whose last pin is being dropped still holds one).
 */
static void
list_free_slots(uint32 first, uint32 end)
{
	uint32		head = TIER_INVALID_INDEX;
	uint32		tail = TIER_INVALID_INDEX;
	uint32		n = 0;
	uint32		slot;

	for (slot = end; slot > first; slot--)
	{
		TierSlot   *s = &Map->slots[slot - 1];
		uint32		state = 0;

		if (!pg_atomic_compare_exchange_u32(&s->state, &state, SLOT_FILLING))
			continue;
		slot_release_owned(slot - 1);
		s->next = head;
		pg_atomic_write_u32(&s->state, SLOT_LISTED);
		if (tail == TIER_INVALID_INDEX)
			tail = slot - 1;
		head = slot - 1;
		if (++n == FREE_LIST_BATCH)
		{
			free_stack_splice(head, tail, n);
			head = tail = TIER_INVALID_INDEX;
			n = 0;
		}
	}
	free_stack_splice(head, tail, n);
}

/*
 * Cut the slots at or past nslots out of the free stack, after a shrink
 * has lowered active_slots to nslots: the whole stack is taken off under
 * the lock (pushes from then on see the new count), walked without it, and
 * what stays is put back in batches.  The slots cut are left free and
 * unlisted.
 */
static void
unlist_slots_from(uint32 nslots)
{
	uint32		cur;
	uint32		head = TIER_INVALID_INDEX;
	uint32		tail = TIER_INVALID_INDEX;
	uint32		n = 0;

	SpinLockAcquire(&Map->free.s.lock);
	cur = Map->free.s.head;
	Map->free.s.head = TIER_INVALID_INDEX;
	Map->free.s.count = 0;
	SpinLockRelease(&Map->free.s.lock);

	while (cur != TIER_INVALID_INDEX)
	{
		TierSlot   *s = &Map->slots[cur];
		uint32		next = s->next;

		if (cur >= nslots)
		{
			s->next = TIER_INVALID_INDEX;
			pg_write_barrier();
			pg_atomic_write_u32(&s->state, 0);
		}
		else
		{
			s->next = TIER_INVALID_INDEX;
			if (tail == TIER_INVALID_INDEX)
				head = cur;
			else
				Map->slots[tail].next = cur;
			tail = cur;
			if (++n == FREE_LIST_BATCH)
			{
				free_stack_splice(head, tail, n);
				head = tail = TIER_INVALID_INDEX;
				n = 0;
			}
		}
		cur = next;
	}
	free_stack_splice(head, tail, n);
}

/*
 * Take a slot for a new page: the top of the free stack if there is one,
 * else with the CLOCK hand: free slots not listed first come first served,
 * then dead slots (their relation moved on), then live slots whose usage
 * count has worn down to zero.  The slot returned is in FILLING state,
 * owned by the caller.  The hand gives up after ALLOC_MAX_TRIES slots
 * (each try wears a usage count down, so the next call gets further) and
 * returns TIER_INVALID_INDEX: a page not admitted is cheaper than a long
 * search on the write path.
 */
uint32
tier_map_alloc_slot(void)
{
	uint32		nslots = pg_atomic_read_u32(&BpextCtl->active_slots);
	uint64		tries;
	uint32		popped;

	/*
	 * While a warm restart loads the saved map, every slot not yet loaded
	 * still holds a saved page that is about to be published: none may be
	 * taken.
	 */
	if (nslots == 0 || pg_atomic_read_u32(&BpextCtl->warm_loading) != 0)
		return TIER_INVALID_INDEX;

	/*
	 * A shrink lowers active_slots before it cuts the stack: a slot popped
	 * in between is past our count, and goes back (unlisted).
	 */
	popped = free_stack_pop();
	if (popped != TIER_INVALID_INDEX)
	{
		if (popped < nslots)
			return popped;
		free_stack_push(popped);
	}

	for (tries = 0; tries < Min((uint64) nslots * 4, ALLOC_MAX_TRIES); tries++)
	{
		uint32		slot = pg_atomic_fetch_add_u32(&Map->clock_hand.value, 1) % nslots;
		TierSlot   *s = &Map->slots[slot];
		uint32		state = pg_atomic_read_u32(&s->state);
		uint32		rel;
		uint32		bucket;
		LWLock	   *lock;
		uint32		prev;
		uint32		cur;

		if (state == 0)
		{
			if (pg_atomic_compare_exchange_u32(&s->state, &state, SLOT_FILLING))
			{
				slot_release_owned(slot);
				pg_atomic_write_u32(&s->state, SLOT_FILLING);
				return slot;
			}
			continue;
		}
		if (!(state & SLOT_HASHED) || SLOT_REFCOUNT(state) > 0)
			continue;
		if (SLOT_USAGE(state) > 0 && slot_is_current_unlocked(s))
		{
			pg_atomic_compare_exchange_u32(&s->state, &state,
										   state - SLOT_USAGE_ONE);
			continue;
		}

		/*
		 * Evict it: unlink it from its chain under the partition lock.  The
		 * slot may change hands before we get the lock, so the bucket is
		 * only a guess until we find the slot in its chain, and its state
		 * must be checked again there (pins are only taken under the
		 * partition lock, so none can appear while we hold it).
		 */
		rel = s->rel;
		if (rel == TIER_INVALID_INDEX)
			continue;
		bucket = bucket_of(page_hash(&Map->rels[rel].rfile,
									 Map->rels[rel].fork, s->block));
		lock = partition_lock(bucket);
		if (!LWLockConditionalAcquire(lock, LW_EXCLUSIVE))
			continue;
		state = pg_atomic_read_u32(&s->state);
		if (!(state & SLOT_HASHED) || SLOT_REFCOUNT(state) > 0 ||
			(SLOT_USAGE(state) > 0 && slot_is_current_unlocked(s)))
		{
			LWLockRelease(lock);
			continue;
		}
		prev = TIER_INVALID_INDEX;
		for (cur = bucket_head(bucket); cur != TIER_INVALID_INDEX;
			 cur = Map->slots[cur].next)
		{
			if (cur == slot)
				break;
			prev = cur;
		}
		if (cur == slot)
		{
			bool		live = slot_is_current(s);

			if (slot_unhash_locked(slot, prev, bucket))
			{
				LWLockRelease(lock);
				slot_release_owned(slot);
				if (live)
					BPEXT_COUNT(page_evictions, 1);
				return slot;
			}
		}
		LWLockRelease(lock);
	}
	BPEXT_COUNT(admission_skips, 1);
	return TIER_INVALID_INDEX;
}

/*
 * Unlink a slot from its chain (caller holds the chain's partition lock
 * exclusive; prev is the slot before it or TIER_INVALID_INDEX).  If nobody
 * has it pinned, the caller becomes its owner in FILLING state and true is
 * returned; otherwise it is left unhashed for the last pin holder to free
 * and false is returned.
 */
static bool
slot_unhash_locked(uint32 slot, uint32 prev, uint32 bucket)
{
	TierSlot   *s = &Map->slots[slot];

	if (prev == TIER_INVALID_INDEX)
		set_bucket_head(bucket, s->next);
	else
		Map->slots[prev].next = s->next;
	return slot_unhash_detached(slot);
}

/*
 * The rest of slot_unhash_locked, for a slot no chain leads to any more:
 * unlinked under the partition lock, or on a chain cut off its bucket
 * under it (unhash_piece_all).  Nobody can pin such a slot, so this needs
 * no lock.
 */
static bool
slot_unhash_detached(uint32 slot)
{
	TierSlot   *s = &Map->slots[slot];
	uint32		state;

	s->next = TIER_INVALID_INDEX;
	pg_atomic_fetch_sub_u32(&Map->used_slots.value, 1);

	state = pg_atomic_read_u32(&s->state);
	for (;;)
	{
		uint32		new_state;

		if (SLOT_REFCOUNT(state) > 0)
			new_state = state & ~(SLOT_HASHED | SLOT_USAGE_MASK);
		else
			new_state = SLOT_FILLING;
		if (pg_atomic_compare_exchange_u32(&s->state, &state, new_state))
		{
			slot_directory_note_change(slot);
			return new_state == SLOT_FILLING;
		}
	}
}

/* Drop the relation reference of a slot the caller owns (FILLING). */
static void
slot_release_owned(uint32 slot)
{
	TierSlot   *s = &Map->slots[slot];

	if (s->rel != TIER_INVALID_INDEX)
	{
		rel_release(s->rel);
		s->rel = TIER_INVALID_INDEX;
	}
	s->block = InvalidBlockNumber;
}

/* Give back a FILLING slot that will not be published: it goes on the free
 * stack. */
void
tier_map_free_slot(uint32 slot)
{
	slot_release_owned(slot);
	free_stack_push(slot);
}

/*
 * Make a filled slot servable, unless the page changed since the ticket
 * was taken, or the slot was written to a file the tier has since left
 * (file_incarnation is the one tier_file_write_pages reported): a write
 * through an old descriptor that outlasted a disable and an enable must
 * not be published into the new file's map.  Consumes the ticket and the
 * slot either way; returns whether the copy was published.
 */
bool
tier_map_publish(TierAdmitTicket *ticket, uint32 slot, pg_crc32c crc,
				 uint32 file_incarnation)
{
	bool		published = publish_slot(ticket, slot, crc, file_incarnation);

	if (!published)
		BPEXT_COUNT(publish_races, 1);
	return published;
}

static bool
publish_slot(TierAdmitTicket *ticket, uint32 slot, pg_crc32c crc,
			 uint32 file_incarnation)
{
	TierSlot   *s = &Map->slots[slot];
	uint32		bucket = bucket_of(ticket->hash);
	LWLock	   *lock = partition_lock(bucket);
	TierRel    *r = &Map->rels[ticket->rel];
	bool		enabled;
	uint32		prev;
	uint32		cur;

	Assert(pg_atomic_read_u32(&s->state) == SLOT_FILLING);
	Assert(s->rel == TIER_INVALID_INDEX);

	LWLockAcquire(lock, LW_EXCLUSIVE);

	/*
	 * Count the slot as used before checking the generations: an
	 * invalidator bumps the write generation and then reads used_slots to
	 * decide whether to look at all (both full barriers), so either it sees
	 * this publication and removes it under the lock, or we see its bump.
	 */
	pg_atomic_fetch_add_u32(&Map->used_slots.value, 1);

	/*
	 * The worker changes file_incarnation and map_epoch before it sets
	 * ENABLED, so seeing ENABLED means seeing the values it enabled with.
	 */
	enabled = pg_atomic_read_u32(&BpextCtl->state) == BPEXT_STATE_ENABLED;
	pg_read_barrier();
	if (!enabled ||
		pg_atomic_read_u32(&BpextCtl->file_incarnation) != file_incarnation ||
		pg_atomic_read_u32(&BpextCtl->map_epoch) != ticket->map_epoch ||
		slot >= pg_atomic_read_u32(&BpextCtl->active_slots) ||
		pg_atomic_read_u32(&r->generation) != ticket->rel_generation ||
		pg_atomic_read_u32(write_generation(ticket->hash)) !=
		ticket->write_generation)
	{
		pg_atomic_fetch_sub_u32(&Map->used_slots.value, 1);
		LWLockRelease(lock);
		tier_map_free_slot(slot);
		tier_map_cancel_admit(ticket);
		return false;
	}

	/* An older copy of the same page (dead or not) gives way. */
	prev = TIER_INVALID_INDEX;
	for (cur = bucket_head(bucket); cur != TIER_INVALID_INDEX;
		 cur = Map->slots[cur].next)
	{
		TierSlot   *c = &Map->slots[cur];

		if (c->rel == ticket->rel && c->block == ticket->block)
		{
			if (slot_unhash_locked(cur, prev, bucket))
				tier_map_free_slot(cur);
			break;
		}
		prev = cur;
	}

	/* The ticket's relation reference passes to the slot. */
	s->rel = ticket->rel;
	s->block = ticket->block;
	s->generation = ticket->rel_generation;
	s->crc = crc;
	s->last_access = map_clock();
	s->next = bucket_head(bucket);
	pg_write_barrier();
	set_bucket_head(bucket, slot);
	pg_atomic_write_u32(&s->state, SLOT_HASHED | SLOT_USAGE_ONE);
	slot_directory_note_change(slot);
	LWLockRelease(lock);

	ticket->rel = TIER_INVALID_INDEX;
	return true;
}

/* ---------------------------------------------------------------------
 * Keeping the invariant
 * ---------------------------------------------------------------------
 */

/*
 * Remove the page's slot from the map if it is there.  The caller has
 * already made any in-flight copy unpublishable.
 */
static void
remove_page(const BpextRelFile *rfile, ForkNumber fork, BlockNumber block,
			uint32 hash)
{
	uint32		bucket = bucket_of(hash);
	LWLock	   *lock = partition_lock(bucket);
	uint32		prev = TIER_INVALID_INDEX;
	uint32		cur;
	bool		present = false;

	/* Most writes find nothing to remove: look under the shared lock. */
	LWLockAcquire(lock, LW_SHARED);
	for (cur = bucket_head(bucket); cur != TIER_INVALID_INDEX;
		 cur = Map->slots[cur].next)
	{
		if (slot_matches(&Map->slots[cur], rfile, fork, block))
		{
			present = true;
			break;
		}
	}
	LWLockRelease(lock);
	if (!present)
		return;

	LWLockAcquire(lock, LW_EXCLUSIVE);
	for (cur = bucket_head(bucket); cur != TIER_INVALID_INDEX;
		 cur = Map->slots[cur].next)
	{
		TierSlot   *c = &Map->slots[cur];

		if (slot_matches(c, rfile, fork, block))
		{
			if (slot_is_current(c))
				BPEXT_COUNT(invalidations, 1);
			if (slot_unhash_locked(cur, prev, bucket))
				tier_map_free_slot(cur);
			break;
		}
		prev = cur;
	}
	LWLockRelease(lock);
}

/*
 * The page's image in its data file is changing.  Writers call this twice:
 * before the write, so the old copy is gone before the new image lands,
 * and after it, so that a copy taken while the write was under way (by a
 * reader that does not go through shared buffers) can no longer be
 * published, or is removed if it already was.
 */
void
tier_map_invalidate_block(const BpextRelFile *rfile, ForkNumber fork,
						  BlockNumber block)
{
	uint32		hash = page_hash(rfile, fork, block);

	pg_atomic_fetch_add_u32(write_generation(hash), 1);
	if (pg_atomic_read_u32(&Map->used_slots.value) == 0)
		return;
	remove_page(rfile, fork, block, hash);
}

/*
 * Blocks [first, end) of the fork are going away (truncation).  With an
 * unknown end, or a range larger than what the tier holds of the
 * relation, the whole fork's generation moves on instead.
 */
void
tier_map_invalidate_from(const BpextRelFile *rfile, ForkNumber fork,
						 BlockNumber first, BlockNumber end)
{
	uint32		rel = rel_acquire(rfile, fork, false);
	BlockNumber hint;
	BlockNumber block;

	if (rel == TIER_INVALID_INDEX)
		return;					/* nothing cached, nothing in flight */
	if (rel_only_ours(rel))
	{
		rel_release(rel);
		return;
	}

	hint = rel_nblocks_hint(rel);
	if (end == InvalidBlockNumber || end > hint)
		end = hint;
	if (first >= end)
	{
		rel_release(rel);
		return;
	}
	if (end - first > BPEXT_EAGER_INVALIDATE_BLOCKS)
	{
		rel_bump_generation(rel);
		rel_release(rel);
		return;
	}
	for (block = first; block < end; block++)
		tier_map_invalidate_block(rfile, fork, block);
	rel_release(rel);
}

/*
 * The fork's file is being created or removed: every copy of it is dead,
 * and so is any copy in flight.
 */
void
tier_map_invalidate_fork(const BpextRelFile *rfile, ForkNumber fork)
{
	uint32		rel = rel_acquire(rfile, fork, false);
	BlockNumber hint;
	BlockNumber block;

	if (rel == TIER_INVALID_INDEX)
		return;
	rel_bump_generation(rel);
	hint = rel_nblocks_hint(rel);
	if (hint <= BPEXT_EAGER_INVALIDATE_BLOCKS && !rel_only_ours(rel))
	{
		/* Free the slots now, so the relation entry can be recycled. */
		for (block = 0; block < hint; block++)
			remove_page(rfile, fork, block, page_hash(rfile, fork, block));
	}
	rel_release(rel);
}

/*
 * Every relation of the database is dead (DROP DATABASE, CREATE DATABASE
 * reusing an OID, ALTER DATABASE SET TABLESPACE).
 */
void
tier_map_invalidate_database(Oid dbid)
{
	uint32		rel;

	LWLockAcquire(Map->rel_lock, LW_SHARED);
	for (rel = 0; rel < Map->rel_unused; rel++)
	{
		TierRel    *r = &Map->rels[rel];

		if (pg_atomic_read_u32(&r->refcount) > 0 &&
			BPEXT_RELFILE_DB(r->rfile) == dbid)
			rel_bump_generation(rel);
	}
	LWLockRelease(Map->rel_lock);
}

/* ---------------------------------------------------------------------
 * Whole-map operations
 * ---------------------------------------------------------------------
 */

/*
 * Wait until every publication that sampled the old map_epoch has either
 * finished or will see the new one: each one holds a partition lock while
 * it checks, so taking each lock once is enough.
 */
static void
wait_for_publishers(void)
{
	int			i;

	pg_memory_barrier();
	for (i = 0; i < BPEXT_MAP_PARTITIONS; i++)
	{
		LWLockAcquire(&Map->partition_locks[i].lock, LW_EXCLUSIVE);
		LWLockRelease(&Map->partition_locks[i].lock);
	}
}

/*
 * Wait until no chain cut off its bucket is still being walked, so that
 * every slot on one has been unhashed (see "Emptying the map" in the file
 * header).  The caller must hold no map lock: a walk takes rel_lock.  A
 * walk is a few thousand slots, milliseconds, so this polls.
 */
static void
wait_for_cuts(void)
{
	if (pg_atomic_read_u32(&Map->cuts_in_flight.value) != 0)
	{
		BPEXT_TEST_NOTE("cut_wait");
		pgstat_report_wait_start(BPEXT_WAIT_EVENT(BPEXT_WAIT_CHAIN_CUTS));
		while (pg_atomic_read_u32(&Map->cuts_in_flight.value) != 0)
			pg_usleep(1000L);
		pgstat_report_wait_end();
	}
	/* What the walks wrote before they counted down. */
	pg_memory_barrier();
}

/*
 * The map is walked in pieces so that a scan can be split over the worker
 * pool (scan_pool.c): piece p covers a share of the buckets of partition
 * p % BPEXT_MAP_PARTITIONS (at least a sixteenth, at most
 * BPEXT_MAP_PIECE_BUCKETS buckets), so each piece takes one partition lock,
 * briefly, and the pieces of a partition are about equally long.
 *
 * Consecutive pieces belong to different partitions.  A scan's tasks are
 * runs of consecutive pieces, claimed in order by every participant, so
 * had a partition's pieces been numbered together, the participants would
 * take its lock one after the other, a piece at a time, for the whole
 * partition: a lookup woken by one release finds it taken again before it
 * runs, and a bpext_drop_clean_buffers at a terabyte held lookups up for a
 * 128th of its time (0.3 to 0.5 s).  Interleaved, a partition's lock is
 * taken once per 128 pieces, and a lookup waits for one piece at most.
 */
uint32
tier_map_pieces(void)
{
	return BPEXT_MAP_PARTITIONS * Map->pieces_per_partition;
}

/* The partition of a piece and the bucket range it covers, as bucket
 * numbers first, first + BPEXT_MAP_PARTITIONS, ... below end. */
static int
piece_buckets(uint32 piece, uint32 *first, uint32 *end)
{
	int			part = piece % BPEXT_MAP_PARTITIONS;
	uint32		sub = piece / BPEXT_MAP_PARTITIONS;
	uint32		per_part = Map->nbuckets / BPEXT_MAP_PARTITIONS;

	/* nbuckets is a power of two of at least 16; partitions 128. */
	if (per_part == 0)
	{
		*first = part;
		*end = (sub == 0 && (uint32) part < Map->nbuckets) ? part + 1 : part;
		return part;
	}
	*first = part + (uint32) ((uint64) sub * per_part / Map->pieces_per_partition) *
		BPEXT_MAP_PARTITIONS;
	*end = part + (uint32) ((uint64) (sub + 1) * per_part / Map->pieces_per_partition) *
		BPEXT_MAP_PARTITIONS;
	return part;
}

/*
 * Unlink the dead slots of one piece (their relation's generation moved
 * on), under the partition's exclusive lock.  Returns how many.
 */
static uint32
unhash_piece_dead(uint32 piece)
{
	uint32		removed = 0;
	uint32		first;
	uint32		end;
	uint32		bucket;
	LWLock	   *lock;

	lock = &Map->partition_locks[piece_buckets(piece, &first, &end)].lock;
	LWLockAcquire(lock, LW_EXCLUSIVE);
	for (bucket = first; bucket < end; bucket += BPEXT_MAP_PARTITIONS)
	{
		uint32		prev = TIER_INVALID_INDEX;
		uint32		cur = bucket_head(bucket);

		while (cur != TIER_INVALID_INDEX)
		{
			uint32		next = Map->slots[cur].next;

			if (!slot_is_dead(&Map->slots[cur]))
				prev = cur;
			else
			{
				if (slot_unhash_locked(cur, prev, bucket))
					tier_map_free_slot(cur);
				removed++;
			}
			cur = next;
		}
	}
	LWLockRelease(lock);
	return removed;
}

/*
 * Unlink every slot of one piece.  Under the partition's exclusive lock
 * the piece's chains are only cut off their buckets; their slots are
 * unhashed and freed after it is released (slot_unhash_detached).  The
 * lock is held for a write per bucket rather than for a few cache misses
 * and atomic operations per slot: on a machine with fewer cores than busy
 * processes, a walk holding it is preempted now and then, and every lookup
 * of the partition waits meanwhile.  Returns how many.
 */
static uint32
unhash_piece_all(uint32 piece)
{
	uint32		heads[BPEXT_MAP_PIECE_BUCKETS];
	uint32		nheads = 0;
	uint32		removed = 0;
	uint32		first;
	uint32		end;
	uint32		bucket;
	uint32		i;
	LWLock	   *lock;
	Oid			hold_rel;

	lock = &Map->partition_locks[piece_buckets(piece, &first, &end)].lock;
	LWLockAcquire(lock, LW_EXCLUSIVE);
	for (bucket = first; bucket < end; bucket += BPEXT_MAP_PARTITIONS)
	{
		uint32		head = bucket_head(bucket);

		if (head == TIER_INVALID_INDEX)
			continue;
		Assert(nheads < lengthof(heads));
		heads[nheads++] = head;
		set_bucket_head(bucket, TIER_INVALID_INDEX);
	}
	if (nheads == 0)
	{
		LWLockRelease(lock);
		return 0;
	}
	/* Before the lock goes: see tier_map_pin_still_valid, wait_for_cuts. */
	pg_atomic_fetch_add_u32(&Map->chain_cuts.value, 1);
	pg_atomic_fetch_add_u32(&Map->cuts_in_flight.value, 1);
	LWLockRelease(lock);

	hold_rel = BPEXT_TEST_HOLD_TARGET("cut");
	for (i = 0; i < nheads; i++)
	{
		uint32		cur = heads[i];

		while (cur != TIER_INVALID_INDEX)
		{
			TierSlot   *s = &Map->slots[cur];
			uint32		next = s->next;

			/* Tests only: hold the cut here, the slot still HASHED. */
			if (OidIsValid(hold_rel) && s->rel != TIER_INVALID_INDEX &&
				BPEXT_RELFILE_NUMBER(Map->rels[s->rel].rfile) == hold_rel &&
				BPEXT_TEST_HOLD("cut", cur))
				hold_rel = InvalidOid;
			if (slot_unhash_detached(cur))
				tier_map_free_slot(cur);
			removed++;
			cur = next;
		}
	}
	/* After the slots' words: a full barrier. */
	pg_atomic_fetch_sub_u32(&Map->cuts_in_flight.value, 1);
	return removed;
}

/* Unlink one piece's slots: all of them, or only the dead ones. */
uint32
tier_map_unhash_piece(uint32 piece, bool dead_only)
{
	return dead_only ? unhash_piece_dead(piece) : unhash_piece_all(piece);
}

/* Empty the whole map, a piece at a time. */
static uint32
unhash_all(void)
{
	uint32		removed = 0;
	uint32		piece;

	for (piece = 0; piece < tier_map_pieces(); piece++)
		removed += unhash_piece_all(piece);
	return removed;
}

/*
 * Make every copy being admitted now fail to publish, and wait until no
 * publication that started before is still under way: after this, what
 * the map holds can be dropped piece by piece without a concurrent
 * admission putting back a page sampled before the drop began.
 */
void
tier_map_begin_drop(void)
{
	pg_atomic_fetch_add_u32(&BpextCtl->map_epoch, 1);
	wait_for_publishers();
}

/*
 * Empty the map (disable, error).  The caller has left ENABLED state.
 * Chains a drop cut off before our pass are not ours to unhash: wait for
 * that drop's walk to have unhashed them (wait_for_cuts).
 */
void
tier_map_clear(void)
{
	tier_map_begin_drop();
	unhash_all();
	wait_for_cuts();
}

/*
 * Make the slots below nslots that were never made: only the worker does
 * this, before it lets anyone use them (see "Start-up cost" above).  At a
 * terabyte this writes 3.7 GB, once per server start, in the worker,
 * where it delays the tier's enabling but not the server's start.
 */
static void
make_slots(uint32 nslots)
{
	uint32		i;

	for (i = Map->slots_ready; i < nslots; i++)
	{
		TierSlot   *s = &Map->slots[i];

		s->rel = TIER_INVALID_INDEX;
		s->block = InvalidBlockNumber;
		s->next = TIER_INVALID_INDEX;
		s->generation = 0;
		s->crc = 0;
		s->last_access = 0;
		pg_atomic_init_u32(&s->state, 0);
	}
	if (nslots > Map->slots_ready)
	{
		pg_write_barrier();
		Map->slots_ready = nslots;
	}
}

/*
 * Change how many slots may be used.  Shrinking stops new publications
 * into the slots being taken away and cuts them out of the free stack;
 * the caller then empties them with tier_map_drop_slots (a scan over the
 * worker pool, tier_control.c).  Growing lists the new slots on the free
 * stack, unless a warm load is under way (tier_map_list_free_slots does
 * it at its end).  Returns the old count.
 */
uint32
tier_map_set_active_slots(uint32 nslots)
{
	uint32		old = pg_atomic_read_u32(&BpextCtl->active_slots);

	Assert(nslots <= Map->max_slots);
	make_slots(nslots);
	pg_atomic_write_u32(&BpextCtl->active_slots, nslots);
	pg_memory_barrier();
	if (nslots < old)
	{
		tier_map_begin_drop();
		unlist_slots_from(nslots);
	}
	else if (nslots > old &&
			 pg_atomic_read_u32(&BpextCtl->warm_loading) == 0)
		list_free_slots(old, nslots);
	return old;
}

/*
 * A warm load is over: list the active slots it left free (those it did
 * not load) on the free stack.
 */
void
tier_map_list_free_slots(void)
{
	list_free_slots(0, pg_atomic_read_u32(&BpextCtl->active_slots));
}

/*
 * Unlink the slots numbered first..end-1 that hold a page (at most
 * TIER_MAP_DROP_MAX of them per call).  Returns how many did.  The slots
 * are grouped by partition and each partition's lock is taken once for
 * its group: a shrink of a terabyte tier to half unlinks 67 million slots,
 * and a lock and a random bucket miss for each took 93 s, longer than
 * bpext_resize waits.  The bucket is computed from the slot's fields read
 * without a lock, so it is only a guess until the slot is found in that
 * chain under the lock; a slot that changed hands meanwhile is left alone
 * (it is no longer the copy that was to be dropped, and publications past
 * the active slots fail, see publish_slot).  A slot still HASHED but in
 * no chain is on one a drop cut off: we wait for the drop to unhash it
 * (wait_for_cuts), so that nothing past the end is hashed when the shrink
 * cuts the file.
 */
uint32
tier_map_drop_slots(uint32 first, uint32 end)
{
	uint32		slots[TIER_MAP_DROP_MAX];
	uint32		buckets[TIER_MAP_DROP_MAX];
	uint16		order[TIER_MAP_DROP_MAX];
	uint16		starts[BPEXT_MAP_PARTITIONS + 1];
	uint32		n = 0;
	uint32		dropped = 0;
	bool		missed = false;
	uint32		slot;
	uint32		part;
	uint32		i;

	Assert(end - first <= TIER_MAP_DROP_MAX);
	end = Min(end, Map->slots_ready);
	pg_read_barrier();
	memset(starts, 0, sizeof(starts));
	for (slot = first; slot < end; slot++)
	{
		TierSlot   *s = &Map->slots[slot];
		uint32		rel = ((volatile TierSlot *) s)->rel;

		if (!(pg_atomic_read_u32(&s->state) & SLOT_HASHED) ||
			rel == TIER_INVALID_INDEX)
			continue;
		slots[n] = slot;
		buckets[n] = bucket_of(page_hash(&Map->rels[rel].rfile,
										 Map->rels[rel].fork, s->block));
		bucket_prefetch(buckets[n]);
		starts[buckets[n] % BPEXT_MAP_PARTITIONS + 1]++;
		n++;
	}
	for (part = 0; part < BPEXT_MAP_PARTITIONS; part++)
		starts[part + 1] += starts[part];
	for (i = 0; i < n; i++)
		order[starts[buckets[i] % BPEXT_MAP_PARTITIONS]++] = (uint16) i;
	/* starts[p] is now where partition p + 1 begins. */

	for (part = 0; part < BPEXT_MAP_PARTITIONS; part++)
	{
		uint32		from = part == 0 ? 0 : starts[part - 1];
		uint32		k;

		if (from == starts[part])
			continue;
		LWLockAcquire(&Map->partition_locks[part].lock, LW_EXCLUSIVE);
		for (k = from; k < starts[part]; k++)
		{
			uint32		victim = slots[order[k]];
			uint32		bucket = buckets[order[k]];
			uint32		prev = TIER_INVALID_INDEX;
			uint32		cur;

			for (cur = bucket_head(bucket); cur != TIER_INVALID_INDEX;
				 cur = Map->slots[cur].next)
			{
				if (cur == victim)
				{
					if (slot_unhash_locked(victim, prev, bucket))
						tier_map_free_slot(victim);
					dropped++;
					break;
				}
				prev = cur;
			}
			if (cur == TIER_INVALID_INDEX &&
				(pg_atomic_read_u32(&Map->slots[victim].state) & SLOT_HASHED))
				missed = true;
		}
		LWLockRelease(&Map->partition_locks[part].lock);
	}
	if (missed)
		wait_for_cuts();
	return dropped;
}

uint32
tier_map_used_slots(void)
{
	return Map ? pg_atomic_read_u32(&Map->used_slots.value) : 0;
}

/*
 * Have relation-level invalidations left dead slots (their relation's
 * generation moved on) since the last call?  The worker then unlinks them
 * with tier_map_unhash_piece, so that they and their relation entries can
 * be reused and the views count live pages only; until then lookups skip
 * them and the CLOCK hand takes them first.
 */
bool
tier_map_dead_slots_possible(void)
{
	static uint32 swept_bumps = 0;
	uint32		bumps = pg_atomic_read_u32(&Map->generation_bumps.value);

	if (bumps == swept_bumps)
		return false;
	swept_bumps = bumps;
	return true;
}

/*
 * Call fn for every current page of one piece of the map, under the
 * partition's lock held shared.  fn must not take map locks; it may
 * allocate (an error releases the lock on abort or exit).
 */
void
tier_map_foreach_piece(uint32 piece,
					   void (*fn) (const TierPageInfo *info, void *arg),
					   void *arg)
{
	uint32		now = map_clock();
	uint32		first;
	uint32		end;
	uint32		bucket;
	LWLock	   *lock;

	lock = &Map->partition_locks[piece_buckets(piece, &first, &end)].lock;
	LWLockAcquire(lock, LW_SHARED);
	for (bucket = first; bucket < end; bucket += BPEXT_MAP_PARTITIONS)
	{
		uint32		cur;

		for (cur = bucket_head(bucket); cur != TIER_INVALID_INDEX;
			 cur = Map->slots[cur].next)
		{
			TierSlot   *s = &Map->slots[cur];
			TierRel    *r = &Map->rels[s->rel];
			uint32		state = pg_atomic_read_u32(&s->state);
			TierPageInfo info;

			if (!slot_is_current(s))
				continue;
			info.slot = cur;
			info.rel = s->rel;
			info.rfile = r->rfile;
			info.fork = r->fork;
			info.block = s->block;
			info.crc = s->crc;
			info.usage = SLOT_USAGE(state);
			info.pins = SLOT_REFCOUNT(state);
			info.unreferenced_seconds = now - Min(now, s->last_access);
			fn(&info, arg);
		}
	}
	LWLockRelease(lock);
}

/* The same over the whole map, one piece at a time. */
void
tier_map_foreach(void (*fn) (const TierPageInfo *info, void *arg), void *arg)
{
	uint32		piece;

	for (piece = 0; piece < tier_map_pieces(); piece++)
		tier_map_foreach_piece(piece, fn, arg);
}

/* ---------------------------------------------------------------------
 * Warm restart (warm_restart.c, slot_directory.c)
 *
 * The map survives a clean restart as the slot directory on the SSD (one
 * entry per slot: its relation entry's index, block, generation and CRC)
 * and the table of relation entries the postmaster writes at exit (each
 * entry's index, identity and generation).  Indexes and generations are
 * the map's own, and a warm start gives them back unchanged: the
 * postmaster, before it starts any other process, makes every saved
 * relation entry again at its saved index with its saved generation, and
 * holds it (tier_map_warm_hold), so that from then on every invalidation
 * that reaches one of them (truncation, unlink, DROP DATABASE) bumps a
 * generation or a write counter that the loader will see.  The bpext
 * worker then publishes the saved pages (tier_map_warm_publish_run) as if each
 * had been admitted with a ticket taken at that moment in the postmaster:
 * the saved generation, and a write counter of zero, which is what every
 * counter was when shared memory was made.  A page written, truncated or
 * unlinked since is therefore never published.  Because the numbering is
 * kept, a directory chunk whose pages were all published describes the
 * map as it is, and need not be written again.  Slot allocation stays
 * closed while the load runs (BpextCtl->warm_loading), because every slot
 * still to be loaded holds a saved page.
 * ---------------------------------------------------------------------
 */

/*
 * A slot's directory entry (slot_directory.c): what it holds if it is
 * HASHED.  Read without locks; the directory's dirty bits make up for a
 * slot caught changing.  False (and the entry untouched) for a slot that
 * holds no page.
 */
bool
tier_map_slot_entry(uint32 slot, SlotDirEntry *entry)
{
	const volatile TierSlot *s = &Map->slots[slot];
	uint32		state = pg_atomic_read_u32(&Map->slots[slot].state);
	uint32		rel;

	if (!(state & SLOT_HASHED) || slot >= Map->slots_ready)
		return false;
	pg_read_barrier();
	rel = s->rel;
	if (rel == TIER_INVALID_INDEX)
		return false;
	entry->rel = rel;
	entry->block = s->block;
	entry->generation = s->generation;
	entry->crc = s->crc;
	return true;
}

/*
 * The shutdown save, in the postmaster once every other process has
 * exited (nobody to lock against, and the postmaster may not take
 * LWLocks): call fn for every relation entry in use, in index order.
 */
void
tier_map_foreach_rel_at_exit(void (*fn) (uint32 rel, const BpextRelFile *rfile,
										 ForkNumber fork, uint32 generation,
										 BlockNumber nblocks, void *arg),
							 void *arg)
{
	uint32		rel;

	for (rel = 0; rel < Map->rel_unused; rel++)
	{
		TierRel    *r = &Map->rels[rel];

		if (pg_atomic_read_u32(&r->refcount) == 0)
			continue;
		fn(rel, &r->rfile, r->fork, pg_atomic_read_u32(&r->generation),
		   pg_atomic_read_u32(&r->nblocks_hint), arg);
	}
}

/*
 * In the postmaster, while it is the only process attached (no locks):
 * make the relation entry a saved map names again, at its saved index and
 * with its saved generation, with blocks up to nblocks, and hold it until
 * the load is over.  Indexes must come in increasing order (the skipped
 * ones go to the free list).  False if the index is out of order or past
 * the relation table (its pages are then not loaded).
 */
bool
tier_map_warm_hold(uint32 index, const BpextRelFile *rfile, ForkNumber fork,
				   uint32 generation, BlockNumber nblocks)
{
	uint32		b = rel_hash(rfile, fork) & (Map->rel_nbuckets - 1);
	TierRel    *r;

	Assert(!IsUnderPostmaster);
	if (index >= Map->nrels || index < Map->rel_unused ||
		rel_find_locked(b, rfile, fork) != TIER_INVALID_INDEX)
		return false;
	while (Map->rel_unused < index)
	{
		uint32		skipped = rel_make_locked();

		Map->rels[skipped].next = Map->rel_free;
		Map->rel_free = skipped;
	}
	(void) rel_make_locked();
	r = &Map->rels[index];
	r->rfile = *rfile;
	r->fork = fork;
	pg_atomic_write_u32(&r->generation, generation);
	pg_atomic_write_u32(&r->refcount, 1);
	pg_atomic_write_u32(&r->nblocks_hint, nblocks);
	r->warm_held = true;
	r->warm_generation = generation;
	r->next = Map->rel_buckets[b];
	Map->rel_buckets[b] = index;

	/* New entries' generations must not meet a saved one. */
	if (pg_atomic_read_u32(&Map->next_generation.value) <= generation)
		pg_atomic_write_u32(&Map->next_generation.value, generation + 1);
	return true;
}

/*
 * The warm load: publish the saved entries of slots first_slot ..
 * first_slot + n - 1 (entries naming no relation are skipped) unless the
 * entry's relation is not held with the saved generation, the slot is
 * taken, or the page changed since the postmaster held its relation (as
 * if each had been admitted with a ticket taken then), and say which were
 * published.  A terabyte map has 134 million entries: one
 * partition lock, one random bucket miss and one directory mark each took
 * about 1.7 us, 4 minutes in all.  Here the entries are sorted by
 * partition, each partition's lock is taken once for all of its entries
 * (the map-wide checks are made once under it: map_epoch and the file can
 * only change while every partition lock is taken in turn, see
 * wait_for_publishers), the buckets are prefetched ahead of use, and the
 * slot directory is not told: a chunk published whole is what is on disk.
 * scratch must hold 2 * n entries.  Only the worker, while warm_loading is
 * set, calls this.
 */
uint32
tier_map_warm_publish_run(const SlotDirEntry *entries, uint32 first_slot,
						  uint32 n, uint32 map_epoch, uint32 file_incarnation,
						  uint32 *scratch, bool *published)
{
	uint32	   *hashes = scratch;
	uint32	   *order = scratch + n;
	uint32		starts[BPEXT_MAP_PARTITIONS + 1];
	uint32		active = pg_atomic_read_u32(&BpextCtl->active_slots);
	uint32		rels_made = Map->rel_unused;
	uint32		now = map_clock();
	uint32		total = 0;
	uint32		part;
	uint32		i;

	memset(starts, 0, sizeof(starts));
	for (i = 0; i < n; i++)
	{
		const SlotDirEntry *e = &entries[i];
		uint32		slot = first_slot + i;
		TierRel    *r;

		published[i] = false;
		hashes[i] = TIER_INVALID_INDEX;
		if (e->rel == TIER_INVALID_INDEX || e->rel >= rels_made ||
			slot >= active || slot >= Map->slots_ready)
			continue;
		r = &Map->rels[e->rel];
		if (!r->warm_held || r->warm_generation != e->generation)
			continue;
		hashes[i] = page_hash(&r->rfile, r->fork, e->block);
		bucket_prefetch(bucket_of(hashes[i]));
		starts[bucket_of(hashes[i]) % BPEXT_MAP_PARTITIONS + 1]++;
	}
	for (part = 0; part < BPEXT_MAP_PARTITIONS; part++)
		starts[part + 1] += starts[part];
	for (i = 0; i < n; i++)
	{
		if (hashes[i] != TIER_INVALID_INDEX)
			order[starts[bucket_of(hashes[i]) % BPEXT_MAP_PARTITIONS]++] = i;
	}
	/* starts[p] is now where partition p + 1 begins. */

	for (part = 0; part < BPEXT_MAP_PARTITIONS; part++)
	{
		uint32		first = part == 0 ? 0 : starts[part - 1];
		uint32		end = starts[part];
		uint32		done = 0;
		uint32		k;

		if (first == end)
			continue;
		LWLockAcquire(&Map->partition_locks[part].lock, LW_EXCLUSIVE);

		/* As publish_slot: counted as used before anything is checked. */
		pg_atomic_fetch_add_u32(&Map->used_slots.value, end - first);
		if (pg_atomic_read_u32(&BpextCtl->state) != BPEXT_STATE_ENABLED)
			end = first;
		pg_read_barrier();
		if (pg_atomic_read_u32(&BpextCtl->file_incarnation) != file_incarnation ||
			pg_atomic_read_u32(&BpextCtl->map_epoch) != map_epoch)
			end = first;

		for (k = first; k < end; k++)
		{
			uint32		at = order[k];
			const SlotDirEntry *e = &entries[at];
			uint32		slot = first_slot + at;
			TierSlot   *s = &Map->slots[slot];
			TierRel    *r = &Map->rels[e->rel];
			uint32		bucket = bucket_of(hashes[at]);
			uint32		free_state = 0;
			uint32		prev = TIER_INVALID_INDEX;
			uint32		cur;

			if (k + 8 < end)
				bucket_prefetch(bucket_of(hashes[order[k + 8]]));
			if (pg_atomic_read_u32(&r->generation) != e->generation ||
				pg_atomic_read_u32(write_generation(hashes[at])) != 0 ||
				!pg_atomic_compare_exchange_u32(&s->state, &free_state,
												SLOT_FILLING))
				continue;

			/* An older copy of the same page (dead or not) gives way. */
			for (cur = bucket_head(bucket); cur != TIER_INVALID_INDEX;
				 cur = Map->slots[cur].next)
			{
				TierSlot   *c = &Map->slots[cur];

				if (c->rel == e->rel && c->block == e->block)
				{
					if (slot_unhash_locked(cur, prev, bucket))
						tier_map_free_slot(cur);
					break;
				}
				prev = cur;
			}

			/* The slot's reference to its relation entry. */
			pg_atomic_fetch_add_u32(&r->refcount, 1);
			s->rel = e->rel;
			s->block = e->block;
			s->generation = e->generation;
			s->crc = e->crc;
			s->last_access = now;
			s->next = bucket_head(bucket);
			pg_write_barrier();
			set_bucket_head(bucket, slot);
			pg_atomic_write_u32(&s->state, SLOT_HASHED | SLOT_USAGE_ONE);
			published[at] = true;
			done++;
		}
		pg_atomic_fetch_sub_u32(&Map->used_slots.value,
								starts[part] - first - done);
		LWLockRelease(&Map->partition_locks[part].lock);
		total += done;
	}
	return total;
}

/*
 * The load is over (done, abandoned or cut short): drop every hold.  Only
 * the worker calls this; holds are only ever made by the postmaster before
 * the worker exists, below the rel_unused it left.
 */
void
tier_map_warm_release_holds(void)
{
	uint32		rel;
	uint32		made;

	LWLockAcquire(Map->rel_lock, LW_SHARED);
	made = Map->rel_unused;
	LWLockRelease(Map->rel_lock);
	for (rel = 0; rel < made; rel++)
	{
		TierRel    *r = &Map->rels[rel];

		if (!r->warm_held)
			continue;
		r->warm_held = false;
		rel_release(rel);
	}
}

/* ---------------------------------------------------------------------
 * Counting pages in slot order (the summary view)
 * ---------------------------------------------------------------------
 */

/*
 * Count the current pages of slots [first, end) by relation fork: fn is
 * called once per run of consecutive slots holding pages of the same
 * relation entry, with the number of pages in the run.
 *
 * The slot array is walked in order, without the partition locks: the
 * piece walk follows hash chains, a cache miss per page in random order,
 * which at 134M pages (a 1 TB tier) costs seconds that a sequential read
 * of the array does not.  A slot's relation and generation are read after
 * its HASHED flag; its relation entry's key is read between two reads of
 * the entry's generation, which must both be the slot's (an entry freed
 * and reused for another relation gets a new generation, see
 * rel_insert_locked).  A slot that changes hands during the walk may be
 * counted under its old page or its new one, or missed: figures for
 * monitoring, exact on a quiet tier.  Takes no lock and never blocks.
 */
void
tier_map_count_slots(uint32 first, uint32 end,
					 void (*fn) (const BpextRelFile *rfile, ForkNumber fork,
								 uint64 pages, void *arg),
					 void *arg)
{
	uint32		run_rel = TIER_INVALID_INDEX;
	uint32		run_generation = 0;
	uint64		run_pages = 0;
	BpextRelFile run_rfile;
	ForkNumber	run_fork = InvalidForkNumber;
	uint32		slot;

	memset(&run_rfile, 0, sizeof(run_rfile));
	/* Only slots the worker has made (see "Start-up cost" above). */
	end = Min(end, Map->slots_ready);
	pg_read_barrier();
	for (slot = first; slot < end; slot++)
	{
		const volatile TierSlot *s = &Map->slots[slot];
		TierRel    *r;
		uint32		rel;
		uint32		generation;
		BpextRelFile rfile;
		ForkNumber	fork;

		if (!(pg_atomic_read_u32(&Map->slots[slot].state) & SLOT_HASHED))
			continue;
		pg_read_barrier();
		rel = s->rel;
		generation = s->generation;
		if (rel >= Map->rel_unused)
			continue;
		r = &Map->rels[rel];
		if (pg_atomic_read_u32(&r->generation) != generation)
			continue;			/* dead: left for the sweep */
		if (rel == run_rel && generation == run_generation)
		{
			run_pages++;
			continue;
		}
		rfile = r->rfile;
		fork = r->fork;
		pg_read_barrier();
		if (pg_atomic_read_u32(&r->generation) != generation)
			continue;
		if (run_pages > 0)
			fn(&run_rfile, run_fork, run_pages, arg);
		run_rel = rel;
		run_generation = generation;
		run_rfile = rfile;
		run_fork = fork;
		run_pages = 1;
	}
	if (run_pages > 0)
		fn(&run_rfile, run_fork, run_pages, arg);
}

/* ---------------------------------------------------------------------
 * Listing pages in slot order (the descriptors view)
 * ---------------------------------------------------------------------
 */

/*
 * Call fn for every current page in slots [first, end), in slot order,
 * without the partition locks, for the same reason as tier_map_count_slots
 * (a sequential read of the slot array instead of a cache miss per page
 * along the hash chains).  fn may do anything but take map locks; no lock
 * is held while it runs.
 *
 * A slot changes hands without our knowledge: it is unlinked (HASHED
 * cleared), its relation and block reset to invalid by the new owner
 * (slot_release_owned), and only then, behind a lock acquisition, filled
 * with the new page and HASHED again.  So a slot's fields are read twice,
 * with barriers between, after one read of its state word that shows it
 * HASHED and before another: a slot that changed hands between the two
 * reads shows a relation or block that differs (or is invalid) in the
 * second, and is skipped; fields that agree are those of one page the
 * slot held meanwhile, and the second state word (HASHED again) gives its
 * usage and pins.  Its relation entry's key is read between two reads of
 * the entry's generation, which must both be the slot's: a dead page (its
 * relation's generation moved on) is never listed, nor a page whose entry
 * was reused.  A page published or unlinked during the walk may be listed
 * or not, and one that moves to another slot may be met twice or missed:
 * a listing for monitoring, exact on a quiet tier.  Only slots below
 * slots_ready and relation entries below rel_unused are read (see
 * "Start-up cost" above).
 */
void
tier_map_foreach_slot(uint32 first, uint32 end,
					  void (*fn) (const TierPageInfo *info, void *arg),
					  void *arg)
{
	uint32		now = map_clock();
	uint32		cached_rel = TIER_INVALID_INDEX;
	uint32		cached_generation = 0;
	BpextRelFile cached_rfile;
	ForkNumber	cached_fork = InvalidForkNumber;
	uint32		slot;

	memset(&cached_rfile, 0, sizeof(cached_rfile));
	end = Min(end, Map->slots_ready);
	pg_read_barrier();
	for (slot = first; slot < end; slot++)
	{
		const volatile TierSlot *s = &Map->slots[slot];
		uint32		state;
		uint32		rel;
		uint32		generation;
		BlockNumber block;
		pg_crc32c	crc;
		uint32		last_access;
		TierRel    *r;
		TierPageInfo info;

		state = pg_atomic_read_u32(&Map->slots[slot].state);
		if (!(state & SLOT_HASHED))
			continue;
		pg_read_barrier();
		rel = s->rel;
		block = s->block;
		generation = s->generation;
		crc = s->crc;
		last_access = s->last_access;
		pg_read_barrier();
		if (s->rel != rel || s->block != block ||
			s->generation != generation || s->crc != crc)
			continue;			/* changing hands */
		pg_read_barrier();
		state = pg_atomic_read_u32(&Map->slots[slot].state);
		if (!(state & SLOT_HASHED) ||
			rel >= ((volatile TierMap *) Map)->rel_unused)
			continue;
		r = &Map->rels[rel];
		if (pg_atomic_read_u32(&r->generation) != generation)
			continue;			/* dead: left for the sweep */
		if (rel != cached_rel || generation != cached_generation)
		{
			BpextRelFile rfile = r->rfile;
			ForkNumber	fork = r->fork;

			pg_read_barrier();
			if (pg_atomic_read_u32(&r->generation) != generation)
				continue;
			cached_rel = rel;
			cached_generation = generation;
			cached_rfile = rfile;
			cached_fork = fork;
		}
		info.slot = slot;
		info.rel = rel;
		info.rfile = cached_rfile;
		info.fork = cached_fork;
		info.block = block;
		info.crc = crc;
		info.usage = SLOT_USAGE(state);
		info.pins = SLOT_REFCOUNT(state);
		info.unreferenced_seconds = now - Min(now, last_access);
		fn(&info, arg);
	}
}

/*-------------------------------------------------------------------------
 *
 * tier_map_rels.c
 *	  The map's relation entries (TierRel) and their generations: the
 *	  admission tickets a copy must not outlive, the invalidations that
 *	  outdate copies (truncation, unlink, create, database-wide events),
 *	  and the entries a warm restart holds (see tier_map.c).
 *
 * Locking protocol.
 *
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
 *	- The postmaster makes and holds the entries a warm restart needs
 *	  before any other process exists, without locks; only the worker
 *	  drops those holds.
 *
 * Nothing here raises an error or allocates memory: these functions run
 * inside smgr calls, some of them in critical sections.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"

#include "stats.h"
#include "tier_control.h"
#include "tier_map.h"
#include "tier_map_internal.h"

/* Drop a relation's slots one by one on unlink if it has at most this many
 * blocks cached; larger ones are left to the CLOCK hand as dead slots. */
#define BPEXT_EAGER_INVALIDATE_BLOCKS	8192

typedef struct TierRelKey
{
	BpextRelFile rfile;
	int32		fork;
} TierRelKey;

static inline uint32
rel_hash(const BpextRelFile *rfile, ForkNumber fork)
{
	TierRelKey	key;

	key.rfile = *rfile;
	key.fork = (int32) fork;
	return hash_bytes((const unsigned char *) &key, sizeof(key));
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
void
tier_rel_release(uint32 rel)
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
	tier_rel_release(ticket->rel);
	ticket->rel = TIER_INVALID_INDEX;
}

/* ---------------------------------------------------------------------
 * Invalidating
 * ---------------------------------------------------------------------
 */

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
		tier_rel_release(rel);
		return;
	}

	hint = rel_nblocks_hint(rel);
	if (end == InvalidBlockNumber || end > hint)
		end = hint;
	if (first >= end)
	{
		tier_rel_release(rel);
		return;
	}
	if (end - first > BPEXT_EAGER_INVALIDATE_BLOCKS)
	{
		rel_bump_generation(rel);
		tier_rel_release(rel);
		return;
	}
	for (block = first; block < end; block++)
		tier_map_invalidate_block(rfile, fork, block);
	tier_rel_release(rel);
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
			tier_index_remove_page(rfile, fork, block,
								   page_hash(rfile, fork, block));
	}
	tier_rel_release(rel);
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
 * Warm restart (see tier_map.c)
 * ---------------------------------------------------------------------
 */

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
		tier_rel_release(rel);
	}
}

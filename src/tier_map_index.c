/*-------------------------------------------------------------------------
 *
 * tier_map_index.c
 *	  The map's page index: a chained hash from a page's identity (its
 *	  relation file, fork and block) to the slot that holds its copy.
 *	  Lookups, publication (linking a filled slot in), unlinking, and the
 *	  walks of the chains piece by piece.
 *
 * Nothing outside this file follows a hash chain: the rest of the map goes
 * through tier_index_unhash_slot, tier_index_remove_page and the piece
 * functions, so that the index can be replaced without touching it.
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
 *	- Publication: admitters sample their relation's generation and the
 *	  page's write counter before copying a page (tier_map_rels.c) and
 *	  publish only if neither moved, checked under the partition lock, so
 *	  invalidation (bump, then unlink under the same lock) and publication
 *	  are serialised.  Publication also checks map_epoch and the file
 *	  incarnation the copy was written to (see tier_map.c).
 *	- Whole-map walks go piece by piece (a share of a partition's
 *	  buckets, at most BPEXT_MAP_PIECE_BUCKETS, under its lock), so that a
 *	  scan can be split over the worker pool and no walk holds a lock for
 *	  long.
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
 * Nothing here raises an error or allocates memory: these functions run
 * inside smgr calls, some of them in critical sections.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "slot_directory.h"
#include "stats.h"
#include "test_hooks.h"
#include "tier_control.h"
#include "tier_map.h"
#include "tier_map_internal.h"

static bool publish_slot(TierAdmitTicket *ticket, uint32 slot, pg_crc32c crc,
						 uint32 file_incarnation);
static bool slot_unhash_locked(uint32 slot, uint32 prev, uint32 bucket);
static bool slot_unhash_detached(uint32 slot);

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

/* Is the slot a copy its relation has since moved on from? */
static bool
slot_is_dead(const TierSlot *s)
{
	return !slot_is_current(s);
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
 * Publishing and unlinking
 * ---------------------------------------------------------------------
 */

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
 * Unhash the slot if it is in the bucket's chain (caller holds the chain's
 * partition lock exclusive).  The bucket was computed from the slot's
 * fields read without the lock, so it is only a guess until the slot is
 * found there.  Returns whether it was; *owned is then what
 * slot_unhash_locked returned.
 */
bool
tier_index_unhash_slot(uint32 bucket, uint32 slot, bool *owned)
{
	uint32		prev = TIER_INVALID_INDEX;
	uint32		cur;

	for (cur = bucket_head(bucket); cur != TIER_INVALID_INDEX;
		 cur = Map->slots[cur].next)
	{
		if (cur == slot)
		{
			*owned = slot_unhash_locked(slot, prev, bucket);
			return true;
		}
		prev = cur;
	}
	return false;
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

/*
 * The warm load: publish the saved entries of slots first_slot ..
 * first_slot + n - 1 (entries naming no relation are skipped) unless the
 * entry's relation is not held with the saved generation, the slot is
 * taken, or the page changed since the postmaster held its relation (as
 * if each had been admitted with a ticket taken then), and say which were
 * published.  A terabyte map has 134 million entries, too many to take a
 * partition lock, miss a random bucket and mark the directory for each.
 * Here the entries are sorted by partition, each partition's lock is
 * taken once for all of its entries
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

/* remove_page, for the relation-level invalidations. */
void
tier_index_remove_page(const BpextRelFile *rfile, ForkNumber fork,
					   BlockNumber block, uint32 hash)
{
	remove_page(rfile, fork, block, hash);
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

/* ---------------------------------------------------------------------
 * Walking the index piece by piece
 * ---------------------------------------------------------------------
 */

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
 * runs, and waits for the partition's whole share of the scan.
 * Interleaved, a partition's lock is
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

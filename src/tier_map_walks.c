/*-------------------------------------------------------------------------
 *
 * tier_map_walks.c
 *	  Whole-map operations: emptying the map (disable, error,
 *	  bpext_drop_clean_buffers), dropping the slots a shrink takes away,
 *	  and walking the map for the views, piece by piece or in slot order.
 *
 * Locking protocol.  The walks piece by piece are the index's
 * (tier_map_index.c, which describes how a piece's entries are cut off
 * their buckets and why a clear or a shrink then waits for the cuts in
 * flight, holding no lock).  tier_map_begin_drop makes every copy being
 * admitted fail to publish by bumping map_epoch, then takes each
 * partition lock once so that no publication that sampled the old epoch
 * is still under way.  The walks in slot order (tier_map_count_slots,
 * tier_map_foreach_slot) take no lock at all: they read each slot's
 * fields between reads of its state word and of its relation's
 * generation, and skip what changed.
 *
 * Nothing here raises an error or allocates memory (the views' callbacks
 * may).
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/wait_event.h"

#include "test_hooks.h"
#include "tier_control.h"
#include "tier_map.h"
#include "tier_map_internal.h"
#include "wait_events.h"

/* ---------------------------------------------------------------------
 * Emptying the map
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
 * Wait until no piece whose entries were cut off its buckets is still
 * being walked, so that every slot cut off has been unhashed (see "Emptying the map" in the file
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

/* Empty the whole map, a piece at a time. */
static uint32
unhash_all(void)
{
	uint32		removed = 0;
	uint32		piece;

	for (piece = 0; piece < tier_map_pieces(); piece++)
		removed += tier_map_unhash_piece(piece, false);
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
 * Entries a drop cut off before our pass are not ours to unhash: wait for
 * that drop's walk to have unhashed them (wait_for_cuts).
 */
void
tier_map_clear(void)
{
	tier_map_begin_drop();
	unhash_all();
	wait_for_cuts();
}

/* ---------------------------------------------------------------------
 * Shrinking
 * ---------------------------------------------------------------------
 */

/*
 * Unlink the slots numbered first..end-1 that hold a page (at most
 * TIER_MAP_DROP_MAX of them per call).  Returns how many did.  The slots
 * are grouped by partition and each partition's lock is taken once for
 * its group: a shrink of a terabyte tier to half unlinks 67 million slots,
 * and a lock and a random bucket miss for each would take longer than
 * bpext_resize waits.  The bucket is computed from the slot's fields read
 * without a lock, so it is only a guess until the slot is found in that
 * bucket's group under the lock; a slot that changed hands meanwhile is
 * left alone (it is no longer the copy that was to be dropped, and
 * publications past the active slots fail, see publish_slot).  A slot
 * still HASHED but in no bucket may be one a drop cut off: we wait for the drop to unhash it
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
		starts[partition_of(buckets[n]) + 1]++;
		n++;
	}
	for (part = 0; part < BPEXT_MAP_PARTITIONS; part++)
		starts[part + 1] += starts[part];
	for (i = 0; i < n; i++)
		order[starts[partition_of(buckets[i])]++] = (uint16) i;
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
			bool		owned;

			if (tier_index_unhash_slot(buckets[order[k]], victim, &owned))
			{
				if (owned)
					tier_map_free_slot(victim);
				dropped++;
			}
			else if (pg_atomic_read_u32(&Map->slots[victim].state) &
					 SLOT_HASHED)
				missed = true;
		}
		LWLockRelease(&Map->partition_locks[part].lock);
	}
	if (missed)
		wait_for_cuts();
	return dropped;
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

/* ---------------------------------------------------------------------
 * Listing
 * ---------------------------------------------------------------------
 */

/* The same over the whole map, one piece at a time. */
void
tier_map_foreach(void (*fn) (const TierPageInfo *info, void *arg), void *arg)
{
	uint32		piece;

	for (piece = 0; piece < tier_map_pieces(); piece++)
		tier_map_foreach_piece(piece, fn, arg);
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
 * piece walk follows the index's entries, a cache miss per page in random order,
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
 * along the index's entries).  fn may do anything but take map locks; no lock
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

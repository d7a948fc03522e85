/*-------------------------------------------------------------------------
 *
 * tier_map_slots.c
 *	  The tier file's slots: their state words and pins, the stack of free
 *	  slots, the CLOCK hand that finds a slot for a new page when the
 *	  stack is empty, and how many slots are active.
 *
 * Slot state word: a pin count (readers copying the slot out of the file),
 * a CLOCK usage count, and three flags: HASHED (the slot is in the page index
 * and may be served), FILLING (a process owns the slot and is writing it)
 * and LISTED (the slot is free and on the free stack).  A slot whose word
 * is zero is free but not listed: it was made and not listed yet (a warm
 * load is under way), it is past the active slots, or its last pin is
 * being dropped (see tier_map_unpin).
 *
 * Free slots.  A slot freed while the tier is in use goes on a stack of
 * free slots threaded through the slots' block fields (a free slot holds
 * no page: off the stack its block is InvalidBlockNumber, which is also
 * TIER_INVALID_INDEX, the end of the stack), under one spinlock with the
 * stack's head and length; allocation pops from it before the CLOCK hand
 * moves, so that no live page is evicted while a slot is free.  Writes,
 * dual writes and invalidations free slots all over the tier, and the
 * hand alone would evict live pages before it reached them.  Only the
 * owner of a slot (FILLING) pushes it, and it becomes LISTED in the same
 * critical section; only a pop, under the same
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
 *	- A slot's state word changes by atomic operations only.  Pins are
 *	  taken under the slot's partition lock (tier_map_index.c); dropping
 *	  one needs no lock.  The CLOCK hand takes a free word with a
 *	  compare-and-swap, and a HASHED slot only under its partition's
 *	  exclusive lock, seeing no pins (tier_index_unhash_slot).
 *	- The free stack's head and length are under its spinlock (above).
 *	- Slots are made (slots_ready) and active_slots is changed by the
 *	  worker alone.
 *
 * Nothing here raises an error or allocates memory: these functions run
 * inside smgr calls, some of them in critical sections.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "stats.h"
#include "tier_control.h"
#include "tier_map.h"
#include "tier_map_internal.h"

static void slot_release_owned(uint32 slot);

/* Slots listed per critical section of the free stack's spinlock. */
#define FREE_LIST_BATCH		4096

/* Most slots the CLOCK hand looks at for one allocation. */
#define ALLOC_MAX_TRIES		4096

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

/* ---------------------------------------------------------------------
 * The free-slot stack
 * ---------------------------------------------------------------------
 */

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
		Map->free.s.head = Map->slots[slot].block;
		Map->free.s.count--;
		Assert(pg_atomic_read_u32(&Map->slots[slot].state) == SLOT_LISTED);
		pg_atomic_write_u32(&Map->slots[slot].state, SLOT_FILLING);
	}
	SpinLockRelease(&Map->free.s.lock);
	if (slot != TIER_INVALID_INDEX)
		Map->slots[slot].block = InvalidBlockNumber;
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
		s->block = Map->free.s.head;
		pg_atomic_write_u32(&s->state, SLOT_LISTED);
		Map->free.s.head = slot;
		Map->free.s.count++;
		SpinLockRelease(&Map->free.s.lock);
		return;
	}
	SpinLockRelease(&Map->free.s.lock);
	s->block = InvalidBlockNumber;
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
	Map->slots[tail].block = Map->free.s.head;
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
		s->block = head;
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
		uint32		next = s->block;

		if (cur >= nslots)
		{
			s->block = InvalidBlockNumber;
			pg_write_barrier();
			pg_atomic_write_u32(&s->state, 0);
		}
		else
		{
			s->block = InvalidBlockNumber;
			if (tail == TIER_INVALID_INDEX)
				head = cur;
			else
				Map->slots[tail].block = cur;
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

/* ---------------------------------------------------------------------
 * Taking and giving back slots
 * ---------------------------------------------------------------------
 */

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
		bool		live;
		bool		owned;

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
		 * Evict it: unlink it from the index under the partition lock.  The
		 * slot may change hands before we get the lock, so the bucket is
		 * only a guess until we find the slot in its group, and its state
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
		live = slot_is_current(s);
		if (tier_index_unhash_slot(bucket, slot, &owned) && owned)
		{
			LWLockRelease(lock);
			slot_release_owned(slot);
			if (live)
				BPEXT_COUNT(page_evictions, 1);
			return slot;
		}
		LWLockRelease(lock);
	}
	BPEXT_COUNT(admission_skips, 1);
	return TIER_INVALID_INDEX;
}

/* Drop the relation reference of a slot the caller owns (FILLING). */
static void
slot_release_owned(uint32 slot)
{
	TierSlot   *s = &Map->slots[slot];

	if (s->rel != TIER_INVALID_INDEX)
	{
		tier_rel_release(s->rel);
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

/* ---------------------------------------------------------------------
 * Active slots
 * ---------------------------------------------------------------------
 */

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

/* ---------------------------------------------------------------------
 * The slot directory (slot_directory.c)
 * ---------------------------------------------------------------------
 */

/*
 * A slot's directory entry (slot_directory.c): what it holds if it is
 * HASHED.  Read without locks; the directory's dirty bits make up for a
 * slot caught changing (a slot freed meanwhile may show the free stack's
 * link in its block: unhashing it set its dirty bit, so the directory
 * writes the entry again before a warm load could trust it).  False (and
 * the entry untouched) for a slot that holds no page.
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

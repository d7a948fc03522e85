/*-------------------------------------------------------------------------
 *
 * tier_map_index.c
 *	  The map's page index: from a page's identity (its relation file, fork
 *	  and block) to the slot that holds its copy.  Lookups, publication
 *	  (entering a filled slot), unlinking, and the walks of the index
 *	  piece by piece.
 *
 * Nothing outside this file reads a bucket: the rest of the map goes
 * through tier_index_unhash_slot, tier_index_remove_page and the piece
 * functions, so that the index can be replaced without touching it.
 *
 * Layout.  The index is an array of buckets of one cache line each
 * (TierBucket): up to TIER_BUCKET_ENTRIES slot numbers, a one-byte tag per
 * entry (tag_of: the bits of the page's hash that its bucket number does
 * not use), and for each entry the position of its home bucket in its
 * group.  A page's home bucket is bucket_of(its hash).  Buckets come in
 * groups of TIER_GROUP_BUCKETS consecutive ones (256 bytes, one page of
 * memory), and a page's entry is in its home bucket or, when that was
 * full, in another bucket of the home's group; each bucket counts the
 * entries whose home it is that are kept elsewhere in the group ("away").
 * So a lookup reads its home bucket's cache line, compares the tags of
 * the entries whose home it is, reads a slot (and its relation entry) only
 * on a tag match, and reads the rest of the group (prefetched at once, in
 * the same 256 bytes) only if the count says some of the home's entries
 * are there.  An entry removed from a bucket makes room for one of the
 * bucket's own entries kept away, which is moved back (and so on), so
 * that a bucket has entries away only while it is full, and pages coming
 * and going do not pile up away from home.  A group whose four buckets are
 * all full takes no more pages: the publication is refused
 * (admission_skips), which is always safe.  The index is sized for 81% of
 * its room at a full map (bpext.max_size): in a simulation of a full map
 * with pages coming and going, a quarter of the lookups then find their
 * home keeping entries away, and 2% of the publications find their group
 * full; at 70%, 13% and 0.3%.  Memory is zero at every start (see
 * entry_slot), so the postmaster does not write the array.
 *
 * Invariants, under the group's partition lock: every HASHED slot reached
 * from a bucket is in exactly one entry, of a bucket of the group of its
 * page's home; a bucket's away count is the number of entries of the group
 * outside it whose home it is.  A lookup that finds its home's count zero
 * may therefore stop at the home.
 *
 * Locking protocol.
 *
 *	- The buckets are protected by BPEXT_MAP_PARTITIONS LWLocks; a group
 *	  of buckets belongs to one partition (partition_of).  Lookups hold
 *	  the lock shared while they pin a slot; anything that enters, moves
 *	  or removes an entry holds it exclusive.  A slot can only become
 *	  unhashed under the exclusive lock, and pins are only taken under the
 *	  shared lock, so an evictor holding the exclusive lock and seeing no
 *	  pins can take the slot.  Unpinning needs no lock.
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
 *	  groups, at most BPEXT_MAP_PIECE_GROUPS, under its lock), so that a
 *	  scan can be split over the worker pool and no walk holds a lock for
 *	  long.  An entry never leaves its group, so a piece holds every entry
 *	  whose home is in it.
 *	  Emptying the map (bpext_drop_clean_buffers, disable) only cuts a
 *	  piece's entries off its buckets under the lock (notes their slots
 *	  and zeroes the buckets), and unhashes those slots after releasing
 *	  it: no lookup can reach them any more, so none can pin them, and
 *	  anyone else who finds such a slot (the CLOCK hand, a shrink, an
 *	  invalidation) looks for it in its group under the lock and leaves
 *	  it.  Because an invalidation cannot unhash such a slot, a reader
 *	  that pinned it before the cut must not trust its re-check: every cut
 *	  bumps chain_cuts under the lock, and a read that a cut overlapped is
 *	  a miss (tier_map_pin_still_valid).  Nor can a shrink
 *	  (tier_map_drop_slots) or tier_map_clear unhash such a slot, which
 *	  would stay HASHED past the file's new end, or in a map said to be
 *	  empty, until the walk reaches it: so every cut also counts in
 *	  cuts_in_flight, raised under the partition lock with chain_cuts and
 *	  lowered once the walk has unhashed all the cut slots.  A shrink that
 *	  finds a slot HASHED but in no bucket, and every clear after its own
 *	  pass, wait (wait_for_cuts) until no cut is in flight, holding no
 *	  lock: a walk takes only rel_lock (to free a relation's last slot)
 *	  and the free stack's spinlock, so the wait ends.  Then every slot
 *	  they looked for is either in its group, where they unhashed it, or
 *	  unhashed by the walk.  A clear's wait cannot be prolonged by new
 *	  cuts, as no publication refills the buckets it emptied; a shrink's
 *	  only by new drops.
 *	- Every publication and unlinking of a slot is reported to the slot
 *	  directory (slot_directory.c) once the slot's fields are final, so
 *	  that its copy on the SSD is written again.  Moving an entry between
 *	  buckets of its group changes nothing the directory keeps.
 *
 * Nothing here raises an error or allocates memory: these functions run
 * inside smgr calls, some of them in critical sections.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "port/pg_bitutils.h"
#include "port/pg_bswap.h"

#include "slot_directory.h"
#include "stats.h"
#include "test_hooks.h"
#include "tier_control.h"
#include "tier_map.h"
#include "tier_map_internal.h"

/* The away count's place in TierBucket.meta. */
#define AWAY_SHIFT		24
#define AWAY_ONE		(1U << AWAY_SHIFT)
#define HOME_BITS		2
#define HOME_MASK		((1U << HOME_BITS) - 1)

StaticAssertDecl(TIER_GROUP_BUCKETS <= (1 << HOME_BITS),
				 "an entry's home position fits its bits of TierBucket.meta");
StaticAssertDecl(TIER_BUCKET_ENTRIES * HOME_BITS <= AWAY_SHIFT,
				 "the home positions fit below the away count");
StaticAssertDecl((TIER_GROUP_BUCKETS - 1) * TIER_BUCKET_ENTRIES < 256,
				 "the away count fits in its byte");

/* Where a page's entry is: a bucket and an entry of it. */
typedef struct IndexPlace
{
	uint32		bucket;
	int			entry;
} IndexPlace;

static bool publish_slot(TierAdmitTicket *ticket, uint32 slot, pg_crc32c crc,
						 uint32 file_incarnation, bool *full);
static bool slot_unhash_detached(uint32 slot);

/* ---------------------------------------------------------------------
 * Buckets and entries
 * ---------------------------------------------------------------------
 */

/*
 * The first bucket of a bucket's group, and the bucket's position in it.
 */
static inline uint32
group_first(uint32 bucket)
{
	return bucket - bucket % TIER_GROUP_BUCKETS;
}

static inline uint32
group_position(uint32 bucket)
{
	return bucket % TIER_GROUP_BUCKETS;
}

/*
 * The slot of an entry, or TIER_INVALID_INDEX for an empty one.  An entry
 * holds its slot's index plus one, so that zero, what a new shared memory
 * segment holds, is empty: PostgreSQL creates the segment anew at every
 * start and after every crash (anonymous mmap, SysV and huge pages all
 * come zeroed), so the postmaster does not have to write the buckets, 880
 * MB at a terabyte, before it can accept connections.
 */
static inline uint32
entry_slot(const TierBucket *b, int i)
{
	return b->slots[i] - 1;
}

static inline uint32
entry_home(const TierBucket *b, int i)
{
	return (b->meta >> (HOME_BITS * i)) & HOME_MASK;
}

static inline uint32
bucket_away(const TierBucket *b)
{
	return b->meta >> AWAY_SHIFT;
}

/* The first empty entry of a bucket, or -1 if it is full. */
static inline int
bucket_free_entry(const TierBucket *b)
{
	int			i;

	for (i = 0; i < TIER_BUCKET_ENTRIES; i++)
		if (b->slots[i] == 0)
			return i;
	return -1;
}

/* Fill entry i of bucket b (empty) with a slot, its tag and its home. */
static inline void
entry_set(TierBucket *b, int i, uint32 slot, uint8 tag, uint32 home_position)
{
	b->tags[i] = tag;
	b->meta = (b->meta & ~(HOME_MASK << (HOME_BITS * i))) |
		(home_position << (HOME_BITS * i));
	b->slots[i] = slot + 1;
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

/*
 * The entry of bucket b whose home is at home_position in the group, whose
 * tag is tag and whose slot holds the page, or -1.  The tags are compared
 * eight at a time (a zero byte of tags XOR tag, found with the usual
 * carry trick, which may also flag a byte above a true one: every
 * candidate is checked anyway).  Byte k of the word must be entry
 * base + k's tag, counted from the low end, whatever the byte order: on a
 * big-endian machine the entries tried would otherwise not be those whose
 * tags match, and an invalidation could miss the page it removes.
 * Emptied entries keep their old tags, so a candidate must also hold a
 * slot.
 */
static inline int
bucket_find_page(const TierBucket *b, uint32 home_position, uint8 tag,
				 const BpextRelFile *rfile, ForkNumber fork,
				 BlockNumber block)
{
	const uint64 ones = UINT64CONST(0x0101010101010101);
	const uint64 highs = UINT64CONST(0x8080808080808080);
	int			base;

	StaticAssertStmt(TIER_BUCKET_ENTRIES == 12,
					 "the tags are read as eight bytes and four");
	for (base = 0; base < TIER_BUCKET_ENTRIES; base += 8)
	{
		uint64		tags = 0;
		uint64		x;
		uint64		candidates;

		memcpy(&tags, b->tags + base, base == 0 ? 8 : 4);
#ifdef WORDS_BIGENDIAN
		/* Entry base + i's tag in byte i counted from the low end. */
		tags = pg_bswap64(tags);
#endif
		x = tags ^ (ones * tag);
		candidates = (x - ones) & ~x & highs;
		if (base != 0)
			candidates &= UINT64CONST(0x80808080);
		while (candidates != 0)
		{
			int			i = base + pg_rightmost_one_pos64(candidates) / 8;

			candidates &= candidates - 1;
			if (b->slots[i] == 0 || entry_home(b, i) != home_position)
				continue;
			if (slot_matches(&Map->slots[entry_slot(b, i)], rfile, fork, block))
				return i;
		}
	}
	return -1;
}

/*
 * Find the page's entry (caller holds the partition lock of the page's
 * home bucket, in either mode).  Returns false if the index has none.
 */
static bool
index_find_page(const BpextRelFile *rfile, ForkNumber fork,
				BlockNumber block, uint32 hash, IndexPlace *place)
{
	uint32		home = bucket_of(hash);
	uint32		position = group_position(home);
	uint32		first = group_first(home);
	uint8		tag = tag_of(hash);
	uint32		d;
	int			i;

	i = bucket_find_page(&Map->buckets[home], position, tag, rfile, fork,
						 block);
	if (i >= 0)
	{
		place->bucket = home;
		place->entry = i;
		return true;
	}
	if (bucket_away(&Map->buckets[home]) == 0)
		return false;
	/* The rest of the group, all at once. */
	for (d = 1; d < TIER_GROUP_BUCKETS; d++)
		bucket_prefetch_read(first + (position + d) % TIER_GROUP_BUCKETS);
	for (d = 1; d < TIER_GROUP_BUCKETS; d++)
	{
		uint32		x = first + (position + d) % TIER_GROUP_BUCKETS;

		i = bucket_find_page(&Map->buckets[x], position, tag, rfile, fork,
							 block);
		if (i >= 0)
		{
			place->bucket = x;
			place->entry = i;
			return true;
		}
	}
	return false;
}

/*
 * Enter a slot for the page of hash hash (caller holds the partition lock
 * exclusive): in its home bucket if that has room, else in another bucket
 * of the group, counted away from the home.  Returns false, entering
 * nothing, if the whole group is full.
 */
static bool
index_enter(uint32 hash, uint32 slot)
{
	uint32		home = bucket_of(hash);
	uint32		position = group_position(home);
	uint32		first = group_first(home);
	uint8		tag = tag_of(hash);
	uint32		d;
	int			i;

	i = bucket_free_entry(&Map->buckets[home]);
	if (i >= 0)
	{
		entry_set(&Map->buckets[home], i, slot, tag, position);
		return true;
	}
	for (d = 1; d < TIER_GROUP_BUCKETS; d++)
	{
		uint32		x = first + (position + d) % TIER_GROUP_BUCKETS;

		i = bucket_free_entry(&Map->buckets[x]);
		if (i >= 0)
		{
			entry_set(&Map->buckets[x], i, slot, tag, position);
			Map->buckets[home].meta += AWAY_ONE;
			return true;
		}
	}
	return false;
}

/* Can the group of the page of hash hash take one more entry? */
static bool
index_has_room(uint32 hash)
{
	uint32		first = group_first(bucket_of(hash));
	uint32		d;

	for (d = 0; d < TIER_GROUP_BUCKETS; d++)
		if (bucket_free_entry(&Map->buckets[first + d]) >= 0)
			return true;
	return false;
}

/*
 * Empty entry i of bucket x (caller holds the partition lock exclusive).
 * If the entry was away from its home, the home counts one fewer away.
 * Then, while the bucket with the empty entry has entries of its own
 * away, one of them comes back into it, which empties an entry of another
 * bucket, and so on: so a bucket keeps entries away only while it is full.
 * Each move brings an entry home, so this ends.
 */
static void
index_remove_entry(uint32 x, int i)
{
	uint32		first = group_first(x);
	uint32		home = entry_home(&Map->buckets[x], i);

	Map->buckets[x].slots[i] = 0;
	if (home != group_position(x))
	{
		Assert(bucket_away(&Map->buckets[first + home]) > 0);
		Map->buckets[first + home].meta -= AWAY_ONE;
	}
	while (bucket_away(&Map->buckets[x]) > 0)
	{
		TierBucket *b = &Map->buckets[x];
		uint32		position = group_position(x);
		uint32		from = x;
		int			j = -1;
		uint32		d;

		for (d = 1; d < TIER_GROUP_BUCKETS && j < 0; d++)
		{
			TierBucket *y;

			from = first + (position + d) % TIER_GROUP_BUCKETS;
			y = &Map->buckets[from];
			for (j = 0; j < TIER_BUCKET_ENTRIES; j++)
				if (y->slots[j] != 0 && entry_home(y, j) == position)
					break;
			if (j == TIER_BUCKET_ENTRIES)
				j = -1;
		}
		if (j < 0)
		{
			Assert(false);		/* the away count was wrong */
			return;
		}
		entry_set(b, i, entry_slot(&Map->buckets[from], j),
				  Map->buckets[from].tags[j], position);
		Map->buckets[from].slots[j] = 0;
		b->meta -= AWAY_ONE;
		x = from;
		i = j;
	}
}

/*
 * Find a slot's entry in the group of bucket (caller holds its partition
 * lock): the bucket first, where it usually is.
 */
static bool
index_find_slot(uint32 bucket, uint32 slot, IndexPlace *place)
{
	uint32		first = group_first(bucket);
	uint32		position = group_position(bucket);
	uint32		d;

	for (d = 0; d < TIER_GROUP_BUCKETS; d++)
	{
		uint32		x = first + (position + d) % TIER_GROUP_BUCKETS;
		const TierBucket *b = &Map->buckets[x];
		int			i;

		for (i = 0; i < TIER_BUCKET_ENTRIES; i++)
		{
			if (b->slots[i] == slot + 1)
			{
				place->bucket = x;
				place->entry = i;
				return true;
			}
		}
	}
	return false;
}

/*
 * Unlink the slot at place from the index (caller holds its partition lock
 * exclusive).  If nobody has it pinned, the caller becomes its owner in
 * FILLING state and true is returned; otherwise it is left unhashed for
 * the last pin holder to free and false is returned.
 */
static bool
slot_unhash_locked(const IndexPlace *place)
{
	uint32		slot = entry_slot(&Map->buckets[place->bucket], place->entry);

	index_remove_entry(place->bucket, place->entry);
	return slot_unhash_detached(slot);
}

/* Ask for the home bucket of each block of a run before looking any up. */
void
tier_map_prefetch_run(const BpextRelFile *rfile, ForkNumber fork,
					  BlockNumber first, BlockNumber nblocks)
{
	BlockNumber i;

	if (pg_atomic_read_u32(&Map->used_slots.value) == 0)
		return;
	for (i = 0; i < nblocks; i++)
		bucket_prefetch_read(bucket_of(page_hash(rfile, fork, first + i)));
}

/* ---------------------------------------------------------------------
 * Serving reads
 * ---------------------------------------------------------------------
 */

/*
 * Find a current copy of the page and pin its slot, so that it cannot be
 * reused while the caller reads it from the tier file.  Returns the slot
 * and its stored CRC, or TIER_INVALID_INDEX.  *chain_cuts is what
 * tier_map_pin_still_valid needs to know whether the slot's entry was cut
 * off meanwhile.  Counts towards the slot's CLOCK usage.
 */
uint32
tier_map_lookup_pin(const BpextRelFile *rfile, ForkNumber fork,
					BlockNumber block, pg_crc32c *crc, uint32 *chain_cuts)
{
	uint32		hash;
	LWLock	   *lock;
	IndexPlace	place;
	TierSlot   *s;
	uint32		slot;
	uint32		old_state;

	if (pg_atomic_read_u32(&Map->used_slots.value) == 0)
		return TIER_INVALID_INDEX;

	hash = page_hash(rfile, fork, block);
	/* The bucket's line is on its way while the lock is taken. */
	bucket_prefetch_read(bucket_of(hash));
	lock = partition_lock(bucket_of(hash));
	LWLockAcquire(lock, LW_SHARED);
	if (!index_find_page(rfile, fork, block, hash, &place))
	{
		LWLockRelease(lock);
		return TIER_INVALID_INDEX;
	}
	slot = entry_slot(&Map->buckets[place.bucket], place.entry);
	s = &Map->slots[slot];
	if (!slot_is_current(s))
	{
		LWLockRelease(lock);
		return TIER_INVALID_INDEX;
	}

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

/*
 * After the caller has read a pinned slot: is it still the current copy?
 * A slot can be unhashed while pinned (invalidation, disable, shrink); the
 * pin only keeps it from being reused.  A slot whose entry was cut off
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
 * Find a current copy of the page in the tier (no pin taken) and, with
 * note_use, give it one more usage count, as a hit does (up to
 * SLOT_USAGE_MAX; the refcount is left alone).
 */
static bool
find_current(const BpextRelFile *rfile, ForkNumber fork, BlockNumber block,
			 bool note_use)
{
	uint32		hash;
	LWLock	   *lock;
	IndexPlace	place;
	bool		found = false;

	if (pg_atomic_read_u32(&Map->used_slots.value) == 0)
		return false;

	hash = page_hash(rfile, fork, block);
	bucket_prefetch_read(bucket_of(hash));
	lock = partition_lock(bucket_of(hash));
	LWLockAcquire(lock, LW_SHARED);
	if (index_find_page(rfile, fork, block, hash, &place))
	{
		TierSlot   *s = &Map->slots[entry_slot(&Map->buckets[place.bucket],
											   place.entry)];

		found = slot_is_current(s);
		if (found && note_use)
		{
			uint32		old_state = pg_atomic_read_u32(&s->state);

			while (SLOT_USAGE(old_state) < SLOT_USAGE_MAX &&
				   !pg_atomic_compare_exchange_u32(&s->state, &old_state,
												   old_state + SLOT_USAGE_ONE))
				;
		}
	}
	LWLockRelease(lock);
	return found;
}

/* Is a current copy of the page in the tier?  (No pin taken.) */
bool
tier_map_contains(const BpextRelFile *rfile, ForkNumber fork,
				  BlockNumber block)
{
	return find_current(rfile, fork, block, false);
}

/*
 * A clean page is about to leave shared buffers (the push found it among
 * the next victims, just ahead of the clock hand): does the tier hold it?
 * If it does, it gets a usage count as a hit would: it has been in shared
 * buffers, where the workload used it, since the tier served or stored
 * it, so that the tier's CLOCK keeps the pages the workload is using.
 * Without it, a page the tier served went back to shared buffers, was
 * used there, and left them with the one count its hit gave it, worn
 * down by every pass of the tier's hand meanwhile; the tier then lost it
 * before pages pushed since and never used again, and, with every push
 * made, served 2 points fewer misses than LRU at a quarter of the hot set
 * (test/bench/tier_policy_sim.py; doc/sizing.md, Accuracy).  A page
 * stored while it was in shared buffers (a dual write of a victim, read
 * admission, bpext_prewarm) gets the count too when it goes, though it
 * may not have been used in between: on the write workloads of the
 * sizing bench the tier served more at a quarter of the hot set with the
 * count than without (skewrw 0.363-0.373 -> 0.388-0.401, TPC-B
 * 0.159-0.180 -> 0.181-0.204).  A page found among the victims and used
 * again before the hand comes is counted again when it is found next.
 */
bool
tier_map_note_departure(const BpextRelFile *rfile, ForkNumber fork,
						BlockNumber block)
{
	return find_current(rfile, fork, block, true);
}

/* ---------------------------------------------------------------------
 * Publishing and unlinking
 * ---------------------------------------------------------------------
 */

/*
 * Unhash the slot if the index has it in the group of bucket (caller
 * holds the group's partition lock exclusive).  The bucket was computed
 * from the slot's fields read without the lock, so it is only a guess
 * until the slot is found there.  Returns whether it was; *owned is then
 * what slot_unhash_locked returned.
 */
bool
tier_index_unhash_slot(uint32 bucket, uint32 slot, bool *owned)
{
	IndexPlace	place;

	if (!index_find_slot(bucket, slot, &place))
		return false;
	*owned = slot_unhash_locked(&place);
	return true;
}

/*
 * The rest of slot_unhash_locked, for a slot no entry leads to any more:
 * removed under the partition lock, or cut off its bucket under it
 * (unhash_piece_all).  Nobody can pin such a slot, so this needs no lock.
 */
static bool
slot_unhash_detached(uint32 slot)
{
	TierSlot   *s = &Map->slots[slot];
	uint32		state;

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
 * Remove from the index any copy of the page of relation entry rel and
 * block block (dead or not) that a new copy replaces (caller holds the
 * partition lock exclusive).  Relation entries are unique while
 * referenced, so comparing the entry index is comparing the identity.
 */
static void
remove_older_copy(uint32 hash, uint32 rel, BlockNumber block)
{
	TierRel    *r = &Map->rels[rel];
	IndexPlace	place;

	if (index_find_page(&r->rfile, r->fork, block, hash, &place) &&
		Map->slots[entry_slot(&Map->buckets[place.bucket],
							  place.entry)].rel == rel)
	{
		uint32		old = entry_slot(&Map->buckets[place.bucket], place.entry);

		if (slot_unhash_locked(&place))
			tier_map_free_slot(old);
	}
}

/*
 * Make a filled slot servable, unless the page changed since the ticket
 * was taken, or the slot was written to a file the tier has since left
 * (file_incarnation is the one tier_file_write_pages reported): a write
 * through an old descriptor that outlasted a disable and an enable must
 * not be published into the new file's map.  Nor is it published if the
 * page's group of buckets is full (rare, see the file header).  Consumes
 * the ticket and the slot either way; returns whether the copy was
 * published.
 */
bool
tier_map_publish(TierAdmitTicket *ticket, uint32 slot, pg_crc32c crc,
				 uint32 file_incarnation)
{
	bool		full = false;
	bool		published = publish_slot(ticket, slot, crc, file_incarnation,
										 &full);

	if (full)
		BPEXT_COUNT(admission_skips, 1);
	else if (!published)
		BPEXT_COUNT(publish_races, 1);
	return published;
}

static bool
publish_slot(TierAdmitTicket *ticket, uint32 slot, pg_crc32c crc,
			 uint32 file_incarnation, bool *full)
{
	TierSlot   *s = &Map->slots[slot];
	uint32		bucket = bucket_of(ticket->hash);
	LWLock	   *lock = partition_lock(bucket);
	TierRel    *r = &Map->rels[ticket->rel];
	bool		enabled;
	bool		entered PG_USED_FOR_ASSERTS_ONLY;

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
	if (enabled &&
		pg_atomic_read_u32(&BpextCtl->file_incarnation) == file_incarnation &&
		pg_atomic_read_u32(&BpextCtl->map_epoch) == ticket->map_epoch &&
		slot < pg_atomic_read_u32(&BpextCtl->active_slots) &&
		pg_atomic_read_u32(&r->generation) == ticket->rel_generation &&
		pg_atomic_read_u32(write_generation(ticket->hash)) ==
		ticket->write_generation)
	{
		/* An older copy of the same page (dead or not) gives way. */
		remove_older_copy(ticket->hash, ticket->rel, ticket->block);
		*full = !index_has_room(ticket->hash);
	}
	else
		enabled = false;
	if (!enabled || *full)
	{
		pg_atomic_fetch_sub_u32(&Map->used_slots.value, 1);
		LWLockRelease(lock);
		tier_map_free_slot(slot);
		tier_map_cancel_admit(ticket);
		return false;
	}

	/* The ticket's relation reference passes to the slot. */
	s->rel = ticket->rel;
	s->block = ticket->block;
	s->generation = ticket->rel_generation;
	s->crc = crc;
	s->last_access = map_clock();
	pg_write_barrier();
	entered = index_enter(ticket->hash, slot);
	Assert(entered);			/* index_has_room said there was room */
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
 * A page whose group of buckets is full is not published (the same index
 * size holds every page it held before the restart; a smaller
 * bpext.max_size may not).  scratch must hold 2 * n entries.  Only the
 * worker, while warm_loading is set, calls this.
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
		starts[partition_of(bucket_of(hashes[i])) + 1]++;
	}
	for (part = 0; part < BPEXT_MAP_PARTITIONS; part++)
		starts[part + 1] += starts[part];
	for (i = 0; i < n; i++)
	{
		if (hashes[i] != TIER_INVALID_INDEX)
			order[starts[partition_of(bucket_of(hashes[i]))]++] = i;
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
			uint32		free_state = 0;
			bool		entered PG_USED_FOR_ASSERTS_ONLY;

			if (k + 8 < end)
				bucket_prefetch(bucket_of(hashes[order[k + 8]]));
			if (pg_atomic_read_u32(&r->generation) != e->generation ||
				pg_atomic_read_u32(write_generation(hashes[at])) != 0 ||
				!pg_atomic_compare_exchange_u32(&s->state, &free_state,
												SLOT_FILLING))
				continue;

			/* An older copy of the same page (dead or not) gives way. */
			remove_older_copy(hashes[at], e->rel, e->block);
			if (!index_has_room(hashes[at]))
			{
				/* Back to free and unlisted, as it was. */
				pg_atomic_write_u32(&s->state, 0);
				continue;
			}

			/* The slot's reference to its relation entry. */
			pg_atomic_fetch_add_u32(&r->refcount, 1);
			s->rel = e->rel;
			s->block = e->block;
			s->generation = e->generation;
			s->crc = e->crc;
			s->last_access = now;
			pg_write_barrier();
			entered = index_enter(hashes[at], slot);
			Assert(entered);	/* index_has_room said there was room */
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
	LWLock	   *lock = partition_lock(bucket_of(hash));
	IndexPlace	place;
	bool		present;

	/* Most writes find nothing to remove: look under the shared lock. */
	LWLockAcquire(lock, LW_SHARED);
	present = index_find_page(rfile, fork, block, hash, &place);
	LWLockRelease(lock);
	if (!present)
		return;

	LWLockAcquire(lock, LW_EXCLUSIVE);
	if (index_find_page(rfile, fork, block, hash, &place))
	{
		uint32		slot = entry_slot(&Map->buckets[place.bucket], place.entry);

		if (slot_is_current(&Map->slots[slot]))
			BPEXT_COUNT(invalidations, 1);
		if (slot_unhash_locked(&place))
			tier_map_free_slot(slot);
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
 * pool (scan_pool.c): piece p covers a share of the groups of partition
 * p % BPEXT_MAP_PARTITIONS (at least a sixteenth, at most
 * BPEXT_MAP_PIECE_GROUPS groups), so each piece takes one partition lock,
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

/*
 * The partition of a piece and the groups it covers, as group numbers
 * first, first + BPEXT_MAP_PARTITIONS, ... below end.
 */
static int
piece_groups(uint32 piece, uint32 *first, uint32 *end)
{
	int			part = piece % BPEXT_MAP_PARTITIONS;
	uint32		sub = piece / BPEXT_MAP_PARTITIONS;
	uint32		per_part = Map->ngroups / BPEXT_MAP_PARTITIONS;

	/* ngroups is a multiple of BPEXT_MAP_PARTITIONS (tier_map.c). */
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
	uint32		group;
	LWLock	   *lock;

	lock = &Map->partition_locks[piece_groups(piece, &first, &end)].lock;
	LWLockAcquire(lock, LW_EXCLUSIVE);
	for (group = first; group < end; group += BPEXT_MAP_PARTITIONS)
	{
		bool		again;

		/*
		 * Removing an entry may move others back home, into buckets of
		 * the group already looked at: look at the group again until a
		 * pass removes nothing.
		 */
		do
		{
			int			k;

			again = false;
			for (k = 0; k < TIER_GROUP_BUCKETS * TIER_BUCKET_ENTRIES; k++)
			{
				IndexPlace	place;
				uint32		slot;

				place.bucket = group * TIER_GROUP_BUCKETS + k / TIER_BUCKET_ENTRIES;
				place.entry = k % TIER_BUCKET_ENTRIES;
				if (Map->buckets[place.bucket].slots[place.entry] == 0)
					continue;
				slot = entry_slot(&Map->buckets[place.bucket], place.entry);
				if (!slot_is_dead(&Map->slots[slot]))
					continue;
				if (slot_unhash_locked(&place))
					tier_map_free_slot(slot);
				removed++;
				again = true;
			}
		} while (again);
	}
	LWLockRelease(lock);
	return removed;
}

/*
 * Unlink every slot of one piece.  Under the partition's exclusive lock
 * the piece's entries are only cut off their buckets (the slots noted,
 * the buckets zeroed); their slots are unhashed and freed after it is
 * released (slot_unhash_detached).  The lock is held for a pass over the
 * piece's buckets rather than for a few cache misses and atomic
 * operations per slot: on a machine with fewer cores than busy processes,
 * a walk holding it is preempted now and then, and every lookup of the
 * partition waits meanwhile.  Returns how many.
 */
static uint32
unhash_piece_all(uint32 piece)
{
	uint32		cut[BPEXT_MAP_PIECE_GROUPS * TIER_GROUP_BUCKETS *
					TIER_BUCKET_ENTRIES];
	uint32		ncut = 0;
	uint32		first;
	uint32		end;
	uint32		group;
	uint32		i;
	LWLock	   *lock;
	Oid			hold_rel;

	lock = &Map->partition_locks[piece_groups(piece, &first, &end)].lock;
	LWLockAcquire(lock, LW_EXCLUSIVE);
	for (group = first; group < end; group += BPEXT_MAP_PARTITIONS)
	{
		TierBucket *b = &Map->buckets[group * TIER_GROUP_BUCKETS];
		int			k;

		for (k = 0; k < TIER_GROUP_BUCKETS * TIER_BUCKET_ENTRIES; k++)
		{
			uint32		slot1 = b[k / TIER_BUCKET_ENTRIES].slots[k % TIER_BUCKET_ENTRIES];

			if (slot1 == 0)
				continue;
			Assert(ncut < lengthof(cut));
			cut[ncut++] = slot1 - 1;
		}
		memset(b, 0, sizeof(TierBucket) * TIER_GROUP_BUCKETS);
	}
	if (ncut == 0)
	{
		LWLockRelease(lock);
		return 0;
	}
	/* Before the lock goes: see tier_map_pin_still_valid, wait_for_cuts. */
	pg_atomic_fetch_add_u32(&Map->chain_cuts.value, 1);
	pg_atomic_fetch_add_u32(&Map->cuts_in_flight.value, 1);
	LWLockRelease(lock);

	hold_rel = BPEXT_TEST_HOLD_TARGET("cut");
	for (i = 0; i < ncut; i++)
	{
		TierSlot   *s = &Map->slots[cut[i]];

		/* Tests only: hold the cut here, the slot still HASHED. */
		if (OidIsValid(hold_rel) && s->rel != TIER_INVALID_INDEX &&
			BPEXT_RELFILE_NUMBER(Map->rels[s->rel].rfile) == hold_rel &&
			BPEXT_TEST_HOLD("cut", cut[i]))
			hold_rel = InvalidOid;
		if (slot_unhash_detached(cut[i]))
			tier_map_free_slot(cut[i]);
	}
	/* After the slots' words: a full barrier. */
	pg_atomic_fetch_sub_u32(&Map->cuts_in_flight.value, 1);
	return ncut;
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
	uint32		group;
	LWLock	   *lock;

	lock = &Map->partition_locks[piece_groups(piece, &first, &end)].lock;
	LWLockAcquire(lock, LW_SHARED);
	for (group = first; group < end; group += BPEXT_MAP_PARTITIONS)
	{
		const TierBucket *b = &Map->buckets[group * TIER_GROUP_BUCKETS];
		int			k;

		for (k = 0; k < TIER_GROUP_BUCKETS * TIER_BUCKET_ENTRIES; k++)
		{
			uint32		slot1 = b[k / TIER_BUCKET_ENTRIES].slots[k % TIER_BUCKET_ENTRIES];
			TierSlot   *s;
			TierRel    *r;
			uint32		state;
			TierPageInfo info;

			if (slot1 == 0)
				continue;
			s = &Map->slots[slot1 - 1];
			if (!slot_is_current(s))
				continue;
			r = &Map->rels[s->rel];
			state = pg_atomic_read_u32(&s->state);
			info.slot = slot1 - 1;
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

#ifdef BPEXT_TEST_HOOKS
/*
 * The floor under a lookup, for the scale bench (test_hooks.c): n reads of
 * one random bucket's line each, every bucket chosen from the word the
 * read before it returned, so that no two reads overlap (independent
 * lookups partly do).  No lock is taken: the words read are only mixed
 * into the next choice.  mix is where the chain starts, and the result
 * where it ended, so that a caller can go on in pieces (and no read is
 * left out by the compiler).
 */
uint64
tier_index_chase_buckets(uint64 mix, uint64 n)
{
	uint64		i;

	for (i = 0; i < n; i++)
	{
		uint32		bucket = (uint32) (((mix >> 32) * Map->nbuckets) >> 32);
		volatile const uint32 *meta = &Map->buckets[bucket].meta;

		mix = (mix + *meta + i) * UINT64CONST(0x2545F4914F6CDD1D);
	}
	return mix;
}
#endif

/*-------------------------------------------------------------------------
 *
 * tier_map.c
 *	  The tier's shared-memory map: which page lives in which slot of the
 *	  tier file, and whether that copy is still current.  This file lays
 *	  it out in shared memory; the rest is split by concern, each file
 *	  with its locking protocol in its header comment:
 *
 *	  tier_map_index.c	the page index: buckets of a cache line from a
 *						page's identity to its slot under partition locks (lookups,
 *						publication, unlinking, the walks piece by piece)
 *	  tier_map_slots.c	slot states and pins, the free-slot stack, the
 *						CLOCK hand, and how many slots are active
 *	  tier_map_rels.c	relation entries and their generations (admission
 *						tickets, invalidations, warm-restart holds)
 *	  tier_map_walks.c	whole-map operations (emptying the map, the
 *						shrink's drop, the listings for the views)
 *
 * and tier_map_internal.h has the structures they share.
 *
 * Layout.  Each slot of the tier file has a TierSlot (24 bytes): the block
 * number (or, on the free stack, the next free slot), the index of its
 * relation entry (TierRel), the relation generation it was admitted under,
 * the CRC of its content, an atomic state word and the time of its last use.
 * Relation identity (the RelFileNode and fork) is kept once per relation in
 * a TierRel.  The page index (tier_map_index.c) has a 64-byte bucket per
 * 9.75 slots of bpext.max_size, 6.6 bytes per tier page.  So the map costs
 * 31.9 bytes per 8 kB tier page at a terabyte, where the relation table
 * stops growing, and 33 to 35 below (the relation table, a 16th of the
 * slots, costs 2.5 bytes per page there, and the write counters, fixed,
 * 2 bytes per page at a gigabyte).
 *
 * Map-wide rules.
 *
 *	- map_epoch (in BpextControl) is bumped whenever slots are taken away
 *	  wholesale (by the worker on disable, error and shrink, by
 *	  bpext_drop_clean_buffers in any backend) and when the worker enables
 *	  a file; publication checks it too, and the file incarnation the copy
 *	  was written to.
 *	- Every publication and unlinking of a slot is reported to the slot
 *	  directory (slot_directory.c) once the slot's fields are final, so
 *	  that its copy on the SSD is written again.
 *
 * Start-up cost.  A terabyte tier has 134 million slots (3.7 GB) and up to 4
 * million relation entries.  The postmaster, which must start accepting
 * connections quickly, only sets up the relation buckets (8 MB at a
 * terabyte): page buckets read as empty from zeroed memory (entry_slot),
 * relation entries are made when first taken (rel_unused), and slots by the
 * worker when it makes them usable (tier_map_set_active_slots, slots_ready),
 * which then lists them on the free stack, a second pass over them.  Nothing
 * reads a slot or relation entry that was never made: lookups only follow the
 * index's entries, and relation walks stop at rel_unused.
 *
 * Warm restart (warm_restart.c, slot_directory.c).  The map survives a clean
 * restart as the slot directory on the SSD (one entry per slot: its relation
 * entry's index, block, generation and CRC) and the table of relation entries
 * the postmaster writes at exit (each entry's index, identity and generation).
 * Indexes and generations are the map's own, and a warm start gives them back
 * unchanged: the postmaster, before it starts any other process, makes every
 * saved relation entry again at its saved index with its saved generation, and
 * holds it (tier_map_warm_hold), so that from then on every invalidation that
 * reaches one of them (truncation, unlink, DROP DATABASE) bumps a generation
 * or a write counter that the loader will see.  The bpext worker then
 * publishes the saved pages (tier_map_warm_publish_run) as if each had been
 * admitted with a ticket taken at that moment in the postmaster: the saved
 * generation, and a write counter of zero, which is what every counter was
 * when shared memory was made.  A page written, truncated or unlinked since is
 * therefore never published.  Because the numbering is kept, a directory chunk
 * whose pages were all published describes the map as it is, and need not be
 * written again.  Slot allocation stays closed while the load runs
 * (BpextCtl->warm_loading), because every slot still to be loaded holds a
 * saved page.
 *
 * Nothing in the map raises an error or allocates memory once it is set
 * up: its functions run inside smgr calls, some of them in critical
 * sections.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "port/pg_bitutils.h"
#include "storage/shmem.h"

#include "page_crc.h"
#include "test_hooks.h"
#include "tier_map.h"
#include "tier_map_internal.h"

TierMap    *Map = NULL;

StaticAssertDecl(sizeof(TierBucket) * TIER_GROUP_BUCKETS == TIER_GROUP_ALIGN && sizeof(TierBucket) == 64,
				 "a bucket of the page index is one cache line");
StaticAssertDecl(sizeof(TierSlot) == 24, "TierSlot is 24 bytes");

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
map_dimensions(uint32 max_slots, uint32 *ngroups, uint32 *nrels,
			   uint32 *rel_nbuckets)
{
	uint64		groups = ((uint64) max_slots + TIER_GROUP_SLOTS_FULL - 1) /
		TIER_GROUP_SLOTS_FULL;

	/* Tests only: a crowded index, whose groups fill up. */
	if (BPEXT_TEST_INDEX_GROUPS() > 0)
		groups = BPEXT_TEST_INDEX_GROUPS();
	/* Every partition gets as many groups. */
	groups = TYPEALIGN64(BPEXT_MAP_PARTITIONS, Max(groups, 1));
	*ngroups = (uint32) groups;
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
	uint32		ngroups,
				nrels,
				rel_nbuckets;
	Size		size;

	map_dimensions(max_slots, &ngroups, &nrels, &rel_nbuckets);
	/* Room to start the buckets on a group's boundary (below). */
	size = add_size(sizeof(TierMap), TIER_GROUP_ALIGN);
	size = add_size(size, mul_size(mul_size(ngroups, TIER_GROUP_BUCKETS),
								   sizeof(TierBucket)));
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

	map_dimensions(max_slots, &Map->ngroups, &Map->nrels, &Map->rel_nbuckets);
	Map->nbuckets = Map->ngroups * TIER_GROUP_BUCKETS;
	Map->pieces_per_partition =
		pg_nextpower2_32(Max(BPEXT_MAP_MIN_PIECES_PER_PARTITION,
							 (Map->ngroups / BPEXT_MAP_PARTITIONS +
							  BPEXT_MAP_PIECE_GROUPS - 1) /
							 BPEXT_MAP_PIECE_GROUPS));
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

	/*
	 * A group of buckets on a boundary of its size, so that it never
	 * straddles two pages of memory.
	 */
	p = (char *) TYPEALIGN(TIER_GROUP_ALIGN, p + sizeof(TierMap));
	Map->buckets = (TierBucket *) p;
	p += (Size) Map->nbuckets * sizeof(TierBucket);
	Map->rel_buckets = (uint32 *) p;
	p += MAXALIGN(Map->rel_nbuckets * sizeof(uint32));
	Map->rels = (TierRel *) p;
	p += MAXALIGN(Map->nrels * sizeof(TierRel));
	Map->slots = (TierSlot *) p;
	p += MAXALIGN(max_slots * sizeof(TierSlot));
	Map->write_generations = (pg_atomic_uint32 *) p;

	/* The buckets need no setting up (entry_slot); TIER_INVALID_INDEX is
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

uint32
tier_map_used_slots(void)
{
	return Map ? pg_atomic_read_u32(&Map->used_slots.value) : 0;
}

/*-------------------------------------------------------------------------
 *
 * tier_map.h
 *	  The tier's shared-memory map: which page lives in which slot of the
 *	  tier file, and whether that copy is still current.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_TIER_MAP_H
#define BPEXT_TIER_MAP_H

#include "common/relpath.h"
#include "port/pg_crc32c.h"
#include "storage/block.h"

#include "compat.h"
#include "slot_directory.h"

#define TIER_INVALID_INDEX	PG_UINT32_MAX

/*
 * What an admitter holds between deciding to copy a page and publishing
 * the copy: the page's relation entry pinned, and the generations sampled
 * before the copy was taken.  Publishing succeeds only if none of them
 * moved, which is how a copy racing with a write, a truncation, an unlink
 * or a DROP DATABASE is thrown away instead of published (design.md §2).
 */
typedef struct TierAdmitTicket
{
	uint32		rel;			/* pinned TierRel index */
	uint32		rel_generation;
	uint32		write_generation;
	uint32		map_epoch;
	uint32		hash;
	BlockNumber block;
} TierAdmitTicket;

extern Size tier_map_shmem_size(uint32 max_slots);
extern void tier_map_shmem_init(uint32 max_slots, bool found);
extern int	tier_map_lwlock_count(void);

/* Serving reads. */
extern uint32 tier_map_lookup_pin(const BpextRelFile *rfile, ForkNumber fork,
								  BlockNumber block, pg_crc32c *crc,
								  uint32 *chain_cuts);
extern bool tier_map_pin_still_valid(uint32 slot, uint32 chain_cuts);
extern void tier_map_unpin(uint32 slot);
extern bool tier_map_contains(const BpextRelFile *rfile, ForkNumber fork,
							  BlockNumber block);
extern bool tier_map_note_departure(const BpextRelFile *rfile,
									ForkNumber fork, BlockNumber block);
extern void tier_map_prefetch_run(const BpextRelFile *rfile, ForkNumber fork,
								  BlockNumber first, BlockNumber nblocks);

/* Admitting pages. */
extern bool tier_map_begin_admit(const BpextRelFile *rfile, ForkNumber fork,
								 BlockNumber block, TierAdmitTicket *ticket);
extern void tier_map_cancel_admit(TierAdmitTicket *ticket);
extern uint32 tier_map_alloc_slot(void);
extern bool tier_map_publish(TierAdmitTicket *ticket, uint32 slot,
							 pg_crc32c crc, uint32 file_incarnation);
extern void tier_map_free_slot(uint32 slot);

/* Keeping the invariant. */
extern void tier_map_invalidate_block(const BpextRelFile *rfile,
									  ForkNumber fork, BlockNumber block);
extern void tier_map_invalidate_from(const BpextRelFile *rfile,
									 ForkNumber fork, BlockNumber first,
									 BlockNumber end);
extern void tier_map_invalidate_fork(const BpextRelFile *rfile,
									 ForkNumber fork);
extern void tier_map_invalidate_database(Oid dbid);

/* Whole-map operations. */
extern void tier_map_clear(void);
extern uint32 tier_map_set_active_slots(uint32 nslots);
extern void tier_map_list_free_slots(void);
/* Most slots tier_map_drop_slots takes at a time. */
#define TIER_MAP_DROP_MAX	4096
extern uint32 tier_map_drop_slots(uint32 first, uint32 end);
extern void tier_map_begin_drop(void);
extern bool tier_map_dead_slots_possible(void);

/* Walking the map in pieces (scan_pool.c splits scans by piece). */
extern uint32 tier_map_pieces(void);
extern uint32 tier_map_unhash_piece(uint32 piece, bool dead_only);

/* One current page of the tier, as the views see it. */
typedef struct TierPageInfo
{
	uint32		slot;
	uint32		rel;			/* index of its relation entry */
	BpextRelFile rfile;
	ForkNumber	fork;
	BlockNumber block;
	pg_crc32c	crc;
	int			usage;
	int			pins;
	uint32		unreferenced_seconds;	/* since the last publish or hit */
} TierPageInfo;

/* Figures for the views. */
extern uint32 tier_map_used_slots(void);
#ifdef BPEXT_TEST_HOOKS
extern uint64 tier_index_chase_buckets(uint64 mix, uint64 n);
#endif
extern void tier_map_foreach_piece(uint32 piece,
								   void (*fn) (const TierPageInfo *info, void *arg),
								   void *arg);
extern void tier_map_foreach(void (*fn) (const TierPageInfo *info, void *arg),
							 void *arg);
extern void tier_map_count_slots(uint32 first, uint32 end,
								 void (*fn) (const BpextRelFile *rfile,
											 ForkNumber fork, uint64 pages,
											 void *arg),
								 void *arg);
extern void tier_map_foreach_slot(uint32 first, uint32 end,
								  void (*fn) (const TierPageInfo *info, void *arg),
								  void *arg);

/* Warm restart (warm_restart.c, slot_directory.c). */
extern bool tier_map_slot_entry(uint32 slot, SlotDirEntry *entry);
extern void tier_map_foreach_rel_at_exit(void (*fn) (uint32 rel,
													 const BpextRelFile *rfile,
													 ForkNumber fork,
													 uint32 generation,
													 BlockNumber nblocks,
													 void *arg),
										 void *arg);
extern bool tier_map_warm_hold(uint32 index, const BpextRelFile *rfile,
							   ForkNumber fork, uint32 generation,
							   BlockNumber nblocks);
extern uint32 tier_map_warm_publish_run(const SlotDirEntry *entries,
										uint32 first_slot, uint32 n,
										uint32 map_epoch,
										uint32 file_incarnation,
										uint32 *scratch, bool *published);
extern void tier_map_warm_release_holds(void);

/* Checksum of a slot's content: the page and the identity it belongs to. */
extern pg_crc32c tier_page_crc(const BpextRelFile *rfile, ForkNumber fork,
							   BlockNumber block, const char *page);

#endif							/* BPEXT_TIER_MAP_H */

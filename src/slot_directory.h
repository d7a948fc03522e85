/*-------------------------------------------------------------------------
 *
 * slot_directory.h
 *	  The slot directory: what each slot of the tier file holds, kept on
 *	  the SSD beside the slots so that a warm restart can rebuild the map.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_SLOT_DIRECTORY_H
#define BPEXT_SLOT_DIRECTORY_H

#include "port/pg_crc32c.h"
#include "storage/block.h"

/* One slot's entry: the map's own fields, as tier_map.c keeps them. */
typedef struct SlotDirEntry
{
	uint32		rel;			/* TierRel index, or TIER_INVALID_INDEX */
	BlockNumber block;
	uint32		generation;		/* the relation's, at admission */
	pg_crc32c	crc;			/* tier_page_crc() of the slot's content */
} SlotDirEntry;

extern Size slot_directory_shmem_size(uint32 max_slots);
extern void slot_directory_shmem_init(uint32 max_slots, bool found);

/* tier_map_index.c: a slot was published or unlinked. */
extern void slot_directory_note_change(uint32 slot);

/* bpext_drop_clean_buffers, before it empties the whole map. */
extern void slot_directory_begin_drop(void);
extern void slot_directory_end_drop(void);

/* The worker, when it takes a file or resizes it. */
extern void slot_directory_lay_out(uint32 nslots, uint64 directory_id);
extern void slot_directory_mark_all_dirty(uint32 first_chunk);
extern void slot_directory_forget(void);
extern bool slot_directory_usable(void);
extern uint64 slot_directory_id(void);
extern uint32 slot_directory_nslots(void);

/* Writing chunks: the worker as the map changes, the postmaster at exit. */
extern bool slot_directory_flush(int fd, uint32 max_chunks, uint32 *nwritten,
								 bool *more);

/* At exit: the dirty chunks, built in memory, for a helper to write. */
typedef struct SlotDirBatch
{
	uint32		nslots;			/* of the file the directory describes */
	uint32		nchunks;
	uint32	   *chunks;			/* their numbers, ascending */
	char	   *images;			/* BLCKSZ each */
} SlotDirBatch;

extern SlotDirBatch *slot_directory_collect_dirty(void);
extern bool slot_directory_write_batch(int fd, const SlotDirBatch *batch);
extern void slot_directory_free_batch(SlotDirBatch *batch);

/* Reading chunks back: a warm start's load. */
extern int	slot_directory_read(int fd, uint32 first_chunk, uint32 nchunks,
								SlotDirEntry *entries, bool *valid);
extern void slot_directory_note_loaded(uint32 chunk, bool valid, bool current);

#endif							/* BPEXT_SLOT_DIRECTORY_H */

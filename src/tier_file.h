/*-------------------------------------------------------------------------
 *
 * tier_file.h
 *	  The tier file on the SSD: creating and checking it, and page I/O.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_TIER_FILE_H
#define BPEXT_TIER_FILE_H

#include <sys/types.h>

#include "port/pg_crc32c.h"

#include "tier_readers.h"

/* The first BLCKSZ bytes of the file are its header; slot i follows. */
#define TIER_SLOT_OFFSET(slot)	((off_t) BLCKSZ * ((off_t) (slot) + 1))
#define TIER_FILE_SIZE(nslots)	TIER_SLOT_OFFSET(nslots)

/*
 * After the last slot, the slot directory (slot_directory.c): what each
 * slot holds, in 8 kB chunks of TIER_DIR_ENTRIES_PER_CHUNK entries, kept
 * current by the worker so that a clean shutdown only writes what changed
 * since its last round.  It costs 16 bytes of file per slot, 0.2%.
 */
#define TIER_DIR_ENTRIES_PER_CHUNK	511
#define TIER_DIR_CHUNKS(nslots) \
	((uint32) (((uint64) (nslots) + TIER_DIR_ENTRIES_PER_CHUNK - 1) / \
			   TIER_DIR_ENTRIES_PER_CHUNK))
#define TIER_DIR_OFFSET(nslots)	TIER_FILE_SIZE(nslots)
#define TIER_DIR_CHUNK_OFFSET(nslots, chunk) \
	(TIER_DIR_OFFSET(nslots) + (off_t) BLCKSZ * (off_t) (chunk))
/* All the file holds for nslots slots: header, slots and directory. */
#define TIER_FILE_BYTES(nslots) \
	TIER_DIR_CHUNK_OFFSET(nslots, TIER_DIR_CHUNKS(nslots))

/*
 * Warm restart: the header block also holds, after the file header, the
 * description of the tier map saved at the last clean shutdown: the slot
 * directory, and the table of relation forks its entries name, which
 * follows the directory, followed by what each fork's segment files looked
 * like at the save (warm_restart.c says how they are used).  Version 3
 * added the segment files; a map saved in an older version reads as none.
 */
#define TIER_WARM_MAGIC			"BPEXWARM"
#define TIER_WARM_VERSION		3
#define TIER_WARM_OFFSET		512

typedef struct TierWarmHeader
{
	char		magic[8];
	uint32		version;		/* TIER_WARM_VERSION */
	uint32		saved;			/* a saved map waits to be used */
	uint32		pg_major;		/* PG_VERSION_NUM / 100 of the saver */
	uint32		timeline;		/* pg_control's at the save */
	uint64		system_identifier;
	uint64		checkpoint;		/* pg_control's checkPoint at the save */
	uint32		control_crc;	/* pg_control's own CRC at the save */
	uint32		nslots;			/* slots of the file at the save */
	uint64		token;			/* also in the data directory */
	uint64		nonce;			/* set when a start takes the map */
	uint64		npages;			/* pages in the map at the save */
	uint32		nrels;			/* relation forks saved */
	uint32		rels_crc;		/* of the relation table and segments */
	uint64		directory_id;	/* in every current directory chunk */
	uint64		rels_offset;	/* where the relation table starts */
	uint32		nsegs;			/* segment files described after it */
	pg_crc32c	crc;			/* of the fields above */
} TierWarmHeader;

/* Alignment for O_DIRECT I/O buffers. */
#define TIER_IO_ALIGN			4096

/* The worker's side: owning the file (in its helpers, or through them). */
extern int	tier_file_open(const char *path, uint32 nslots,
						   const uint64 *busy_devs, const uint64 *busy_inos,
						   int nbusy, uint64 *taken_from, int *work_fd,
						   char *err, size_t errlen);
extern bool tier_file_resize(int fd, uint32 old_nslots, uint32 new_nslots,
							 char *err, size_t errlen);
extern bool tier_file_write_header(int fd, uint32 nslots, char *err,
								   size_t errlen);
extern bool tier_file_identity(int fd, uint64 *dev, uint64 *ino);
extern bool tier_file_is(const char *path, uint64 dev, uint64 ino);
extern void tier_file_set_worker_fd(int fd, uint32 incarnation);

/* Warm restart. */
extern void tier_file_cache_identity(void);
extern bool tier_file_check_ours(int fd, const char *path, uint32 *nslots,
								 char *err, size_t errlen);
extern bool tier_file_read_warm(int fd, TierWarmHeader *warm);
extern bool tier_file_write_warm(int fd, TierWarmHeader *warm);
extern int	tier_file_reopen(const char *path, uint64 dev, uint64 ino,
							 uint64 nonce, char *err, size_t errlen);

/* Every process's side: page I/O through its own descriptor. */
extern bool tier_file_ready(void);
extern TierReadResult tier_file_read_page(uint32 slot, char *page);
extern bool tier_file_worker_fd_valid(int fd, uint64 *dev, uint64 *ino,
									  char *err, size_t errlen);
extern int	tier_file_reopen_own(int fd, bool writable, uint64 dev,
								 uint64 ino);
extern bool tier_file_write_pages(uint32 first_slot, int npages,
								  char *const *pages, uint32 *incarnation);
extern void tier_file_close_local(void);

#endif							/* BPEXT_TIER_FILE_H */

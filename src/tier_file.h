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

/* The first BLCKSZ bytes of the file are its header; slot i follows. */
#define TIER_SLOT_OFFSET(slot)	((off_t) BLCKSZ * ((off_t) (slot) + 1))
#define TIER_FILE_SIZE(nslots)	TIER_SLOT_OFFSET(nslots)

/* Alignment for O_DIRECT I/O buffers. */
#define TIER_IO_ALIGN			4096

/* The worker's side: owning the file. */
extern int	tier_file_open(const char *path, uint32 nslots, char *err,
						   size_t errlen);
extern bool tier_file_resize(int fd, uint32 old_nslots, uint32 new_nslots,
							 char *err, size_t errlen);
extern bool tier_file_identity(int fd, uint64 *dev, uint64 *ino);
extern bool tier_file_is(const char *path, uint64 dev, uint64 ino);
extern bool tier_file_still_ours(int fd, const char *path, uint32 nslots,
								 char *err, size_t errlen);

/* Every process's side: page I/O through its own descriptor. */
extern bool tier_file_ready(void);
extern bool tier_file_read_page(uint32 slot, char *page);
extern bool tier_file_write_pages(uint32 first_slot, int npages,
								  char *const *pages, uint32 *incarnation);
extern void tier_file_close_local(void);

#endif							/* BPEXT_TIER_FILE_H */

/*-------------------------------------------------------------------------
 *
 * descriptors.h
 *	  The bpext_buffer_descriptors view and the per-buffer read times it
 *	  shows.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_DESCRIPTORS_H
#define BPEXT_DESCRIPTORS_H

#include "scan_pool.h"

extern Size bpext_descriptors_shmem_size(void);
extern void bpext_descriptors_shmem_init(bool found);
extern void bpext_note_buffer_read(const char *buffer, uint64 microseconds);
extern void bpext_note_buffer_read_untimed(const char *buffer);
extern void bpext_descriptors_unit(BpextScan *scan, uint64 unit);

#endif							/* BPEXT_DESCRIPTORS_H */

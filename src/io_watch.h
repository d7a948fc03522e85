/*-------------------------------------------------------------------------
 *
 * io_watch.h
 *	  Noticing tier I/O that does not return (bpext.io_timeout).
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_IO_WATCH_H
#define BPEXT_IO_WATCH_H

extern Size bpext_io_watch_shmem_size(void);
extern void bpext_io_watch_shmem_init(bool found);

extern uint64 bpext_io_watch_clock(void);
extern bool bpext_io_watch_check(void);
extern bool bpext_io_watch_check_at(uint64 now);
extern void bpext_io_watch_begin(bool writing);
extern void bpext_io_watch_begin_at(bool writing, uint64 now);
extern void bpext_io_watch_end(void);

#endif							/* BPEXT_IO_WATCH_H */

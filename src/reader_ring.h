/*-------------------------------------------------------------------------
 *
 * reader_ring.h
 *	  The io_uring a reader helper keeps several tier reads in flight
 *	  through.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_READER_RING_H
#define BPEXT_READER_RING_H

#include <sys/types.h>

typedef struct ReaderRing ReaderRing;

/* A completion: the tag its request was queued with, and its result. */
typedef struct ReaderRingDone
{
	uint64		tag;
	int			result;			/* bytes read, or -errno */
} ReaderRingDone;

extern ReaderRing *reader_ring_create(unsigned depth, int *save_errno);
extern void reader_ring_queue_read(ReaderRing *ring, int fd, void *buf,
								   size_t len, off_t offset, uint64 tag);
extern void reader_ring_queue_poll_in(ReaderRing *ring, int fd, uint64 tag);
extern int	reader_ring_submit_and_wait(ReaderRing *ring, int ms);
extern int	reader_ring_reap(ReaderRing *ring, ReaderRingDone *done, int max);

#endif							/* BPEXT_READER_RING_H */

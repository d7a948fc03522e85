/*-------------------------------------------------------------------------
 *
 * tier_readers.h
 *	  Tier reads that may have to wait for the device, done by helper
 *	  processes that a backend stops waiting for after bpext.io_timeout.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_TIER_READERS_H
#define BPEXT_TIER_READERS_H

#include <sys/types.h>

/* How a tier read through the readers ended. */
typedef enum TierReadResult
{
	TIER_READ_OK,				/* the page is in the caller's buffer */
	TIER_READ_FAILED,			/* the read failed: errno set (0: short) */
	TIER_READ_UNAVAILABLE		/* not read: no reader, or it did not
								 * answer in time (then the tier failed) */
} TierReadResult;

/* The most reader helpers bpext.tier_readers may ask for. */
#define TIER_READERS_MAX		16

/* The most reads bpext.tier_read_depth lets one helper keep in flight. */
#define TIER_READ_DEPTH_MAX		64

extern void tier_readers_create(void);
extern TierReadResult tier_readers_read(char *page, off_t offset,
										uint32 incarnation);
extern void tier_readers_maintain(int fd, uint32 incarnation);
extern void tier_readers_stop(void);
extern void tier_readers_count(int *waiting, int *at_device);

#endif							/* BPEXT_TIER_READERS_H */

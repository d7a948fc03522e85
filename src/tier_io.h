/*-------------------------------------------------------------------------
 *
 * tier_io.h
 *	  Moving pages between PostgreSQL and the tier: serving a read,
 *	  storing a batch.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_TIER_IO_H
#define BPEXT_TIER_IO_H

#include "stats.h"
#include "tier_map.h"

/*
 * A batch of page copies waiting to be written to the tier together.  Each
 * page has an admission ticket taken before it was copied; pages being
 * copied are "pending" (their tickets held, not yet added).
 */
typedef struct TierBatch
{
	BpextAdmitSource source;	/* counted per source when published */
	int			pending;		/* pages begun, not yet added */
	int			npages;
	int			capacity;
	char	  **pages;			/* capacity aligned page buffers */
	TierAdmitTicket *tickets;
	pg_crc32c  *crcs;
	uint32	   *slots;			/* scratch for tier_batch_flush */
	int32	   *owners;			/* who waits for each page, or -1 */
	void		(*done) (int32 owner, bool published);	/* told of each
														 * owned page */
} TierBatch;

extern char *tier_private_page(void);
extern bool tier_serve_page(const BpextRelFile *rfile, ForkNumber fork,
							BlockNumber block, char *buffer, uint64 *read_us,
							void (*before_read) (void));
extern bool tier_will_miss(const BpextRelFile *rfile, ForkNumber fork,
						   BlockNumber block);
extern bool tier_inspect_page(const BpextRelFile *rfile, ForkNumber fork,
							  BlockNumber block, char *buffer);

extern TierBatch *tier_batch_create(int capacity, BpextAdmitSource source);
extern char *tier_batch_begin(TierBatch *batch, const BpextRelFile *rfile,
							  ForkNumber fork, BlockNumber block);
extern char *tier_batch_adopt(TierBatch *batch, const TierAdmitTicket *ticket,
							  int32 owner);
extern void tier_batch_add(TierBatch *batch, const BpextRelFile *rfile,
						   ForkNumber fork, BlockNumber block);
extern void tier_batch_cancel_pending(TierBatch *batch);
extern void tier_batch_abandon(TierBatch *batch);
extern int	tier_batch_flush(TierBatch *batch);

#endif							/* BPEXT_TIER_IO_H */

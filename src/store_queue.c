/*-------------------------------------------------------------------------
 *
 * store_queue.c
 *	  Pages on their way into the tier from inside smgr calls (dual writes
 *	  and read admission), handed to the bpext worker through a bounded
 *	  queue in shared memory.
 *
 * A process that stores a page from inside smgrwrite or smgrreadv holds
 * things others wait for: FlushBuffer has set the buffer's I/O flag and
 * holds its content lock, and a read holds the I/O flag of the buffers it
 * fills.  A tier write that hangs there (a device that hangs instead of
 * failing) would hold them for ever: CHECKPOINT waiting on the I/O flag,
 * updates on the content lock, a standby's replay, a fast shutdown.  So
 * those processes never write to the tier: they take the admission ticket
 * where they always did (after the data-file write and its
 * after-invalidation, or before the data-file read), copy the page into a
 * free entry of this queue, and wake the worker, which writes the queued
 * pages in batches (tier_io.c) through its helper process
 * (tier_writer.c) and publishes those whose tickets still hold.
 *
 * The ticket is what keeps this safe, exactly as for a store made in
 * place: a page written or invalidated again after its ticket was taken,
 * however long it waited in the queue, is never published
 * (tier_map_publish checks the ticket's generations, map epoch and the
 * file incarnation the page went to).
 *
 * When no entry is free, the page is not stored (the ticket is cancelled
 * and counted in admission_skips): the block was invalidated before and
 * after the data-file write, so the tier simply does not hold it; nobody
 * ever waits for the queue.
 *
 * Locking protocol.  Each entry has an atomic state:
 *
 *	FREE	 -> FILLING  a producer, by compare-and-swap (so one producer
 *						 owns it);
 *	FILLING  -> READY	 that producer, after filling the page and the
 *						 identity, behind a write barrier;
 *	READY	 -> TAKEN	 the worker, by compare-and-swap;
 *	TAKEN	 -> FREE	 the worker, once it has copied the page into its
 *						 batch (or cancelled the ticket), behind a full
 *						 barrier.
 *
 * An entry's fields are written only by the process that moved it to
 * FILLING and read only by the one that moved it to TAKEN.  nready counts
 * READY entries so that an idle worker does not scan the queue; it is a
 * hint (it may be briefly off by the entries changing state as it is
 * read), never trusted for an entry's state.  The ticket passes from the
 * entry to the worker's batch, which then holds its relation reference.
 * An entry TAKEN is only ever held by a running worker for the time of a
 * memcpy, with nothing in between that can raise an error; a new worker
 * nevertheless gives back any it finds (store_queue_recover) before it
 * starts.  Entries READY while the tier is off, or switched to another
 * file, are drained all the same: their tickets are cancelled (or their
 * publication fails on the map epoch and file incarnation).
 *
 * Producers run inside smgr calls: no errors, no allocation, no waiting
 * on anything the tier could hold (a compare-and-swap, a copy and a
 * SetLatch).
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/shmem.h"

#include "io_watch.h"
#include "settings.h"
#include "stats.h"
#include "store_queue.h"
#include "tier_control.h"
#include "tier_io.h"

#define ENTRY_FREE		0
#define ENTRY_FILLING	1
#define ENTRY_READY		2
#define ENTRY_TAKEN		3

/* The worker writes the queued pages in batches of this many at most. */
#define STORE_BATCH_PAGES	64

typedef struct StoreEntry
{
	pg_atomic_uint32 state;
	BpextAdmitSource source;
	BpextRelFile rfile;
	ForkNumber	fork;
	BlockNumber block;
	TierAdmitTicket ticket;
} StoreEntry;

typedef struct StoreQueue
{
	int			nentries;
	pg_atomic_uint32 next_claim;	/* where producers start looking */
	pg_atomic_uint32 nready;	/* READY entries, a hint */
	StoreEntry	entries[FLEXIBLE_ARRAY_MEMBER];
} StoreQueue;

static StoreQueue *Queue = NULL;
static char *QueuePages = NULL;

/* The worker's batches, one per admission source it sees. */
static TierBatch *batches[BPEXT_NUM_SOURCES];

static Size
entries_size(int n)
{
	return add_size(offsetof(StoreQueue, entries),
					mul_size(n, sizeof(StoreEntry)));
}

Size
store_queue_shmem_size(void)
{
	Size		size = CACHELINEALIGN(entries_size(bpext_store_queue_pages));

	return add_size(size, mul_size(bpext_store_queue_pages, BLCKSZ));
}

void
store_queue_shmem_init(bool found)
{
	Queue = ShmemInitStruct("bpext store queue", store_queue_shmem_size(),
							&found);
	QueuePages = (char *) Queue +
		CACHELINEALIGN(entries_size(bpext_store_queue_pages));
	if (!found)
	{
		int			i;

		Queue->nentries = bpext_store_queue_pages;
		pg_atomic_init_u32(&Queue->next_claim, 0);
		pg_atomic_init_u32(&Queue->nready, 0);
		for (i = 0; i < Queue->nentries; i++)
			pg_atomic_init_u32(&Queue->entries[i].state, ENTRY_FREE);
	}
}

static inline char *
entry_page(int i)
{
	return QueuePages + (Size) i * BLCKSZ;
}

/*
 * Queue page (the image just written to, or read from, its data file) for
 * the worker to store, under the ticket the caller took for it.  Consumes
 * the ticket.  Never waits: with no free entry the page is not stored.
 */
void
store_queue_put(const BpextRelFile *rfile, ForkNumber fork,
				BlockNumber block, const char *page, TierAdmitTicket *ticket,
				BpextAdmitSource source)
{
	StoreEntry *e = NULL;
	uint32		start;
	int			n;
	int			i = 0;

	if (Queue == NULL || Queue->nentries == 0 || !bpext_tier_enabled() ||
		!bpext_io_watch_check())
	{
		tier_map_cancel_admit(ticket);
		return;
	}

	start = pg_atomic_fetch_add_u32(&Queue->next_claim, 1);
	for (n = 0; n < Queue->nentries; n++)
	{
		uint32		expected = ENTRY_FREE;

		i = (start + n) % Queue->nentries;
		if (pg_atomic_read_u32(&Queue->entries[i].state) == ENTRY_FREE &&
			pg_atomic_compare_exchange_u32(&Queue->entries[i].state,
										   &expected, ENTRY_FILLING))
		{
			e = &Queue->entries[i];
			break;
		}
	}
	if (e == NULL)
	{
		/* Full: invalidate rather than wait (the caller already did). */
		tier_map_cancel_admit(ticket);
		BPEXT_COUNT(admission_skips, 1);
		return;
	}

	e->source = source;
	e->rfile = *rfile;
	e->fork = fork;
	e->block = block;
	e->ticket = *ticket;
	ticket->rel = TIER_INVALID_INDEX;	/* it is the entry's now */
	memcpy(entry_page(i), page, BLCKSZ);
	pg_write_barrier();
	pg_atomic_write_u32(&e->state, ENTRY_READY);
	pg_atomic_fetch_add_u32(&Queue->nready, 1);
	bpext_wake_worker();
}

/* The worker: the batch for pages from source, made on first use. */
static TierBatch *
batch_for(BpextAdmitSource source)
{
	if (batches[source] == NULL)
		batches[source] = tier_batch_create(STORE_BATCH_PAGES, source);
	return batches[source];
}

static void
flush_batches(void)
{
	int			s;

	for (s = 0; s < BPEXT_NUM_SOURCES; s++)
		if (batches[s] != NULL)
			(void) tier_batch_flush(batches[s]);
}

/*
 * The worker: store every page queued so far (or, with the tier off, give
 * their tickets back), freeing their entries as soon as they are copied.
 * Returns whether more entries became ready meanwhile.
 */
bool
store_queue_drain(void)
{
	bool		enabled;
	int			i;

	if (Queue == NULL || pg_atomic_read_u32(&Queue->nready) == 0)
		return false;
	enabled = bpext_tier_enabled();

	for (i = 0; i < Queue->nentries; i++)
	{
		StoreEntry *e = &Queue->entries[i];
		uint32		expected = ENTRY_READY;

		if (pg_atomic_read_u32(&e->state) != ENTRY_READY ||
			!pg_atomic_compare_exchange_u32(&e->state, &expected, ENTRY_TAKEN))
			continue;
		pg_atomic_fetch_sub_u32(&Queue->nready, 1);

		if (enabled)
		{
			TierBatch  *batch = batch_for(e->source);
			char	   *copy;

			if (batch->npages == batch->capacity)
				(void) tier_batch_flush(batch);
			copy = tier_batch_adopt(batch, &e->ticket);
			memcpy(copy, entry_page(i), BLCKSZ);
			tier_batch_add(batch, &e->rfile, e->fork, e->block);
		}
		else
			tier_map_cancel_admit(&e->ticket);

		pg_memory_barrier();
		pg_atomic_write_u32(&e->state, ENTRY_FREE);
	}
	flush_batches();
	return (int32) pg_atomic_read_u32(&Queue->nready) > 0;
}

/* The worker is exiting: give back the tickets its batches hold. */
void
store_queue_abandon(void)
{
	int			s;

	for (s = 0; s < BPEXT_NUM_SOURCES; s++)
		if (batches[s] != NULL)
			tier_batch_abandon(batches[s]);
}

/*
 * A new worker: entries a previous one took and never freed (it cannot
 * happen short of a crash, which resets shared memory, but a leaked
 * ticket pins a relation entry until restart) are given back.
 */
void
store_queue_recover(void)
{
	int			i;

	if (Queue == NULL)
		return;
	for (i = 0; i < Queue->nentries; i++)
	{
		StoreEntry *e = &Queue->entries[i];

		if (pg_atomic_read_u32(&e->state) != ENTRY_TAKEN)
			continue;
		tier_map_cancel_admit(&e->ticket);
		pg_memory_barrier();
		pg_atomic_write_u32(&e->state, ENTRY_FREE);
	}
}

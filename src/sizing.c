/*-------------------------------------------------------------------------
 *
 * sizing.c
 *	  The tier sizing advisor: how many shared-buffer misses a tier of each
 *	  size would serve, estimated from the miss stream alone, so that the
 *	  curve exists before the SSD does (it works with bpext.size = 0).
 *
 * Method: SHARDS (Waldspurger et al., "Efficient MRC Construction with
 * SHARDS", FAST 2015), fixed-size variant.  A page is sampled when a hash
 * of its identity is at most a threshold T (rate R = (T + 1) / 2^32).  For
 * the sampled pages only, we keep their order of last reference: an entry
 * per page (hash table) holding a logical time stamp, and a Fenwick tree
 * over the stamps.  On a sampled miss, the number of sampled pages
 * referenced since the page's last reference (its reuse, or stack,
 * distance among the sampled pages), divided by R, estimates the number
 * of distinct pages referenced in between; the miss is added to a
 * histogram of those distances with weight 1/R.  A miss with distance d is
 * a tier hit for every tier of more than d pages; the hit ratio at size S
 * is the weight below S over the total weight.  Because sampling is by
 * page identity, every reuse of a sampled page is seen, and the distances
 * are unbiased; the error is that of estimating a count from a 1-in-1/R
 * sample, about 1/sqrt(d R) relative.
 *
 * The sample's size.  The number of pages under the threshold is itself
 * random (binomial: one standard deviation is 1 / sqrt(sampled pages)),
 * and every distance scales with it, so a small sample stretches or
 * shrinks the whole curve, the same way every time for the same data.  A
 * HyperLogLog page counter (sizing.h) sees every page, sampled or not,
 * and counts them within about 1%; while the sample holds fewer pages
 * than the counter has registers, the distances are divided by the ratio
 * of the sample's footprint to the counted one (sizing_snapshot).
 *
 * Fixed memory (bpext.sizing_memory): when the entries run out, the
 * threshold is lowered by an eighth and the entries whose hash is now
 * above it are dropped, so that the stack still holds exactly the pages a
 * sample at the new rate would hold (SHARDS-adj lowers T to the largest
 * sampled hash; lowering in steps does the same work less often).  Each
 * miss is weighted with the rate in force when it was counted, so the
 * histogram stays an estimate of the whole stream across changes of rate.
 * bpext.sizing_sample_rate is the rate a curve starts with (at server
 * start and at bpext_sizing_reset()); the budget only ever lowers it.
 *
 * Bounded cost (bpext.sizing_samples_per_second): references to sampled
 * pages that come faster than that lower the threshold the same way, to
 * what would have taken them a second (budget_spend).  The rate can then
 * start at 1, every page: the accuracy of a sample is in the number of
 * pages it holds, and a working set of tens of thousands of pages at 1%
 * holds a few hundred, which put the curve off by up to 6 points on the
 * bench; what the rate must be kept from is the cost of a high one where
 * misses come fast.
 *
 * What is modelled, and why it is close enough to the tier's real policy:
 *
 *	- The reference stream is every shared-buffer miss (whether the tier
 *	  serves it or not: the wrappers see both) and every data-file write.
 *	  A page enters the tier when it leaves shared buffers (the eviction
 *	  push), when it is written (dual write), or when it is read
 *	  (bpext.admission = read), and stays in it when it is served.  So a
 *	  page referenced by a miss is, from then on, either in shared buffers
 *	  or in the tier.  The stack therefore models shared buffers and the
 *	  tier together: the bpext worker sees shared buffers (the buffers
 *	  just ahead of the clock hand, and a pass over all of them a second
 *	  while the stack changes, bpext_sizing_sweep_shared_buffers) and
 *	  moves the sampled pages it finds there to the top, so that a page
 *	  is dated by when it was last seen in shared buffers, about when the
 *	  tier got it, not by the miss that brought it in; and a tier of S
 *	  pages is the stack's answer for S + shared_buffers pages less
 *	  those both hold (tier_hit_ratio), which the timed pass measures
 *	  (overlap_at).  The pushes themselves are not fed into the stack's
 *	  distances: with the tier off there are none, and they must mean the
 *	  same thing before and after the SSD exists.  (The miniatures below
 *	  take them while the tier admits: which pushes the worker misses
 *	  moves what the tier serves, and nothing else can tell.  A page
 *	  pushed that the sample lacks joins it then, as the sweep would have
 *	  put it there.)
 *	- A write re-admits the page (dual write stores it, and a page
 *	  written while in shared buffers is then in both; under write_policy
 *	  = invalidate the clean page is pushed when it is evicted).  A dirty
 *	  page written by the backend that evicts it, under invalidate, is not
 *	  in the tier afterwards but counts as in it here.
 *	- Replacement: the tier's CLOCK with usage counts (tier_map_slots.c
 *	  tier_map_alloc_slot: one at entry, one more for each hit and each
 *	  time the push finds the page among the next victims of shared
 *	  buffers, up to 3) is not LRU: it keeps pages read often longer, and
 *	  serves a point or more above the stack's answer at small tiers
 *	  (test/bench/tier_policy_sim.py).  Miniature simulations of that
 *	  CLOCK on the sampled pages (sizing_mini.c) say by how much at the
 *	  series' sizes, and tier_hit_ratio corrects the stack's answer by
 *	  it.  They are fed what the tier would be: a sampled miss looks the
 *	  page up, a page the push takes (bpext_sizing_pushed) or, while the
 *	  tier does not admit, one the sweep finds ahead of the clock hand
 *	  where the push would take it (touch_seen) is admitted, a write
 *	  stores it or makes it stale, and under admission = read a miss
 *	  admits it.  So
 *	  pages read through ring strategies (big sequential scans, VACUUM),
 *	  which never meet the clock hand, are not admitted under admission =
 *	  evict, in the miniatures as in the tier.
 *	- Not modelled: pages of dropped or truncated relations keep their
 *	  place in the stack until they age out; synchronous relation copies
 *	  (ALTER TABLE SET TABLESPACE, CREATE DATABASE) count as misses.
 *
 * Cost.  A page not sampled costs the caller one hash and one compare
 * against the threshold (sizing.h), with no lock and no shared write.  A
 * sampled page takes the advisor's LWLock exclusive for a hash lookup and
 * two Fenwick walks (log2 of twice the entry count, 17 steps at the
 * default 4 MB), and a step through the 16 miniatures (a bit each; an
 * admission runs each full ring's clock, a few slots on average): a read
 * call took 678 instructions with every page sampled before the
 * miniatures, 306 with the advisor off (doc/sizing.md), and the limit
 * holds that to bpext.sizing_samples_per_second references a second.
 * Now and then, with the lock held, the stamps are renumbered (every
 * `capacity` sampled references, linear in the entries) or the threshold
 * is lowered (linear too, rings rebuilt included).  Nothing here
 * allocates, raises an error, or waits for anything but that lock.  The worker's sweep of shared buffers takes
 * each buffer's header spinlock for a tag copy and hashes it: NBuffers a
 * second while the stack changes (none on an idle server), plus each
 * buffer the clock hand passes once, at most 256k buffers a round each,
 * about a millisecond per 100k buffers, off every backend's path.  The
 * sampled pages it finds count against the limit too, and so, while the
 * tier admits, do the sampled pages the push takes (bpext_sizing_pushed,
 * counted a second time where the sweep saw them too): while the hand
 * moves, the rate is at most about the limit over NBuffers, and the
 * sample then holds about as many pages as the limit, since shared
 * buffers alone are that many pages touched.
 *
 * Locking protocol.
 *	- threshold is an atomic, read without a lock by every miss; it is
 *	  written only under the lock (lowered, or reset).  A reader that saw
 *	  an old, higher value re-checks under the lock and drops the page.
 *	- Everything else (entries, hash chains, stamps, Fenwick tree,
 *	  histogram, window start, the miniatures) is read and written under
 *	  the lock, by the sampled path, the worker's sweep and its push
 *	  (bpext_sizing_pushed), the views and bpext_sizing_reset().  It is
 *	  the last lock taken: nothing is acquired under it.
 *	- The sweep reads a buffer's tag under its header spinlock and lets go
 *	  before it takes the advisor's lock; a tag out of date by then only
 *	  dates one sampled page a little late or early.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/pg_bitutils.h"
#include "storage/buf_internals.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "evict_push.h"
#include "helper_io.h"
#include "settings.h"
#include "sizing.h"
#include "sizing_mini.h"
#include "sql_api.h"
#include "tier_control.h"
#include "tier_map.h"

PG_FUNCTION_INFO_V1(bpext_sizing_1_3);
PG_FUNCTION_INFO_V1(bpext_sizing_window_1_3);
PG_FUNCTION_INFO_V1(bpext_sizing_reset);

#define SIZING_NONE			PG_UINT32_MAX

/* held_from of a page whose current image no tier would hold. */
#define HELD_NOWHERE		1e30

/*
 * Histogram of scaled reuse distances, in pages: exact below 16, then 16
 * buckets per power of two (6% wide), up to 2^52 pages.
 */
#define SIZING_SUB_BITS		4
#define SIZING_SUB			(1 << SIZING_SUB_BITS)
#define SIZING_MAX_LOG2		52
#define SIZING_NBUCKETS		(SIZING_SUB + (SIZING_MAX_LOG2 - SIZING_SUB_BITS) * SIZING_SUB)

/* Rows of bpext_sizing: a doubling series cannot have more. */
#define SIZING_MAX_ROWS		128

/*
 * Shared memory per sampled page: entry, bucket, stamp owner and tree, and
 * the miniatures' words, rings and scratch (sizing_mini.c).
 */
#define SIZING_BYTES_PER_ENTRY	(sizeof(SizingEntry) + 2 * sizeof(uint32) + \
								 2 * 2 * sizeof(uint32) + 5 * sizeof(uint32))

typedef struct SizingEntry
{
	BpextRelFile rfile;
	int32		fork;
	BlockNumber block;
	uint32		hash;
	uint32		stamp;			/* time of last reference, 1-based */
	uint32		next;			/* hash chain, or free list */
	float		held_from;		/* a union of more pages holds its current
								 * image (HELD_NOWHERE: none does) */
} SizingEntry;

typedef struct SizingShared
{
	/* Read by every miss: on a cache line of its own. */
	union
	{
		pg_atomic_uint32 value;
		char		pad[PG_CACHE_LINE_SIZE];
	}			threshold;

	/* Everything below is under lock. */
	LWLock	   *lock;
	uint32		capacity;		/* entries */
	uint32		nstamps;		/* 2 * capacity */
	uint32		nbuckets;		/* power of two */
	uint32		nentries;
	uint32		free_head;
	uint32		next_stamp;		/* 1-based */
	TimestampTz window_start;
	uint64		sampled_misses;
	uint64		sampled_writes;
	uint64		threshold_cuts;
	uint64		budget_start;	/* when the sampled references below began
								 * (bpext_monotonic_ms) */
	uint32		budget_used;	/* sampled references since budget_start */
	double		miss_weight;	/* estimated misses since window_start */
	double		cold_weight;	/* of which first references */
	double		histogram[SIZING_NBUCKETS];
	double		overlap_visits; /* buffers the timed sweep visited */
	double		overlap_histogram[SIZING_NBUCKETS]; /* by held_from */

	uint32	   *buckets;
	uint32	   *owner;			/* stamp -> entry, SIZING_NONE if none */
	uint32	   *tree;			/* Fenwick tree over stamps 1..nstamps */
	SizingEntry *entries;
	SizingMini *mini;			/* the tier's CLOCK at the series' sizes */
} SizingShared;

pg_atomic_uint32 *BpextSizingThreshold = NULL;
pg_atomic_uint32 *BpextSizingCounter = NULL;

static SizingShared *Sizing = NULL;

static uint32
sizing_capacity(void)
{
	return (uint32) Min((uint64) bpext_sizing_memory_kb * 1024 / SIZING_BYTES_PER_ENTRY,
						(uint64) PG_INT32_MAX / 4);
}

static uint32
sizing_nbuckets(uint32 capacity)
{
	return (uint32) pg_nextpower2_32(Max(capacity, 16));
}

Size
bpext_sizing_shmem_size(void)
{
	uint32		capacity = sizing_capacity();
	Size		size;

	if (capacity == 0)
		return 0;
	size = MAXALIGN(sizeof(SizingShared));
	size = add_size(size, MAXALIGN(mul_size(sizing_nbuckets(capacity), sizeof(uint32))));
	size = add_size(size, MAXALIGN(mul_size((Size) 2 * capacity + 1, sizeof(uint32))));
	size = add_size(size, MAXALIGN(mul_size((Size) 2 * capacity + 1, sizeof(uint32))));
	size = add_size(size, MAXALIGN(mul_size(capacity, sizeof(SizingEntry))));
	size = add_size(size, MAXALIGN(mul_size(SIZING_COUNTER_REGISTERS,
											sizeof(pg_atomic_uint32))));
	size = add_size(size, sizing_mini_shmem_size(capacity));
	return size;
}

/* The threshold that samples a fraction rate of all pages. */
static uint32
rate_threshold(double rate)
{
	double		t = rate * 4294967296.0 - 1.0;

	if (t >= (double) PG_UINT32_MAX)
		return PG_UINT32_MAX;
	if (t < 0)
		return 0;
	return (uint32) t;
}

static double
threshold_weight(uint32 threshold)
{
	return 4294967296.0 / ((double) threshold + 1.0);
}

/* Empty the advisor: caller holds the lock exclusive, or is the postmaster. */
static void
sizing_clear(void)
{
	uint32		i;

	memset(Sizing->buckets, 0xFF, sizeof(uint32) * Sizing->nbuckets);
	memset(Sizing->owner, 0xFF, sizeof(uint32) * (Sizing->nstamps + 1));
	memset(Sizing->tree, 0, sizeof(uint32) * (Sizing->nstamps + 1));
	for (i = 0; i < Sizing->capacity; i++)
		Sizing->entries[i].next = (i + 1 < Sizing->capacity) ? i + 1 : SIZING_NONE;
	Sizing->free_head = 0;
	Sizing->nentries = 0;
	Sizing->next_stamp = 1;
	Sizing->sampled_misses = 0;
	Sizing->sampled_writes = 0;
	Sizing->threshold_cuts = 0;
	Sizing->budget_used = 0;
	Sizing->miss_weight = 0;
	Sizing->cold_weight = 0;
	memset(Sizing->histogram, 0, sizeof(Sizing->histogram));
	Sizing->overlap_visits = 0;
	memset(Sizing->overlap_histogram, 0, sizeof(Sizing->overlap_histogram));
	for (i = 0; i < SIZING_COUNTER_REGISTERS; i++)
		pg_atomic_write_u32(&BpextSizingCounter[i], 0);
	Sizing->window_start = GetCurrentTimestamp();
	Sizing->budget_start = bpext_monotonic_ms();
	pg_atomic_write_u32(&Sizing->threshold.value,
						rate_threshold(bpext_sizing_sample_rate));
	sizing_mini_clear(Sizing->mini,
					  1.0 / threshold_weight(pg_atomic_read_u32(&Sizing->threshold.value)));
}

void
bpext_sizing_shmem_init(bool found)
{
	uint32		capacity = sizing_capacity();
	char	   *p;
	int			i;

	if (capacity == 0)
		return;
	p = ShmemInitStruct("bpext sizing", bpext_sizing_shmem_size(), &found);
	Sizing = (SizingShared *) p;
	BpextSizingThreshold = &Sizing->threshold.value;
	p += MAXALIGN(sizeof(SizingShared));
	BpextSizingCounter = (pg_atomic_uint32 *) p;
	p += MAXALIGN(sizeof(pg_atomic_uint32) * SIZING_COUNTER_REGISTERS);
	if (found)
		return;

	memset(Sizing, 0, sizeof(SizingShared));
	pg_atomic_init_u32(&Sizing->threshold.value, 0);
	Sizing->lock = &(GetNamedLWLockTranche("bpext sizing"))->lock;
	Sizing->capacity = capacity;
	Sizing->nstamps = 2 * capacity;
	Sizing->nbuckets = sizing_nbuckets(capacity);
	Sizing->buckets = (uint32 *) p;
	p += MAXALIGN(sizeof(uint32) * Sizing->nbuckets);
	Sizing->owner = (uint32 *) p;
	p += MAXALIGN(sizeof(uint32) * (Sizing->nstamps + 1));
	Sizing->tree = (uint32 *) p;
	p += MAXALIGN(sizeof(uint32) * (Sizing->nstamps + 1));
	Sizing->entries = (SizingEntry *) p;
	p += MAXALIGN(sizeof(SizingEntry) * capacity);
	Sizing->mini = sizing_mini_init(p, capacity);
	for (i = 0; i < SIZING_COUNTER_REGISTERS; i++)
		pg_atomic_init_u32(&BpextSizingCounter[i], 0);
	sizing_clear();
}

/* ---------------------------------------------------------------------
 * The stack of sampled pages (all under the lock)
 * ---------------------------------------------------------------------
 */

static inline void
tree_add(uint32 stamp, int delta)
{
	for (; stamp <= Sizing->nstamps; stamp += stamp & (~stamp + 1))
		Sizing->tree[stamp] += delta;
}

/* Live stamps at or before stamp. */
static inline uint32
tree_prefix(uint32 stamp)
{
	uint32		sum = 0;

	for (; stamp > 0; stamp -= stamp & (~stamp + 1))
		sum += Sizing->tree[stamp];
	return sum;
}

/* Rebuild the tree from the owners, in linear time. */
static void
tree_rebuild(void)
{
	uint32		n = Sizing->nstamps;
	uint32		i;

	for (i = 1; i <= n; i++)
		Sizing->tree[i] = Sizing->owner[i] != SIZING_NONE ? 1 : 0;
	for (i = 1; i <= n; i++)
	{
		uint32		j = i + (i & (~i + 1));

		if (j <= n)
			Sizing->tree[j] += Sizing->tree[i];
	}
}

/* Renumber the live stamps 1..nentries, keeping their order. */
static void
stamps_compact(void)
{
	uint32		old;
	uint32		next = 1;

	for (old = 1; old < Sizing->next_stamp; old++)
	{
		uint32		e = Sizing->owner[old];

		if (e == SIZING_NONE)
			continue;
		Sizing->owner[old] = SIZING_NONE;
		Sizing->owner[next] = e;
		Sizing->entries[e].stamp = next;
		next++;
	}
	Sizing->next_stamp = next;
	tree_rebuild();
}

/*
 * Lower the threshold to threshold and drop the pages now above it
 * (SHARDS-adj).
 */
static void
threshold_lower(uint32 threshold)
{
	uint32		b;

	pg_atomic_write_u32(&Sizing->threshold.value, threshold);
	Sizing->threshold_cuts++;

	for (b = 0; b < Sizing->nbuckets; b++)
	{
		uint32	   *link = &Sizing->buckets[b];

		while (*link != SIZING_NONE)
		{
			uint32		e = *link;
			SizingEntry *entry = &Sizing->entries[e];

			if (entry->hash <= threshold)
			{
				link = &entry->next;
				continue;
			}
			*link = entry->next;
			Sizing->owner[entry->stamp] = SIZING_NONE;
			entry->next = Sizing->free_head;
			Sizing->free_head = e;
			Sizing->nentries--;
			sizing_mini_forget(Sizing->mini, e);
		}
	}
	tree_rebuild();
	sizing_mini_rate_lowered(Sizing->mini, 1.0 / threshold_weight(threshold));
}

/* Lower the threshold by an eighth: the sample no longer fits. */
static void
threshold_cut(void)
{
	uint32		threshold = pg_atomic_read_u32(&Sizing->threshold.value);

	threshold_lower(threshold - (threshold / 8 + 1));
}

/*
 * Count n references to sampled pages (misses, writes, pages the worker
 * finds in shared buffers or pushes) against bpext.sizing_samples_per_second,
 * and lower the rate if they came faster: to what would have taken a
 * second for them, less an eighth, so that the rate settles under the
 * limit rather than on it, but to no less than half at a time, so that a
 * burst (the first misses after a reset, all of them new pages) does not
 * leave the rate far below what the steady stream allows; a stream far
 * over the limit halves it every limit's worth of references until it
 * fits.  The rate is never raised again in a window: a window's rate is
 * what its fastest stretch allowed.  Each reference takes the advisor's
 * lock and walks its tree, about a microsecond: the limit bounds the
 * advisor's cost, and keeps its lock free most of the time, whatever the
 * miss rate.  The clock (monotonic) is read once per limit's worth of
 * references.
 */
static void
budget_spend(uint32 n)
{
	uint64		now;
	double		elapsed;
	uint32		threshold;

	if (bpext_sizing_samples_per_second <= 0)
		return;
	Sizing->budget_used += n;
	if (Sizing->budget_used < (uint32) bpext_sizing_samples_per_second)
		return;
	now = bpext_monotonic_ms();
	elapsed = (now - Sizing->budget_start) / 1000.0;
	Sizing->budget_start = now;
	Sizing->budget_used = 0;
	if (elapsed >= 1.0)
		return;
	threshold = pg_atomic_read_u32(&Sizing->threshold.value);
	if (threshold > 0)
		threshold_lower((uint32) (threshold * Max(elapsed * 7 / 8, 0.5)));
}

static inline bool
entry_matches(const SizingEntry *entry, const BpextRelFile *rfile,
			  ForkNumber fork, BlockNumber block)
{
	return entry->block == block && entry->fork == (int32) fork &&
		BPEXT_RELFILE_EQUAL(entry->rfile, *rfile);
}

/* The entry of a sampled page, or NULL.  Under the lock. */
static SizingEntry *
find_entry(const BpextRelFile *rfile, ForkNumber fork, BlockNumber block,
		   uint32 hash)
{
	uint32		e;

	for (e = Sizing->buckets[hash & (Sizing->nbuckets - 1)]; e != SIZING_NONE;
		 e = Sizing->entries[e].next)
	{
		if (entry_matches(&Sizing->entries[e], rfile, fork, block))
			return &Sizing->entries[e];
	}
	return NULL;
}

/* The histogram bucket of a scaled distance, and the bounds of a bucket. */
static int
distance_bucket(double distance)
{
	uint64		v;
	int			e;

	if (distance >= ldexp(1.0, SIZING_MAX_LOG2))
		return SIZING_NBUCKETS - 1;
	v = (uint64) distance;
	if (v < SIZING_SUB)
		return (int) v;
	e = pg_leftmost_one_pos64(v);
	return SIZING_SUB + (e - SIZING_SUB_BITS) * SIZING_SUB +
		(int) ((v >> (e - SIZING_SUB_BITS)) & (SIZING_SUB - 1));
}

static void
bucket_bounds(int bucket, double *lo, double *width)
{
	int			e;
	int			sub;

	if (bucket < SIZING_SUB)
	{
		*lo = bucket;
		*width = 1;
		return;
	}
	e = SIZING_SUB_BITS + (bucket - SIZING_SUB) / SIZING_SUB;
	sub = (bucket - SIZING_SUB) % SIZING_SUB;
	*lo = ldexp((double) (SIZING_SUB + sub), e - SIZING_SUB_BITS);
	*width = ldexp(1.0, e - SIZING_SUB_BITS);
}

/*
 * Give a sampled page the newest stamp: entry is its entry, or NULL to take
 * a free one (the caller has made sure there is one).  Returns the entry.
 * Under the lock.
 */
static SizingEntry *
move_to_top(SizingEntry *entry, const BpextRelFile *rfile, ForkNumber fork,
			BlockNumber block, uint32 hash)
{
	uint32		e;

	if (entry == NULL)
	{
		uint32		bucket = hash & (Sizing->nbuckets - 1);

		e = Sizing->free_head;
		entry = &Sizing->entries[e];
		Sizing->free_head = entry->next;
		entry->rfile = *rfile;
		entry->fork = (int32) fork;
		entry->block = block;
		entry->hash = hash;
		entry->held_from = HELD_NOWHERE;
		entry->next = Sizing->buckets[bucket];
		Sizing->buckets[bucket] = e;
		Sizing->nentries++;
	}
	else
	{
		e = (uint32) (entry - Sizing->entries);
		Sizing->owner[entry->stamp] = SIZING_NONE;
		tree_add(entry->stamp, -1);
	}

	if (Sizing->next_stamp > Sizing->nstamps)
		stamps_compact();
	entry->stamp = Sizing->next_stamp++;
	Sizing->owner[entry->stamp] = e;
	tree_add(entry->stamp, 1);
	return entry;
}

/*
 * A sampled page was referenced: count the miss at its distance, then move
 * the page to the top of the stack.  See the file header for the model.
 */
void
bpext_sizing_sampled(const BpextRelFile *rfile, ForkNumber fork,
					 BlockNumber block, uint32 hash, bool miss)
{
	SizingEntry *entry;
	double		weight;
	double		held_from;

	/* LWLocks need a PGPROC; only the postmaster lacks one, and reads none. */
	if (MyProc == NULL || Sizing == NULL)
		return;

	LWLockAcquire(Sizing->lock, LW_EXCLUSIVE);

	entry = find_entry(rfile, fork, block, hash);

	/* A new page, and no room: sample less. */
	while (entry == NULL && Sizing->free_head == SIZING_NONE &&
		   pg_atomic_read_u32(&Sizing->threshold.value) > 0)
		threshold_cut();
	if (entry == NULL && Sizing->free_head == SIZING_NONE)
	{
		LWLockRelease(Sizing->lock);
		return;
	}
	if (hash > pg_atomic_read_u32(&Sizing->threshold.value))
	{
		/* Not (or no longer) sampled. */
		LWLockRelease(Sizing->lock);
		return;
	}
	weight = threshold_weight(pg_atomic_read_u32(&Sizing->threshold.value));

	if (miss)
	{
		Sizing->sampled_misses++;
		Sizing->miss_weight += weight;
		if (entry == NULL)
		{
			Sizing->cold_weight += weight;
			held_from = HELD_NOWHERE;
		}
		else
		{
			/* Sampled pages referenced since: live stamps after ours. */
			uint32		since = Sizing->nentries - tree_prefix(entry->stamp);

			held_from = since * weight;
			Sizing->histogram[distance_bucket(held_from)] += weight;
			sizing_mini_lookup(Sizing->mini, (uint32) (entry - Sizing->entries),
							   weight);
		}
	}
	else
	{
		Sizing->sampled_writes++;
		/* A dual write stores the new image; invalidate drops the old. */
		held_from = bpext_write_policy == BPEXT_WRITE_DUAL ? 0 : HELD_NOWHERE;
	}

	entry = move_to_top(entry, rfile, fork, block, hash);
	entry->held_from = (float) Min(held_from, HELD_NOWHERE);
	if (miss && bpext_admission == BPEXT_ADMIT_READ)
		sizing_mini_admit(Sizing->mini, (uint32) (entry - Sizing->entries),
						  SIZING_MINI_READ);
	else if (!miss && bpext_write_policy == BPEXT_WRITE_DUAL)
		sizing_mini_admit(Sizing->mini, (uint32) (entry - Sizing->entries),
						  SIZING_MINI_STORE);
	else if (!miss)
		sizing_mini_invalidate(Sizing->mini, (uint32) (entry - Sizing->entries));
	budget_spend(1);
	LWLockRelease(Sizing->lock);
}

/*
 * Shared buffers, seen by the bpext worker.  A sampled page found in
 * shared buffers is moved to the top of the stack, as a write moves it,
 * without counting a miss: the tier would receive it when it leaves
 * shared buffers, so its next miss must be measured from about then, not
 * from the miss that brought it in.  Without this, a page that stays long
 * in shared buffers (an index's inner pages, a hot leaf) looks as if the
 * tier had to keep it for all that time, and the curve is low at small
 * tiers.
 *
 * Two sightings date a page.  The buffers just ahead of the clock hand
 * are the ones about to leave (the push looks there for the same reason,
 * evict_push.c): each position is visited once per lap of the hand, as
 * the hand comes near, so a page that leaves is dated at most one
 * window's worth of evictions early.  A sweep paced by time alone (a pass
 * a second) dates a page up to a second early, and a second of misses is
 * a long distance where shared buffers turn over many times a second
 * (the bench's 16 MB turn over some 18 times a second): a page hot
 * enough to stay in shared buffers for seconds was measured from up to
 * a second's misses before it left.  The window is the larger of a
 * quarter of shared buffers and twice what the hand moved since the last
 * call, so that the next call, if the hand keeps its speed, still finds
 * the pages it must see before they go.  The pass over all of shared
 * buffers stays, at one full pass per SIZING_SWEEP_MS: the hand can
 * outrun the worker (a burst of misses between two of its rounds), and
 * then a page is dated by its last sight in that pass, at most a pass
 * early.  Either visits at most SIZING_SWEEP_MAX buffers a call.  The
 * header spinlock is taken per buffer, to read its tag whole; the
 * advisor's lock once per batch of sampled pages.  While the hand stands
 * still and no sampled page is referenced (a miss served from the free
 * list, a read through a ring, a write), the stack does not change: one
 * whole pass after the last such change puts the pages in shared buffers
 * on top, where a later pass would put them again, so the passes stop
 * there until the hand moves or a sampled page is referenced (an idle
 * server with 32 GB of shared buffers would otherwise take four million
 * header locks a second).
 */
#define SIZING_SWEEP_MS		1000
#define SIZING_SWEEP_MAX	(256 * 1024)
#define SIZING_SWEEP_BATCH	64

typedef struct SizingSeen
{
	BpextRelFile rfile;
	ForkNumber	fork;
	BlockNumber block;
	uint32		hash;
	bool		departing;		/* the push would take it now */
} SizingSeen;

static void
touch_seen(const SizingSeen *seen, int nseen, bool timed, int visits)
{
	bool		tier_admitting = bpext_tier_enabled() && !bpext_admission_paused();
	double		weight;
	uint32		moved = 0;
	int			i;

	LWLockAcquire(Sizing->lock, LW_EXCLUSIVE);
	weight = threshold_weight(pg_atomic_read_u32(&Sizing->threshold.value));
	if (timed)
		Sizing->overlap_visits += visits;
	for (i = 0; i < nseen; i++)
	{
		SizingEntry *entry;

		if (seen[i].hash > pg_atomic_read_u32(&Sizing->threshold.value))
			continue;
		entry = find_entry(&seen[i].rfile, seen[i].fork, seen[i].block,
						   seen[i].hash);
		/* A page not yet in the sample is not worth a cut of the rate. */
		if (entry == NULL && Sizing->free_head == SIZING_NONE)
			continue;
		entry = move_to_top(entry, &seen[i].rfile, seen[i].fork,
							seen[i].block, seen[i].hash);
		if (seen[i].departing && !tier_admitting)
			sizing_mini_admit(Sizing->mini, (uint32) (entry - Sizing->entries),
							  SIZING_MINI_DEPARTURE);
		moved++;
		if (timed && entry->held_from < HELD_NOWHERE)
			Sizing->overlap_histogram[distance_bucket(entry->held_from)] += weight;
	}
	budget_spend(moved);
	LWLockRelease(Sizing->lock);
}

/*
 * The push took a page into the tier, or found the tier holding it as it
 * left shared buffers (evict_push.c).  While the tier admits, the
 * miniatures are fed these, its own admissions, and not the sweep's
 * sightings (touch_seen): where the worker falls behind the clock hand
 * and misses pushes, which moves what the tier serves, the miniatures
 * miss them too.  A page not yet in the sample joins it, as the sweep
 * would have put it there.  Called by the bpext worker only.
 */
void
bpext_sizing_pushed(const BpextRelFile *rfile, ForkNumber fork,
					BlockNumber block)
{
	uint32		hash;
	SizingEntry *entry;

	if (!bpext_sizing || Sizing == NULL)
		return;
	hash = bpext_sizing_hash(rfile, fork, block);
	if (hash > pg_atomic_read_u32(&Sizing->threshold.value))
		return;

	LWLockAcquire(Sizing->lock, LW_EXCLUSIVE);
	entry = find_entry(rfile, fork, block, hash);
	if (hash <= pg_atomic_read_u32(&Sizing->threshold.value) &&
		(entry != NULL || Sizing->free_head != SIZING_NONE))
	{
		if (entry == NULL)
			entry = move_to_top(NULL, rfile, fork, block, hash);
		sizing_mini_admit(Sizing->mini, (uint32) (entry - Sizing->entries),
						  SIZING_MINI_DEPARTURE);
		budget_spend(1);
	}
	LWLockRelease(Sizing->lock);
}

/*
 * Visit n buffers from position first on (positions wrap around shared
 * buffers) and date the sampled pages they hold.  Ahead of the clock hand
 * (not timed), a page the push would take, as evict_push.c's
 * is_clean_victim says, is leaving shared buffers for the miniatures.
 */
static void
visit_buffers(uint64 first, int n, bool timed)
{
	SizingSeen	seen[SIZING_SWEEP_BATCH];
	int			nseen = 0;
	int			i;

	for (i = 0; i < n; i++)
	{
		BufferDesc *desc = GetBufferDescriptor((int) ((first + i) % NBuffers));
		BpextBufState state;
		BufferTag	tag;
		bool		valid;
		uint64		hash64;

		state = LockBufHdr(desc);
		valid = (state & (BM_VALID | BM_TAG_VALID)) == (BM_VALID | BM_TAG_VALID);
		tag = desc->tag;
		bpext_unlock_buf_hdr(desc, state);
		if (!valid)
			continue;

		seen[nseen].departing = !timed &&
			(state & (BM_DIRTY | BM_IO_IN_PROGRESS | BM_IO_ERROR)) == 0 &&
			BUF_STATE_GET_REFCOUNT(state) == 0 &&
			BUF_STATE_GET_USAGECOUNT(state) == 0 &&
			BPEXT_BUFTAG_FORK(tag) == MAIN_FORKNUM;
		seen[nseen].rfile = BPEXT_BUFTAG_RELFILE(tag);
		seen[nseen].fork = BPEXT_BUFTAG_FORK(tag);
		seen[nseen].block = BPEXT_BUFTAG_BLOCK(tag);
		hash64 = bpext_sizing_hash64(&seen[nseen].rfile, seen[nseen].fork,
									 seen[nseen].block);
		bpext_sizing_count(hash64);
		seen[nseen].hash = (uint32) hash64;
		if (seen[nseen].hash > pg_atomic_read_u32(&Sizing->threshold.value))
			continue;
		if (++nseen == SIZING_SWEEP_BATCH)
		{
			touch_seen(seen, nseen, timed, 0);
			nseen = 0;
		}
	}
	/* The visits are counted with the last batch, seen or not. */
	if (nseen > 0 || timed)
		touch_seen(seen, nseen, timed, n);
}

/*
 * The buffers ahead of the clock hand not visited since it last came.
 * Returns whether the hand has moved since the last call.
 */
static bool
sweep_ahead_of_hand(void)
{
	static uint64 visited_until = 0;
	static uint64 last_hand = 0;
	uint64		hand;
	uint64		moved;
	uint64		window;
	uint64		first;
	uint64		end;

	hand = bpext_clock_hand_position();
	moved = last_hand == 0 ? 0 : hand - Min(last_hand, hand);
	last_hand = hand;
	window = Min((uint64) NBuffers, Max((uint64) Max(NBuffers / 4, 1), 2 * moved));
	first = Max(visited_until, hand);
	end = Min(hand + window, first + SIZING_SWEEP_MAX);
	if (end > first)
	{
		visit_buffers(first, (int) (end - first), false);
		visited_until = end;
	}
	return moved > 0;
}

void
bpext_sizing_sweep_shared_buffers(void)
{
	static uint64 next_buffer = 0;
	static TimestampTz last_sweep = 0;
	static uint64 visited_while_still = 0;	/* by the pass, since the
											 * hand last moved */
	static uint64 references_seen = 0;	/* sampled misses and writes then */
	uint64		references;
	TimestampTz now;
	long		secs;
	int			usecs;
	double		share;
	int			nvisit;

	if (!bpext_sizing || Sizing == NULL)
		return;

	/* Read without the lock: a stale sum only delays a pass by a round. */
	references = Sizing->sampled_misses + Sizing->sampled_writes;
	if (sweep_ahead_of_hand() || references != references_seen)
		visited_while_still = 0;
	references_seen = references;

	now = GetCurrentTimestamp();
	if (visited_while_still >= (uint64) NBuffers)
	{
		/* A whole pass since the stack last changed: nothing to redo. */
		last_sweep = now;
		return;
	}
	if (last_sweep == 0)
		share = 1.0;
	else
	{
		TimestampDifference(last_sweep, now, &secs, &usecs);
		share = (secs * 1000.0 + usecs / 1000.0) / SIZING_SWEEP_MS;
	}
	nvisit = (int) Min(Min(share, 1.0) * NBuffers, (double) SIZING_SWEEP_MAX);
	if (nvisit < 1)
		return;
	last_sweep = now;
	visited_while_still += nvisit;
	visit_buffers(next_buffer, nvisit, true);
	next_buffer = (next_buffer + nvisit) % NBuffers;
}

/* ---------------------------------------------------------------------
 * SQL interface
 * ---------------------------------------------------------------------
 */

typedef struct SizingSnapshot
{
	TimestampTz window_start;
	double		seconds;
	double		miss_weight;
	double		cold_weight;
	double		rate;
	uint64		sampled_misses;
	uint64		sampled_writes;
	uint64		threshold_cuts;
	uint32		nentries;
	uint32		capacity;
	double		histogram[SIZING_NBUCKETS];
	double		overlap_visits;
	double		overlap_histogram[SIZING_NBUCKETS];
	double		footprint;		/* pages touched in the window */
	double		scale;			/* the sample's footprint over that */
	SizingMiniSnapshot mini;
	/* The miniatures' hit ratios less the stack's, where they say. */
	int			ncorrections;
	double		correction_pages[SIZING_MINI_SIZES];
	double		correction[SIZING_MINI_SIZES];
} SizingSnapshot;

static void snapshot_corrections(SizingSnapshot *snap);

static void
sizing_require(void)
{
	bpext_require_preloaded();
	if (Sizing == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the bpext sizing advisor is off"),
				 errdetail("bpext.sizing_memory is 0, so no shared memory was reserved for it."),
				 errhint("Set bpext.sizing_memory and restart the server.")));
}

/*
 * The page counter's estimate of the pages the window touched
 * (HyperLogLog, Flajolet et al. 2007, with its small- and large-range
 * corrections for a 32-bit hash): its relative error is about 1.04 /
 * sqrt(registers), 0.8%, whatever the rate.  Read without the lock: a
 * register raised meanwhile moves the estimate by a page or so.
 */
static double
counted_pages(void)
{
	double		m = SIZING_COUNTER_REGISTERS;
	double		sum = 0;
	int			zeros = 0;
	double		estimate;
	int			i;

	for (i = 0; i < SIZING_COUNTER_REGISTERS; i++)
	{
		uint32		rank = pg_atomic_read_u32(&BpextSizingCounter[i]);

		sum += ldexp(1.0, -(int) rank);
		if (rank == 0)
			zeros++;
	}
	estimate = 0.7213 / (1.0 + 1.079 / m) * m * m / sum;
	if (estimate <= 2.5 * m && zeros > 0)
		estimate = m * log(m / zeros);
	else if (estimate > 4294967296.0 / 30.0)
		estimate = -4294967296.0 * log(1.0 - estimate / 4294967296.0);
	return estimate;
}

static void
sizing_snapshot(SizingSnapshot *snap)
{
	long		secs;
	int			usecs;

	LWLockAcquire(Sizing->lock, LW_SHARED);
	snap->window_start = Sizing->window_start;
	snap->miss_weight = Sizing->miss_weight;
	snap->cold_weight = Sizing->cold_weight;
	snap->rate = 1.0 / threshold_weight(pg_atomic_read_u32(&Sizing->threshold.value));
	snap->sampled_misses = Sizing->sampled_misses;
	snap->sampled_writes = Sizing->sampled_writes;
	snap->threshold_cuts = Sizing->threshold_cuts;
	snap->nentries = Sizing->nentries;
	snap->capacity = Sizing->capacity;
	memcpy(snap->histogram, Sizing->histogram, sizeof(snap->histogram));
	snap->overlap_visits = Sizing->overlap_visits;
	memcpy(snap->overlap_histogram, Sizing->overlap_histogram,
		   sizeof(snap->overlap_histogram));
	sizing_mini_snapshot(Sizing->mini, &snap->mini);
	LWLockRelease(Sizing->lock);

	TimestampDifference(snap->window_start, GetCurrentTimestamp(), &secs, &usecs);
	snap->seconds = secs + usecs / 1000000.0;

	/*
	 * A distance is a count of sampled pages divided by the rate, and so
	 * is the sample's footprint: if the sample happens to hold 12% more
	 * pages than the rate says (by the luck of the hash: one standard
	 * deviation is 1 / sqrt(sampled pages), 7% for 200), every distance
	 * is 12% long, the whole curve is stretched to the right, and the
	 * same data is stretched the same way every time.  The page counter
	 * measures the footprint directly; the distances are divided by the
	 * ratio of the two.  Past SIZING_COUNTER_REGISTERS sampled pages the
	 * sample is the better estimate (its error is below the counter's),
	 * and with every page sampled it is exact: no correction then.
	 */
	snap->footprint = snap->nentries / snap->rate;
	snap->scale = 1.0;
	if (snap->rate < 1.0 && snap->nentries < SIZING_COUNTER_REGISTERS)
	{
		double		counted = counted_pages();

		if (counted > 0)
		{
			if (snap->nentries > 0)
				snap->scale = snap->footprint / counted;
			snap->footprint = counted;
		}
	}
	snapshot_corrections(snap);
}

/* The weight of a histogram below pages (a bucket split pro rata). */
static double
weight_below(const double *histogram, double pages)
{
	double		weight = 0;
	int			b;

	for (b = 0; b < SIZING_NBUCKETS; b++)
	{
		double		lo,
					width;

		if (histogram[b] == 0)
			continue;
		bucket_bounds(b, &lo, &width);
		if (lo + width <= pages)
			weight += histogram[b];
		else if (lo < pages)
			weight += histogram[b] * (pages - lo) / width;
	}
	return weight;
}

/* The stack's answer: the fraction of misses whose distance is below pages. */
static double
hit_ratio_at(const SizingSnapshot *snap, double pages)
{
	if (snap->miss_weight <= 0)
		return 0;
	return Min(weight_below(snap->histogram, pages * snap->scale) /
			   snap->miss_weight, 1.0);
}

/*
 * The pages shared buffers and a tier holding `held` pages of the stack
 * would hold both: the sampled pages the timed sweep saw in shared
 * buffers whose image such a tier held (held_from below it), per full
 * pass, scaled by the rate.  A page read from its data file, and one that
 * has stayed in shared buffers since before the window, is not in the
 * tier; one the tier served is, and so is one dual-written since it came.
 */
static double
overlap_at(const SizingSnapshot *snap, double held)
{
	if (snap->overlap_visits <= 0)
		return 0;
	return Min(weight_below(snap->overlap_histogram, held * snap->scale) /
			   snap->scale * NBuffers / snap->overlap_visits, (double) NBuffers);
}

/*
 * The stack's estimate of the fraction of the misses an LRU tier of
 * tier_pages pages would serve.  The stack holds shared buffers' pages too
 * (the sweep keeps them at its top), so a missed page is still held, by
 * shared buffers or by the tier, when it is among the last tier_pages +
 * NBuffers - x distinct pages seen, where x is the pages both hold.  x is
 * measured, not assumed: it is overlap_at() of that same union size (a page is in both when the
 * tier served it, which it does when its distance was below the union),
 * so x solves x = overlap_at(tier_pages + NBuffers - x); the right-hand
 * side falls as x grows, so there is one x, found by bisection.  (Taking
 * x as the hit ratio's share of shared buffers, as this did before,
 * counted the pages that stay in shared buffers for the whole window as
 * held twice too, and the curve was low by 2 to 7 points at small tiers.)
 */
static double
lru_tier_hit_ratio(const SizingSnapshot *snap, double tier_pages)
{
	double		lo = 0;
	double		hi = NBuffers;
	int			i;

	for (i = 0; i < 30; i++)
	{
		double		x = (lo + hi) / 2;

		if (overlap_at(snap, tier_pages + NBuffers - x) > x)
			lo = x;
		else
			hi = x;
	}
	return hit_ratio_at(snap, tier_pages + NBuffers - hi);
}

/*
 * Where the miniatures (sizing_mini.c) say what the tier's CLOCK would
 * serve, the difference from the stack's LRU answer at the same size.  A
 * miniature of a size scaled by the rate holds that share of the sampled
 * pages; when the sample holds more or fewer pages than the rate says
 * (scale), that share of the true footprint is a tier of its size over
 * scale.
 */
static void
snapshot_corrections(SizingSnapshot *snap)
{
	int			k;

	snap->ncorrections = 0;
	if (snap->miss_weight <= 0)
		return;
	for (k = 0; k < SIZING_MINI_SIZES; k++)
	{
		double		pages = snap->mini.pages[k] / snap->scale;
		int			n = snap->ncorrections;

		if (!snap->mini.modelled[k])
			continue;
		snap->correction_pages[n] = pages;
		snap->correction[n] = snap->mini.hit_weight[k] / snap->miss_weight -
			lru_tier_hit_ratio(snap, pages);
		snap->ncorrections++;
	}
}

/*
 * Estimated fraction of the misses a tier of tier_pages pages would serve:
 * the stack's LRU answer, corrected by the miniatures' difference from it,
 * interpolated on the logarithm of the size between the two nearest
 * miniatures (above the largest, its own; below the smallest, its own
 * tapered to none at no pages).
 */
static double
tier_hit_ratio(const SizingSnapshot *snap, double tier_pages)
{
	double		ratio = lru_tier_hit_ratio(snap, tier_pages);
	double		correction;
	int			k;

	if (snap->ncorrections == 0)
		return ratio;
	/* The first miniature at or above tier_pages. */
	for (k = 0; k < snap->ncorrections &&
		 snap->correction_pages[k] < tier_pages; k++)
		;
	if (k == 0)
	{
		/*
		 * Below the smallest miniature (those smaller were too small to
		 * simulate), taper its correction off with the size: a tier of no
		 * pages serves nothing, whatever its policy.
		 */
		correction = snap->correction[0] *
			Min(tier_pages / snap->correction_pages[0], 1.0);
	}
	else if (k == snap->ncorrections)
		correction = snap->correction[k - 1];
	else
	{
		double		lo = log(snap->correction_pages[k - 1]);
		double		hi = log(snap->correction_pages[k]);
		double		at = (log(Max(tier_pages, 1.0)) - lo) / (hi - lo);

		correction = snap->correction[k - 1] +
			at * (snap->correction[k] - snap->correction[k - 1]);
	}
	return Min(Max(ratio + correction, 0.0), 1.0);
}

/* Shared memory the tier map would take for a tier of pages pages. */
static double
map_bytes_for(double pages)
{
	double		probe = Min(pages, (double) (PG_UINT32_MAX / 2));

	if (probe < 1)
		return 0;
	return (double) tier_map_shmem_size((uint32) probe) / probe * pages;
}

/*
 * bpext_sizing_1_3(): one row per tier size, a geometric series from an
 * eighth of shared_buffers up to 64 times the larger of the current tier
 * and the data the window has touched, plus the current tier's own size.
 */
Datum
bpext_sizing_1_3(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SizingSnapshot *snap;
	double		sizes[SIZING_MAX_ROWS];
	int			nsizes = 0;
	double		tier_pages;
	double		footprint;
	double		upper;
	double		pages;
	double		misses_per_second;
	double		ratio = 0;
	int			i;

	sizing_require();
	InitMaterializedSRF(fcinfo, 0);

	snap = palloc(sizeof(SizingSnapshot));
	sizing_snapshot(snap);

	tier_pages = pg_atomic_read_u32(&BpextCtl->active_slots);
	footprint = snap->footprint;
	upper = 64.0 * Max(Max(tier_pages, footprint), (double) NBuffers);
	misses_per_second = snap->seconds > 0 ? snap->miss_weight / snap->seconds : 0;

	/* The series, with the current tier's size in its place. */
	for (pages = Max(NBuffers / 8, 1); pages <= upper && nsizes < SIZING_MAX_ROWS - 1;
		 pages *= 2)
	{
		if (tier_pages > 0 && tier_pages < pages &&
			(nsizes == 0 || sizes[nsizes - 1] < tier_pages))
			sizes[nsizes++] = tier_pages;
		sizes[nsizes++] = pages;
	}

	for (i = 0; i < nsizes; i++)
	{
		Datum		values[5];
		bool		nulls[5] = {0};

		/*
		 * A larger tier serves at least what a smaller one does; the
		 * miniatures' sampling noise must not say otherwise.
		 */
		ratio = Max(tier_hit_ratio(snap, sizes[i]), ratio);

		values[0] = Int64GetDatum((int64) sizes[i]);
		values[1] = Int64GetDatum((int64) sizes[i] * BLCKSZ);
		values[2] = Float8GetDatum(ratio);
		values[3] = Float8GetDatum(ratio * misses_per_second);
		values[4] = Int64GetDatum((int64) map_bytes_for(sizes[i]));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* bpext_sizing_window_1_3(): what the curve is made of. */
Datum
bpext_sizing_window_1_3(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SizingSnapshot *snap;
	Datum		values[10];
	bool		nulls[10] = {0};

	sizing_require();
	InitMaterializedSRF(fcinfo, 0);

	snap = palloc(sizeof(SizingSnapshot));
	sizing_snapshot(snap);

	values[0] = TimestampTzGetDatum(snap->window_start);
	values[1] = Float8GetDatum(snap->seconds);
	values[2] = Float8GetDatum(snap->miss_weight);
	if (snap->seconds > 0)
		values[3] = Float8GetDatum(snap->miss_weight / snap->seconds);
	else
		nulls[3] = true;
	if (snap->miss_weight > 0)
		values[4] = Float8GetDatum(snap->cold_weight / snap->miss_weight);
	else
		nulls[4] = true;
	values[5] = Int64GetDatum((int64) snap->footprint);
	values[6] = Float8GetDatum(snap->rate);
	values[7] = Int64GetDatum((int64) snap->sampled_misses);
	values[8] = Int64GetDatum((int64) snap->nentries);
	values[9] = Int64GetDatum((int64) snap->capacity);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}

/* bpext_sizing_reset(): start a new window (superusers only, by GRANT). */
Datum
bpext_sizing_reset(PG_FUNCTION_ARGS)
{
	sizing_require();
	LWLockAcquire(Sizing->lock, LW_EXCLUSIVE);
	sizing_clear();
	LWLockRelease(Sizing->lock);
	PG_RETURN_VOID();
}

/*-------------------------------------------------------------------------
 *
 * sizing_mini.c
 *	  Miniature simulations of the tier (Waldspurger et al., "Cache
 *	  Modeling and Optimization using Miniature Simulations", USENIX ATC
 *	  2017), so that the sizing curve follows the tier's replacement
 *	  rather than LRU.
 *
 * The advisor's stack distances (sizing.c) give the hit ratio of an LRU
 * tier at every size at once.  The tier is not LRU: it is a CLOCK whose
 * pages enter at usage count 1 and gain one, up to 3, at each hit and
 * each time they leave shared buffers again while the tier holds them
 * (tier_map_slots.c, evict_push.c).  Pages read often (B-tree leaves)
 * keep their place longer than under LRU, and the tier serves one to
 * three points more misses at small sizes than the stack says
 * (test/bench/tier_policy_sim.py).  CLOCK has no stack property, so its
 * curve cannot be read off one structure; but run on the sampled pages
 * only, at its size times the sampling rate, it behaves as the whole
 * tier does on all pages, as SHARDS's stack does for LRU.  Here that
 * CLOCK runs at SIZING_MINI_SIZES sizes, the tier sizes of bpext_sizing's
 * series (NBuffers / 8 pages, doubling), and counts the sampled misses
 * each one would serve; sizing.c corrects the stack's curve by the
 * difference between the two at these sizes.
 *
 * What a miniature is fed, by sizing.c: a sampled miss looks the page up
 * (a hit adds a usage count); a page leaving shared buffers is admitted
 * (a page held gains a count); a data-file write stores the page under
 * dual_write, and makes it stale under invalidate; under admission = read
 * a miss admits it.  Pages leave shared buffers where the push takes
 * them: while the tier admits, the push reports what it took
 * (bpext_sizing_pushed), so that the pushes it misses when the worker
 * falls behind the clock hand are missed here too; otherwise (the tier
 * off, or paused) the worker's sweep reports the pages it finds just
 * ahead of the hand, clean, unpinned and at usage count 0, which the push
 * would have taken, as if it missed none.
 *
 * Memory.  Per sampled entry, a word of membership bits (one per size,
 * and STALE_BIT) and a word of usage counts (two bits per size).  A size
 * whose scaled tier holds the whole sample (SIZES scaled to at least the
 * entry capacity) never evicts and needs nothing more; smaller ones keep
 * their CLOCK in a ring of entry numbers, each as long as the scaled size.
 * Since the sizes double, the rings together are shorter than twice the
 * capacity; a scratch of one capacity lets them be rebuilt, in their
 * clock order, when the rate is lowered (a size that held the whole
 * sample and becomes a ring takes its pages in the sample's order).  20
 * bytes per entry in all.  Sizes scaled below MINI_MIN_SLOTS pages are
 * too small to say anything and are not simulated.
 *
 * Locking: none of its own; the caller holds the advisor's lock.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "miscadmin.h"
#include "storage/shmem.h"

#include "sizing_mini.h"

/* The tier's largest usage count (tier_map_internal.h, SLOT_USAGE_MAX). */
#define MINI_USAGE_MAX		3

/* Fewer scaled pages than this are too few to simulate. */
#define MINI_MIN_SLOTS		64

/* Membership bit of an entry whose tier copy a write has made stale. */
#define STALE_BIT			((uint32) 1 << 31)

#define NO_ENTRY			PG_UINT32_MAX

StaticAssertDecl(SIZING_MINI_SIZES <= 16,
				 "usage counts are two bits a size in a uint32");

typedef enum MiniKind
{
	MINI_UNMODELLED,			/* too small to simulate */
	MINI_RING,					/* a CLOCK over its ring */
	MINI_WHOLE					/* holds the whole sample: never evicts */
} MiniKind;

typedef struct MiniSize
{
	MiniKind	kind;
	uint32		offset;			/* of its ring in the pool */
	uint32		slots;			/* ring length */
	uint32		used;			/* ring entries filled */
	uint32		hand;
} MiniSize;

struct SizingMini
{
	uint32		capacity;		/* sampled entries */
	double		base_pages;		/* tier size of the first miniature */
	MiniSize	sizes[SIZING_MINI_SIZES];
	double		hit_weight[SIZING_MINI_SIZES];
	uint32	   *member;			/* per entry: bit k, in miniature k */
	uint32	   *usage;			/* per entry: bits 2k..2k+1, its count */
	uint32	   *pool;			/* the rings, 2 * capacity */
	uint32	   *scratch;		/* capacity */
};

Size
sizing_mini_shmem_size(uint32 capacity)
{
	Size		size = MAXALIGN(sizeof(SizingMini));

	size = add_size(size, MAXALIGN(mul_size(capacity, sizeof(uint32))));
	size = add_size(size, MAXALIGN(mul_size(capacity, sizeof(uint32))));
	size = add_size(size, MAXALIGN(mul_size((Size) 2 * capacity, sizeof(uint32))));
	size = add_size(size, MAXALIGN(mul_size(capacity, sizeof(uint32))));
	return size;
}

/* Lay the miniatures out at base (postmaster, at shared memory creation). */
SizingMini *
sizing_mini_init(char *base, uint32 capacity)
{
	SizingMini *mini = (SizingMini *) base;
	char	   *p = base + MAXALIGN(sizeof(SizingMini));

	memset(mini, 0, sizeof(SizingMini));
	mini->capacity = capacity;
	mini->base_pages = Max(NBuffers / 8, 1);
	mini->member = (uint32 *) p;
	p += MAXALIGN(sizeof(uint32) * capacity);
	mini->usage = (uint32 *) p;
	p += MAXALIGN(sizeof(uint32) * capacity);
	mini->pool = (uint32 *) p;
	p += MAXALIGN(sizeof(uint32) * 2 * (Size) capacity);
	mini->scratch = (uint32 *) p;
	return mini;
}

static inline uint32
usage_of(const SizingMini *mini, uint32 entry, int k)
{
	return (mini->usage[entry] >> (2 * k)) & 3;
}

static inline void
set_usage(SizingMini *mini, uint32 entry, int k, uint32 count)
{
	mini->usage[entry] = (mini->usage[entry] & ~((uint32) 3 << (2 * k))) |
		(count << (2 * k));
}

static inline void
add_usage(SizingMini *mini, uint32 entry, int k)
{
	uint32		count = usage_of(mini, entry, k);

	if (count < MINI_USAGE_MAX)
		set_usage(mini, entry, k, count + 1);
}

/* What each size is at rate, and where its ring goes. */
static void
plan_sizes(SizingMini *mini, double rate, MiniSize *plan)
{
	uint32		offset = 0;
	int			k;

	for (k = 0; k < SIZING_MINI_SIZES; k++)
	{
		double		scaled = ldexp(mini->base_pages, k) * rate;

		plan[k].offset = offset;
		plan[k].used = 0;
		plan[k].hand = 0;
		plan[k].slots = 0;
		if (scaled >= (double) mini->capacity)
			plan[k].kind = MINI_WHOLE;
		else if (scaled < MINI_MIN_SLOTS)
			plan[k].kind = MINI_UNMODELLED;
		else
		{
			plan[k].kind = MINI_RING;
			plan[k].slots = (uint32) scaled;
			offset += plan[k].slots;
		}
	}
	/* Doubling sizes, each under the capacity: less than twice it. */
	Assert(offset <= 2 * mini->capacity);
}

void
sizing_mini_clear(SizingMini *mini, double rate)
{
	memset(mini->member, 0, sizeof(uint32) * mini->capacity);
	memset(mini->usage, 0, sizeof(uint32) * mini->capacity);
	memset(mini->hit_weight, 0, sizeof(mini->hit_weight));
	plan_sizes(mini, rate, mini->sizes);
}

/* An entry left the sample (the rate was lowered). */
void
sizing_mini_forget(SizingMini *mini, uint32 entry)
{
	mini->member[entry] = 0;
	mini->usage[entry] = 0;
}

/*
 * Run miniature k's clock over list[0..n) (entry numbers, NO_ENTRY for a
 * hole) from *cursor until at most keep of them are left, as the tier's
 * hand would: a page at usage 0 is evicted, any other loses a count.
 * Returns how many are left.
 */
static uint32
clock_evict_list(SizingMini *mini, int k, uint32 *list, uint32 n,
				 uint32 live, uint32 keep, uint32 *cursor)
{
	uint32		i = *cursor;

	while (live > keep)
	{
		uint32		entry = list[i];

		if (entry != NO_ENTRY)
		{
			uint32		count = usage_of(mini, entry, k);

			if (count == 0)
			{
				mini->member[entry] &= ~((uint32) 1 << k);
				list[i] = NO_ENTRY;
				live--;
			}
			else
				set_usage(mini, entry, k, count - 1);
		}
		i = (i + 1) % n;
	}
	*cursor = i;
	return live;
}

/*
 * The rate was lowered: the sizes scale down, and the entries sizing.c
 * dropped (sizing_mini_forget) leave their rings.  Each ring is copied in
 * clock order from its hand, less the pages no longer in it, run down to
 * its new length by its own clock, and written back to its new place.
 * The rings are done in order of size: a ring only ever shrinks (or
 * appears, where its size no longer holds the whole sample, and so do all
 * larger sizes), so its new place never reaches a larger one's old ring
 * before that has been copied.
 */
void
sizing_mini_rate_lowered(SizingMini *mini, double rate)
{
	MiniSize	plan[SIZING_MINI_SIZES];
	int			k;

	plan_sizes(mini, rate, plan);
	for (k = 0; k < SIZING_MINI_SIZES; k++)
	{
		MiniSize   *was = &mini->sizes[k];
		MiniSize   *now = &plan[k];
		uint32		bit = (uint32) 1 << k;
		uint32		n = 0;
		uint32		live PG_USED_FOR_ASSERTS_ONLY;
		uint32		cursor = 0;
		uint32		i;

		if (now->kind == MINI_WHOLE)
			continue;			/* was whole too: nothing to move */

		/* The pages it holds, oldest by the clock first. */
		if (was->kind == MINI_RING)
		{
			uint32	   *ring = mini->pool + was->offset;

			/* Less the entries sizing_mini_forget has just dropped. */
			for (i = 0; i < was->used; i++)
			{
				uint32		entry = ring[(was->hand + i) % was->used];

				if (mini->member[entry] & bit)
					mini->scratch[n++] = entry;
			}
		}
		else if (was->kind == MINI_WHOLE)
		{
			for (i = 0; i < mini->capacity; i++)
				if (mini->member[i] & bit)
					mini->scratch[n++] = i;
		}

		if (now->kind == MINI_UNMODELLED)
		{
			for (i = 0; i < n; i++)
				mini->member[mini->scratch[i]] &= ~bit;
			continue;
		}

		live = n > 0 ? clock_evict_list(mini, k, mini->scratch, n, n,
										 now->slots, &cursor) : 0;
		for (i = 0; i < n; i++)
		{
			uint32		entry = mini->scratch[(cursor + i) % n];

			if (entry != NO_ENTRY)
				mini->pool[now->offset + now->used++] = entry;
		}
		Assert(now->used == live);
	}
	memcpy(mini->sizes, plan, sizeof(plan));
}

/* Put entry into miniature k's ring, evicting by its clock if full. */
static void
ring_insert(SizingMini *mini, int k, uint32 entry)
{
	MiniSize   *size = &mini->sizes[k];
	uint32	   *ring = mini->pool + size->offset;

	if (size->used < size->slots)
		ring[size->used++] = entry;
	else
	{
		for (;;)
		{
			uint32		victim = ring[size->hand];
			uint32		count = usage_of(mini, victim, k);

			/* Entries dropped have left the rings (rate_lowered). */
			Assert(mini->member[victim] & ((uint32) 1 << k));
			if (count == 0)
			{
				mini->member[victim] &= ~((uint32) 1 << k);
				break;
			}
			set_usage(mini, victim, k, count - 1);
			size->hand = (size->hand + 1) % size->slots;
		}
		ring[size->hand] = entry;
		size->hand = (size->hand + 1) % size->slots;
	}
	mini->member[entry] |= (uint32) 1 << k;
	set_usage(mini, entry, k, 1);
}

/* A sampled miss: every miniature holding the page serves it. */
void
sizing_mini_lookup(SizingMini *mini, uint32 entry, double weight)
{
	uint32		member = mini->member[entry];
	int			k;

	if (member & STALE_BIT)
		return;
	for (k = 0; k < SIZING_MINI_SIZES; k++)
	{
		if (!(member & ((uint32) 1 << k)))
			continue;
		mini->hit_weight[k] += weight;
		add_usage(mini, entry, k);
	}
}

/*
 * The page goes into the tier: at a departure from shared buffers (a page
 * held gains a count, as tier_map_note_departure gives it), at a write
 * under dual_write (a page held is stored anew, at count 1), or at a miss
 * under bpext.admission = read (a page held has just been served, and
 * counted by sizing_mini_lookup).  A stale page is not held: it comes in
 * anew, at count 1, where its place was.
 */
void
sizing_mini_admit(SizingMini *mini, uint32 entry, SizingMiniAdmit how)
{
	bool		stale = (mini->member[entry] & STALE_BIT) != 0;
	int			k;

	mini->member[entry] &= ~STALE_BIT;
	for (k = 0; k < SIZING_MINI_SIZES; k++)
	{
		MiniSize   *size = &mini->sizes[k];

		if (size->kind == MINI_UNMODELLED)
			continue;
		if (mini->member[entry] & ((uint32) 1 << k))
		{
			if (stale || how == SIZING_MINI_STORE)
				set_usage(mini, entry, k, 1);
			else if (how == SIZING_MINI_DEPARTURE)
				add_usage(mini, entry, k);
		}
		else if (size->kind == MINI_WHOLE)
		{
			mini->member[entry] |= (uint32) 1 << k;
			set_usage(mini, entry, k, 1);
		}
		else
			ring_insert(mini, k, entry);
	}
}

/*
 * A write under bpext.write_policy = invalidate: the tier drops its copy.
 * The page keeps its places, at count 0, and each clock takes them back
 * when its hand reaches them; a lookup until it is admitted again is a
 * miss.  The tier frees such a slot at once, and fills it before it moves
 * its hand (tier_map_alloc_slot): under invalidate, a miniature holds
 * fewer live pages than the tier until its hand comes round.
 */
void
sizing_mini_invalidate(SizingMini *mini, uint32 entry)
{
	mini->member[entry] |= STALE_BIT;
	mini->usage[entry] = 0;
}

void
sizing_mini_snapshot(const SizingMini *mini, SizingMiniSnapshot *snap)
{
	int			k;

	for (k = 0; k < SIZING_MINI_SIZES; k++)
	{
		snap->pages[k] = ldexp(mini->base_pages, k);
		snap->hit_weight[k] = mini->hit_weight[k];
		snap->modelled[k] = mini->sizes[k].kind != MINI_UNMODELLED;
	}
}

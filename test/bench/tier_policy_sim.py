#!/usr/bin/env python3
"""What the tier's own policy does to its hit ratio, offline.

    test/bench/tier_policy_sim.py [--scale 10] [--shared-buffers-mb 16]
        [--tier-share 0.25 | --tier-pages N] [--transactions 900000]
        [--skew exponential:4] [--missed-pushes "0 0.45 0.6"] [--seed 1]
        [--mini-rates "0.4 0.1"] [--sample-seed 0]

The sizing advisor (src/sizing.c) models the tier as LRU fed with every
page that leaves shared buffers.  The tier is CLOCK (a page enters at
usage count 1, each hit adds one up to 3, and so does leaving shared
buffers again for a page it holds: tier_map_alloc_slot, evict_push.c),
and the bpext worker does not push every page that leaves
(bpext_stats.missed_pushes).  This
simulates pgbench's select-only transaction (or the bench's skewed one:
the same query, its aid drawn as pgbench's random_exponential) on
PostgreSQL's buffer replacement (a clock sweep, usage counts up to 5,
a new buffer at 1), and feeds the pages it evicts to a tier of each
policy, each push lost with the given probability, side by side on the
same reference stream.  It prints each tier's hit ratio over the
shared-buffer misses of the last two thirds of the transactions (the
first third warms both levels).

--mini-rates adds miniature simulations of the tier (Waldspurger et al.,
"Cache Modeling and Optimization using Miniature Simulations", USENIX ATC
2017): the tier's own CLOCK, its size scaled by a rate, fed only the
pages whose hash is under that rate (the advisor's spatial sampling,
src/sizing.c), with the same pushes lost as the full tier.  Its hit
ratio over the sampled lookups estimates the full tier's; --sample-seed
draws another set of sampled pages.

A transaction reads the primary key's root, one inner page, one leaf and
one heap page.  Page counts follow pgbench's layout: 61 rows per heap
page, 366 keys per leaf (int4 keys, fillfactor 90), 407 per inner page.
Everything else a server reads (catalogs, pgbench_branches and
pgbench_tellers) is left out.  Pure Python: about a minute per 10^6
transactions and policy.
"""

import argparse
import math
import random
from collections import OrderedDict

ROWS_PER_SCALE = 100000
HEAP_ROWS_PER_PAGE = 61
KEYS_PER_LEAF = 366
KEYS_PER_INNER = 407
SHARED_BUFFER_USAGE_MAX = 5
TIER_USAGE_MAX = 3


class ClockSweep:
    """PostgreSQL's buffer replacement, or the tier's (the same sweep)."""

    def __init__(self, size, usage_max):
        self.size = size
        self.usage_max = usage_max
        self.page = [None] * size
        self.usage = [0] * size
        self.where = {}
        self.hand = 0

    def touch(self, page):
        """A hit: True, and one more usage; a miss: False."""
        slot = self.where.get(page)
        if slot is None:
            return False
        self.usage[slot] = min(self.usage[slot] + 1, self.usage_max)
        return True

    def enter(self, page):
        """Take a slot for page at usage 1; return the page evicted, if any."""
        while True:
            slot = self.hand
            self.hand = (self.hand + 1) % self.size
            if self.page[slot] is None or self.usage[slot] == 0:
                break
            self.usage[slot] -= 1
        evicted = self.page[slot]
        if evicted is not None:
            del self.where[evicted]
        self.page[slot] = page
        self.usage[slot] = 1
        self.where[page] = slot
        return evicted


class ClockTier:
    """bpext's tier before 1f4f42c: a hit adds usage; a page it holds is
    not pushed again, and its usage is left as it is."""

    name = "CLOCK, a push of a page held does nothing"

    def __init__(self, size):
        self.clock = ClockSweep(size, TIER_USAGE_MAX)

    def lookup(self, page):
        return self.clock.touch(page)

    def push(self, page):
        if page not in self.clock.where:
            self.clock.enter(page)


class ClockTierRepush(ClockTier):
    """bpext's tier: a page it holds leaving shared buffers again adds
    usage, as a hit does (evict_push.c, tier_map_note_departure)."""

    name = "CLOCK, a push of a page held adds usage (the tier)"

    def push(self, page):
        if not self.clock.touch(page):
            self.clock.enter(page)


class LruTier:
    """The advisor's model: a hit or a push makes a page the newest."""

    name = "LRU (the advisor's model)"

    def __init__(self, size):
        self.size = size
        self.pages = OrderedDict()

    def lookup(self, page):
        if page in self.pages:
            self.pages.move_to_end(page)
            return True
        return False

    def push(self, page):
        if page in self.pages:
            self.pages.move_to_end(page)
            return
        self.pages[page] = True
        if len(self.pages) > self.size:
            self.pages.popitem(last=False)


def page_hash(page, seed):
    """A 32-bit hash of a page's identity (splitmix64's finaliser)."""
    kind, number = page
    x = (number * 4 + ("root", "inner", "leaf", "heap").index(kind)
         + (seed + 1) * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (x ^ (x >> 31)) >> 32


class MiniTier:
    """The tier's policy on the pages sampled at a rate, at its size times
    the rate: a miniature simulation."""

    def __init__(self, size, rate, seed):
        self.threshold = int(rate * 2**32)
        self.seed = seed
        self.tier = ClockTierRepush(max(1, round(size * rate)))
        self.name = f"miniature of the tier, {rate:.0%} of the pages"
        self.lookups = 0
        self.hits = 0

    def sampled(self, page):
        return page_hash(page, self.seed) < self.threshold

    def lookup(self, page, counted):
        if self.sampled(page):
            hit = self.tier.lookup(page)
            self.lookups += counted
            self.hits += hit and counted

    def push(self, page):
        if self.sampled(page):
            self.tier.push(page)


def aid_sampler(rows, skew, rng):
    """pgbench's random(1, rows) or random_exponential(1, rows, param)."""
    if skew is None:
        return lambda: rng.randrange(rows)
    kind, _, param = skew.partition(":")
    if kind != "exponential":
        raise SystemExit("--skew: only exponential:PARAM")
    param = float(param)
    cut = math.exp(-param)

    def exponential():
        uniform = 1.0 - rng.random()
        return min(int(rows * (-math.log(cut + (1.0 - cut) * uniform) / param)), rows - 1)

    return exponential


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--shared-buffers-mb", type=int, default=16)
    parser.add_argument("--tier-share", type=float, default=0.25,
                        help="tier size as a share of the pages the workload touches")
    parser.add_argument("--tier-pages", type=int,
                        help="tier size in pages (overrides --tier-share)")
    parser.add_argument("--transactions", type=int, default=900000)
    parser.add_argument("--skew", help="exponential:PARAM (default: uniform)")
    parser.add_argument("--missed-pushes", default="0",
                        help="probabilities that a push is lost, e.g. \"0 0.45 0.6\"")
    parser.add_argument("--mini-rates", default="",
                        help="sampling rates of miniature simulations of the tier, e.g. \"0.4 0.1\"")
    parser.add_argument("--sample-seed", type=int, default=0,
                        help="which pages the miniature simulations sample")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    rows = args.scale * ROWS_PER_SCALE
    heap = math.ceil(rows / HEAP_ROWS_PER_PAGE)
    leaves = math.ceil(rows / KEYS_PER_LEAF)
    inner = math.ceil(leaves / KEYS_PER_INNER)
    touched = heap + leaves + inner + 1
    tier_pages = args.tier_pages or int(touched * args.tier_share)
    shared_buffers = args.shared_buffers_mb * 128
    missed = [float(p) for p in args.missed_pushes.split()]

    rng = random.Random(args.seed)
    losses = random.Random(args.seed + 1)   # the stream stays the same
    next_aid = aid_sampler(rows, args.skew, rng)
    shared = ClockSweep(shared_buffers, SHARED_BUFFER_USAGE_MAX)
    tiers = [(cls(tier_pages), p) for p in missed for cls in (ClockTier, ClockTierRepush, LruTier)]
    minis = [(MiniTier(tier_pages, float(r), args.sample_seed), p)
             for p in missed for r in args.mini_rates.split()]
    hits = [0] * len(tiers)
    misses = 0
    measure_from = args.transactions // 3

    for txn in range(args.transactions):
        aid = next_aid()
        leaf = aid // KEYS_PER_LEAF
        for page in (("root", 0), ("inner", leaf // KEYS_PER_INNER),
                     ("leaf", leaf), ("heap", aid // HEAP_ROWS_PER_PAGE)):
            if shared.touch(page):
                continue
            counted = txn >= measure_from
            misses += counted
            for i, (tier, _) in enumerate(tiers):
                if tier.lookup(page) and counted:
                    hits[i] += 1
            for mini, _ in minis:
                mini.lookup(page, counted)
            evicted = shared.enter(page)
            if evicted is not None:
                # One draw per share lost: every tier at that share loses
                # the same pushes.
                pushed = {p: p == 0 or losses.random() >= p for p in missed}
                for tier, lost in tiers + minis:
                    if pushed[lost]:
                        tier.push(evicted)

    print(f"scale {args.scale} ({touched} pages: {heap} heap, {leaves} leaves), "
          f"shared buffers {shared_buffers} pages, tier {tier_pages} pages, "
          f"{args.skew or 'uniform'}, {args.transactions} transactions, "
          f"{misses} shared-buffer misses measured")
    print("| tier policy | pushes lost | tier hit ratio |")
    print("|---|---|---|")
    for (tier, lost), h in zip(tiers, hits):
        print(f"| {tier.name} | {lost:.0%} | {h / misses:.3f} |")
    for mini, lost in minis:
        print(f"| {mini.name} ({mini.lookups} sampled misses) | {lost:.0%} | "
              f"{mini.hits / max(mini.lookups, 1):.3f} |")


if __name__ == "__main__":
    main()

/*-------------------------------------------------------------------------
 *
 * adaptive_admission.c
 *	  Pausing admission to the tier while it cannot help, and resuming it
 *	  when it can (bpext.adaptive_admission).
 *
 * A tier hit saves the data-file read it replaces.  That read costs a
 * device read when the kernel does not hold the page, and a page-cache
 * read when it does, which is what a tier hit costs too.  When the data
 * files fit in RAM (shared buffers at a quarter of it, the rest page
 * cache), every hit saves nothing, and admitting pages costs CPU: the
 * worker pushes the pages about to leave shared buffers and writes them,
 * read admission and dual writes queue pages for it, and a tier smaller
 * than the data evicts a page for each one it takes.  On two cores that
 * made select-only 21% slower than no tier at all.
 *
 * What the tier would save is measured where it is decided: at its hits.
 * One tier hit in PROBE_EVERY, in each backend, asks the kernel whether
 * the block's data-file page is in its page cache, on the segment md has
 * open: cachestat(2) (Linux 6.5 on), or mincore(2) on a mapping of those
 * 8 kB.  Neither reads anything or touches the page.  Timing data-file
 * reads instead would compare the wrong pages (the misses, not the hits:
 * under TPC-B most misses are pages written a moment ago, in the page
 * cache, while the hits are pages that would come from disk), would be
 * blurred by a loaded CPU, and cannot be done on 18, whose data-file
 * reads complete in I/O workers or the kernel.
 *
 * The worker adds the probes up in windows of at least WINDOW_MS and
 * MIN_PROBES probes.  While admitting, PAUSE_WINDOWS windows in a row in
 * which at least PAUSE_CACHED of the probed pages were cached pause
 * admission: pushes ahead of the clock sweep (evict_push.c), read
 * admission and dual-write stores (the smgr wrappers) stop.  The tier's
 * hits stop too, but for its probes: a hit whose data-file page is cached
 * saves nothing, and still costs the lookup, the pin and the page's CRC.
 * So while paused only one shared-buffer miss in PROBE_EVERY, in each
 * backend, looks in the tier (bpext_adaptive_look_in_tier); the others
 * read their data files at once, as without bpext, and every hit of the
 * one that looks is probed, so the probes go on at the rate they had.
 * A probe that finds its data-file page not cached makes that backend
 * look in the tier for every miss again (probing one hit in PROBE_EVERY,
 * as while admitting) until a probe finds one cached: when the data stop
 * fitting in memory, the misses the tier could serve are served at once,
 * not read from the disk until the worker's windows resume admission.
 * Every invalidation goes on as before (a data file that changes still
 * drops or replaces the tier's copy), so the pages the tier holds are
 * current when it serves them again.  RESUME_WINDOWS windows in a row
 * with fewer than RESUME_CACHED cached resume admission and the hits
 * (memory grew short, or the data grew).  A pause needs ten windows, a
 * resume two, since admitting where it cannot help costs some CPU, and
 * not admitting where it could costs disk reads.  No pause comes sooner
 * than MIN_ADMITTING_MS after a resume, so that the two cannot alternate
 * quickly.  Each change is counted (admission_pauses, admission_resumes)
 * and logged once.  A disabled tier, or bpext.adaptive_admission = off,
 * admits as configured.
 *
 * When nothing is probed (no hits: a tier that is empty or holds nothing
 * the workload reads) the mode stays as it is: a window closes only with
 * MIN_PROBES probes in it, and a window that takes longer than
 * MAX_WINDOW_MS is started over.
 *
 * Locking: BpextCtl->admission_paused is written by the worker alone and
 * read without a lock by everyone (a process that acts on a stale value
 * admits or skips one more page, which is harmless either way: pausing
 * never touches invalidation).  The probe counters are per process
 * (stats.c).  Nothing on the backends' side allocates or raises an error:
 * it runs inside smgr calls.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "utils/timestamp.h"

#include "adaptive_admission.h"
#include "compat.h"
#include "settings.h"
#include "stats.h"
#include "tier_control.h"

/* Probe one tier hit in this many, per backend. */
#define PROBE_EVERY			128

/*
 * cachestat(2), Linux 6.5 on: the page-cache state of a range of a file
 * in one system call.  Its number is the same on every architecture that
 * uses the common system call table (not alpha).
 */
#if defined(__NR_cachestat)
#define BPEXT_NR_CACHESTAT	__NR_cachestat
#elif defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))
#define BPEXT_NR_CACHESTAT	451
#endif

#ifdef BPEXT_NR_CACHESTAT
typedef struct CachestatRange
{
	uint64		off;
	uint64		len;
} CachestatRange;

typedef struct Cachestat
{
	uint64		nr_cache;
	uint64		nr_dirty;
	uint64		nr_writeback;
	uint64		nr_evicted;
	uint64		nr_recently_evicted;
} Cachestat;
#endif

/* A window: at least this long, and with at least this many probes. */
#define WINDOW_MS			1000
#define MIN_PROBES			100
#define MAX_WINDOW_MS		60000

/* Pause: this many windows in a row with at least this share cached. */
#define PAUSE_WINDOWS		10
#define PAUSE_CACHED		0.99

/* Resume: this many windows in a row with less than this share cached. */
#define RESUME_WINDOWS		2
#define RESUME_CACHED		0.97

/* Admit for at least this long after a resume. */
#define MIN_ADMITTING_MS	(5 * 60 * 1000)

/*
 * Is the data-file page of this block in the kernel's page cache?  1 if
 * every memory page of it is, 0 if one is not, -1 if this process cannot
 * tell (md has not opened the segment here, or it closed its descriptor
 * to stay within max_files_per_process, or a system call failed).  One
 * cachestat call where the kernel has it, else mincore on a mapping of
 * the block (three calls); neither reads the file or touches the page.
 */
static int
data_page_cached(SMgrRelation reln, ForkNumber fork, BlockNumber block)
{
	static long os_page = 0;
#ifdef BPEXT_NR_CACHESTAT
	static bool no_cachestat = false;
#endif
	unsigned char vec[16];
	off_t		offset;
	off_t		start;
	size_t		len;
	void	   *map;
	int			fd;
	int			cached;
	size_t		i;

	if (os_page == 0)
		os_page = sysconf(_SC_PAGESIZE);
	if (os_page <= 0)
		return -1;
	fd = bpext_md_open_segment_fd(reln, fork, block, &offset);
	if (fd < 0)
		return -1;

	/* The memory pages that hold the block, whole. */
	start = offset - offset % os_page;
	len = TYPEALIGN(os_page, offset + BLCKSZ - start);
	if (len / os_page > sizeof(vec))
		return -1;

#ifdef BPEXT_NR_CACHESTAT
	if (!no_cachestat)
	{
		CachestatRange range = {.off = (uint64) start,.len = (uint64) len};
		Cachestat	cs;

		if (syscall(BPEXT_NR_CACHESTAT, fd, &range, &cs, 0) == 0)
			return cs.nr_cache == len / os_page ? 1 : 0;
		/* Not in this kernel, or not allowed here: mincore from now on. */
		if (errno == ENOSYS || errno == EPERM)
			no_cachestat = true;
		else
			return -1;
	}
#endif

	map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, start);
	if (map == MAP_FAILED)
		return -1;
	cached = mincore(map, len, vec) == 0 ? 1 : -1;
	for (i = 0; cached == 1 && i < len / os_page; i++)
		if ((vec[i] & 1) == 0)
			cached = 0;
	munmap(map, len);
	return cached;
}

/*
 * While paused, this backend's last probe found its data-file page not
 * cached: it looks in the tier for every miss (see the file header).
 */
static bool looking_at_every_miss = false;

/*
 * Admission is paused: should this shared-buffer miss look in the tier?
 * One miss in PROBE_EVERY in each backend, or every miss after a probe
 * that found its page not cached (see the file header).  A miss that does
 * not look is a data-file read.  While admitting every miss looks, which
 * the caller knows without calling.
 */
bool
bpext_adaptive_look_in_tier(void)
{
	static uint32 misses = 0;

	if (looking_at_every_miss)
		return true;
	if (++misses < PROBE_EVERY)
		return false;
	misses = 0;
	return true;
}

/*
 * A backend served this block from the tier: probe one hit in PROBE_EVERY
 * when every miss looks in the tier, every hit when one miss in
 * PROBE_EVERY does (see the file header).
 */
void
bpext_adaptive_note_hit(SMgrRelation reln, ForkNumber fork, BlockNumber block)
{
	static uint32 hits = 0;
	bool		paused = bpext_admission_paused();
	int			cached;

	if (!bpext_adaptive_admission)
		return;
	if (!paused || looking_at_every_miss)
	{
		if (++hits < PROBE_EVERY)
			return;
		hits = 0;
	}
	cached = data_page_cached(reln, fork, block);
	if (cached < 0)
		return;
	BPEXT_COUNT(hit_probes, 1);
	if (cached)
		BPEXT_COUNT(hit_probes_cached, 1);
	looking_at_every_miss = paused && !cached;
}

/* The worker's view of the windows. */
static TimestampTz window_start = 0;
static uint64 window_probes = 0;	/* raw counter sums at the start */
static uint64 window_cached = 0;
static int	cached_windows = 0;
static int	uncached_windows = 0;
static TimestampTz resumed_at = 0;
static TimestampTz summed_at = 0;	/* the last look at the counters */

static void
start_window(TimestampTz now, const BpextCounters *c)
{
	window_start = now;
	window_probes = c->hit_probes;
	window_cached = c->hit_probes_cached;
}

static void
set_paused(bool paused)
{
	pg_atomic_write_u32(&BpextCtl->admission_paused, paused ? 1 : 0);
	cached_windows = uncached_windows = 0;
}

/*
 * The worker, on every round: close a window when it is due, and pause or
 * resume admission (see the file header).
 */
void
bpext_adaptive_admission_step(void)
{
	TimestampTz now = GetCurrentTimestamp();
	bool		paused = bpext_admission_paused();
	BpextCounters c;
	uint64		probes;
	double		cached;

	/* A tier turned off starts admitting when it comes back. */
	if (!bpext_tier_enabled())
	{
		if (paused)
			set_paused(false);
		window_start = summed_at = 0;
		return;
	}
	if (!bpext_adaptive_admission)
	{
		if (paused)
		{
			set_paused(false);
			BPEXT_COUNT(admission_resumes, 1);
			ereport(LOG,
					(errmsg("bpext resumed admission to the tier: bpext.adaptive_admission is off")));
		}
		window_start = summed_at = 0;
		return;
	}
	/*
	 * At most one look at the counters per WINDOW_MS: summing every
	 * process's slots is most of what an idle round costs, and a window
	 * short of MIN_PROBES would otherwise be summed again every round.
	 */
	if (summed_at != 0 &&
		!TimestampDifferenceExceeds(summed_at, now, WINDOW_MS))
		return;
	summed_at = now;

	bpext_stats_raw_sum(&c);
	if (window_start == 0)
	{
		start_window(now, &c);
		return;
	}
	probes = c.hit_probes - window_probes;
	if (probes < MIN_PROBES)
	{
		if (TimestampDifferenceExceeds(window_start, now, MAX_WINDOW_MS))
			start_window(now, &c);
		return;
	}
	cached = (double) (c.hit_probes_cached - window_cached) / probes;
	start_window(now, &c);

	if (!paused)
	{
		cached_windows = cached >= PAUSE_CACHED ? cached_windows + 1 : 0;
		if (cached_windows < PAUSE_WINDOWS ||
			(resumed_at != 0 &&
			 !TimestampDifferenceExceeds(resumed_at, now, MIN_ADMITTING_MS)))
			return;
		set_paused(true);
		BPEXT_COUNT(admission_pauses, 1);
		ereport(LOG,
				(errmsg("bpext paused admission to the tier: %.1f%% of the pages it served were in the kernel's page cache as data-file pages too",
						100.0 * cached),
				 errdetail("Reading them from their data files costs what reading them from the tier costs, so admitting more pages would cost more than it saves. Pushes, read admission and dual-write stores stop, and shared-buffer misses read their data files but for one in %d, which the tier serves if it can, until reading its pages from their data files would read the disk again.", PROBE_EVERY),
				 errhint("Set bpext.adaptive_admission to off to keep admitting pages.")));
	}
	else
	{
		uncached_windows = cached < RESUME_CACHED ? uncached_windows + 1 : 0;
		if (uncached_windows < RESUME_WINDOWS)
			return;
		set_paused(false);
		resumed_at = now;
		BPEXT_COUNT(admission_resumes, 1);
		ereport(LOG,
				(errmsg("bpext resumed admission to the tier: %.1f%% of the pages it served were not in the kernel's page cache as data-file pages",
						100.0 * (1.0 - cached)),
				 errdetail("Reading those pages from their data files would read the disk.")));
	}
}

/*-------------------------------------------------------------------------
 *
 * settings.c
 *	  bpext's settings (the bpext.* GUCs).
 *
 * This file calls into no other part of bpext, so that everything can
 * depend on it and it on nothing: _PG_init (bpext.c) defines the settings
 * through bpext_define_settings.
 *
 * Locking: the variables are per process, set by the GUC machinery.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>

#include "utils/guc.h"

#include "settings.h"
#include "test_hooks.h"
#include "tier_control.h"
#include "tier_readers.h"

char	   *bpext_path = NULL;
int			bpext_size_mb = 0;
int			bpext_max_size_mb = 8192;
int			bpext_write_policy = BPEXT_WRITE_DUAL;
int			bpext_admission = BPEXT_ADMIT_EVICT;
bool		bpext_direct_io = false;
int			bpext_push_interval_ms = 10;
int			bpext_push_lookahead = 0;
int			bpext_io_timeout_ms = 5000;
int			bpext_recovery_interval_ms = 10000;
int			bpext_tier_readers = 4;
int			bpext_tier_read_depth = 16;
bool		bpext_log_events = false;
bool		bpext_warm_restart = true;
char	   *bpext_min_free_space = NULL;
int			bpext_store_queue_pages = 256;
bool		bpext_adaptive_admission = true;

int			bpext_scan_workers = -1;
bool		bpext_parallel_scan = true;
int			bpext_scan_task_buffers = 16384;
int			bpext_log_scan_min_duration_ms = 10000;
int			bpext_scan_task_delay_ms = 0;
int			bpext_log_tier_reads_min_duration_ms = -1;

bool		bpext_sizing = true;
int			bpext_sizing_memory_kb = 4096;
double		bpext_sizing_sample_rate = 1.0;
int			bpext_sizing_samples_per_second = 20000;

static const struct config_enum_entry write_policy_options[] = {
	{"invalidate", BPEXT_WRITE_INVALIDATE, false},
	{"dual_write", BPEXT_WRITE_DUAL, false},
	{NULL, 0, false}
};

static const struct config_enum_entry admission_options[] = {
	{"evict", BPEXT_ADMIT_EVICT, false},
	{"read", BPEXT_ADMIT_READ, false},
	{NULL, 0, false}
};

/*
 * Does a tier of size_mb fit in the map reserved at server start?  The
 * header takes one block of the size, so size_mb holds one slot less than
 * its blocks.
 */
bool
bpext_size_fits(int size_mb)
{
	return size_mb <= 0 ||
		(uint64) size_mb * 1024 * 1024 / BLCKSZ - 1 <= BpextCtl->max_slots;
}

/* The largest tier the map reserved at server start can hold, in MB. */
int
bpext_reserved_size_mb(void)
{
	return (int) (((uint64) BpextCtl->max_slots + 1) * BLCKSZ / (1024 * 1024));
}

/*
 * bpext.size above what the map was sized for.  Before shared memory exists
 * (the server is starting) it is let through, and the worker caps the tier
 * with a WARNING: a typo must never keep the server from starting.  Once
 * the server runs, ALTER SYSTEM refuses it and a reload keeps the old value,
 * as for any invalid setting.
 */
static bool
check_tier_size(int *newval, void **extra, GucSource source)
{
	if (BpextCtl == NULL || bpext_size_fits(*newval))
		return true;
	GUC_check_errdetail("The tier's map in shared memory was sized at server start for at most %d MB (bpext.max_size).",
						bpext_reserved_size_mb());
	GUC_check_errhint("Choose a smaller size, or raise bpext.max_size and restart the server.");
	return false;
}

/*
 * bpext.min_free_space is a percentage of the file system's size ("10%")
 * or an amount, with a unit ("4GB") or in MB ("4096").  Sets *percent to
 * the percentage, or to -1 and *mb to the amount.
 */
static bool
parse_min_free_space(const char *value, double *percent, int *mb,
					 const char **hintmsg)
{
	size_t		len = strlen(value);

	*hintmsg = NULL;
	while (len > 0 && isspace((unsigned char) value[len - 1]))
		len--;
	if (len > 0 && value[len - 1] == '%')
	{
		char		number[32];
		char	   *end;
		double		p;

		if (len > sizeof(number))
			len = sizeof(number);
		strlcpy(number, value, len);	/* without the % */
		errno = 0;
		p = strtod(number, &end);
		while (isspace((unsigned char) *end))
			end++;
		if (end == number || *end != '\0' || errno != 0 ||
			!(p >= 0 && p <= 100))
		{
			*hintmsg = "A percentage must be between 0% and 100%.";
			return false;
		}
		*percent = p;
		*mb = 0;
		return true;
	}
	*percent = -1;
	if (!parse_int(value, mb, GUC_UNIT_MB, hintmsg) || *mb < 0)
		return false;
	return true;
}

static bool
check_min_free_space(char **newval, void **extra, GucSource source)
{
	double		percent;
	int			mb;
	const char *hintmsg;

	if (*newval != NULL && parse_min_free_space(*newval, &percent, &mb, &hintmsg))
		return true;
	GUC_check_errdetail("bpext.min_free_space must be a percentage of the file system, such as '10%%', or a size, such as '4GB'.");
	if (hintmsg)
		GUC_check_errhint("%s", hintmsg);
	return false;
}

/*
 * The free space, in bytes, that the tier must leave on a file system of
 * fs_size bytes that also holds the cluster's files.  The check hook has
 * let only values through that parse.
 */
uint64
bpext_min_free_space_bytes(uint64 fs_size)
{
	double		percent = 10;
	int			mb = 0;
	const char *hintmsg;

	if (bpext_min_free_space == NULL ||
		!parse_min_free_space(bpext_min_free_space, &percent, &mb, &hintmsg))
		percent = 10;
	if (percent >= 0)
		return (uint64) ((double) fs_size * percent / 100.0);
	return (uint64) mb * 1024 * 1024;
}

static bool
check_tier_path(char **newval, void **extra, GucSource source)
{
	if (*newval == NULL || (*newval)[0] == '\0')
		return true;
	if (!is_absolute_path(*newval))
	{
		GUC_check_errdetail("bpext.path must be an absolute path.");
		return false;
	}
	if (strlen(*newval) >= MAXPGPATH)
	{
		GUC_check_errdetail("bpext.path is longer than %d bytes.", MAXPGPATH - 1);
		return false;
	}
	return true;
}

/* Define every bpext.* setting (from _PG_init). */
void
bpext_define_settings(void)
{
	DefineCustomStringVariable("bpext.path",
							   "Path of the tier file, on a fast local disk.",
							   "The file is created if missing (mode 0600); an existing file is used only if it is a bpext tier file of this cluster.",
							   &bpext_path,
							   "",
							   PGC_SIGHUP,
							   0,
							   check_tier_path, NULL, NULL);

	DefineCustomIntVariable("bpext.size",
							"Size of the tier file; 0 turns the tier off.",
							"Changes take effect online, up to bpext.max_size.",
							&bpext_size_mb,
							0,
							0, INT_MAX / 2,
							PGC_SIGHUP,
							GUC_UNIT_MB,
							check_tier_size, NULL, NULL);

	DefineCustomIntVariable("bpext.max_size",
							"Largest tier size that bpext.size can be set to without a restart.",
							"Shared memory for the tier's map (about 32 bytes per 8 kB page) is reserved for this size at server start.",
							&bpext_max_size_mb,
							8192,
							0, INT_MAX / 2,
							PGC_POSTMASTER,
							GUC_UNIT_MB,
							NULL, NULL, NULL);

	DefineCustomStringVariable("bpext.min_free_space",
							   "Free space that enabling or growing the tier must leave on a file system that also holds the cluster's files.",
							   "A percentage of the file system's size (such as 10%) or a size (such as 4GB); 0 keeps no reserve, but a size that would take more than the free space is still refused rather than left to fill the disk. It applies when the tier file shares a file system with the data directory, pg_wal or a tablespace, and only to what the file grows by.",
							   &bpext_min_free_space,
							   "10%",
							   PGC_SIGHUP,
							   0,
							   check_min_free_space, NULL, NULL);

	DefineCustomEnumVariable("bpext.write_policy",
							 "What happens to the tier's copy of a page written to its data file.",
							 "dual_write stores the new image in the tier; invalidate only drops the old copy.",
							 &bpext_write_policy,
							 BPEXT_WRITE_DUAL,
							 write_policy_options,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomEnumVariable("bpext.admission",
							 "Which pages enter the tier besides dual writes.",
							 "evict pushes clean pages about to leave shared buffers; read also stores every page read from a data file.",
							 &bpext_admission,
							 BPEXT_ADMIT_EVICT,
							 admission_options,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("bpext.direct_io",
							 "Use O_DIRECT for tier file I/O where the file system supports it.",
							 "Off (the default), the kernel's page cache holds the hottest tier pages within the server's memory, as it holds data-file pages without bpext; on keeps them out of it.",
							 &bpext_direct_io,
							 false,
							 PGC_POSTMASTER,
							 0,
							 NULL, NULL, NULL);

	/*
	 * 256 pages (2 MB): more than a bgwriter round writes by default
	 * (bgwriter_lru_maxpages = 100) plus what backends write while the
	 * worker, woken at the first page, copies them out; each entry is
	 * freed as soon as the worker has copied it, before the tier write.
	 */
	DefineCustomIntVariable("bpext.store_queue_pages",
							"Pages that data-file writes and reads can queue for the tier worker to store.",
							"Dual writes and read admission copy the page into this shared queue instead of writing the tier themselves; when it is full the page is not stored. bpext_prewarm waits for room in it. 0 stores nothing from data-file writes and reads, nor from bpext_prewarm.",
							&bpext_store_queue_pages,
							256,
							0, 65536,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("bpext.adaptive_admission",
							 "Pause admission to the tier while reading its pages from their data files would cost no more than reading them from the tier.",
							 "The bpext worker watches whether the data-file pages of the tier's hits are in the kernel's page cache; while they all are, the tier keeps serving its pages but stops pushing, read-admitting and dual-write storing new ones, and resumes when they are not.",
							 &bpext_adaptive_admission,
							 true,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("bpext.push_interval",
							"Sleep between eviction-push rounds when there was nothing to push.",
							NULL,
							&bpext_push_interval_ms,
							10,
							1, 10000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bpext.push_lookahead",
							"Buffers ahead of the clock hand examined per eviction-push round; 0 means shared_buffers/4.",
							NULL,
							&bpext_push_lookahead,
							0,
							0, INT_MAX,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bpext.io_timeout",
							"Switch the tier off when one of its reads or writes has not returned after this long; 0 disables.",
							"A hung tier device then costs the queries already waiting on it, not every later one: new misses go to the data files.",
							&bpext_io_timeout_ms,
							5000,
							0, 3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bpext.recovery_interval",
							"How soon the bpext worker tries to enable a tier that failed again; 0 leaves it to bpext_enable() or a reload.",
							"The wait doubles after every try that fails, up to five minutes, and starts again from this once the tier has stayed enabled for as long. Tries that fail log nothing.",
							&bpext_recovery_interval_ms,
							10000,
							0, 3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bpext.tier_readers",
							"Helper processes that do the tier reads the kernel's page cache cannot serve at once.",
							"A backend waits for them at most bpext.io_timeout, so a hung tier device never holds a read up for longer. 0 reads such pages from the data files instead.",
							&bpext_tier_readers,
							4,
							0, TIER_READERS_MAX,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bpext.tier_read_depth",
							"Tier reads each reader helper keeps at the device at once.",
							"Above 1, a helper queues the reads it takes through io_uring and answers each as it completes, so the reads in flight follow the sessions waiting for them (64 at most in the whole server). 1 reads one page at a time, with pread, as does a helper where the kernel refuses io_uring.",
							&bpext_tier_read_depth,
							16,
							1, TIER_READ_DEPTH_MAX,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("bpext.log_events",
							 "Log the tier's page writes, reads and evictions once a second.",
							 "The equivalent of SQL Server's buffer pool extension extended events, aggregated.",
							 &bpext_log_events,
							 false,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("bpext.warm_restart",
							 "Keep the tier's contents across a clean restart.",
							 "At a clean shutdown the tier map is saved in the tier file; the next start reuses it only if nothing can have changed the data files meanwhile, and starts the tier empty otherwise.",
							 &bpext_warm_restart,
							 true,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("bpext.scan_workers",
							"Background workers that run buffer and tier scans in parallel; -1 sizes the pool to the machine.",
							"-1 means one per CPU, at most 8 and at most half of max_worker_processes less one.",
							&bpext_scan_workers,
							-1,
							-1, 64,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("bpext.parallel_scan",
							 "Split buffer and tier scans over the scan workers.",
							 "Off makes every scan serial, like the trace flag that turns off SQL Server's parallel buffer pool scan.",
							 &bpext_parallel_scan,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("bpext.scan_task_buffers",
							"Buffers or tier pages per parallel scan task.",
							"Scans over fewer than twice this many run serially.",
							&bpext_scan_task_buffers,
							16384,
							64, INT_MAX / 2,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bpext.log_scan_min_duration",
							"Log buffer and tier scans that take at least this long; -1 disables.",
							NULL,
							&bpext_log_scan_min_duration_ms,
							10000,
							-1, INT_MAX,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bpext.log_tier_reads_min_duration",
							"Log the tier hits and data-file reads of statements that take at least this long; -1 disables.",
							"0 logs every statement.  Parallel workers' reads are included.",
							&bpext_log_tier_reads_min_duration_ms,
							-1,
							-1, INT_MAX,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bpext.scan_task_delay",
							"Developer option: scan workers sleep this long before each task of a scan a client backend asked for.",
							"For testing query cancellation and the loss of a worker during a scan.",
							&bpext_scan_task_delay_ms,
							0,
							0, 60000,
							PGC_SIGHUP,
							GUC_UNIT_MS | GUC_NOT_IN_SAMPLE,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("bpext.sizing",
							 "Feed the tier sizing advisor (the bpext_sizing view) with the shared-buffer miss stream.",
							 "It works with the tier off too; doc/sizing.md says how to read the curve.",
							 &bpext_sizing,
							 true,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("bpext.sizing_memory",
							"Shared memory for the tier sizing advisor's sample; 0 turns the advisor off.",
							"About 80 bytes per sampled page: when the sample fills it, the advisor samples fewer pages.",
							&bpext_sizing_memory_kb,
							4096,
							0, 1024 * 1024,
							PGC_POSTMASTER,
							GUC_UNIT_KB,
							NULL, NULL, NULL);

	DefineCustomRealVariable("bpext.sizing_sample_rate",
							 "Fraction of pages the tier sizing advisor samples when its curve starts.",
							 "Takes effect at server start and at bpext_sizing_reset(); the advisor lowers it when bpext.sizing_memory fills, and when sampled pages are referenced faster than bpext.sizing_samples_per_second.",
							 &bpext_sizing_sample_rate,
							 1.0,
							 0.0001, 1.0,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("bpext.sizing_samples_per_second",
							"Most references to sampled pages the tier sizing advisor takes a second; 0 sets no limit.",
							"Each costs about a microsecond under the advisor's lock: when they come faster, the advisor samples fewer pages.",
							&bpext_sizing_samples_per_second,
							20000,
							0, INT_MAX,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

#ifdef BPEXT_TEST_HOOKS
	bpext_test_define_settings();
#endif

	MarkGUCPrefixReserved("bpext");
}

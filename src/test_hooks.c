/*-------------------------------------------------------------------------
 *
 * test_hooks.c
 *	  Test-only functions for the scale bench (test/bench/scale.sh): fill
 *	  the tier map with entries of a synthetic relation, and time lookups
 *	  in it; and for tests of races, holds, and a read of a block through
 *	  smgr (not shared buffers).  Compiled only by `make
 *	  BPEXT_TEST_HOOKS=1`; the SQL functions are created by
 *	  test/sql/bpext_test.sql, never by the extension's install scripts.
 *
 * The synthetic pages belong to relations in the global tablespace with a
 * database OID other than 0, a combination no cluster can have (shared
 * relations always have database 0), so no query, no invalidation of a real
 * relation and no DROP DATABASE of a real database ever touches them.  They
 * are published through the real admission path (tier_map_begin_admit,
 * tier_map_alloc_slot, tier_map_publish) as if their pages had been
 * written, but no page image is ever written: the tier file stays sparse
 * there and the CRCs recorded match nothing.  Nothing may read them: a read
 * of one (bpext_buffer_descriptors(true), for one) would find the CRC
 * mismatch and switch the tier to ERROR, as for a damaged file.
 *
 * Each synthetic relation gets an empty file of its own (global/<number>,
 * where the global tablespace puts it): warm restart saves only forks
 * whose files it can describe, and loads them only while those files are
 * unchanged, so without a file the bench's warm start would load nothing.
 *
 * Holds make a race happen in a chosen order, with no timing involved.
 * With bpext.test_holds on, a test writes a relation number, and
 * optionally a lowest slot, to a file bpext_test_hold.POINT in the data
 * directory.  The first process to get to POINT (a call of
 * BPEXT_TEST_HOLD) for a slot of that relation, at or past that slot,
 * claims the hold by renaming the file to bpext_test_held.POINT, writes
 * the slot to bpext_test_reached.POINT, and waits there until the test
 * removes bpext_test_held.POINT.  Only one process is held per hold file.
 * The points:
 *
 *	read	a tier read, the slot pinned and read, not yet re-checked
 *			(tier_io.c)
 *	cut		a drop's walk of the entries it cut, at a slot cut off but
 *			still HASHED (tier_map_index.c, unhash_piece_all)
 *	writer_start  a writer helper just forked, its signals back to their
 *			defaults (tier_writer.c); any relation number holds it
 *
 * BPEXT_TEST_NOTE only writes the reached file (for cut_wait: a shrink
 * or a clear is waiting for cut entries, wait_for_cuts).  A held server
 * process does not answer signals (a held helper dies of those with a
 * default action); the test lets it go before anything waits for it.  These run inside smgr calls and map walks: they raise no error.
 *
 * Locking: none of its own; tier_map.c's.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <unistd.h>

#include "access/relation.h"
#include "catalog/pg_tablespace_d.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "storage/bufmgr.h"
#include "storage/smgr.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/rel.h"

#include "page_crc.h"
#include "test_hooks.h"
#include "tier_control.h"
#include "tier_map.h"

/* Synthetic relation i is (global tablespace, SYNTH_DB, SYNTH_REL + i). */
#define SYNTH_DB				4000000000U
#define SYNTH_REL				4000000000U
/* Blocks per synthetic relation (8 GB), so a terabyte spans 128 of them. */
#define SYNTH_REL_BLOCKS		(1U << 20)

/* Most lookups one call of bpext_test_lookup_cost may time. */
#define LOOKUP_MAX				(50 * 1000 * 1000)

bool		bpext_test_sparse_file = false;
bool		bpext_test_holds = false;
int			bpext_test_index_groups = 0;
int			bpext_test_helper_pause_ms = 0;

PG_FUNCTION_INFO_V1(bpext_test_fill);
PG_FUNCTION_INFO_V1(bpext_test_lookup_cost);
PG_FUNCTION_INFO_V1(bpext_test_line_cost);
PG_FUNCTION_INFO_V1(bpext_test_read_block);
PG_FUNCTION_INFO_V1(bpext_test_page_crc);

/* From settings.c, before the bpext prefix is reserved. */
void
bpext_test_define_settings(void)
{
	DefineCustomBoolVariable("bpext.test_sparse_file",
							 "Test builds only: size the tier file without preallocating it.",
							 "The file is extended sparse (ftruncate) instead of allocated, so that a terabyte tier fits on a small disk for the scale bench.",
							 &bpext_test_sparse_file,
							 false,
							 PGC_SIGHUP,
							 GUC_NOT_IN_SAMPLE,
							 NULL, NULL, NULL);
	DefineCustomBoolVariable("bpext.test_holds",
							 "Test builds only: let tests hold processes at points of races.",
							 "Off, each point only tests this flag: the scale bench's tier reads look for no hold file.",
							 &bpext_test_holds,
							 false,
							 PGC_POSTMASTER,
							 GUC_NOT_IN_SAMPLE,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("bpext.test_index_groups",
							"Test builds only: size the page index with this many groups of buckets instead of from bpext.max_size.",
							"0 sizes it as release builds do.  A few groups (it is rounded up to a multiple of 128) make most of them full, so that tests exercise entries kept outside their home bucket and publications refused for a full group.",
							&bpext_test_index_groups,
							0,
							0, BPEXT_TEST_INDEX_GROUPS_MAX,
							PGC_POSTMASTER,
							GUC_NOT_IN_SAMPLE,
							NULL, NULL, NULL);
	DefineCustomIntVariable("bpext.test_helper_pause",
							"Test builds only: a helper process that handed over a descriptor waits this long before it says it is done.",
							"So that the process waiting for it looks for more in between, and finds nothing, after the descriptor came.",
							&bpext_test_helper_pause_ms,
							0,
							0, 10000,
							PGC_SIGHUP,
							GUC_NOT_IN_SAMPLE | GUC_UNIT_MS,
							NULL, NULL, NULL);
}

/*
 * The hold file of point: its relation number (InvalidOid without a
 * file) and lowest slot.
 */
static Oid
read_hold_file(const char *point, uint32 *min_slot)
{
	char		path[MAXPGPATH];
	unsigned int rel = InvalidOid;
	unsigned int slot = 0;
	FILE	   *f;

	snprintf(path, sizeof(path), "bpext_test_hold.%s", point);
	f = fopen(path, "r");
	if (f == NULL)
		return InvalidOid;
	if (fscanf(f, "%u %u", &rel, &slot) < 1)
		rel = InvalidOid;
	fclose(f);
	*min_slot = slot;
	return (Oid) rel;
}

/* Write text to bpext_test_reached.POINT whole (renamed into place). */
static void
write_reached_file(const char *point, const char *text)
{
	char		path[MAXPGPATH];
	char		tmp[MAXPGPATH];
	FILE	   *f;

	snprintf(path, sizeof(path), "bpext_test_reached.%s", point);
	snprintf(tmp, sizeof(tmp), "%s.%d", path, MyProcPid);
	f = fopen(tmp, "w");
	if (f == NULL)
		return;
	fputs(text, f);
	if (fclose(f) == 0)
		(void) rename(tmp, path);
}

Oid
bpext_test_hold_target(const char *point)
{
	uint32		min_slot;

	return read_hold_file(point, &min_slot);
}

/* Hold at point for slot if told to (see the file header). */
bool
bpext_test_hold(const char *point, uint32 slot)
{
	char		hold[MAXPGPATH];
	char		held[MAXPGPATH];
	char		text[32];
	uint32		min_slot = 0;

	if (!OidIsValid(read_hold_file(point, &min_slot)) || slot < min_slot)
		return false;
	snprintf(hold, sizeof(hold), "bpext_test_hold.%s", point);
	snprintf(held, sizeof(held), "bpext_test_held.%s", point);
	if (rename(hold, held) != 0)
		return false;			/* another process claimed it */
	snprintf(text, sizeof(text), "%u\n", slot);
	write_reached_file(point, text);
	while (access(held, F_OK) == 0)
		pg_usleep(10000L);
	return true;
}

void
bpext_test_note(const char *point)
{
	write_reached_file(point, "");
}

/* The identity of synthetic page i. */
static void
synth_page(uint64 i, BpextRelFile *rfile, BlockNumber *block)
{
	memset(rfile, 0, sizeof(*rfile));
	BPEXT_RELFILE_SPC(*rfile) = GLOBALTABLESPACE_OID;
	BPEXT_RELFILE_DB(*rfile) = SYNTH_DB;
	BPEXT_RELFILE_NUMBER(*rfile) = SYNTH_REL + (uint32) (i / SYNTH_REL_BLOCKS);
	*block = (BlockNumber) (i % SYNTH_REL_BLOCKS);
}

/*
 * Give synthetic relations 0 .. nrels-1 an empty data file each, if they
 * have none (see the file header).
 */
static void
make_synthetic_files(uint64 nrels)
{
	uint64		k;

	for (k = 0; k < nrels; k++)
	{
		BpextRelFile rfile;
		BlockNumber block;
		char	   *path;
		int			fd;

		synth_page(k * SYNTH_REL_BLOCKS, &rfile, &block);
		path = bpext_relpath_perm(rfile, MAIN_FORKNUM);
		fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC,
				  S_IRUSR | S_IWUSR);
		if (fd < 0 || close(fd) != 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not create \"%s\": %m", path)));
		pfree(path);
	}
}

static void
require_enabled(void)
{
	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("only superusers may use the bpext test functions")));
	if (pg_atomic_read_u32(&BpextCtl->state) != BPEXT_STATE_ENABLED)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the tier is not enabled"),
				 errhint("Enable it with bpext_enable() and wait until bpext_configuration.state is 5.")));
}

/*
 * bpext_test_fill(npages bigint) returns bigint: publish synthetic pages
 * 0 .. npages-1 (see the file header) and return how many were published.
 * Filling past the tier's size evicts earlier pages, as admissions do; a
 * fill on top of real pages evicts those.  Cancellable.
 */
Datum
bpext_test_fill(PG_FUNCTION_ARGS)
{
	int64		npages = PG_GETARG_INT64(0);
	int64		published = 0;
	uint64		i;

	require_enabled();
	if (npages < 0 || npages > (int64) PG_UINT32_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("npages must be between 0 and %u", PG_UINT32_MAX)));

	make_synthetic_files(((uint64) npages + SYNTH_REL_BLOCKS - 1) / SYNTH_REL_BLOCKS);
	for (i = 0; i < (uint64) npages; i++)
	{
		BpextRelFile rfile;
		BlockNumber block;
		TierAdmitTicket ticket;
		uint32		slot;

		if ((i & 0xFFFF) == 0)
			CHECK_FOR_INTERRUPTS();
		synth_page(i, &rfile, &block);
		if (!tier_map_begin_admit(&rfile, MAIN_FORKNUM, block, &ticket))
			continue;
		slot = tier_map_alloc_slot();
		if (slot == TIER_INVALID_INDEX)
		{
			tier_map_cancel_admit(&ticket);
			continue;
		}
		/* The CRC of no content: these pages are never read. */
		if (tier_map_publish(&ticket, slot, (pg_crc32c) i,
							 pg_atomic_read_u32(&BpextCtl->file_incarnation)))
			published++;
	}
	PG_RETURN_INT64(published);
}

/* The timed part, on its own so that callgrind can count it alone. */
static pg_noinline uint64
lookup_loop(const BpextRelFile *rfiles, const BlockNumber *blocks, int n)
{
	uint64		found = 0;
	int			i;

	for (i = 0; i < n; i++)
	{
		pg_crc32c	crc;
		uint32		chain_cuts;
		uint32		slot = tier_map_lookup_pin(&rfiles[i], MAIN_FORKNUM,
											   blocks[i], &crc, &chain_cuts);

		if (slot != TIER_INVALID_INDEX)
		{
			tier_map_unpin(slot);
			found++;
		}
	}
	return found;
}

/*
 * bpext_test_lookup_cost(n int, hit bool) returns float8: nanoseconds per
 * lookup (tier_map_lookup_pin, and tier_map_unpin after a hit) of n random
 * synthetic pages.  It assumes the map holds synthetic pages 0 .. k-1 only
 * (bpext_test_fill(k) on a fresh tier), k being the map's used slots: hits
 * draw from those, misses from the pages after them, which are absent.  A
 * WARNING says when the hits or misses were not all what they should be.
 */
Datum
bpext_test_lookup_cost(PG_FUNCTION_ARGS)
{
	int32		n = PG_GETARG_INT32(0);
	bool		hit = PG_GETARG_BOOL(1);
	uint64		used;
	uint64		state = 0x9E3779B97F4A7C15ULL;
	BpextRelFile *rfiles;
	BlockNumber *blocks;
	instr_time	start;
	instr_time	elapsed;
	uint64		found;
	int			i;

	require_enabled();
	if (n < 1 || n > LOOKUP_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("n must be between 1 and %d", LOOKUP_MAX)));
	used = tier_map_used_slots();
	if (hit && used == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the tier map is empty"),
				 errhint("Fill it with bpext_test_fill() first.")));

	rfiles = palloc_extended(sizeof(BpextRelFile) * n, MCXT_ALLOC_HUGE);
	blocks = palloc_extended(sizeof(BlockNumber) * n, MCXT_ALLOC_HUGE);
	for (i = 0; i < n; i++)
	{
		uint64		r;

		/* xorshift64*: cheap, and the same draws every call */
		state ^= state >> 12;
		state ^= state << 25;
		state ^= state >> 27;
		r = state * 0x2545F4914F6CDD1DULL;
		synth_page(hit ? r % used : used + r % (PG_UINT32_MAX - used),
				   &rfiles[i], &blocks[i]);
	}

	INSTR_TIME_SET_CURRENT(start);
	found = lookup_loop(rfiles, blocks, n);
	INSTR_TIME_SET_CURRENT(elapsed);
	INSTR_TIME_SUBTRACT(elapsed, start);

	if (found != (hit ? (uint64) n : 0))
		ereport(WARNING,
				(errmsg("%llu of %d lookups found a page, expected %s",
						(unsigned long long) found, n, hit ? "all" : "none"),
				 errdetail("The map holds pages other than the synthetic pages 0 to %llu.",
						   (unsigned long long) used - 1)));
	pfree(rfiles);
	pfree(blocks);
	PG_RETURN_FLOAT8(INSTR_TIME_GET_DOUBLE(elapsed) * 1e9 / n);
}

/*
 * bpext_test_line_cost(n int) returns float8: nanoseconds per read of a
 * random bucket's cache line in the page index, each read waiting for the
 * one before it (tier_index_chase_buckets): the memory's own latency over
 * the index's pages, which a lookup's one or two lines cannot beat.
 */
Datum
bpext_test_line_cost(PG_FUNCTION_ARGS)
{
	int32		n = PG_GETARG_INT32(0);
	uint64		mix = UINT64CONST(0x9E3779B97F4A7C15);
	int32		done;
	instr_time	start;
	instr_time	elapsed;

	require_enabled();
	if (n < 1 || n > LOOKUP_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("n must be between 1 and %d", LOOKUP_MAX)));
	INSTR_TIME_SET_CURRENT(start);
	/* In pieces, so that a long chase can be cancelled. */
	for (done = 0; done < n; done += Min(n - done, 65536))
	{
		CHECK_FOR_INTERRUPTS();
		mix = tier_index_chase_buckets(mix, Min(n - done, 65536));
	}
	INSTR_TIME_SET_CURRENT(elapsed);
	INSTR_TIME_SUBTRACT(elapsed, start);
	PG_RETURN_FLOAT8(INSTR_TIME_GET_DOUBLE(elapsed) * 1e9 / n);
}

/*
 * bpext_test_read_block(rel regclass, block bigint) returns bytea: read a
 * block of rel's main fork through smgr, as pg_prewarm's read mode does,
 * bypassing shared buffers: served from the tier if it holds the page, so
 * a test sees what the tier served while the page is changed through
 * shared buffers.
 */
Datum
bpext_test_read_block(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	int64		block = PG_GETARG_INT64(1);
	Relation	rel;
	bytea	   *page;

	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("only superusers may use the bpext test functions")));
	rel = relation_open(relid, AccessShareLock);
	if (block < 0 || block >= (int64) RelationGetNumberOfBlocks(rel))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("block %lld is out of range for relation \"%s\"",
						(long long) block, RelationGetRelationName(rel))));
	page = (bytea *) palloc(BLCKSZ + VARHDRSZ);
	SET_VARSIZE(page, BLCKSZ + VARHDRSZ);
	smgrread(RelationGetSmgr(rel), MAIN_FORKNUM, (BlockNumber) block,
			 VARDATA(page));
	relation_close(rel, AccessShareLock);
	PG_RETURN_BYTEA_P(page);
}

/*
 * bpext_test_page_crc(npages int): every way page_crc.c has of computing a
 * tier page's CRC on this CPU, against PostgreSQL's, on npages pages.
 */
Datum
bpext_test_page_crc(PG_FUNCTION_ARGS)
{
	int32		npages = PG_GETARG_INT32(0);
	char		out[256];

	bpext_page_crc_test(Max(npages, 1), out, sizeof(out));
	PG_RETURN_TEXT_P(cstring_to_text(out));
}


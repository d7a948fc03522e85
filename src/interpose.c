/*-------------------------------------------------------------------------
 *
 * interpose.c
 *	  Route the server's storage-manager calls through bpext.
 *
 * PostgreSQL has no storage-manager hook.  Every read, write, extend,
 * truncate, unlink and create goes through smgr.c's private table
 * "static const f_smgr smgrsw[]", whose only entry points at md.c.  In a
 * position-independent executable (Debian's, and most others) the linker
 * places that table in the PT_GNU_RELRO segment (read-only after
 * relocation); in one linked at a fixed address (16.2 of the pgserver
 * wheel, for one) the pointers need no relocation and the table is in
 * .rodata, a read-only PT_LOAD segment.  In the postmaster, while
 * shared_preload_libraries is processed, we find the table, in those
 * read-only parts of the executable, as the one pointer-aligned run of
 * words equal to the md.c functions in the order the version's f_smgr
 * declares them (compat.h), make its page writable, swap the slots bpext
 * wraps, give the page its protection back and read it back.  Every
 * process forked from the postmaster inherits the patched table.
 *
 * On 16 the truncate slot gets the wrapper of the server's own shape
 * (compat.h): one build runs on both sides of 16.7.
 *
 * Anything unexpected (no match, several matches, a slot that already
 * points elsewhere because another library got there first, a minor
 * release whose signatures we have not audited, a 16 server whose version
 * and truncate function disagree) stops the server with a FATAL message
 * that says why: running with a half-installed tier would be worse than
 * not starting.
 *
 * Locking: none; this runs once, single-threaded, in the postmaster before
 * any child exists.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include "miscadmin.h"
#include "utils/guc.h"

#include "compat.h"
#include "interpose.h"

/* The md.c table as compat.h describes it. */
static void *const md_slots[] = {BPEXT_MD_SLOTS};

#define N_MD_SLOTS lengthof(md_slots)

/*
 * The read-only parts of the main executable where a const table of
 * function pointers can be: PT_GNU_RELRO, and the PT_LOAD segments that
 * are not writable.  prot is what a range's pages are mapped with, to be
 * given back once the table is patched.
 */
#define MAX_RANGES 16

typedef struct ReadOnlyRange
{
	uintptr_t	start;
	size_t		size;
	int			prot;
} ReadOnlyRange;

typedef struct ReadOnlyRanges
{
	int			n;
	ReadOnlyRange range[MAX_RANGES];
} ReadOnlyRanges;

/* dl_iterate_phdr callback: the main executable is the unnamed entry. */
static int
find_main_read_only(struct dl_phdr_info *info, size_t size, void *arg)
{
	ReadOnlyRanges *ranges = (ReadOnlyRanges *) arg;
	int			i;

	if (info->dlpi_name != NULL && info->dlpi_name[0] != '\0')
		return 0;
	for (i = 0; i < info->dlpi_phnum && ranges->n < MAX_RANGES; i++)
	{
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		ReadOnlyRange *r = &ranges->range[ranges->n];

		if (ph->p_type == PT_GNU_RELRO)
			r->prot = PROT_READ;
		else if (ph->p_type == PT_LOAD && (ph->p_flags & PF_W) == 0 &&
				 (ph->p_flags & PF_R) != 0)
			r->prot = PROT_READ | ((ph->p_flags & PF_X) ? PROT_EXEC : 0);
		else
			continue;
		r->start = info->dlpi_addr + ph->p_vaddr;
		r->size = ph->p_memsz;
		ranges->n++;
	}
	return 1;					/* the first entry is the only one we want */
}

/*
 * The minor release must match the slot signatures we were built for.
 * Returns whether the server's smgr_truncate takes old_blocks.
 */
static bool
check_server_version(void)
{
	const char *vstr = GetConfigOption("server_version_num", false, false);
	long		version = strtol(vstr, NULL, 10);
	bool		server_has_old_blocks = dlsym(RTLD_DEFAULT, "smgrtruncate2") != NULL;

	if (version / 10000 != PG_VERSION_NUM / 10000)
		ereport(FATAL,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("bpext was built for PostgreSQL %d but the server is %s",
						PG_VERSION_NUM / 10000, vstr)));
#if BPEXT_TRUNCATE_SHAPE_AT_START
	if (server_has_old_blocks != (version >= BPEXT_TRUNCATE_CHANGED_AT))
		ereport(FATAL,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("bpext cannot tell which storage manager truncate signature this server has"),
				 errdetail("The signature changed in %s, which added the function smgrtruncate2; this server is version %s but %s smgrtruncate2.",
						   BPEXT_TRUNCATE_CHANGED_IN,
						   GetConfigOption("server_version", false, false),
						   server_has_old_blocks ? "exports" : "does not export"),
				 errhint("Remove bpext from shared_preload_libraries, or run it on a PostgreSQL 16 server built from an unmodified release.")));
#else
	if (BPEXT_TRUNCATE_SPLIT_IN_MINOR &&
		server_has_old_blocks != (BPEXT_TRUNCATE_HAS_OLD_BLOCKS != 0))
		ereport(FATAL,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("bpext was built for a different minor release of PostgreSQL %d than the server's (%s)",
						PG_VERSION_NUM / 10000, vstr),
				 errdetail("The storage manager's truncate signature changed in %s; the server and the headers bpext was built with are on different sides of that change.",
						   BPEXT_TRUNCATE_CHANGED_IN),
				 errhint("Rebuild bpext against the server's own headers.")));
	/* Where the shape cannot differ from the headers', it is theirs. */
	server_has_old_blocks = BPEXT_TRUNCATE_HAS_OLD_BLOCKS;
#endif
	if (version < BPEXT_AUDITED_MIN_VERSION_NUM ||
		version > BPEXT_AUDITED_MAX_VERSION_NUM)
		ereport(FATAL,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("bpext has not been audited for server version %s", vstr),
				 errhint("Supported: server_version_num %d to %d.",
						 BPEXT_AUDITED_MIN_VERSION_NUM,
						 BPEXT_AUDITED_MAX_VERSION_NUM)));
	return server_has_old_blocks;
}

/*
 * Find the table; FATAL unless there is exactly one.  A run that matches
 * except for the slots we wrap means another library has already patched
 * it; we say so rather than stack on top of it.  *prot is the protection
 * of the pages it is on.
 */
static void **
find_smgr_table(int *prot)
{
	ReadOnlyRanges ranges;
	void	  **match = NULL;
	int			nmatches = 0;
	int			npartial = 0;
	int			r;

	ranges.n = 0;
	dl_iterate_phdr(find_main_read_only, &ranges);
	if (ranges.n == 0)
		ereport(FATAL,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("bpext could not find the server's storage manager table"),
				 errdetail("The postgres executable has no read-only segment.")));

	for (r = 0; r < ranges.n; r++)
	{
		uintptr_t	p = TYPEALIGN(sizeof(void *), ranges.range[r].start);
		uintptr_t	end = ranges.range[r].start + ranges.range[r].size;

		for (; p + sizeof(md_slots) <= end; p += sizeof(void *))
		{
			void	  **words = (void **) p;
			int			i;
			int			mismatches = 0;

			if (words[0] != md_slots[0] || words[2] != md_slots[2])
				continue;
			for (i = 0; i < (int) N_MD_SLOTS; i++)
				if (words[i] != md_slots[i])
					mismatches++;
			if (mismatches == 0)
			{
				match = words;
				*prot = ranges.range[r].prot;
				nmatches++;
			}
			else
				npartial++;
		}
	}

	if (nmatches == 1)
		return match;
	if (nmatches == 0 && npartial > 0)
		ereport(FATAL,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("bpext found the storage manager table already modified"),
				 errdetail("Another library in shared_preload_libraries has replaced md.c functions in smgrsw[]."),
				 errhint("Remove the other storage-manager extension from shared_preload_libraries, or bpext.")));
	ereport(FATAL,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("bpext could not identify the server's storage manager table"),
			 errdetail("%d candidate tables were found where exactly one was expected.",
					   nmatches),
			 errhint("This server build is not supported by bpext.")));
	return NULL;				/* keep compiler quiet */
}

static void
set_protection(void **table, int prot)
{
	long		pagesize = sysconf(_SC_PAGESIZE);
	uintptr_t	first = TYPEALIGN_DOWN(pagesize, (uintptr_t) table);
	uintptr_t	last = TYPEALIGN(pagesize, (uintptr_t) (table + N_MD_SLOTS));

	if (mprotect((void *) first, last - first, prot) != 0)
		ereport(FATAL,
				(errmsg("bpext could not change the protection of the storage manager table: %m")));
}

/* The truncate wrapper of the server's shape (16: either; else the headers'). */
static void *
truncate_wrapper(const BpextSmgrWrappers *wrappers, bool server_has_old_blocks)
{
#if BPEXT_TRUNCATE_SHAPE_AT_START
	return server_has_old_blocks ?
		(void *) wrappers->truncate_with_old_blocks :
		(void *) wrappers->truncate_without_old_blocks;
#else
	Assert(server_has_old_blocks == BPEXT_TRUNCATE_HAS_OLD_BLOCKS);
	return (void *) wrappers->truncate;
#endif
}

void
bpext_interpose_smgr(const BpextSmgrWrappers *wrappers)
{
	void	   *truncate = truncate_wrapper(wrappers, check_server_version());
	void	  **table;
	int			prot;
	struct
	{
		int			slot;
		void	   *fn;
	}			swaps[] = {
		{BPEXT_SLOT_CREATE, (void *) wrappers->create},
		{BPEXT_SLOT_UNLINK, (void *) wrappers->unlink},
		{BPEXT_SLOT_EXTEND, (void *) wrappers->extend},
		{BPEXT_SLOT_TRUNCATE, truncate},
#if BPEXT_SMGR_ZEROEXTEND
		{BPEXT_SLOT_ZEROEXTEND, (void *) wrappers->zeroextend},
#endif
#if BPEXT_SMGR_VECTORED
		{BPEXT_SLOT_PREFETCH, (void *) wrappers->prefetch},
		{BPEXT_SLOT_READV, (void *) wrappers->readv},
		{BPEXT_SLOT_WRITEV, (void *) wrappers->writev},
#if BPEXT_SMGR_AIO
		{BPEXT_SLOT_MAXCOMBINE, (void *) wrappers->maxcombine},
		{BPEXT_SLOT_STARTREADV, (void *) wrappers->startreadv},
#endif
#else
		{BPEXT_SLOT_READ, (void *) wrappers->read},
		{BPEXT_SLOT_WRITE, (void *) wrappers->write},
#endif
	};
	int			i;

	table = find_smgr_table(&prot);

	/* Keep PROT_EXEC where the table shares its pages with code. */
	set_protection(table, prot | PROT_WRITE);
	for (i = 0; i < (int) lengthof(swaps); i++)
		table[swaps[i].slot] = swaps[i].fn;
	set_protection(table, prot);

	for (i = 0; i < (int) lengthof(swaps); i++)
		if (((void *volatile *) table)[swaps[i].slot] != swaps[i].fn)
			ereport(FATAL,
					(errmsg("bpext could not install its storage manager wrappers")));
}

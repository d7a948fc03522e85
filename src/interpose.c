/*-------------------------------------------------------------------------
 *
 * interpose.c
 *	  Route the server's storage-manager calls through bpext.
 *
 * PostgreSQL has no storage-manager hook.  Every read, write, extend,
 * truncate, unlink and create goes through smgr.c's private table
 * "static const f_smgr smgrsw[]", whose only entry points at md.c.  The
 * linker places that table in the executable's PT_GNU_RELRO segment
 * (read-only after relocation).  In the postmaster, while
 * shared_preload_libraries is processed, we find the table as the one
 * pointer-aligned run of words equal to the md.c functions in the order
 * the version's f_smgr declares them (compat.h), make its page writable,
 * swap the slots bpext wraps, make it read-only again and read it back.
 * Every process forked from the postmaster inherits the patched table.
 *
 * Anything unexpected (no match, several matches, a slot that already
 * points elsewhere because another library got there first, a minor
 * release whose signatures we have not audited) stops the server with a
 * FATAL message that says why: running with a half-installed tier would be
 * worse than not starting.
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

typedef struct RelroRange
{
	uintptr_t	start;
	size_t		size;
	bool		found;
} RelroRange;

/* dl_iterate_phdr callback: the main executable is the unnamed entry. */
static int
find_main_relro(struct dl_phdr_info *info, size_t size, void *arg)
{
	RelroRange *range = (RelroRange *) arg;
	int			i;

	if (info->dlpi_name != NULL && info->dlpi_name[0] != '\0')
		return 0;
	for (i = 0; i < info->dlpi_phnum; i++)
	{
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type == PT_GNU_RELRO)
		{
			range->start = info->dlpi_addr + ph->p_vaddr;
			range->size = ph->p_memsz;
			range->found = true;
		}
	}
	return 1;					/* the first entry is the only one we want */
}

/* The minor release must match the slot signatures we were built for. */
static void
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
	if (BPEXT_TRUNCATE_SPLIT_IN_MINOR &&
		server_has_old_blocks != (BPEXT_TRUNCATE_HAS_OLD_BLOCKS != 0))
		ereport(FATAL,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("bpext was built for a different minor release of PostgreSQL %d than the server's (%s)",
						PG_VERSION_NUM / 10000, vstr),
				 errdetail("The storage manager's truncate signature changed in %s; the server and the headers bpext was built with are on different sides of that change.",
						   BPEXT_TRUNCATE_CHANGED_IN),
				 errhint("Rebuild bpext against the server's own headers.")));
	if (version < BPEXT_AUDITED_MIN_VERSION_NUM ||
		version > BPEXT_AUDITED_MAX_VERSION_NUM)
		ereport(FATAL,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("bpext has not been audited for server version %s", vstr),
				 errhint("Supported: server_version_num %d to %d.",
						 BPEXT_AUDITED_MIN_VERSION_NUM,
						 BPEXT_AUDITED_MAX_VERSION_NUM)));
}

/*
 * Find the table; FATAL unless there is exactly one.  A run that matches
 * except for the slots we wrap means another library has already patched
 * it; we say so rather than stack on top of it.
 */
static void **
find_smgr_table(void)
{
	RelroRange	range = {0, 0, false};
	uintptr_t	p;
	uintptr_t	end;
	void	  **match = NULL;
	int			nmatches = 0;
	int			npartial = 0;

	dl_iterate_phdr(find_main_relro, &range);
	if (!range.found)
		ereport(FATAL,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("bpext could not find the server's storage manager table"),
				 errdetail("The postgres executable has no PT_GNU_RELRO segment.")));

	p = TYPEALIGN(sizeof(void *), range.start);
	end = range.start + range.size;
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
			nmatches++;
		}
		else
			npartial++;
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

void
bpext_interpose_smgr(const BpextSmgrWrappers *wrappers)
{
	void	  **table;
	struct
	{
		int			slot;
		void	   *fn;
	}			swaps[] = {
		{BPEXT_SLOT_CREATE, (void *) wrappers->create},
		{BPEXT_SLOT_UNLINK, (void *) wrappers->unlink},
		{BPEXT_SLOT_EXTEND, (void *) wrappers->extend},
		{BPEXT_SLOT_TRUNCATE, (void *) wrappers->truncate},
#if BPEXT_SMGR_VECTORED
		{BPEXT_SLOT_ZEROEXTEND, (void *) wrappers->zeroextend},
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

	check_server_version();
	table = find_smgr_table();

	set_protection(table, PROT_READ | PROT_WRITE);
	for (i = 0; i < (int) lengthof(swaps); i++)
		table[swaps[i].slot] = swaps[i].fn;
	set_protection(table, PROT_READ);

	for (i = 0; i < (int) lengthof(swaps); i++)
		if (((void *volatile *) table)[swaps[i].slot] != swaps[i].fn)
			ereport(FATAL,
					(errmsg("bpext could not install its storage manager wrappers")));
}

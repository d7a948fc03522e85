/*-------------------------------------------------------------------------
 *
 * test_hooks.h
 *	  Test-only hooks, compiled in only by `make BPEXT_TEST_HOOKS=1`
 *	  (test_hooks.c): a sparse tier file and a synthetic fill of the map,
 *	  for the scale bench (test/bench/scale.sh), and holds that stop a
 *	  process at a point of a race until the test lets it go, and a page
 *	  index too small for its map, so that its overflow paths run, and a
 *	  pause in helpers that hand over a descriptor.  Release
 *	  builds (the Debian packages, `make dist`) never define
 *	  BPEXT_TEST_HOOKS, and then BPEXT_TEST_SPARSE_FILE() is the constant
 *	  false, BPEXT_TEST_HOLD_TARGET() InvalidOid, and the rest nothing.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_TEST_HOOKS_H
#define BPEXT_TEST_HOOKS_H

#ifdef BPEXT_TEST_HOOKS

extern bool bpext_test_sparse_file;
extern bool bpext_test_holds;
extern int	bpext_test_index_groups;
extern int	bpext_test_helper_pause_ms;
extern void bpext_test_define_settings(void);

extern Oid	bpext_test_hold_target(const char *point);
extern bool bpext_test_hold(const char *point, uint32 slot);
extern void bpext_test_note(const char *point);

/* bpext.test_sparse_file: size the tier file with ftruncate only. */
#define BPEXT_TEST_SPARSE_FILE()	(bpext_test_sparse_file)

/*
 * bpext.test_index_groups: the page index's groups, if not 0.  At most
 * this many, so that the count of buckets (four a group) fits in 32 bits.
 */
#define BPEXT_TEST_INDEX_GROUPS()	(bpext_test_index_groups)
#define BPEXT_TEST_INDEX_GROUPS_MAX	(1 << 26)

/*
 * bpext.test_helper_pause: how long a helper (helper_io.c) that handed
 * over a descriptor waits before it says it is done.
 */
#define BPEXT_TEST_HELPER_PAUSE_MS()	(bpext_test_helper_pause_ms)

/*
 * Holds, with bpext.test_holds on (see test_hooks.c): the relation number
 * whose slots are held at point, or InvalidOid; hold there (true if it
 * did); note that a process got to point.
 */
#define BPEXT_TEST_HOLD_TARGET(point) \
	(bpext_test_holds ? bpext_test_hold_target(point) : InvalidOid)
#define BPEXT_TEST_HOLD(point, slot)	bpext_test_hold((point), (slot))
#define BPEXT_TEST_NOTE(point) \
	do { \
		if (bpext_test_holds) \
			bpext_test_note(point); \
	} while (0)

#else

#define BPEXT_TEST_SPARSE_FILE()	false
#define BPEXT_TEST_INDEX_GROUPS()	0
#define BPEXT_TEST_HELPER_PAUSE_MS()	0
#define BPEXT_TEST_HOLD_TARGET(point)	InvalidOid
#define BPEXT_TEST_HOLD(point, slot)	false
#define BPEXT_TEST_NOTE(point)		((void) 0)

#endif							/* BPEXT_TEST_HOOKS */

#endif							/* BPEXT_TEST_HOOKS_H */

/*-------------------------------------------------------------------------
 *
 * test_hooks.h
 *	  Test-only hooks, compiled in only by `make BPEXT_TEST_HOOKS=1`
 *	  (test_hooks.c): a sparse tier file and a synthetic fill of the map,
 *	  for the scale bench (test/bench/scale.sh).  Release builds (the
 *	  Debian packages, `make dist`) never define BPEXT_TEST_HOOKS, and then
 *	  BPEXT_TEST_SPARSE_FILE() is the constant false.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_TEST_HOOKS_H
#define BPEXT_TEST_HOOKS_H

#ifdef BPEXT_TEST_HOOKS

extern bool bpext_test_sparse_file;
extern void bpext_test_define_settings(void);

/* bpext.test_sparse_file: size the tier file with ftruncate only. */
#define BPEXT_TEST_SPARSE_FILE()	(bpext_test_sparse_file)

#else

#define BPEXT_TEST_SPARSE_FILE()	false

#endif							/* BPEXT_TEST_HOOKS */

#endif							/* BPEXT_TEST_HOOKS_H */

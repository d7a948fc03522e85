/*-------------------------------------------------------------------------
 *
 * postmaster_io.h
 *	  Tier-file I/O the postmaster needs done, in a process it can stop
 *	  waiting for.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_POSTMASTER_IO_H
#define BPEXT_POSTMASTER_IO_H

/* Work done in the helper process; it reports with the two calls below. */
typedef void (*PostmasterIoWork) (void *arg);

/* In the helper: a call returned (progress), and what to hand back. */
extern void postmaster_io_progress(void);
extern void postmaster_io_send(const void *data, size_t len);

/* Shared with tier_writer.c's helper. */
extern void bpext_close_inherited_fds(const int *keep, int nkeep);
extern void bpext_reset_signals(void);
extern uint64 bpext_monotonic_ms(void);

/* In the postmaster: run work, collect what it sent. */
extern bool postmaster_io_run(PostmasterIoWork work, void *arg,
							  int timeout_ms, char **result, size_t *resultlen,
							  char *why, size_t whylen);

#endif							/* BPEXT_POSTMASTER_IO_H */

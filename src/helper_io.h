/*-------------------------------------------------------------------------
 *
 * helper_io.h
 *	  Tier-file work done in a helper process that the caller can stop
 *	  waiting for.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_HELPER_IO_H
#define BPEXT_HELPER_IO_H

#include <sys/types.h>

/* Work done in the helper process; it reports with the calls below. */
typedef void (*HelperIoWork) (void *arg);

/* What to run, and how long its silence may last. */
typedef struct HelperIoRun
{
	const char *title;			/* the helper's process title */
	HelperIoWork work;
	void	   *arg;
	const int  *keep;			/* descriptors the helper keeps open */
	int			nkeep;
	int			timeout_ms;		/* the longest silence allowed; 0: none */
	bool		worker_child;	/* the bpext worker's child (worker_children.c) */
} HelperIoRun;

/* How a run ended when it did not answer. */
typedef enum HelperIoFailure
{
	HELPER_IO_OK,
	HELPER_IO_NOT_STARTED,		/* no helper could be started */
	HELPER_IO_TIMED_OUT,		/* silent for timeout_ms: abandoned */
	HELPER_IO_INTERRUPTED,		/* shutdown, cancel: abandoned */
	HELPER_IO_DIED				/* it ended without an answer */
} HelperIoFailure;

/* In the helper: a call returned (progress), and what to hand back. */
extern void helper_io_progress(void);
extern void helper_io_send(const void *data, size_t len);
extern void helper_io_send_fd(const void *data, size_t len, int fd);

/* In every helper process, also tier_writer.c's and tier_readers.c's. */
extern void bpext_close_inherited_fds(const int *keep, int nkeep);
extern void bpext_helper_leave_server(void);
extern void bpext_helper_title(const char *title);
extern uint64 bpext_monotonic_ms(void);

/* In the caller (the postmaster, the bpext worker, a backend). */
extern HelperIoFailure helper_io_run(const HelperIoRun *run, char **result,
									 size_t *resultlen, int *fd,
									 char *why, size_t whylen);

#endif							/* BPEXT_HELPER_IO_H */

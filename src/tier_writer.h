/*-------------------------------------------------------------------------
 *
 * tier_writer.h
 *	  The bpext worker's I/O on the tier file it holds, done by a helper
 *	  process it can abandon when the device hangs.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_TIER_WRITER_H
#define BPEXT_TIER_WRITER_H

#include <sys/types.h>
#include <sys/uio.h>

extern void tier_writer_enable(void);
extern bool tier_writer_enabled(void);
extern ssize_t tier_writer_pwritev(int fd, const struct iovec *iov,
								   int iovcnt, off_t offset);
extern ssize_t tier_writer_pread(int fd, char *buf, size_t len, off_t offset);
extern int	tier_writer_datasync(int fd);
extern int	tier_writer_start_writeback(int fd);
extern int	tier_writer_truncate(int fd, off_t size);
extern int	tier_writer_allocate(int fd, off_t offset, off_t len);
extern bool tier_writer_check(int fd, const char *path, off_t min_size,
							  char *err, size_t errlen);
extern void tier_writer_stop(void);

/*
 * pwritev on the tier file: through the helper in a process that has one
 * (the bpext worker), directly anywhere else.
 */
static inline ssize_t
bpext_tier_pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset)
{
	if (tier_writer_enabled())
		return tier_writer_pwritev(fd, iov, iovcnt, offset);
	return pwritev(fd, iov, iovcnt, offset);
}

#endif							/* BPEXT_TIER_WRITER_H */

/*-------------------------------------------------------------------------
 *
 * free_space.h
 *	  The free space a tier must leave on a file system it shares with the
 *	  cluster's own files (bpext.min_free_space).
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_FREE_SPACE_H
#define BPEXT_FREE_SPACE_H

/* What bpext_space_allows found, for the message that refuses a size. */
typedef struct BpextSpaceCheck
{
	char		path[MAXPGPATH];	/* the tier file */
	char		shares[64];		/* which cluster files share its file
								 * system ("the data directory"), or "" */
	uint64		fs_size;		/* bytes in that file system */
	uint64		fs_free;		/* bytes free for unprivileged users */
	uint64		wanted;			/* file size asked for */
	uint64		held;			/* bytes the file already holds */
	uint64		growth;			/* what preallocating would newly take */
	uint64		reserve;		/* bytes bpext.min_free_space keeps free */
} BpextSpaceCheck;

extern bool bpext_space_allows(const char *path, int fd, uint64 new_size,
							   BpextSpaceCheck *check);
extern bool bpext_space_check(const char *path, int fd, uint64 new_size,
							  BpextSpaceCheck *check, bool *answered,
							  char *why, size_t whylen);
extern void bpext_space_reason(const BpextSpaceCheck *check, char *buf,
							   size_t buflen);
extern int	bpext_space_errdetail(const BpextSpaceCheck *check);
extern int	bpext_space_errhint(void);

#endif							/* BPEXT_FREE_SPACE_H */

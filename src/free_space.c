/*-------------------------------------------------------------------------
 *
 * free_space.c
 *	  The free space a tier must leave on a file system it shares with the
 *	  cluster's own files (bpext.min_free_space).
 *
 * The tier file is preallocated: enabling a 60 GB tier takes 60 GB at
 * once.  Where the tier file shares a file system with the data directory,
 * pg_wal or a tablespace, that can leave the server's next WAL write
 * without room, and a WAL write that fails with ENOSPC is a PANIC.  A
 * cache must never cause that, so bpext refuses a size whose growth would
 * leave that file system with less free space than bpext.min_free_space.
 * Only the growth counts (what preallocation would newly take, so not the
 * blocks the file already holds): shrinking, and reusing a file of the
 * same size, are always allowed.  A file system that holds none of the
 * cluster's files is the tier's alone and needs no reserve.
 *
 * The check runs twice: in the backend of bpext_enable()/bpext_resize(),
 * which can still refuse with an ERROR before anything is written to
 * postgresql.auto.conf, and in the bpext worker right before it creates
 * or grows the file (tier_control.c), because free space changes in
 * between and because a reload or a server start has no caller to refuse.
 *
 * Nothing here raises an error or allocates: a file system that cannot be
 * examined is let through, and opening or growing the file then reports
 * whatever is wrong with it.
 *
 * Locking: none; this only reads the file systems and the settings.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "miscadmin.h"

#include "free_space.h"
#include "settings.h"
#include "test_hooks.h"

#define MB(bytes)			((unsigned long long) ((bytes) >> 20))
#define MB_ROUNDED_UP(bytes) ((unsigned long long) (((bytes) + (1 << 20) - 1) >> 20))

/*
 * Does the file system st_dev also hold the data directory, pg_wal or a
 * tablespace?  Links are followed (stat, not lstat): pg_wal and the
 * entries of pg_tblspc are symbolic links when they live elsewhere.
 * Names the first one found in shares.
 */
static bool
holds_cluster_files(dev_t dev, char *shares, size_t shareslen)
{
	char		path[MAXPGPATH];
	struct stat st;
	DIR		   *dir;
	struct dirent *de;
	bool		found = false;

	if (stat(DataDir, &st) == 0 && st.st_dev == dev)
	{
		strlcpy(shares, "the data directory", shareslen);
		return true;
	}
	snprintf(path, sizeof(path), "%s/pg_wal", DataDir);
	if (stat(path, &st) == 0 && st.st_dev == dev)
	{
		strlcpy(shares, "pg_wal", shareslen);
		return true;
	}

	snprintf(path, sizeof(path), "%s/pg_tblspc", DataDir);
	dir = opendir(path);
	if (dir == NULL)
		return false;
	while (!found && (de = readdir(dir)) != NULL)
	{
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof(path), "%s/pg_tblspc/%s", DataDir, de->d_name);
		if (stat(path, &st) == 0 && st.st_dev == dev)
		{
			snprintf(shares, shareslen, "tablespace %s", de->d_name);
			found = true;
		}
	}
	closedir(dir);
	return found;
}

/*
 * May the tier file at path (held open as fd by the worker, or -1) be
 * made new_size bytes long?  Fills in check for the message either way.
 * If no file is open, an existing regular file at path is the one that
 * will be reused (tier_file_open truncates it before preallocating), so
 * its blocks count as held; otherwise the file system is its directory's.
 */
bool
bpext_space_allows(const char *path, int fd, uint64 new_size,
				   BpextSpaceCheck *check)
{
	struct stat st;
	struct statvfs vfs;
	char		dir[MAXPGPATH];

	memset(check, 0, sizeof(*check));
	strlcpy(check->path, path, sizeof(check->path));
	check->wanted = new_size;

	/* Test builds' sparse tier file takes no space up front. */
	if (BPEXT_TEST_SPARSE_FILE())
		return true;

	if (fd >= 0)
	{
		if (fstat(fd, &st) != 0 || fstatvfs(fd, &vfs) != 0)
			return true;
		check->held = (uint64) st.st_blocks * 512;
	}
	else if (lstat(path, &st) == 0 && S_ISREG(st.st_mode))
	{
		if (statvfs(path, &vfs) != 0)
			return true;
		check->held = (uint64) st.st_blocks * 512;
	}
	else
	{
		strlcpy(dir, path, sizeof(dir));
		get_parent_directory(dir);
		if (dir[0] == '\0')
			strlcpy(dir, "/", sizeof(dir));
		if (stat(dir, &st) != 0 || statvfs(dir, &vfs) != 0)
			return true;
	}

	check->fs_size = (uint64) vfs.f_blocks * vfs.f_frsize;
	check->fs_free = (uint64) vfs.f_bavail * vfs.f_frsize;
	check->growth = new_size > check->held ? new_size - check->held : 0;
	check->reserve = bpext_min_free_space_bytes(check->fs_size);

	if (check->growth == 0 ||
		!holds_cluster_files(st.st_dev, check->shares, sizeof(check->shares)))
		return true;
	return check->fs_free >= check->growth &&
		check->fs_free - check->growth >= check->reserve;
}

/* One line for the message and for last_error. */
void
bpext_space_reason(const BpextSpaceCheck *check, char *buf, size_t buflen)
{
	snprintf(buf, buflen,
			 "a tier file of %llu MB at \"%s\" would leave less than bpext.min_free_space free on the file system it shares with %s",
			 MB(check->wanted), check->path, check->shares);
}

/* The numbers behind a refusal, as an errdetail inside ereport(). */
int
bpext_space_errdetail(const BpextSpaceCheck *check)
{
	return errdetail("That file system has %llu MB free. The tier file holds %llu MB there now and would take %llu MB more for the %llu MB asked, and bpext.min_free_space (%s) keeps %llu MB free.",
					 MB(check->fs_free), MB(check->held),
					 MB_ROUNDED_UP(check->growth), MB(check->wanted),
					 bpext_min_free_space ? bpext_min_free_space : "",
					 MB_ROUNDED_UP(check->reserve));
}

int
bpext_space_errhint(void)
{
	return errhint("Choose a smaller size, put the tier file on a file system that holds none of the cluster's files (data directory, pg_wal, tablespaces), or lower bpext.min_free_space.");
}

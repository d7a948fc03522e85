/*-------------------------------------------------------------------------
 *
 * warm_datadir.c
 *	  A warm restart's ties to the data directory: pg_control, the token
 *	  that binds a saved map to the directory it was saved in, and flushing
 *	  the file systems that hold data files before a map is saved.
 *
 * warm_restart.c saves, decides and loads; what it needs from the data
 * directory is here.  The token (WARM_TOKEN_FILE) is written, renamed
 * into place and removed durably (the directory is fsynced each time), so
 * that a crash never leaves a token that a later start could trust
 * without the map it belongs to.  pg_control is read with its CRC
 * checked, never through PostgreSQL's own reader, which raises errors:
 * nothing here may fail the server's start or its exit.
 *
 * No locking: only the postmaster (at its exit after a clean shutdown,
 * when every other process has exited, and at its start, before it forks
 * any) and the helper processes it runs these in (warm_restart.c) call
 * them.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog_internal.h"
#include "catalog/pg_control.h"
#include "port/pg_crc32c.h"

#include "warm_datadir.h"

/* In the data directory: a link to each tablespace's directory. */
#define WARM_TBLSPC_DIR			"pg_tblspc"

/* pg_control's state, in words, for the log. */
const char *
warm_datadir_state_name(DBState state)
{
	switch (state)
	{
		case DB_STARTUP:
			return "starting up";
		case DB_SHUTDOWNED:
			return "shut down";
		case DB_SHUTDOWNED_IN_RECOVERY:
			return "shut down in recovery";
		case DB_SHUTDOWNING:
			return "shutting down";
		case DB_IN_CRASH_RECOVERY:
			return "in crash recovery";
		case DB_IN_ARCHIVE_RECOVERY:
			return "in archive recovery";
		case DB_IN_PRODUCTION:
			return "in production";
	}
	return "unknown";
}

/* Read pg_control; false if it cannot be read or its CRC is wrong. */
bool
warm_datadir_read_control(ControlFileData *control)
{
	int			fd = open(XLOG_CONTROL_FILE, O_RDONLY | PG_BINARY, 0);
	pg_crc32c	crc;
	ssize_t		n;

	if (fd < 0)
		return false;
	n = read(fd, control, sizeof(ControlFileData));
	close(fd);
	if (n != sizeof(ControlFileData))
		return false;
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, control, offsetof(ControlFileData, crc));
	FIN_CRC32C(crc);
	return EQ_CRC32C(crc, control->crc);
}

/* Did pg_control's cluster shut down cleanly, as a primary or a standby? */
bool
warm_datadir_clean_shutdown(const ControlFileData *control)
{
	return control->state == DB_SHUTDOWNED ||
		control->state == DB_SHUTDOWNED_IN_RECOVERY;
}

/* Read the token; false if there is none, or it is not one. */
bool
warm_datadir_read_token(uint64 *token)
{
	char		buf[64];
	int			fd = open(WARM_TOKEN_FILE, O_RDONLY, 0);
	ssize_t		n;
	char	   *end;

	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	errno = 0;
	*token = strtou64(buf, &end, 16);
	return errno == 0 && end != buf && (*end == '\n' || *end == '\0');
}

/*
 * Flush every file system that holds data files: the data directory's and
 * each tablespace's.  A primary's shutdown checkpoint has fsynced every
 * data file, but a standby's shutdown skips its restartpoint when no
 * checkpoint record came since the last one, and then leaves the writes
 * made since in the kernel's cache; a map that describes them must not be
 * durable before they are.
 */
bool
warm_datadir_sync_file_systems(void)
{
#ifdef HAVE_SYNCFS
	DIR		   *dir;
	struct dirent *de;
	int			fd = open(".", O_RDONLY, 0);
	bool		ok = fd >= 0 && syncfs(fd) == 0;

	if (fd >= 0)
		close(fd);
	dir = opendir(WARM_TBLSPC_DIR);
	if (dir == NULL)
		return false;
	while (ok && (de = readdir(dir)) != NULL)
	{
		char		path[MAXPGPATH];

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", WARM_TBLSPC_DIR, de->d_name);
		fd = open(path, O_RDONLY, 0);	/* through the link */
		ok = fd >= 0 && syncfs(fd) == 0;
		if (fd >= 0)
			close(fd);
	}
	closedir(dir);
	return ok;
#else
	errno = ENOSYS;
	return false;
#endif
}

static bool
fsync_data_directory(void)
{
	int			fd = open(".", O_RDONLY, 0);
	bool		ok;

	if (fd < 0)
		return false;
	ok = fsync(fd) == 0;
	close(fd);
	return ok;
}

/* Write the token into the data directory, durably. */
bool
warm_datadir_write_token(uint64 token)
{
	char		buf[64];
	int			len = snprintf(buf, sizeof(buf), "%016llx\n",
							   (unsigned long long) token);
	int			fd;
	bool		ok;

	fd = open(WARM_TOKEN_TEMP_FILE, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW,
			  S_IRUSR | S_IWUSR);
	if (fd < 0)
		return false;
	ok = write(fd, buf, len) == len && fsync(fd) == 0;
	if (close(fd) != 0)
		ok = false;
	if (ok)
		ok = rename(WARM_TOKEN_TEMP_FILE, WARM_TOKEN_FILE) == 0;
	if (!ok)
	{
		(void) unlink(WARM_TOKEN_TEMP_FILE);
		return false;
	}
	return fsync_data_directory();
}

/* Remove the token, durably; true if there is none left. */
bool
warm_datadir_remove_token(void)
{
	if (unlink(WARM_TOKEN_FILE) != 0)
		return errno == ENOENT;
	return fsync_data_directory();
}

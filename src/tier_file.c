/*-------------------------------------------------------------------------
 *
 * tier_file.c
 *	  The tier file: one preallocated file on a fast local disk, an 8 kB
 *	  header followed by one 8 kB slot per cached page.
 *
 * The file holds no data of its own worth keeping: it is rebuilt empty at
 * every server start and whenever the tier is re-enabled.  What matters is
 * that bpext never damages a file that is not its own and never uses one
 * that another cluster is using.  So the bpext worker, the only process
 * that creates, resizes or validates it (always through a helper process,
 * helper_io.c and tier_writer.c, never with a call of its own: see
 * doc/hung-device.md):
 *
 *	- creates it whole or not at all: unnamed in its directory (O_TMPFILE),
 *	  mode 0600, given its header, and only then linked at the path, which
 *	  fails if anything is there (create_tier_file).  A helper killed part
 *	  way, as when the device hangs during bpext_enable, leaves no file
 *	  that later attempts would have to refuse as not bpext's (on a file
 *	  system without O_TMPFILE it is created by name, O_CREAT | O_EXCL |
 *	  O_NOFOLLOW, and such a helper still leaves an empty file);
 *	- opens an existing one only if it is a regular file (not a symbolic
 *	  link) that starts with our magic, format and block size, and is not
 *	  locked by another server (flock, held while the tier is enabled);
 *	- takes over, empty, a file that another cluster made (another system
 *	  identifier: the same bpext.path after pg_upgrade, say) only if its
 *	  header is intact (CRC) and no server holds its lock: the tier never
 *	  holds the only copy of anything, and a cluster still using the file
 *	  holds the lock;
 *	- writes the header with the slot count, then preallocates the slots
 *	  and the slot directory that follows them (slot_directory.c).
 *
 * The worker holds the file through a read-only descriptor that carries
 * the flock, which a helper opened and handed over (tier_control.c); its
 * helpers open descriptions of their own.  Every other process only reads
 * the file: it opens it read-only and without access-time updates
 * (O_NOATIME: an atime update is a journal transaction, which a hung device
 * never lets finish), on first use and again whenever
 * BpextCtl->file_incarnation says the worker has taken another file.  It
 * opens it through the worker's own descriptor (/proc/PID/fd/N), which
 * resolves no path on the tier's file system at all, and by path only if
 * that fails; and the release of a read-only description takes no lock of
 * the file system's.  Page I/O uses O_DIRECT
 * when bpext.direct_io is on and the file system allows it; writes (the
 * worker's helper) go through an aligned bounce buffer when the caller's
 * buffer is not aligned (PostgreSQL 15's shared buffers are only
 * cache-line aligned), and reads never wait for the device in the caller
 * (tier_file_read_page, tier_readers.c).
 *
 * Nothing here raises an error: failures come back as false/-1 with errno
 * or a message, and the caller decides (tier_control.c turns them into the
 * error state).
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include "access/xlog.h"
#include "miscadmin.h"
#include "port/pg_crc32c.h"
#include "storage/fd.h"

#include "helper_io.h"
#include "settings.h"
#include "test_hooks.h"
#include "tier_control.h"
#include "tier_file.h"
#include "tier_readers.h"
#include "tier_writer.h"

/* cachestat(2), Linux 6.5; the same number on every architecture. */
#ifndef SYS_cachestat
#define SYS_CACHESTAT		451
#else
#define SYS_CACHESTAT		SYS_cachestat
#endif

#define TIER_MAGIC			"BPEXTIER"
#define TIER_FORMAT_VERSION	1
#define TIER_MAX_IOV		64

/* Preallocation goes in pieces, each a sign of life (helper_io.c). */
#define ALLOCATE_PIECE		((off_t) 1024 * 1024 * 1024)

typedef struct TierFileHeader
{
	char		magic[8];
	uint32		format_version;
	uint32		blcksz;
	uint64		system_identifier;
	uint32		nslots;
	uint32		reserved;
	pg_crc32c	crc;			/* of the fields above */
} TierFileHeader;

/*
 * This process's descriptor for the tier file.  In the bpext worker, the
 * one it holds (tier_file_set_worker_fd), which this file never opens or
 * closes there.
 */
static int	local_fd = -1;
static uint32 local_incarnation = 0;
static bool local_direct = false;
static bool in_worker = false;

/* An aligned page for O_DIRECT bounces; static so it is never allocated
 * inside an smgr call. */
static union
{
	char		data[BLCKSZ + TIER_IO_ALIGN];
	double		force_align;
}			bounce_space;

/*
 * The cluster's system identifier, which tier file headers carry.  Cached,
 * because the postmaster's helper process (helper_io.c) checks headers
 * after it has detached from the shared memory that holds pg_control's
 * copy: tier_file_cache_identity() must have run in the postmaster first.
 */
static uint64 system_identifier = 0;

void
tier_file_cache_identity(void)
{
	if (system_identifier == 0)
		system_identifier = GetSystemIdentifier();
}

static uint64
cluster_identifier(void)
{
	tier_file_cache_identity();
	return system_identifier;
}

static char *
bounce_page(void)
{
	return (char *) TYPEALIGN(TIER_IO_ALIGN, bounce_space.data);
}

static pg_crc32c
header_crc(const TierFileHeader *hdr)
{
	pg_crc32c	crc;

	INIT_CRC32C(crc);
	COMP_CRC32C(crc, hdr, offsetof(TierFileHeader, crc));
	FIN_CRC32C(crc);
	return crc;
}

/* The file's first block, for nslots slots, in the bounce page. */
static char *
build_header(uint32 nslots)
{
	char	   *page = bounce_page();
	TierFileHeader *hdr = (TierFileHeader *) page;

	memset(page, 0, BLCKSZ);
	memcpy(hdr->magic, TIER_MAGIC, sizeof(hdr->magic));
	hdr->format_version = TIER_FORMAT_VERSION;
	hdr->blcksz = BLCKSZ;
	hdr->system_identifier = cluster_identifier();
	hdr->nslots = nslots;
	hdr->crc = header_crc(hdr);
	return page;
}

/* In a helper: write the header, durably. */
static bool
write_header(int fd, uint32 nslots, char *err, size_t errlen)
{
	char	   *page = build_header(nslots);
	ssize_t		n;

	n = pwrite(fd, page, BLCKSZ, 0);
	if (n < 0)
	{
		snprintf(err, errlen, "could not write the tier file header: %m");
		return false;
	}
	if (n != BLCKSZ)
	{
		snprintf(err, errlen, "could not write the tier file header: short write (%d of %d bytes)",
				 (int) n, BLCKSZ);
		return false;
	}
	/* Durably: a saved map's description it wipes must not come back. */
	if (fdatasync(fd) != 0)
	{
		snprintf(err, errlen, "could not fsync the tier file header: %m");
		return false;
	}
	return true;
}

/*
 * In a helper: create the tier file at path, with its header (see the file
 * header).  Where the file system has no O_TMPFILE, it is created by name
 * (O_CREAT | O_EXCL | O_NOFOLLOW), header after.  Returns the descriptor,
 * or -1 with a message in err.
 *
 * Once linked, the file is opened again by its path and the unnamed
 * descriptor closed: a descriptor of an O_TMPFILE file keeps its anonymous
 * name for good ("dir/#inode (deleted)" in /proc/PID/fd), and every
 * description bpext later opens through /proc would carry it, so lsof
 * would show the tier as a deleted file held open.
 */
static int
create_tier_file(const char *path, uint32 nslots, char *err, size_t errlen)
{
	char		dir[MAXPGPATH];
	char		self[64];
	struct stat unnamed;
	struct stat linked;
	int			fd;
	int			named;

	/* The directory, with its slash: the path of its files begins so. */
	strlcpy(dir, path, sizeof(dir));
	strrchr(dir, '/')[1] = '\0';
#ifdef O_TMPFILE
	fd = open(dir, O_RDWR | O_TMPFILE | O_CLOEXEC, S_IRUSR | S_IWUSR);
#else
	fd = -1;
	errno = EOPNOTSUPP;
#endif
	if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL))
	{
		fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
				  S_IRUSR | S_IWUSR);
		if (fd < 0 && errno == ELOOP)
			snprintf(err, errlen, "\"%s\" is a symbolic link; bpext does not follow links",
					 path);
		else if (fd < 0)
			snprintf(err, errlen, "could not create \"%s\": %m", path);
		else if (!write_header(fd, nslots, err, errlen))
		{
			close(fd);
			return -1;
		}
		return fd;
	}
	if (fd < 0)
	{
		if (errno == ENOENT)
			snprintf(err, errlen, "could not create \"%s\": the directory does not exist",
					 path);
		else
			snprintf(err, errlen, "could not create \"%s\": %m", path);
		return -1;
	}
	if (!write_header(fd, nslots, err, errlen))
	{
		close(fd);
		return -1;
	}
	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	if (linkat(AT_FDCWD, self, AT_FDCWD, path, AT_SYMLINK_FOLLOW) != 0)
	{
		snprintf(err, errlen, "could not create \"%s\": %m", path);
		close(fd);
		return -1;
	}

	/* Named from here on; anything else at the path is not ours. */
	named = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (named < 0)
	{
		snprintf(err, errlen, "could not open \"%s\" after creating it: %m",
				 path);
		close(fd);
		return -1;
	}
	if (fstat(fd, &unnamed) != 0 || fstat(named, &linked) != 0)
	{
		snprintf(err, errlen, "could not stat \"%s\": %m", path);
		close(named);
		close(fd);
		return -1;
	}
	close(fd);
	if (unnamed.st_dev != linked.st_dev || unnamed.st_ino != linked.st_ino)
	{
		snprintf(err, errlen, "\"%s\" was replaced while bpext created it",
				 path);
		close(named);
		return -1;
	}
	return named;
}

/*
 * In a helper: reserve the file's blocks up to size, a piece at a time,
 * each reported as progress (helper_io.c), so that a large tier on a
 * device that answers is not taken for a hung one; 0 or an errno.
 *
 * TEST BUILDS ONLY (make BPEXT_TEST_HOOKS=1, test_hooks.h): with
 * bpext.test_sparse_file the file is only extended, sparse, so that the
 * scale bench's terabyte tier fits on a small disk.  Any check of free
 * space before preallocating is skipped by the same condition.
 */
static int
preallocate(int fd, off_t size)
{
	off_t		done;

	if (BPEXT_TEST_SPARSE_FILE())
		return ftruncate(fd, size) == 0 ? 0 : errno;
	for (done = 0; done < size; done += ALLOCATE_PIECE)
	{
		int			rc = posix_fallocate(fd, done, Min(ALLOCATE_PIECE, size - done));

		if (rc != 0)
			return rc;
		helper_io_progress();
	}
	return 0;
}

/*
 * open() without access-time updates when the file is ours to say so
 * (O_NOATIME is refused, EPERM, on a file of another owner).
 */
static int
open_noatime(const char *path, int flags)
{
	int			fd = open(path, flags | O_NOATIME);

	if (fd < 0 && errno == EPERM)
		fd = open(path, flags);
	return fd;
}

/*
 * Best-effort truncation after a failure that is already being reported;
 * a second failure here changes nothing for the caller.
 */
static void
cut_to(int fd, off_t size)
{
	if (ftruncate(fd, size) != 0)
		return;
}

/*
 * Decide whether an existing file may be reused as the tier file.  Our own
 * files qualify: right magic, format and block size, same cluster.  So
 * does, if the caller then gets its lock, a bpext tier file of another
 * cluster whose header is intact: *other_cluster is set to that cluster's
 * system identifier (0 for our own file).
 */
static bool
check_existing(int fd, const char *path, uint64 *other_cluster, char *err,
			   size_t errlen)
{
	TierFileHeader hdr;
	struct stat st;

	*other_cluster = 0;
	if (tier_file_check_ours(fd, path, NULL, err, errlen))
		return true;

	/*
	 * Only a regular file whose header passed every check but the
	 * cluster's (err keeps what tier_file_check_ours said).
	 */
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
		pread(fd, &hdr, sizeof(hdr), 0) != sizeof(hdr) ||
		memcmp(hdr.magic, TIER_MAGIC, sizeof(hdr.magic)) != 0 ||
		hdr.format_version != TIER_FORMAT_VERSION || hdr.blcksz != BLCKSZ ||
		hdr.system_identifier == cluster_identifier() ||
		hdr.system_identifier == 0 || header_crc(&hdr) != hdr.crc)
		return false;
	*other_cluster = hdr.system_identifier;
	return true;
}

/*
 * Is the open file one of this cluster's tier files?  Sets *nslots (if
 * not NULL) to the slot count its header gives.
 */
bool
tier_file_check_ours(int fd, const char *path, uint32 *nslots, char *err,
					 size_t errlen)
{
	char	   *page = bounce_page();
	TierFileHeader *hdr = (TierFileHeader *) page;
	struct stat st;
	ssize_t		n;

	if (fstat(fd, &st) != 0)
	{
		snprintf(err, errlen, "could not stat \"%s\": %m", path);
		return false;
	}
	if (!S_ISREG(st.st_mode))
	{
		snprintf(err, errlen, "\"%s\" exists and is not a regular file", path);
		return false;
	}
	n = pread(fd, page, BLCKSZ, 0);
	if (n < 0)
	{
		snprintf(err, errlen, "could not read \"%s\": %m", path);
		return false;
	}
	if (n < (ssize_t) sizeof(TierFileHeader) ||
		memcmp(hdr->magic, TIER_MAGIC, sizeof(hdr->magic)) != 0)
	{
		snprintf(err, errlen,
				 "\"%s\" exists and is not a bpext tier file; bpext will not overwrite it",
				 path);
		return false;
	}
	if (hdr->format_version != TIER_FORMAT_VERSION || hdr->blcksz != BLCKSZ)
	{
		snprintf(err, errlen,
				 "\"%s\" is a bpext tier file of another format (version %u, block size %u)",
				 path, hdr->format_version, hdr->blcksz);
		return false;
	}
	if (hdr->system_identifier != cluster_identifier())
	{
		snprintf(err, errlen,
				 "\"%s\" is the tier file of another cluster (system identifier " UINT64_FORMAT ", this cluster's is " UINT64_FORMAT ")",
				 path, hdr->system_identifier, cluster_identifier());
		return false;
	}
	if (nslots != NULL)
	{
		/* Only a warm start relies on the slot count. */
		if (header_crc(hdr) != hdr->crc)
		{
			snprintf(err, errlen, "the header of \"%s\" is damaged", path);
			return false;
		}
		*nslots = hdr->nslots;
	}
	return true;
}

static pg_crc32c
warm_crc(const TierWarmHeader *warm)
{
	pg_crc32c	crc;

	INIT_CRC32C(crc);
	COMP_CRC32C(crc, warm, offsetof(TierWarmHeader, crc));
	FIN_CRC32C(crc);
	return crc;
}

/*
 * Read the saved-map description from the header block.  False if there
 * is none, or it is damaged (a torn write): both mean no saved map.
 */
bool
tier_file_read_warm(int fd, TierWarmHeader *warm)
{
	if (pread(fd, warm, sizeof(*warm), TIER_WARM_OFFSET) != sizeof(*warm))
		return false;
	return memcmp(warm->magic, TIER_WARM_MAGIC, sizeof(warm->magic)) == 0 &&
		warm->version == TIER_WARM_VERSION && warm_crc(warm) == warm->crc;
}

/* Write it, durably.  False with errno set on failure. */
bool
tier_file_write_warm(int fd, TierWarmHeader *warm)
{
	memcpy(warm->magic, TIER_WARM_MAGIC, sizeof(warm->magic));
	warm->version = TIER_WARM_VERSION;
	warm->crc = warm_crc(warm);
	if (pwrite(fd, warm, sizeof(*warm), TIER_WARM_OFFSET) != sizeof(*warm))
	{
		if (errno == 0)
			errno = ENOSPC;
		return false;
	}
	return fdatasync(fd) == 0;
}

/*
 * A warm start, in the worker's helper (helper_io.c): open the tier file
 * the postmaster took the saved map from, as it is (no truncation), and
 * lock it.  It must be the same file (dev, ino) and still carry the nonce
 * the postmaster wrote when it took the map: a server that used the file
 * since would have rewritten the header.  Returns the descriptor (read
 * only: the worker's hold, see the file header), or -1 and a message.
 */
int
tier_file_reopen(const char *path, uint64 dev, uint64 ino, uint64 nonce,
				 char *err, size_t errlen)
{
	TierWarmHeader warm;
	uint64		got_dev;
	uint64		got_ino;
	int			fd;

	fd = open_noatime(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
	{
		snprintf(err, errlen, "could not open \"%s\": %m", path);
		return -1;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) != 0)
	{
		snprintf(err, errlen, "\"%s\" is in use by another server", path);
		close(fd);
		return -1;
	}
	if (!tier_file_identity(fd, &got_dev, &got_ino) ||
		got_dev != dev || got_ino != ino)
	{
		snprintf(err, errlen, "\"%s\" was replaced after the server started", path);
		close(fd);
		return -1;
	}
	if (!tier_file_read_warm(fd, &warm) || warm.nonce != nonce)
	{
		snprintf(err, errlen, "\"%s\" was rewritten after the server started", path);
		close(fd);
		return -1;
	}
	(void) fchmod(fd, S_IRUSR | S_IWUSR);
	return fd;
}

/*
 * In the worker's helper (helper_io.c): open or create the tier file at
 * path, sized for nslots, and lock it.  Returns a read-only descriptor
 * that holds the lock (the worker's hold on the file, see the file
 * header), or -1 with a message in err.  *work_fd is set to the
 * read-write descriptor the file was prepared through (-1 on failure),
 * which the caller closes only once the worker has its answer: as the
 * last writable description of the file, its release may wait on the
 * device.  *taken_from is set to the system identifier of the cluster
 * whose tier file this was, if it was another's (check_existing), and to 0
 * otherwise.  A file whose identity is one of the nbusy in busy_devs and
 * busy_inos is refused: helpers the worker gave up on may still write to
 * it.
 */
int
tier_file_open(const char *path, uint32 nslots, const uint64 *busy_devs,
			   const uint64 *busy_inos, int nbusy, uint64 *taken_from,
			   int *work_fd, char *err, size_t errlen)
{
	char		self[64];
	struct stat st;
	int			fd;
	int			hold;
	bool		created = false;
	uint64		other_cluster = 0;
	int			rc;
	int			i;

	*taken_from = 0;
	*work_fd = -1;

	if (path[0] != '/')
	{
		snprintf(err, errlen, "bpext.path \"%s\" is not an absolute path", path);
		return -1;
	}

	fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
	{
		fd = create_tier_file(path, nslots, err, errlen);
		if (fd < 0)
			return -1;
		created = true;
	}
	if (fd < 0)
	{
		if (errno == ELOOP)
			snprintf(err, errlen, "\"%s\" is a symbolic link; bpext does not follow links",
					 path);
		else if (errno == ENOENT)
			snprintf(err, errlen, "could not create \"%s\": the directory does not exist",
					 path);
		else
			snprintf(err, errlen, "could not open \"%s\": %m", path);
		return -1;
	}

	if (!created && !check_existing(fd, path, &other_cluster, err, errlen))
	{
		close(fd);
		return -1;
	}
	helper_io_progress();
	if (fstat(fd, &st) != 0)
	{
		snprintf(err, errlen, "could not stat \"%s\": %m", path);
		close(fd);
		return -1;
	}
	for (i = 0; i < nbusy; i++)
	{
		if ((uint64) st.st_dev == busy_devs[i] && (uint64) st.st_ino == busy_inos[i])
		{
			snprintf(err, errlen,
					 "\"%s\" is the tier file bpext gave up on when its device stopped answering, and a helper process is still waiting for that device",
					 path);
			close(fd);
			return -1;
		}
	}

	/* The worker's hold: a read-only description of the same file. */
	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	hold = open_noatime(self, O_RDONLY | O_CLOEXEC);
	if (hold < 0)
	{
		snprintf(err, errlen, "could not open \"%s\" again: %m", path);
		close(fd);
		return -1;
	}

	if (flock(hold, LOCK_EX | LOCK_NB) != 0)
	{
		if (errno == EWOULDBLOCK && other_cluster != 0)
			snprintf(err, errlen,
					 "\"%s\" is the tier file of another cluster (system identifier " UINT64_FORMAT "), which is using it",
					 path, other_cluster);
		else if (errno == EWOULDBLOCK)
			snprintf(err, errlen, "\"%s\" is in use by another server, or by a bpext helper process still waiting for its device",
					 path);
		else
			snprintf(err, errlen, "could not lock \"%s\": %m", path);
		close(hold);
		close(fd);
		return -1;
	}
	*taken_from = other_cluster;

	/*
	 * An existing file: cut whatever a previous incarnation left and give
	 * it a new header (a new file has its header already).  Then
	 * preallocate.
	 */
	if (!created)
	{
		(void) fchmod(fd, S_IRUSR | S_IWUSR);
		if (ftruncate(fd, BLCKSZ) != 0)
		{
			snprintf(err, errlen, "could not truncate \"%s\": %m", path);
			goto fail;
		}
		if (!write_header(fd, nslots, err, errlen))
			goto fail;
	}
	helper_io_progress();
	rc = preallocate(fd, TIER_FILE_BYTES(nslots));
	if (rc != 0)
	{
		errno = rc;
		snprintf(err, errlen, "could not allocate %llu bytes for \"%s\": %m",
				 (unsigned long long) TIER_FILE_BYTES(nslots), path);
		goto fail;
	}
	*work_fd = fd;
	return hold;

fail:
	/* Give the space back; the file stays, marked as ours. */
	cut_to(fd, TIER_FILE_SIZE(0));
	close(hold);
	close(fd);
	return -1;
}

/*
 * Grow or shrink the file the worker holds (fd, its descriptor), through
 * its helper (tier_writer.c): each call waits at most bpext.io_timeout, a
 * growth goes a piece at a time, and the worker leaves between pieces if
 * it is asked to exit.  False with a message if a call failed or did not
 * answer (the tier has then been switched off).
 */
bool
tier_file_resize(int fd, uint32 old_nslots, uint32 new_nslots, char *err,
				 size_t errlen)
{
	off_t		old_size = TIER_FILE_BYTES(old_nslots);
	off_t		new_size = TIER_FILE_BYTES(new_nslots);

	if (new_nslots > old_nslots)
	{
		off_t		done;
		int			rc = 0;

		if (BPEXT_TEST_SPARSE_FILE())
			rc = tier_writer_truncate(fd, new_size) == 0 ? 0 : errno;
		for (done = old_size; rc == 0 && !BPEXT_TEST_SPARSE_FILE() &&
			 done < new_size; done += ALLOCATE_PIECE)
		{
			CHECK_FOR_INTERRUPTS();
			rc = tier_writer_allocate(fd, done,
									  Min(ALLOCATE_PIECE, new_size - done));
		}
		if (rc != 0)
		{
			errno = rc;
			snprintf(err, errlen, "could not grow the tier file to %llu bytes: %m",
					 (unsigned long long) new_size);
			if (rc != ETIMEDOUT && rc != EIO)
				(void) tier_writer_truncate(fd, old_size);
			return false;
		}
	}
	else if (tier_writer_truncate(fd, new_size) != 0)
	{
		snprintf(err, errlen, "could not shrink the tier file: %m");
		return false;
	}
	return tier_file_write_header(fd, new_nslots, err, errlen);
}

/*
 * Write the header for nslots slots into the file the worker holds,
 * durably, through its helper.
 */
bool
tier_file_write_header(int fd, uint32 nslots, char *err, size_t errlen)
{
	struct iovec iov = {.iov_base = build_header(nslots),.iov_len = BLCKSZ};
	ssize_t		n = tier_writer_pwritev(fd, &iov, 1, 0);

	if (n != BLCKSZ)
	{
		if (n >= 0)
			errno = ENOSPC;
		snprintf(err, errlen, "could not write the tier file header: %m");
		return false;
	}
	/* Durably: a saved map's description it wipes must not come back. */
	if (tier_writer_datasync(fd) != 0)
	{
		snprintf(err, errlen, "could not fsync the tier file header: %m");
		return false;
	}
	return true;
}

/* The identity of an open file, for BpextCtl->file_dev/file_ino. */
bool
tier_file_identity(int fd, uint64 *dev, uint64 *ino)
{
	struct stat st;

	if (fstat(fd, &st) != 0)
		return false;
	*dev = (uint64) st.st_dev;
	*ino = (uint64) st.st_ino;
	return true;
}

/*
 * Is the file now at path the one whose identity is given?  Used before
 * removing it: bpext removes only the file it created or validated.
 */
bool
tier_file_is(const char *path, uint64 dev, uint64 ino)
{
	struct stat st;

	return lstat(path, &st) == 0 && S_ISREG(st.st_mode) &&
		(uint64) st.st_dev == dev && (uint64) st.st_ino == ino;
}

/*
 * In the bpext worker: the descriptor it holds for the file of this
 * incarnation (-1: none), which its page writes name (they are made by
 * its helper, tier_writer.c).  The worker never opens the file by path.
 */
void
tier_file_set_worker_fd(int fd, uint32 incarnation)
{
	in_worker = true;
	local_fd = fd;
	local_incarnation = incarnation;
	local_direct = false;		/* the helper writes from aligned memory */
}

/*
 * Open the file the worker holds as its descriptor holder_fd in process
 * holder: through /proc, if that still is the file (dev, ino), else by
 * path.
 */
static int
open_held(const char *path, int holder, int holder_fd, uint64 want_dev,
		  uint64 want_ino, int flags)
{
	if (holder > 0 && holder_fd >= 0)
	{
		char		proc[64];
		uint64		dev;
		uint64		ino;
		int			fd;

		snprintf(proc, sizeof(proc), "/proc/%d/fd/%d", holder, holder_fd);
		fd = open_noatime(proc, flags);
		if (fd >= 0 && tier_file_identity(fd, &dev, &ino) &&
			dev == want_dev && ino == want_ino)
			return fd;
		if (fd >= 0)
			close(fd);
		else if (errno == EINVAL)
			return -1;			/* O_DIRECT refused: the caller retries */
	}
	return open_noatime(path, flags | O_NOFOLLOW);
}

/*
 * This process's descriptor, (re)opened if the worker has switched files
 * since we last looked.  Returns -1 with errno set on failure.  The
 * descriptor is counted against max_files_per_process like any other
 * file PostgreSQL holds open outside its VFD cache.
 */
static int
local_tier_fd(void)
{
	uint32		incarnation = pg_atomic_read_u32(&BpextCtl->file_incarnation);
	char		path[MAXPGPATH];
	uint64		want_dev;
	uint64		want_ino;
	uint64		dev;
	uint64		ino;
	int			holder;
	int			holder_fd;
	int			flags = O_RDONLY | O_CLOEXEC;

	if (in_worker)
	{
		if (local_fd >= 0 && incarnation == local_incarnation)
			return local_fd;
		errno = ESTALE;
		return -1;
	}
	if (local_fd >= 0 && incarnation == local_incarnation)
		return local_fd;
	tier_file_close_local();

	LWLockAcquire(BpextCtl->control_lock, LW_SHARED);
	strlcpy(path, BpextCtl->path, sizeof(path));
	want_dev = BpextCtl->file_dev;
	want_ino = BpextCtl->file_ino;
	holder = BpextCtl->worker_pid;
	holder_fd = BpextCtl->worker_tier_fd;
	LWLockRelease(BpextCtl->control_lock);

	if (!AcquireExternalFD())
	{
		errno = EMFILE;
		return -1;
	}
	local_direct = bpext_direct_io;
	local_fd = open_held(path, holder, holder_fd, want_dev, want_ino,
						 flags | (local_direct ? O_DIRECT : 0));
	if (local_fd < 0 && local_direct && errno == EINVAL)
	{
		/* The file system does not do direct I/O (tmpfs, for one). */
		local_direct = false;
		local_fd = open_held(path, holder, holder_fd, want_dev, want_ino,
							 flags);
	}
	if (local_fd < 0)
	{
		ReleaseExternalFD();
		return -1;
	}

	/* Never use a file that was put where the worker's file was. */
	if (!tier_file_identity(local_fd, &dev, &ino) ||
		dev != want_dev || ino != want_ino)
	{
		tier_file_close_local();
		bpext_tier_fail("the tier file has been replaced", 0);
		errno = ESTALE;
		return -1;
	}
	local_incarnation = incarnation;
	return local_fd;
}

void
tier_file_close_local(void)
{
	if (in_worker)
		return;
	if (local_fd >= 0)
	{
		close(local_fd);
		ReleaseExternalFD();
	}
	local_fd = -1;
}

/*
 * Can this process do tier I/O now?  A process that cannot open the file
 * (out of descriptors, say) just does without the tier; whether the file
 * itself is still there is the worker's to check.
 */
bool
tier_file_ready(void)
{
	return local_tier_fd() >= 0;
}

static inline bool
needs_bounce(const char *buf)
{
	return local_direct && (uintptr_t) buf % TIER_IO_ALIGN != 0;
}

/* Is st the regular file (dev, ino)? */
static bool
is_the_file(const struct stat *st, uint64 dev, uint64 ino)
{
	return S_ISREG(st->st_mode) && (uint64) st->st_dev == dev &&
		(uint64) st->st_ino == ino;
}

/*
 * In the bpext worker, before it forks a helper that does I/O through fd
 * (tier_writer.c, tier_readers.c) and before it closes fd (tier_control.c):
 * is fd still the tier file it took, BpextCtl->file_dev and file_ino,
 * which *dev and *ino get?  A helper writes wherever its descriptor
 * points, so one that no longer is the file (closed and its number reused,
 * which would be a bug) must never reach a helper: it could be a data
 * file.  False with err saying what fd is instead, and errno EBADF if fd
 * is not open at all, ESTALE if it is something else.  The worker makes
 * no call that could wait on the tier's device (doc/hung-device.md): statx
 * with AT_STATX_DONT_SYNC answers from the inode in memory, and asks no
 * file system (FUSE, NFS) for fresh attributes.  Where statx is missing
 * or refused (ENOSYS, or EPERM from a seccomp filter older than it),
 * fstat does.
 */
bool
tier_file_worker_fd_valid(int fd, uint64 *dev, uint64 *ino, char *err,
						  size_t errlen)
{
	struct statx stx;
	struct stat st;

	LWLockAcquire(BpextCtl->control_lock, LW_SHARED);
	*dev = BpextCtl->file_dev;
	*ino = BpextCtl->file_ino;
	LWLockRelease(BpextCtl->control_lock);

	if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC,
			  STATX_TYPE | STATX_INO, &stx) == 0)
	{
		memset(&st, 0, sizeof(st));
		st.st_mode = stx.stx_mode;
		st.st_dev = makedev(stx.stx_dev_major, stx.stx_dev_minor);
		st.st_ino = stx.stx_ino;
	}
	else if ((errno != ENOSYS && errno != EPERM) || fstat(fd, &st) != 0)
	{
		int			save_errno = errno;

		snprintf(err, errlen,
				 "could not look at the bpext worker's descriptor %d of the tier file: %m",
				 fd);
		errno = save_errno;
		return false;
	}
	if (!is_the_file(&st, *dev, *ino))
	{
		snprintf(err, errlen,
				 "the bpext worker's descriptor %d of the tier file refers to another %s",
				 fd, S_ISREG(st.st_mode) ? "file" :
				 S_ISFIFO(st.st_mode) ? "object (a pipe)" :
				 S_ISSOCK(st.st_mode) ? "object (a socket)" : "object");
		errno = ESTALE;
		return false;
	}
	return true;
}

/*
 * In a helper process (tier_writer.c's, tier_readers.c's): a descriptor of
 * the tier file with an open file description of its own, read-write for
 * the writer, instead of the inherited fd (the worker's), which is closed,
 * so that a helper left stuck in the kernel never holds the worker's
 * flock.  It is opened through the inherited one (/proc/self/fd/N), so it
 * is the very file the worker holds, even one renamed or removed since
 * (the worker's check notices that and lets the file go), and it must be
 * the regular file (dev, ino) the worker checked before the fork
 * (tier_file_worker_fd_valid).  Direct I/O as bpext.direct_io says and the
 * file system allows.  -1 with errno set if that fails (ESTALE: not the
 * file); every I/O then fails with it.
 */
int
tier_file_reopen_own(int fd, bool writable, uint64 dev, uint64 ino)
{
	char		link[64];
	struct stat inherited;
	struct stat own_st;
	int			flags = (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC;
	int			own = -1;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	if (fstat(fd, &inherited) != 0)
		own = -1;
	else if (!is_the_file(&inherited, dev, ino))
		errno = ESTALE;
	else
	{
		own = open_noatime(link, flags | (bpext_direct_io ? O_DIRECT : 0));
		if (own < 0 && bpext_direct_io && errno == EINVAL)
			own = open_noatime(link, flags);
		if (own >= 0 &&
			(fstat(own, &own_st) != 0 || !is_the_file(&own_st, dev, ino)))
		{
			close(own);
			own = -1;
			errno = ESTALE;
		}
	}
	close(fd);
	return own;
}

/*
 * Is the whole slot in the kernel's page cache?  A read with RWF_NOWAIT
 * of a page that is not still starts the kernel's readahead of it (it
 * returns EAGAIN only after), and submitting that read can sleep on a
 * device whose queue is full of requests that never complete: so such a
 * read is never tried.  cachestat (Linux 6.5) looks, without any I/O; on
 * an older kernel the read is tried as before (doc/hung-device.md).
 */
static bool
slot_cached(int fd, uint32 slot)
{
	static bool cachestat_unsupported = false;
	struct
	{
		uint64		off;
		uint64		len;
	}			range;
	struct
	{
		uint64		nr_cache;
		uint64		nr_dirty;
		uint64		nr_writeback;
		uint64		nr_evicted;
		uint64		nr_recently_evicted;
	}			found;

	if (cachestat_unsupported)
		return true;
	range.off = (uint64) TIER_SLOT_OFFSET(slot);
	range.len = BLCKSZ;
	if (syscall(SYS_CACHESTAT, fd, &range, &found, 0) != 0)
	{
		if (errno != ENOSYS && errno != EOPNOTSUPP && errno != EINVAL)
			return false;
		cachestat_unsupported = true;
		return true;
	}
	return found.nr_cache * (uint64) getpagesize() >= BLCKSZ;
}

/*
 * Read one slot, never waiting for the device: a page the kernel's page
 * cache holds is read here (preadv2 with RWF_NOWAIT, which returns EAGAIN
 * or a short count instead of going to the device), any other through a
 * reader helper that the caller waits for at most bpext.io_timeout
 * (tier_readers.c).  With O_DIRECT, or where the file system does not do
 * RWF_NOWAIT, every read goes to a helper.  TIER_READ_FAILED has errno
 * set (0 for a short read).
 */
TierReadResult
tier_file_read_page(uint32 slot, char *page)
{
	static bool nowait_unsupported = false;
	int			fd = local_tier_fd();

	if (fd < 0)
		return TIER_READ_UNAVAILABLE;
	if (!local_direct && !nowait_unsupported && slot_cached(fd, slot))
	{
		struct iovec iov = {.iov_base = page,.iov_len = BLCKSZ};
		ssize_t		n = preadv2(fd, &iov, 1, TIER_SLOT_OFFSET(slot), RWF_NOWAIT);

		if (n == BLCKSZ)
			return TIER_READ_OK;
		if (n < 0 && (errno == EOPNOTSUPP || errno == ENOSYS || errno == EINVAL))
			nowait_unsupported = true;
		else if (n < 0 && errno != EAGAIN)
			return TIER_READ_FAILED;
	}
	return tier_readers_read(page, TIER_SLOT_OFFSET(slot), local_incarnation);
}

/*
 * Write npages pages into consecutive slots from first_slot, in as few
 * system calls as the iovec limit allows.  *incarnation is set to the file
 * incarnation the pages went to, which the caller must check before
 * publishing them (the worker may have moved to another file meanwhile);
 * it is 0 if this process could not open the current file, which is no
 * fault of the tier's disk (the file was just switched or released).
 * False with errno set (ENOSPC for a short write) on failure.
 */
bool
tier_file_write_pages(uint32 first_slot, int npages, char *const *pages,
					  uint32 *incarnation)
{
	int			fd = local_tier_fd();
	int			done = 0;

	*incarnation = fd >= 0 ? local_incarnation : 0;
	if (fd < 0)
		return false;

	while (done < npages)
	{
		struct iovec iov[TIER_MAX_IOV];
		int			n = 0;
		ssize_t		written;

		/* Unaligned pages go one at a time through the bounce buffer. */
		if (needs_bounce(pages[done]))
		{
			memcpy(bounce_page(), pages[done], BLCKSZ);
			iov[0].iov_base = bounce_page();
			iov[0].iov_len = BLCKSZ;
			n = 1;
		}
		else
		{
			while (done + n < npages && n < TIER_MAX_IOV &&
				   !needs_bounce(pages[done + n]))
			{
				iov[n].iov_base = pages[done + n];
				iov[n].iov_len = BLCKSZ;
				n++;
			}
		}
		written = bpext_tier_pwritev(fd, iov, n,
									 TIER_SLOT_OFFSET(first_slot + done));
		if (written != (ssize_t) n * BLCKSZ)
		{
			if (written >= 0)
				errno = ENOSPC; /* a short write means the disk is full */
			return false;
		}
		done += n;
	}
	return true;
}

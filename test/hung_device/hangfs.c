/*-------------------------------------------------------------------------
 *
 * hangfs.c
 *	  A FUSE file system of one file that stops answering on demand, to
 *	  make a block device that hangs the way a stuck SSD does (test/
 *	  hung_device.sh puts a loop device and ext4 on top of it).
 *
 *	  hangfs BACKING CTLDIR MOUNTPOINT [FUSE option ...]
 *
 * MOUNTPOINT shows one file, "disk", whose contents are those of BACKING
 * (a file on an ordinary file system, sparse, of the device's size).
 * Every read, write, flush and fsync of it is served by this program, in
 * as many threads as there are requests (up to 64): the file is opened
 * with direct_io, so no read is answered from the kernel's page cache of
 * the FUSE file.
 *
 * CTLDIR is watched every 10 ms, never through the mount itself:
 *
 *	hang		while this file exists, every request waits in this
 *				program until it is removed; the kernel then has no answer
 *				for the loop device, and every process doing I/O on the file
 *				system above sleeps in uninterruptible disk sleep (state D),
 *				as on a device that accepts requests and never completes them
 *	latency_us	a number: each request waits that many microseconds
 *				before it is served (requests in parallel wait side by
 *				side), to emulate a device's latency; absent or 0: none
 *	status		written by this program: "hung held=N" (N requests are
 *				waiting) or "answering", then "latency_us=N"
 *
 * Locking: one mutex protects the gate (hung, held, latency); requests wait
 * on its condition variable, which the watcher broadcasts on release.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#define FUSE_USE_VERSION 31
#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DISK_NAME	"disk"
#define DISK_PATH	"/" DISK_NAME
#define WATCH_NS	(10 * 1000 * 1000)

static int	backing_fd = -1;
static off_t backing_size;
static char *ctl_dir;

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_open = PTHREAD_COND_INITIALIZER;
static bool hung;
static unsigned held;
static long latency_us;

/*
 * Every request passes here before it touches the backing file: it waits
 * while the device is hung, then for the latency set, if any.
 */
static void
gate(void)
{
	long		latency;

	pthread_mutex_lock(&gate_lock);
	while (hung)
	{
		held++;
		pthread_cond_wait(&gate_open, &gate_lock);
		held--;
	}
	latency = latency_us;
	pthread_mutex_unlock(&gate_lock);
	if (latency > 0)
	{
		struct timespec ts = {latency / 1000000, (latency % 1000000) * 1000};

		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
	}
}

/* The number in CTLDIR/name, 0 if there is none. */
static long
read_number(const char *name)
{
	char		path[4096];
	char		buf[32] = "";
	FILE	   *f;

	snprintf(path, sizeof(path), "%s/%s", ctl_dir, name);
	f = fopen(path, "r");
	if (f == NULL)
		return 0;
	if (fgets(buf, sizeof(buf), f) == NULL)
		buf[0] = '\0';
	fclose(f);
	return strtol(buf, NULL, 10);
}

/* CTLDIR/status, replaced whole (a reader never sees half of it). */
static void
write_status(const char *text)
{
	char		tmp[4096],
				path[4096];
	FILE	   *f;

	snprintf(tmp, sizeof(tmp), "%s/.status.tmp", ctl_dir);
	snprintf(path, sizeof(path), "%s/status", ctl_dir);
	f = fopen(tmp, "w");
	if (f == NULL)
		return;
	fputs(text, f);
	if (fclose(f) == 0)
		(void) rename(tmp, path);
}

/*
 * The control directory is polled rather than watched with inotify: it is
 * a few syscalls every 10 ms, and a directory removed and made again (a
 * test's cleanup) needs no special case.
 */
static void *
watch(void *arg)
{
	char		last[128] = "";

	(void) arg;
	for (;;)
	{
		char		hang_path[4096];
		char		status[128];
		bool		hang_now;
		long		latency;
		struct timespec ts = {0, WATCH_NS};

		snprintf(hang_path, sizeof(hang_path), "%s/hang", ctl_dir);
		hang_now = access(hang_path, F_OK) == 0;
		latency = read_number("latency_us");
		if (latency < 0)
			latency = 0;

		pthread_mutex_lock(&gate_lock);
		if (hung && !hang_now)
			pthread_cond_broadcast(&gate_open);
		hung = hang_now;
		latency_us = latency;
		if (hung)
			snprintf(status, sizeof(status), "hung held=%u\nlatency_us=%ld\n",
					 held, latency);
		else
			snprintf(status, sizeof(status), "answering\nlatency_us=%ld\n",
					 latency);
		pthread_mutex_unlock(&gate_lock);

		if (strcmp(status, last) != 0)
		{
			write_status(status);
			strcpy(last, status);
		}
		nanosleep(&ts, NULL);
	}
	return NULL;
}

/*
 * direct_io for every file: the kernel keeps no page cache of the FUSE
 * file, so every read of the loop device reaches the gate.
 */
static void *
hf_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	/*
	 * As many asynchronous requests (a loop device's direct I/O) side by
	 * side as there are threads to serve them; the kernel's default is 12.
	 */
	conn->max_background = 64;
	conn->congestion_threshold = 48;
	cfg->direct_io = 1;
	cfg->kernel_cache = 0;
	return NULL;
}

/* The root directory and "disk", the size of the backing file. */
static int
hf_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	(void) fi;
	memset(st, 0, sizeof(*st));
	st->st_uid = getuid();
	st->st_gid = getgid();
	if (strcmp(path, "/") == 0)
	{
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
		return 0;
	}
	if (strcmp(path, DISK_PATH) == 0)
	{
		st->st_mode = S_IFREG | 0600;
		st->st_nlink = 1;
		st->st_size = backing_size;
		st->st_blocks = backing_size / 512;
		return 0;
	}
	return -ENOENT;
}

/* The root directory lists "disk" alone. */
static int
hf_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
		   struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
	(void) off;
	(void) fi;
	(void) flags;
	if (strcmp(path, "/") != 0)
		return -ENOENT;
	fill(buf, ".", NULL, 0, 0);
	fill(buf, "..", NULL, 0, 0);
	fill(buf, DISK_NAME, NULL, 0, 0);
	return 0;
}

/* Only "disk" opens, with direct_io (see hf_init). */
static int
hf_open(const char *path, struct fuse_file_info *fi)
{
	if (strcmp(path, DISK_PATH) != 0)
		return -ENOENT;
	fi->direct_io = 1;
	return 0;
}

/*
 * The requests of the device: each passes the gate, then does what a disk
 * would with the backing file.  A write past the end is a full device.
 */
static int
hf_read(const char *path, char *buf, size_t size, off_t off,
		struct fuse_file_info *fi)
{
	size_t		done = 0;

	(void) path;
	(void) fi;
	gate();
	while (done < size)
	{
		ssize_t		n = pread(backing_fd, buf + done, size - done, off + done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		done += n;
	}
	return done;
}

static int
hf_write(const char *path, const char *buf, size_t size, off_t off,
		 struct fuse_file_info *fi)
{
	size_t		done = 0;

	(void) path;
	(void) fi;
	if (off >= backing_size)
		return -ENOSPC;
	if ((off_t) size > backing_size - off)
		size = backing_size - off;
	gate();
	while (done < size)
	{
		ssize_t		n = pwrite(backing_fd, buf + done, size - done, off + done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		done += n;
	}
	return done;
}

static int
hf_flush(const char *path, struct fuse_file_info *fi)
{
	(void) path;
	(void) fi;
	gate();
	return 0;
}

static int
hf_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
	(void) path;
	(void) datasync;
	(void) fi;
	gate();
	return fdatasync(backing_fd) == 0 ? 0 : -errno;
}

static const struct fuse_operations hf_ops = {
	.init = hf_init,
	.getattr = hf_getattr,
	.readdir = hf_readdir,
	.open = hf_open,
	.read = hf_read,
	.write = hf_write,
	.flush = hf_flush,
	.fsync = hf_fsync,
};

int
main(int argc, char **argv)
{
	struct stat st;
	pthread_t	watcher;
	char	  **fargv;
	int			fargc = 0;

	if (argc < 4)
	{
		fprintf(stderr, "usage: %s BACKING CTLDIR MOUNTPOINT [FUSE option ...]\n",
				argv[0]);
		return 2;
	}
	backing_fd = open(argv[1], O_RDWR | O_CLOEXEC);
	if (backing_fd < 0 || fstat(backing_fd, &st) != 0)
	{
		fprintf(stderr, "hangfs: could not open \"%s\": %s\n", argv[1],
				strerror(errno));
		return 1;
	}
	backing_size = st.st_size;
	ctl_dir = argv[2];
	if (pthread_create(&watcher, NULL, watch, NULL) != 0)
	{
		fprintf(stderr, "hangfs: could not start the watcher thread\n");
		return 1;
	}

	/* Foreground, multi-threaded, up to 64 requests served at once. */
	fargv = calloc(argc + 4, sizeof(char *));
	if (fargv == NULL)
		return 1;
	fargv[fargc++] = argv[0];
	fargv[fargc++] = argv[3];
	fargv[fargc++] = "-f";
	fargv[fargc++] = "-o";
	fargv[fargc++] = "fsname=hangfs,subtype=hangfs,max_threads=64";
	for (int i = 4; i < argc; i++)
		fargv[fargc++] = argv[i];
	return fuse_main(fargc, fargv, &hf_ops, NULL);
}

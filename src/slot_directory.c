/*-------------------------------------------------------------------------
 *
 * slot_directory.c
 *	  The slot directory: what each slot of the tier file holds, kept on
 *	  the SSD after the last slot, so that a warm restart can rebuild the
 *	  map and a clean shutdown only has to write what changed lately.
 *
 * A tier of a terabyte has 134 million slots.  Writing the whole map at
 * shutdown would take minutes, past pg_ctl's wait and most service
 * managers' patience.  Instead the directory is written as the map
 * changes: one entry per slot (the map's own fields: relation entry,
 * block, generation and CRC), 511 entries to an 8 kB chunk, and a bitmap
 * in shared memory with one bit per chunk that says the map changed since
 * the chunk was last written.  tier_map_index.c sets the bit whenever it
 * publishes or unlinks a slot; the bpext worker writes the dirty chunks
 * every round (slot_directory_flush); at exit the postmaster writes what
 * is still dirty, then the relation table, then the header
 * (warm_restart.c).
 *
 * Which chunks may be believed.  Every chunk carries the directory's id
 * (random, chosen whenever the directory is laid out on a new or resized
 * file, and again after bpext_drop_clean_buffers empties the whole map)
 * and its own number under a CRC.  A chunk whose CRC does not match
 * describes empty slots: never written since the lay-out, torn, or left by
 * another file.  Leaving a page out of the map is always safe; what must
 * never happen is a valid chunk that names a page the map no longer holds
 * in that slot.  That is why every change of a slot marks its chunk dirty,
 * why a warm start's load marks dirty every chunk it could not publish
 * whole, and why a load given up marks dirty every chunk it had not yet
 * read.  Dead slots (their relation's generation moved on) need no mark:
 * the relation table saved at exit carries the generations, and the load
 * skips entries of an older one.
 *
 * Emptying the whole map.  A drop of every page marks every chunk dirty,
 * and rewriting them all as empty would be 2 GB of writes at a terabyte,
 * made while the drop's processes already keep the CPUs busy.  So the
 * drop asks for a new id (slot_directory_begin_drop) before it empties
 * anything, and the next writer of chunks takes one before it writes:
 * every chunk on disk then reads as empty, which is safe, and the chunks
 * the drop empties are left unwritten like any empty chunk never written
 * under the current id.  The worker's rounds are held off until the drop
 * ends (slot_directory_end_drop): a terabyte drop takes tens of seconds
 * and empties each chunk piecemeal, a chunk's slots lying in many pieces
 * of the index, so a round in between would write every chunk that still
 * held a page, some of them many times.  The renewal marks every chunk dirty, so
 * that every chunk that still holds a page is written under the new id:
 * after a whole drop those are the few that took pages since, and a drop
 * cancelled half way loses none of what it left in the map.
 *
 * Locking protocol.
 *
 *	- dirty bits are atomic.  A process that changed a slot issues a full
 *	  barrier and then sets the bit (skipping the atomic OR if the bit is
 *	  already set); the flusher clears the bit with an atomic AND, a full
 *	  barrier, before it reads the chunk's slots.  So a change made after
 *	  the flusher read a slot sets the bit again, and the chunk is written
 *	  again in a later round; a chunk written from a slot caught half way
 *	  through a change is rewritten the same way.  The slots are read
 *	  without locks (tier_map_slot_entry).
 *	- nslots, directory_id, renewals_done, usable and the written bits
 *	  belong to the bpext worker while the server runs, and to the
 *	  postmaster at exit, when every other process is gone.  Only those two
 *	  ever write a chunk.  Any process may bump renewals_requested and
 *	  drops_running (atomics); the owner acts on the first before it next
 *	  writes a chunk, and the worker writes none while the second is not
 *	  zero.  A drop lowers drops_running again even when it fails or its
 *	  backend exits (buffer_ops.c); one killed outright takes shared
 *	  memory with it (a crash restart).  The postmaster at exit does not
 *	  look at it: no drop runs any more.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/uio.h>
#include <unistd.h>

#include "port/atomics.h"
#include "port/pg_bitutils.h"
#include "storage/shmem.h"

#include "helper_io.h"
#include "slot_directory.h"
#include "tier_file.h"
#include "tier_map.h"
#include "tier_writer.h"

/* Chunks written with one pwritev. */
#define DIR_RUN_CHUNKS		32

typedef struct DirChunkHeader
{
	uint64		directory_id;
	uint32		chunk;
	pg_crc32c	crc;			/* of the id, the number and the entries */
} DirChunkHeader;

typedef struct DirChunk
{
	DirChunkHeader header;
	SlotDirEntry entries[TIER_DIR_ENTRIES_PER_CHUNK];
} DirChunk;

StaticAssertDecl(sizeof(DirChunkHeader) + sizeof(SlotDirEntry) * TIER_DIR_ENTRIES_PER_CHUNK <= BLCKSZ,
				 "a directory chunk must fit in a block");

typedef struct SlotDirectory
{
	uint32		max_chunks;		/* for bpext.max_size */
	uint32		nslots;			/* slots of the file described; 0: none */
	uint64		directory_id;
	pg_atomic_uint32 renewals_requested;	/* by whole-map drops */
	pg_atomic_uint32 drops_running; /* whole-map drops under way */
	uint32		renewals_done;	/* requests the id has been renewed for */
	bool		usable;			/* laid out, and no chunk write failed */
	uint32		flush_cursor;	/* the bitmap word the next round starts at */
	pg_atomic_uint32 *dirty;	/* a bit per chunk: changed since written */
	uint32	   *written;		/* a bit per chunk: valid on disk */
} SlotDirectory;

static SlotDirectory *Dir = NULL;

/* A run of chunks being built, then written; allocated on first use. */
static char *run_buffer = NULL;

static inline uint32
bitmap_words(uint32 nchunks)
{
	return (nchunks + 31) / 32;
}

Size
slot_directory_shmem_size(uint32 max_slots)
{
	uint32		words = bitmap_words(TIER_DIR_CHUNKS(max_slots));
	Size		size = MAXALIGN(sizeof(SlotDirectory));

	size = add_size(size, MAXALIGN(mul_size(words, sizeof(pg_atomic_uint32))));
	size = add_size(size, MAXALIGN(mul_size(words, sizeof(uint32))));
	return size;
}

void
slot_directory_shmem_init(uint32 max_slots, bool found)
{
	char	   *p;
	uint32		words;
	uint32		i;

	p = ShmemInitStruct("bpext slot directory",
						slot_directory_shmem_size(max_slots), &found);
	Dir = (SlotDirectory *) p;
	if (found)
		return;
	memset(Dir, 0, sizeof(SlotDirectory));
	pg_atomic_init_u32(&Dir->renewals_requested, 0);
	pg_atomic_init_u32(&Dir->drops_running, 0);
	Dir->max_chunks = TIER_DIR_CHUNKS(max_slots);
	words = bitmap_words(Dir->max_chunks);
	p += MAXALIGN(sizeof(SlotDirectory));
	Dir->dirty = (pg_atomic_uint32 *) p;
	p += MAXALIGN(words * sizeof(pg_atomic_uint32));
	Dir->written = (uint32 *) p;
	for (i = 0; i < words; i++)
	{
		pg_atomic_init_u32(&Dir->dirty[i], 0);
		Dir->written[i] = 0;
	}
}

static inline void
mark_dirty(uint32 chunk)
{
	pg_atomic_uint32 *word = &Dir->dirty[chunk / 32];
	uint32		bit = 1U << (chunk % 32);

	if ((pg_atomic_read_u32(word) & bit) == 0)
		pg_atomic_fetch_or_u32(word, bit);
}

/*
 * A slot was published or unlinked: its chunk must be written again.
 * Called right after the change, from inside smgr calls: no locks, no
 * errors, one atomic read in the common case of a chunk already dirty.
 */
void
slot_directory_note_change(uint32 slot)
{
	pg_memory_barrier();
	mark_dirty(slot / TIER_DIR_ENTRIES_PER_CHUNK);
}

static inline bool
chunk_written(uint32 chunk)
{
	return (Dir->written[chunk / 32] & (1U << (chunk % 32))) != 0;
}

static inline void
set_written(uint32 chunk, bool written)
{
	if (written)
		Dir->written[chunk / 32] |= 1U << (chunk % 32);
	else
		Dir->written[chunk / 32] &= ~(1U << (chunk % 32));
}

/* A random directory id, neither 0 nor the current one. */
static uint64
new_directory_id(void)
{
	uint64		id = 0;

	while (id == 0 || id == Dir->directory_id)
	{
		if (!pg_strong_random(&id, sizeof(id)))
			id = (uint64) random() << 32 | (uint64) random();
	}
	return id;
}

/*
 * The worker has taken a file of nslots slots (or resized it): from now on
 * the directory after its last slot describes it.  directory_id is the one
 * a warm start found in the saved header (whose chunks are valid and
 * describe what the load will publish), or 0 for a new one, which makes
 * every chunk on disk invalid: a new or resized file starts empty.  Under
 * a warm start's id every chunk counts as written until the load reads it
 * (slot_directory_note_loaded): one the load never reaches, because it is
 * given up, is valid on disk and names pages the map does not hold, so it
 * must be written again, if only as empty.  A renewal asked for before
 * is met either way: a new id is one, and a warm start's id comes before
 * any drop could empty the map it loads.
 */
void
slot_directory_lay_out(uint32 nslots, uint64 directory_id)
{
	uint32		words = bitmap_words(Dir->max_chunks);
	uint32		written = 0;
	uint32		i;

	if (directory_id == 0)
		directory_id = new_directory_id();
	else
		written = ~UINT32_C(0);
	Dir->renewals_done = pg_atomic_read_u32(&Dir->renewals_requested);
	for (i = 0; i < words; i++)
	{
		pg_atomic_write_u32(&Dir->dirty[i], 0);
		Dir->written[i] = written;
	}
	pg_memory_barrier();
	Dir->nslots = Min(nslots, Dir->max_chunks * TIER_DIR_ENTRIES_PER_CHUNK);
	Dir->directory_id = directory_id;
	Dir->flush_cursor = 0;
	Dir->usable = true;
}

/*
 * bpext_drop_clean_buffers is about to empty the whole map: the chunks it
 * empties need not be written, and the worker writes none until
 * slot_directory_end_drop (see "Emptying the whole map" above).  Called
 * before the first page is dropped, from any process.
 */
void
slot_directory_begin_drop(void)
{
	pg_atomic_fetch_add_u32(&Dir->drops_running, 1);
	pg_atomic_fetch_add_u32(&Dir->renewals_requested, 1);
}

/* The drop begun by slot_directory_begin_drop is over, done or not. */
void
slot_directory_end_drop(void)
{
	Assert(pg_atomic_read_u32(&Dir->drops_running) > 0);
	pg_atomic_fetch_sub_u32(&Dir->drops_running, 1);
}

/*
 * The owner, before it writes chunks: take a new id if a drop asked for
 * one since the last.  No chunk is valid on disk under it yet, and every
 * chunk is to be written if it holds a page.
 */
static void
renew_if_requested(void)
{
	uint32		requested = pg_atomic_read_u32(&Dir->renewals_requested);
	uint32		words = bitmap_words(Dir->max_chunks);
	uint32		i;

	if (requested == Dir->renewals_done)
		return;
	Dir->renewals_done = requested;
	Dir->directory_id = new_directory_id();
	for (i = 0; i < words; i++)
		Dir->written[i] = 0;
	slot_directory_mark_all_dirty(0);
}

/* Every chunk from first_chunk on must be written again. */
void
slot_directory_mark_all_dirty(uint32 first_chunk)
{
	uint32		chunk;

	for (chunk = first_chunk; chunk < TIER_DIR_CHUNKS(Dir->nslots); chunk++)
		mark_dirty(chunk);
}

/* The tier let go of its file: no directory describes anything. */
void
slot_directory_forget(void)
{
	Dir->usable = false;
	Dir->nslots = 0;
}

bool
slot_directory_usable(void)
{
	return Dir != NULL && Dir->usable && Dir->nslots > 0;
}

uint64
slot_directory_id(void)
{
	return Dir->directory_id;
}

uint32
slot_directory_nslots(void)
{
	return Dir->nslots;
}

static pg_crc32c
chunk_crc(const DirChunk *c)
{
	pg_crc32c	crc;

	INIT_CRC32C(crc);
	COMP_CRC32C(crc, &c->header, offsetof(DirChunkHeader, crc));
	COMP_CRC32C(crc, c->entries, sizeof(c->entries));
	FIN_CRC32C(crc);
	return crc;
}

/*
 * Fill a chunk from the map, all but its CRC (chunk_crc, once it is known
 * to be written).  Returns whether any of its slots holds a page.
 */
static bool
build_chunk(uint32 chunk, DirChunk *c)
{
	uint32		first = chunk * TIER_DIR_ENTRIES_PER_CHUNK;
	bool		any = false;
	uint32		i;

	memset(c, 0, BLCKSZ);
	c->header.directory_id = Dir->directory_id;
	c->header.chunk = chunk;
	for (i = 0; i < TIER_DIR_ENTRIES_PER_CHUNK; i++)
	{
		SlotDirEntry *e = &c->entries[i];

		if (first + i < Dir->nslots && tier_map_slot_entry(first + i, e))
			any = true;
		else
		{
			e->rel = TIER_INVALID_INDEX;
			e->block = InvalidBlockNumber;
		}
	}
	return any;
}

/* Write n chunks that lie one after the other in images, with one call. */
static ssize_t
write_chunks(int fd, uint32 nslots, uint32 first, uint32 n, char *images)
{
	struct iovec iov[DIR_RUN_CHUNKS];
	uint32		i;

	Assert(n <= DIR_RUN_CHUNKS);
	for (i = 0; i < n; i++)
	{
		iov[i].iov_base = images + (Size) i * BLCKSZ;
		iov[i].iov_len = BLCKSZ;
	}
	return bpext_tier_pwritev(fd, iov, n, TIER_DIR_CHUNK_OFFSET(nslots, first));
}

/*
 * Write the run of chunks built in run_buffer, first..first+n-1.  On
 * failure they are marked dirty again and the directory becomes unusable
 * (the next save is refused: a chunk on disk may now be stale).
 */
static bool
write_run(int fd, uint32 first, uint32 n)
{
	ssize_t		done;
	uint32		i;

	if (n == 0)
		return true;
	done = write_chunks(fd, Dir->nslots, first, n, run_buffer);
	if (done != (ssize_t) n * BLCKSZ)
	{
		int			save_errno = (done < 0) ? errno : ENOSPC;

		for (i = 0; i < n; i++)
			mark_dirty(first + i);
		Dir->usable = false;
		errno = save_errno;
		return false;
	}
	for (i = 0; i < n; i++)
		set_written(first + i, true);
	return true;
}

/*
 * Write up to max_chunks dirty chunks, in runs of neighbours.  A chunk that
 * holds no page and was never written since the lay-out is left as it is:
 * on disk it is invalid, which reads as empty.  *nwritten says how many
 * were handled and *more whether dirty ones are left.  False, with errno,
 * if a write failed.  Nothing is written while a whole-map drop runs.
 * Only the worker (while the server runs) calls this.
 */
bool
slot_directory_flush(int fd, uint32 max_chunks, uint32 *nwritten, bool *more)
{
	uint32		nchunks = TIER_DIR_CHUNKS(Dir->nslots);
	uint32		words = bitmap_words(nchunks);
	uint32		handled = 0;
	uint32		run_first = 0;
	uint32		run_len = 0;
	uint32		step;

	*nwritten = 0;
	*more = false;
	if (!Dir->usable || nchunks == 0 ||
		pg_atomic_read_u32(&Dir->drops_running) != 0)
		return true;
	renew_if_requested();
	if (run_buffer == NULL)
	{
		run_buffer = malloc((Size) BLCKSZ * DIR_RUN_CHUNKS);
		if (run_buffer == NULL)
		{
			errno = ENOMEM;
			return false;
		}
	}

	for (step = 0; step < words; step++)
	{
		uint32		w = (Dir->flush_cursor + step) % words;
		uint32		bits = pg_atomic_read_u32(&Dir->dirty[w]);

		while (bits != 0)
		{
			uint32		b = pg_rightmost_one_pos32(bits);
			uint32		chunk = w * 32 + b;
			DirChunk   *c;

			bits &= bits - 1;
			if (chunk >= nchunks)
			{
				pg_atomic_fetch_and_u32(&Dir->dirty[w], ~(1U << b));
				continue;
			}
			if (handled == max_chunks)
			{
				*more = true;
				Dir->flush_cursor = w;
				*nwritten = handled;
				return write_run(fd, run_first, run_len);
			}
			/* Clear first (a full barrier), then read the slots. */
			pg_atomic_fetch_and_u32(&Dir->dirty[w], ~(1U << b));
			handled++;

			if (run_len > 0 &&
				(chunk != run_first + run_len || run_len == DIR_RUN_CHUNKS))
			{
				if (!write_run(fd, run_first, run_len))
					return false;
				run_len = 0;
			}
			c = (DirChunk *) (run_buffer + (Size) run_len * BLCKSZ);
			if (!build_chunk(chunk, c) && !chunk_written(chunk))
				continue;		/* empty, and invalid on disk already */
			c->header.crc = chunk_crc(c);
			if (run_len == 0)
				run_first = chunk;
			run_len++;
		}
	}
	Dir->flush_cursor = 0;
	*nwritten = handled;
	return write_run(fd, run_first, run_len);
}

/*
 * A warm start's load, in the worker: read nchunks chunks from first_chunk
 * into entries (TIER_DIR_ENTRIES_PER_CHUNK each), through its helper
 * (tier_writer.c), and say which are valid.  Returns how many chunks were
 * read (fewer at the end of the directory), or -1 with errno on a read
 * error or a read that did not answer.
 */
int
slot_directory_read(int fd, uint32 first_chunk, uint32 nchunks,
					SlotDirEntry *entries, bool *valid)
{
	uint32		total = TIER_DIR_CHUNKS(Dir->nslots);
	uint32		done = 0;

	if (run_buffer == NULL)
	{
		run_buffer = malloc((Size) BLCKSZ * DIR_RUN_CHUNKS);
		if (run_buffer == NULL)
		{
			errno = ENOMEM;
			return -1;
		}
	}
	if (first_chunk >= total)
		return 0;
	nchunks = Min(nchunks, total - first_chunk);
	while (done < nchunks)
	{
		uint32		n = Min(nchunks - done, DIR_RUN_CHUNKS);
		ssize_t		want = (ssize_t) n * BLCKSZ;
		uint32		i;

		if (tier_writer_pread(fd, run_buffer, want,
							  TIER_DIR_CHUNK_OFFSET(Dir->nslots, first_chunk + done)) != want)
		{
			if (errno == 0)
				errno = EIO;
			return -1;
		}
		for (i = 0; i < n; i++)
		{
			DirChunk   *c = (DirChunk *) (run_buffer + (Size) i * BLCKSZ);
			uint32		chunk = first_chunk + done + i;

			valid[done + i] = c->header.directory_id == Dir->directory_id &&
				c->header.chunk == chunk && EQ_CRC32C(chunk_crc(c), c->header.crc);
			memcpy(&entries[(Size) (done + i) * TIER_DIR_ENTRIES_PER_CHUNK],
				   c->entries, sizeof(c->entries));
		}
		done += n;
	}
	return (int) done;
}

/*
 * The load went through a chunk: a valid one is on disk with this
 * directory's id; one whose entries were not all published (the page
 * changed, its relation was dropped, its slot is past the tier's end)
 * no longer describes the map and must be written again.
 */
void
slot_directory_note_loaded(uint32 chunk, bool valid, bool current)
{
	set_written(chunk, valid);
	if (valid && !current)
		mark_dirty(chunk);
}

/*
 * At exit, in the postmaster, alone: build every dirty chunk into memory,
 * for a helper process to write (warm_restart.c, helper_io.c), so that
 * the helper needs no shared memory.  NULL with errno if out of memory.
 */
SlotDirBatch *
slot_directory_collect_dirty(void)
{
	uint32		nchunks = TIER_DIR_CHUNKS(Dir->nslots);
	uint32		words = bitmap_words(nchunks);
	SlotDirBatch *batch;
	uint32		allocated = 64;
	uint32		w;
	DirChunk   *c;

	renew_if_requested();
	batch = calloc(1, sizeof(SlotDirBatch));
	if (batch == NULL)
		return NULL;
	batch->nslots = Dir->nslots;
	batch->chunks = malloc(sizeof(uint32) * allocated);
	batch->images = malloc((Size) BLCKSZ * allocated);
	if (batch->chunks == NULL || batch->images == NULL)
		goto oom;
	for (w = 0; w < words; w++)
	{
		uint32		bits = pg_atomic_read_u32(&Dir->dirty[w]);

		while (bits != 0)
		{
			uint32		chunk = w * 32 + pg_rightmost_one_pos32(bits);

			bits &= bits - 1;
			if (chunk >= nchunks)
				continue;
			if (batch->nchunks == allocated)
			{
				uint32	   *chunks;
				char	   *images;

				allocated *= 2;
				chunks = realloc(batch->chunks, sizeof(uint32) * allocated);
				if (chunks == NULL)
					goto oom;
				batch->chunks = chunks;
				images = realloc(batch->images, (Size) BLCKSZ * allocated);
				if (images == NULL)
					goto oom;
				batch->images = images;
			}
			c = (DirChunk *) (batch->images + (Size) BLCKSZ * batch->nchunks);
			if (!build_chunk(chunk, c) && !chunk_written(chunk))
				continue;
			c->header.crc = chunk_crc(c);
			batch->chunks[batch->nchunks++] = chunk;
		}
	}
	return batch;

oom:
	slot_directory_free_batch(batch);
	errno = ENOMEM;
	return NULL;
}

void
slot_directory_free_batch(SlotDirBatch *batch)
{
	if (batch == NULL)
		return;
	free(batch->chunks);
	free(batch->images);
	free(batch);
}

/*
 * Write a batch, neighbours together, reporting progress after each call
 * (helper_io.c).  False with errno on failure.
 */
bool
slot_directory_write_batch(int fd, const SlotDirBatch *batch)
{
	uint32		i = 0;

	while (i < batch->nchunks)
	{
		uint32		n = 1;
		ssize_t		done;

		while (i + n < batch->nchunks && n < DIR_RUN_CHUNKS &&
			   batch->chunks[i + n] == batch->chunks[i] + n)
			n++;
		done = write_chunks(fd, batch->nslots, batch->chunks[i], n,
							batch->images + (Size) BLCKSZ * i);
		if (done != (ssize_t) n * BLCKSZ)
		{
			if (done >= 0)
				errno = ENOSPC;
			return false;
		}
		helper_io_progress();
		i += n;
	}
	return true;
}

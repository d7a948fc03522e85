/*-------------------------------------------------------------------------
 *
 * page_crc.c
 *	  The CRC-32C that every tier page carries (over its identity and its
 *	  8 kB image), computed three streams at a time where the CPU has a
 *	  CRC-32C instruction.
 *
 * A tier hit verifies the CRC of the page it read, and every page stored
 * computes one.  PostgreSQL's SSE 4.2 loop (COMP_CRC32C, 15 to 17) feeds
 * the page to one chain of crc32 instructions, each waiting for the one
 * before: the instruction takes three cycles to give its result but the
 * CPU could start one every cycle.  On this machine that chain was most
 * of a tier hit's cost, more than the pread it replaces.  So the page is
 * cut in three parts whose CRCs are computed side by side in one loop,
 * and then combined: the CRC register is linear, so the CRC of A followed
 * by B is the register after A, carried over |B| zero bytes, xor the
 * register of B alone started from zero.  Carrying a register over a
 * fixed number of zero bytes is itself linear in the register's 32 bits,
 * so it is four lookups in tables that the postmaster computes once, at
 * load time, for every process it forks.  The result is the same CRC-32C
 * value to the bit (so tier files, and the CRCs a warm restart saved, stay
 * valid); the postmaster checks that against PostgreSQL's own before the
 * fast path is used, and keeps PostgreSQL's if they differ.
 *
 * Elsewhere (no SSE 4.2, other architectures) PostgreSQL's COMP_CRC32C
 * does the work, as before; and where PostgreSQL (18 on) computes its
 * CRC-32C with AVX-512, which folds 64 bytes at a time and is faster than
 * three crc32 streams, PostgreSQL's own is used too.
 *
 * Locking: none; the tables are written once, in the postmaster, and only
 * read afterwards.  Nothing here allocates or raises an error: it runs
 * inside smgr calls.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "port/pg_crc32c.h"

#include "page_crc.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PAGE_CRC_INTERLEAVED 1
#include <nmmintrin.h>
/* Functions that use the crc32 instruction, whatever the build's target. */
#define SSE42_TARGET __attribute__((target("sse4.2")))
#endif

#ifdef PAGE_CRC_INTERLEAVED

/*
 * The page is cut in a first part of BLCKSZ - 2 * STREAM_BYTES bytes and
 * two of STREAM_BYTES; the loop walks the first STREAM_BYTES of each side
 * by side and the first part's 8 bytes left over alone.
 */
#define STREAM_BYTES	(((BLCKSZ / 3) / 8) * 8)
#define FIRST_BYTES		(BLCKSZ - 2 * STREAM_BYTES)

StaticAssertDecl(FIRST_BYTES >= STREAM_BYTES && FIRST_BYTES % 8 == 0,
				 "the page must split into three streams of whole words");

/* Use the interleaved loop (set up and checked by bpext_page_crc_setup)? */
static bool fast_crc = false;

/* shift_tables[k][b]: the register b << 8k carried over STREAM_BYTES zeroes. */
static uint32 shift_tables[4][256];

/* Carry a register over STREAM_BYTES zero bytes. */
static inline uint32
shift_stream(uint32 crc)
{
	return shift_tables[0][crc & 0xFF] ^
		shift_tables[1][(crc >> 8) & 0xFF] ^
		shift_tables[2][(crc >> 16) & 0xFF] ^
		shift_tables[3][crc >> 24];
}

/* The crc32 instruction over len bytes (a multiple of 8) from crc. */
SSE42_TARGET
static uint32
crc_words(uint32 crc, const char *p, size_t len)
{
	uint64		c = crc;
	size_t		i;

	for (i = 0; i < len; i += 8)
	{
		uint64		w;

		memcpy(&w, p + i, 8);
		c = _mm_crc32_u64(c, w);
	}
	return (uint32) c;
}

/*
 * The register after crc and the page, three streams at a time (see the
 * file header).
 */
SSE42_TARGET
static uint32
crc_page_interleaved(uint32 crc, const char *page)
{
	const char *a = page;
	const char *b = page + FIRST_BYTES;
	const char *c = b + STREAM_BYTES;
	uint64		ca = crc;
	uint64		cb = 0;
	uint64		cc = 0;
	size_t		i;

	for (i = 0; i < STREAM_BYTES; i += 8)
	{
		uint64		wa,
					wb,
					wc;

		memcpy(&wa, a + i, 8);
		memcpy(&wb, b + i, 8);
		memcpy(&wc, c + i, 8);
		ca = _mm_crc32_u64(ca, wa);
		cb = _mm_crc32_u64(cb, wb);
		cc = _mm_crc32_u64(cc, wc);
	}
	ca = crc_words((uint32) ca, a + STREAM_BYTES, FIRST_BYTES - STREAM_BYTES);

	/* A then B then C: carry A over B and C, B over C. */
	return shift_stream(shift_stream((uint32) ca) ^ (uint32) cb) ^ (uint32) cc;
}

/*
 * Build the tables (the 32 single-bit registers carried over zeroes, and
 * by linearity every byte of every position), then check the result on a
 * page against PostgreSQL's own CRC.
 */
SSE42_TARGET
static bool
fast_crc_setup(void)
{
	static const char zeroes[STREAM_BYTES];
	uint32		basis[32];
	char		page[BLCKSZ];
	pg_crc32c	expected;
	int			k,
				bit,
				i;
	uint32		seed = 0x9E3779B9;

	for (bit = 0; bit < 32; bit++)
		basis[bit] = crc_words(UINT32_C(1) << bit, zeroes, STREAM_BYTES);
	for (k = 0; k < 4; k++)
		for (i = 0; i < 256; i++)
		{
			uint32		v = 0;

			for (bit = 0; bit < 8; bit++)
				if (i & (1 << bit))
					v ^= basis[8 * k + bit];
			shift_tables[k][i] = v;
		}

	for (i = 0; i < BLCKSZ; i++)
	{
		seed = seed * 1664525 + 1013904223;
		page[i] = (char) (seed >> 24);
	}
	INIT_CRC32C(expected);
	COMP_CRC32C(expected, page, BLCKSZ);
	return crc_page_interleaved(0xFFFFFFFF, page) == expected;
}

#endif							/* PAGE_CRC_INTERLEAVED */

/*
 * In the postmaster, from _PG_init: choose the interleaved loop if this
 * CPU has the instruction and the loop gives PostgreSQL's CRC (the tables
 * take about 100,000 instructions, once, not in every backend).
 */
void
bpext_page_crc_setup(void)
{
#ifdef PAGE_CRC_INTERLEAVED
	fast_crc = __builtin_cpu_supports("sse4.2") && fast_crc_setup();
#ifdef USE_AVX512_CRC32C_WITH_RUNTIME_CHECK
	/* fast_crc_setup called COMP_CRC32C, which made PostgreSQL choose. */
	if (pg_comp_crc32c == pg_comp_crc32c_avx512)
		fast_crc = false;
#endif
#endif
}

/*
 * The CRC-32C of key (the page's identity) followed by the page: exactly
 * INIT_CRC32C, COMP_CRC32C of both, FIN_CRC32C.
 */
pg_crc32c
bpext_page_crc(const void *key, size_t keylen, const char *page)
{
	pg_crc32c	crc;

	INIT_CRC32C(crc);
	COMP_CRC32C(crc, key, keylen);
#ifdef PAGE_CRC_INTERLEAVED
	if (fast_crc)
		crc = crc_page_interleaved(crc, page);
	else
#endif
		COMP_CRC32C(crc, page, BLCKSZ);
	FIN_CRC32C(crc);
	return crc;
}

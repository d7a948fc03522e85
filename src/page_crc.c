/*-------------------------------------------------------------------------
 *
 * page_crc.c
 *	  The CRC-32C that every tier page carries (over its identity and its
 *	  8 kB image), computed by folding with carry-less multiplication where
 *	  the CPU has AVX-512 VPCLMULQDQ, and in three interleaved crc32
 *	  streams where it has SSE 4.2.
 *
 * A tier hit verifies the CRC of the page it read, and every page stored
 * computes one.  PostgreSQL's SSE 4.2 loop (COMP_CRC32C, 15 and 17) feeds
 * the page to one chain of crc32 instructions, each waiting three cycles
 * for the one before, although the CPU could start one every cycle: on
 * this machine that chain was most of a tier hit's cost, more than the
 * pread it replaces.  Two faster ways give the same CRC-32C to the bit (so
 * tier files, and the CRCs a warm restart saved, stay valid):
 *
 *	- Folding (AVX-512 VPCLMULQDQ).  The CRC register is linear over GF(2):
 *	  feeding bytes A then B from a zero register gives what feeding B
 *	  alone gives, xor what feeding A followed by |B| zero bytes gives, and
 *	  the polynomial of A times x^n is congruent, modulo the CRC
 *	  polynomial, to a carry-less product of A's two 64-bit halves with
 *	  the constants x^(n+32) and x^(n-32) mod P (reflected, shifted left by
 *	  one bit, as the register's bit order wants).  Sixteen 16-byte lanes
 *	  in four 512-bit registers are folded forward 256 bytes at a time
 *	  (each multiply covers 64 bytes), then into one another, and the last
 *	  16 bytes go through two crc32 instructions.  The register before the
 *	  page (the CRC of the identity) enters as an xor into the page's first
 *	  four bytes.
 *	- Three streams (SSE 4.2).  The page is cut in three parts whose
 *	  registers are computed side by side in one loop and combined:
 *	  carrying a register over a fixed number of zero bytes is linear in
 *	  its 32 bits, so it is four lookups in tables.
 *
 * The constants and tables are computed once, in the postmaster at load
 * time (bpext_page_crc_setup), and every process it forks inherits them;
 * each fast way is checked there against PostgreSQL's own CRC on a page
 * of pseudo-random bytes, and used only if it matches.  Elsewhere (older
 * CPUs, other architectures) PostgreSQL's COMP_CRC32C does the work.
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
#define PAGE_CRC_FAST 1
#include <immintrin.h>
/* Functions that use these instructions, whatever the build's target. */
#define SSE42_TARGET __attribute__((target("sse4.2")))
#define FOLD_TARGET \
	__attribute__((target("sse4.2,pclmul,avx512f,avx512vl,vpclmulqdq")))
#endif

typedef enum PageCrcMethod
{
	PAGE_CRC_POSTGRES,			/* COMP_CRC32C */
	PAGE_CRC_STREAMS,			/* three crc32 streams */
	PAGE_CRC_FOLD				/* AVX-512 folding */
} PageCrcMethod;

static PageCrcMethod method = PAGE_CRC_POSTGRES;

#ifdef PAGE_CRC_FAST

/* The CRC-32C polynomial, reflected. */
#define CRC32C_POLY_REFLECTED	0x82F63B78U

/*
 * Three streams: the page is cut in a first part of BLCKSZ - 2 *
 * STREAM_BYTES bytes and two of STREAM_BYTES; the loop walks the first
 * STREAM_BYTES of each side by side and the first part's bytes left over
 * alone.
 */
#define STREAM_BYTES	(((BLCKSZ / 3) / 8) * 8)
#define FIRST_BYTES		(BLCKSZ - 2 * STREAM_BYTES)

StaticAssertDecl(FIRST_BYTES >= STREAM_BYTES && FIRST_BYTES % 8 == 0,
				 "the page must split into three streams of whole words");

/* Folding: 256 bytes per round, four 512-bit registers. */
#define FOLD_ROUND_BYTES	256

StaticAssertDecl(BLCKSZ % FOLD_ROUND_BYTES == 0,
				 "the page must be whole rounds of folding");

/* shift_tables[k][b]: the register b << 8k carried over STREAM_BYTES zeroes. */
static uint32 shift_tables[4][256];

/*
 * Folding constants, {x^(n+32), x^(n-32)} mod P reflected and shifted left
 * by one, for folding forward by n bits: 128 (one lane into the next), 512
 * (one 512-bit register into the next) and 2048 (a round).
 */
static uint64 fold_128[2];
static uint64 fold_512[2];
static uint64 fold_2048[2];

/* x^n mod P, reflected (bit 31 is x^0). */
static uint32
xpow_mod(int n)
{
	uint32		r = UINT32_C(1) << 31;

	while (n-- > 0)
		r = (r & 1) ? (r >> 1) ^ CRC32C_POLY_REFLECTED : r >> 1;
	return r;
}

static void
fold_constants(uint64 k[2], int nbits)
{
	k[0] = (uint64) xpow_mod(nbits + 32) << 1;
	k[1] = (uint64) xpow_mod(nbits - 32) << 1;
}

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
crc_page_streams(uint32 crc, const char *page)
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

/* Fold each 128-bit lane of x forward by the distance of k. */
FOLD_TARGET
static inline __m512i
fold_lanes(__m512i x, __m512i k)
{
	return _mm512_xor_si512(_mm512_clmulepi64_epi128(x, k, 0x00),
							_mm512_clmulepi64_epi128(x, k, 0x11));
}

FOLD_TARGET
static inline __m128i
fold_lane(__m128i x, __m128i k)
{
	return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00),
						 _mm_clmulepi64_si128(x, k, 0x11));
}

/* The register after crc and the page, by folding (see the file header). */
FOLD_TARGET
static uint32
crc_page_fold(uint32 crc, const char *page)
{
	__m512i		k_round = _mm512_broadcast_i32x4(_mm_set_epi64x(fold_2048[1], fold_2048[0]));
	__m512i		k_512 = _mm512_broadcast_i32x4(_mm_set_epi64x(fold_512[1], fold_512[0]));
	__m128i		k_128 = _mm_set_epi64x(fold_128[1], fold_128[0]);
	__m512i		r0 = _mm512_loadu_si512(page);
	__m512i		r1 = _mm512_loadu_si512(page + 64);
	__m512i		r2 = _mm512_loadu_si512(page + 128);
	__m512i		r3 = _mm512_loadu_si512(page + 192);
	__m128i		x;
	size_t		i;

	r0 = _mm512_xor_si512(r0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int) crc)));
	for (i = FOLD_ROUND_BYTES; i < BLCKSZ; i += FOLD_ROUND_BYTES)
	{
		r0 = _mm512_xor_si512(fold_lanes(r0, k_round), _mm512_loadu_si512(page + i));
		r1 = _mm512_xor_si512(fold_lanes(r1, k_round), _mm512_loadu_si512(page + i + 64));
		r2 = _mm512_xor_si512(fold_lanes(r2, k_round), _mm512_loadu_si512(page + i + 128));
		r3 = _mm512_xor_si512(fold_lanes(r3, k_round), _mm512_loadu_si512(page + i + 192));
	}
	r1 = _mm512_xor_si512(fold_lanes(r0, k_512), r1);
	r2 = _mm512_xor_si512(fold_lanes(r1, k_512), r2);
	r3 = _mm512_xor_si512(fold_lanes(r2, k_512), r3);

	x = _mm512_extracti32x4_epi32(r3, 0);
	x = _mm_xor_si128(fold_lane(x, k_128), _mm512_extracti32x4_epi32(r3, 1));
	x = _mm_xor_si128(fold_lane(x, k_128), _mm512_extracti32x4_epi32(r3, 2));
	x = _mm_xor_si128(fold_lane(x, k_128), _mm512_extracti32x4_epi32(r3, 3));
	return (uint32) _mm_crc32_u64(_mm_crc32_u64(0, (uint64) _mm_cvtsi128_si64(x)),
								  (uint64) _mm_extract_epi64(x, 1));
}

/*
 * The three streams' tables: the 32 single-bit registers carried over
 * zeroes, and by linearity every byte of every position.
 */
SSE42_TARGET
static void
streams_setup(void)
{
	static const char zeroes[STREAM_BYTES];
	uint32		basis[32];
	int			k,
				bit,
				i;

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
}

#endif							/* PAGE_CRC_FAST */

/*
 * In the postmaster, from _PG_init: choose the fastest way this CPU has
 * whose result is PostgreSQL's CRC on a page of pseudo-random bytes.
 */
void
bpext_page_crc_setup(void)
{
#ifdef PAGE_CRC_FAST
	char		page[BLCKSZ];
	pg_crc32c	expected;
	uint32		seed = 0x9E3779B9;
	int			i;

	for (i = 0; i < BLCKSZ; i++)
	{
		seed = seed * 1664525 + 1013904223;
		page[i] = (char) (seed >> 24);
	}
	INIT_CRC32C(expected);
	COMP_CRC32C(expected, page, BLCKSZ);

	/* Both are set up where the CPU has them (tests compare both). */
	if (__builtin_cpu_supports("sse4.2"))
	{
		streams_setup();
		if (crc_page_streams(0xFFFFFFFF, page) == expected)
			method = PAGE_CRC_STREAMS;
	}
	if (__builtin_cpu_supports("avx512f") &&
		__builtin_cpu_supports("avx512vl") &&
		__builtin_cpu_supports("vpclmulqdq") &&
		__builtin_cpu_supports("pclmul") &&
		__builtin_cpu_supports("sse4.2"))
	{
		fold_constants(fold_128, 128);
		fold_constants(fold_512, 512);
		fold_constants(fold_2048, 8 * FOLD_ROUND_BYTES);
		if (crc_page_fold(0xFFFFFFFF, page) == expected)
			method = PAGE_CRC_FOLD;
	}
#endif
}

#ifdef BPEXT_TEST_HOOKS
/*
 * Test builds only (bpext_test_page_crc, test_hooks.c): compare every way
 * this CPU has with PostgreSQL's COMP_CRC32C on npages pages of
 * pseudo-random bytes after keys of pseudo-random lengths, and say which
 * way is in use: "fold 1000/1000 streams 1000/1000 in use: fold" (matches
 * of pages compared; a way this CPU lacks is left out).
 */
void
bpext_page_crc_test(int npages, char *out, size_t outlen)
{
	static char page[BLCKSZ];
	char		key[64];
	uint32		seed = 12345;
	int			fold_ok = 0,
				streams_ok = 0;
	bool		have_fold = false,
				have_streams = false;
	int			n,
				i;

#ifdef PAGE_CRC_FAST
	have_fold = __builtin_cpu_supports("avx512f") &&
		__builtin_cpu_supports("avx512vl") &&
		__builtin_cpu_supports("vpclmulqdq") &&
		__builtin_cpu_supports("pclmul") &&
		__builtin_cpu_supports("sse4.2");
	have_streams = __builtin_cpu_supports("sse4.2");
#endif
	for (n = 0; n < npages; n++)
	{
		pg_crc32c	expected;
		pg_crc32c	start;
		size_t		keylen;

		for (i = 0; i < BLCKSZ; i++)
		{
			seed = seed * 1664525 + 1013904223;
			page[i] = (char) (seed >> 24);
		}
		keylen = seed % sizeof(key);
		memcpy(key, page + 100, keylen);
		INIT_CRC32C(start);
		COMP_CRC32C(start, key, keylen);
		expected = start;
		COMP_CRC32C(expected, page, BLCKSZ);
#ifdef PAGE_CRC_FAST
		if (have_fold && crc_page_fold(start, page) == expected)
			fold_ok++;
		if (have_streams && crc_page_streams(start, page) == expected)
			streams_ok++;
#endif
	}
	snprintf(out, outlen, "%s%s in use: %s",
			 have_fold ? psprintf("fold %d/%d ", fold_ok, npages) : "",
			 have_streams ? psprintf("streams %d/%d", streams_ok, npages) : "",
			 method == PAGE_CRC_FOLD ? "fold" :
			 method == PAGE_CRC_STREAMS ? "streams" : "postgres");
}
#endif

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
	switch (method)
	{
#ifdef PAGE_CRC_FAST
		case PAGE_CRC_FOLD:
			crc = crc_page_fold(crc, page);
			break;
		case PAGE_CRC_STREAMS:
			crc = crc_page_streams(crc, page);
			break;
#endif
		default:
			COMP_CRC32C(crc, page, BLCKSZ);
			break;
	}
	FIN_CRC32C(crc);
	return crc;
}

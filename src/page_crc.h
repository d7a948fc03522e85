/*-------------------------------------------------------------------------
 *
 * page_crc.h
 *	  The CRC-32C of a tier page and its identity (page_crc.c).
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_PAGE_CRC_H
#define BPEXT_PAGE_CRC_H

#include "port/pg_crc32c.h"

extern void bpext_page_crc_setup(void);
extern pg_crc32c bpext_page_crc(const void *key, size_t keylen,
								const char *page);

#ifdef BPEXT_TEST_HOOKS
extern void bpext_page_crc_test(int npages, char *out, size_t outlen);
#endif

#endif							/* BPEXT_PAGE_CRC_H */

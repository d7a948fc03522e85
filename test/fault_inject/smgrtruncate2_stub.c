/*-------------------------------------------------------------------------
 *
 * smgrtruncate2_stub.c
 *	  An LD_PRELOAD library that only exports a function named
 *	  smgrtruncate2, for test/t/032_truncate_shape.pl.
 *
 * PostgreSQL 16.7 changed the storage manager's truncate signature and
 * added smgrtruncate2 with it.  bpext tells a 16 server's signature from
 * its version and checks that the server exports smgrtruncate2 exactly
 * when its version says it should (src/interpose.c).  Preloaded into a
 * 16.0 to 16.6 server, this library makes the two disagree, as a server
 * patched with part of the change would: bpext must refuse to start.
 * It is never called.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
void		smgrtruncate2(void);

void
smgrtruncate2(void)
{
}

/*-------------------------------------------------------------------------
 *
 * interpose.h
 *	  Installing bpext's wrappers into the server's smgr table.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_INTERPOSE_H
#define BPEXT_INTERPOSE_H

/* The wrapper for each f_smgr member bpext replaces (smgr_wrap.c). */
typedef struct BpextSmgrWrappers
{
	void	   *create;
	void	   *unlink;
	void	   *extend;
	void	   *read;
	void	   *write;
	void	   *truncate;
} BpextSmgrWrappers;

extern void bpext_interpose_smgr(const BpextSmgrWrappers *wrappers);

#endif							/* BPEXT_INTERPOSE_H */

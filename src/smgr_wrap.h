/*-------------------------------------------------------------------------
 *
 * smgr_wrap.h
 *	  bpext's storage-manager wrappers.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#ifndef BPEXT_SMGR_WRAP_H
#define BPEXT_SMGR_WRAP_H

extern void bpext_install_smgr_wrappers(void);

#endif							/* BPEXT_SMGR_WRAP_H */

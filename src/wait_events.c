/*-------------------------------------------------------------------------
 *
 * wait_events.c
 *	  The wait events bpext reports in pg_stat_activity.
 *
 * From 17 on an extension can name its wait events: pg_stat_activity then
 * shows wait_event_type "Extension" with a wait_event of bpext's own
 * (BpextTierRead, say) where 15 shows the generic "Extension", so that a
 * session stuck on the SSD can be told from one waiting for a scan worker.
 * The names are registered once per shared-memory lifetime, by the
 * postmaster from the shared-memory startup hook (again after a crash
 * restart); the ids they get are kept in a static array that every child
 * inherits.
 *
 * Locking: WaitEventExtensionNew's own, in the postmaster only.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/wait_event.h"

#include "compat.h"
#include "wait_events.h"

uint32		bpext_wait_event_info[BPEXT_WAIT_EVENT_COUNT];

/* In BpextWaitEvent order. */
static const char *const wait_event_names[BPEXT_WAIT_EVENT_COUNT] = {
	"BpextTierRead",
	"BpextTierWrite",
	"BpextScanOutput",
	"BpextScanWorkers",
	"BpextScanTaskDelay",
	"BpextScanWorkerIdle",
	"BpextWorkerMain",
	"BpextSettingsApplied",
	"BpextWarmLoad",
	"BpextChainCuts",
	"BpextTierHelper",
	"BpextStoreQueue",
};

/* Called by the postmaster once shared memory is set up. */
void
bpext_register_wait_events(void)
{
	int			i;

	for (i = 0; i < BPEXT_WAIT_EVENT_COUNT; i++)
	{
#if BPEXT_CUSTOM_WAIT_EVENTS
		bpext_wait_event_info[i] = WaitEventExtensionNew(wait_event_names[i]);
#else
		(void) wait_event_names[i];
		bpext_wait_event_info[i] = PG_WAIT_EXTENSION;
#endif
	}
}

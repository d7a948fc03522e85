/*-------------------------------------------------------------------------
 *
 * tier_scans.c
 *	  Scans over the tier map, split over the worker pool: unlinking the
 *	  slots an invalidation left dead, and emptying the slots a shrink
 *	  takes away.
 *
 * Invalidating a relation or a database takes effect at once, by bumping
 * generations (tier_map_rels.c): no lookup serves a dead slot from then on.
 * The scan here only gives the dead slots back, so that the space and the
 * counts in the views are right.  The tier worker runs it: for DROP
 * DATABASE and ALTER DATABASE SET TABLESPACE as soon as they finish
 * (db_hooks.c asks for it, and the history names the command, as SQL
 * Server scans its buffer pool for them), and after relation-level
 * invalidations.
 *
 * Shrinking first stops publications into the slots being taken away
 * (tier_map_set_active_slots), then unlinks what they hold, before the
 * tier worker cuts the file.
 *
 * Copyright (c) 2026, bpext developers
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "progress.h"
#include "scan_pool.h"
#include "settings.h"
#include "tier_control.h"
#include "tier_map.h"
#include "tier_scans.h"

/* Slots per unit of a shrink (tier_map_drop_slots takes them together). */
#define SHRINK_SLOTS_PER_UNIT	TIER_MAP_DROP_MAX

void
bpext_invalidate_unit(BpextScan *scan, uint64 unit)
{
	uint32		removed = tier_map_unhash_piece((uint32) unit, true);

	bpext_scan_count(scan, removed, removed);
}

void
bpext_shrink_unit(BpextScan *scan, uint64 unit)
{
	const BpextScanArgs *args = bpext_scan_args(scan);
	uint32		first = args->first_slot + (uint32) unit * SHRINK_SLOTS_PER_UNIT;
	uint32		end = Min(first + SHRINK_SLOTS_PER_UNIT, args->end_slot);
	uint32		dropped;

	dropped = tier_map_drop_slots(first, end);
	bpext_scan_count(scan, dropped, end - first);
}

/*
 * Unlink every dead slot of the map.  dbid and command are the database
 * and the command whose invalidation asked for it (InvalidOid and NULL for
 * the worker's routine sweeps): the scan history reports them.
 */
void
bpext_tier_sweep_dead(Oid dbid, const char *command)
{
	BpextScanSpec spec;
	BpextScanResult result;

	memset(&spec, 0, sizeof(spec));
	spec.op = BPEXT_SCAN_INVALIDATE;
	spec.args.dbid = dbid;
	spec.command = command;
	/* The tier worker's routine sweeps are listed when they find work. */
	spec.record_if_idle = OidIsValid(dbid);
	spec.nranges = 1;
	spec.total_buffers = bpext_scan_tier_range(&spec.ranges[0]);
	bpext_progress_begin(BPEXT_PROGRESS_SWEEP, spec.total_buffers);
	bpext_progress_set_target(dbid, InvalidOid, command);
	PG_TRY();
	{
		bpext_scan_run(&spec, &result);
	}
	PG_FINALLY();
	{
		bpext_progress_end();
	}
	PG_END_TRY();
}

/*
 * Take the tier from old_slots down to new_slots: stop publications into
 * the slots past new_slots, then empty them.
 */
void
bpext_tier_shrink(uint32 old_slots, uint32 new_slots)
{
	BpextScanSpec spec;
	BpextScanResult result;

	Assert(new_slots < old_slots);
	tier_map_set_active_slots(new_slots);

	memset(&spec, 0, sizeof(spec));
	spec.op = BPEXT_SCAN_SHRINK;
	spec.record_if_idle = true;
	spec.args.first_slot = new_slots;
	spec.args.end_slot = old_slots;
	spec.nranges = 1;
	spec.ranges[0].nunits = (old_slots - new_slots + SHRINK_SLOTS_PER_UNIT - 1) /
		SHRINK_SLOTS_PER_UNIT;
	spec.ranges[0].units_per_task =
		Max(1, bpext_scan_task_buffers / SHRINK_SLOTS_PER_UNIT);
	spec.total_buffers = old_slots - new_slots;
	bpext_scan_run(&spec, &result);
}

/*
 * Ask the worker to sweep the tier for a database whose files went away.
 * The command that did it has already changed files it cannot take back,
 * so it must not fail now: the sweep runs in the worker, and if too many
 * are pending this one is left to the worker's routine sweep.
 */
void
bpext_request_sweep(Oid dbid, const char *command)
{
	LWLockAcquire(BpextCtl->control_lock, LW_EXCLUSIVE);
	if (BpextCtl->nsweeps < BPEXT_MAX_SWEEP_REQUESTS)
	{
		BpextCtl->sweep_dbid[BpextCtl->nsweeps] = dbid;
		strlcpy(BpextCtl->sweep_command[BpextCtl->nsweeps], command,
				NAMEDATALEN);
		BpextCtl->nsweeps++;
	}
	LWLockRelease(BpextCtl->control_lock);
	bpext_wake_worker();
}

/* The worker: run the sweeps asked for.  Returns how many there were. */
int
bpext_run_requested_sweeps(void)
{
	Oid			dbids[BPEXT_MAX_SWEEP_REQUESTS];
	char		commands[BPEXT_MAX_SWEEP_REQUESTS][NAMEDATALEN];
	int			n;
	int			i;

	/*
	 * A sweep unlinks every dead slot, whoever's: the routine sweep for the
	 * generations bumped so far would walk the map again for nothing.
	 */
	(void) tier_map_dead_slots_possible();

	LWLockAcquire(BpextCtl->control_lock, LW_EXCLUSIVE);
	n = BpextCtl->nsweeps;
	memcpy(dbids, BpextCtl->sweep_dbid, sizeof(Oid) * n);
	memcpy(commands, BpextCtl->sweep_command, NAMEDATALEN * n);
	BpextCtl->nsweeps = 0;
	LWLockRelease(BpextCtl->control_lock);

	for (i = 0; i < n; i++)
		bpext_tier_sweep_dead(dbids[i], commands[i]);
	return n;
}

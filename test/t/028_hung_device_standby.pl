
# Copyright (c) 2026, bpext developers

# A hot standby whose tier device stops answering (test/hung_device.sh:
# every process doing I/O that reaches the device sleeps in the kernel in
# state D) keeps replaying, and holds no lock that replay needs.
#
# The primary's tier is on an ordinary disk, the standby's on the device;
# bpext.io_timeout = 1s, dual writes, and bpext.direct_io = on (027 runs
# with the page cache between bpext and the device; here every tier read
# and write goes to the device).  Twice, starting with the standby's tier
# enabled:
#
#  - bpext_prewarm of a table on the standby while the primary takes an
#    AccessExclusiveLock on it (LOCK TABLE), which replay must apply: the
#    prewarm returns (pages or a clear ERROR) and the standby replays past
#    the lock within io_timeout + 5 s;
#  - updates on the primary that the standby replays within io_timeout +
#    5 s, then a restartpoint on the standby (CHECKPOINT) that finishes
#    within the same bound.
#
# All along no process of the standby but bpext's helpers is held in D
# state by the device; then the device answers again and the standby's
# tier is enabled again by itself (bpext.recovery_interval = 1s) within
# 60 s, and the standby reads what the primary holds.  Every wait is
# bounded; the device is released on every way out (END).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use File::Path ();
use IO::Handle;
use IPC::Run ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

my $dev = bpext_hung_device();

my $io_timeout = 1;
my $bound = $io_timeout + 5;
my $hold = 2;

END
{
	unlink "$dev/ctl/hang" if defined $dev;
}

my $dir = "$dev/ssd/028";
File::Path::rmtree($dir);
mkdir $dir or die "could not create $dir: $!";

my $primary = bpext_init_node('hung_sb_primary', tier_size => '128MB',
	max_size => '128MB',
	init => { allows_streaming => 1 },
	conf => qq{
bpext.io_timeout = '${io_timeout}s'
bpext.write_policy = 'dual_write'
bpext.direct_io = on
bpext.recovery_interval = '1s'
log_statement = none
});
$primary->start;
bpext_setup($primary);
$primary->safe_psql('postgres', q{
	CREATE TABLE big (id int PRIMARY KEY, v int NOT NULL, pad text NOT NULL);
	INSERT INTO big SELECT i, 0, repeat('b', 400) FROM generate_series(1, 80000) i;
	VACUUM ANALYZE big;
	CHECKPOINT;
});

my $standby = bpext_init_standby($primary, 'hung_standby', "$dir/standby.tier");
$standby->start;
$primary->wait_for_catchup($standby);
ok(bpext_wait_for_state($standby, 'enabled'), 'the standby enables its tier');

# big as the primary holds it: rows and a sum over every column.
sub big_on
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		q{SELECT count(*) || ':' || sum(id) || ':' || sum(v) || ':' || sum(length(pad)) FROM big});
}

# The standby has replayed up to the primary's current position, within
# limit seconds.
sub replayed
{
	my ($limit) = @_;
	my $lsn = $primary->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
	my $deadline = time() + $limit;
	while (time() < $deadline)
	{
		my ($ret, $out) = $standby->psql('postgres',
			"SELECT pg_last_wal_replay_lsn() >= '$lsn'::pg_lsn");
		return 1 if $ret == 0 && $out eq 't';
		usleep(50_000);
	}
	return 0;
}

my $tier = "$dir/standby.tier";

# As 027: the tier file written back and its cache dropped, so that reads
# go to the device.
sub drop_tier_cache
{
	return unless -e $tier;
	if (open(my $fh, '<', $tier))
	{
		$fh->sync;
		close $fh;
	}
	system('dd', "if=$tier", 'iflag=nocache', 'count=0', 'status=none') == 0
	  or diag("could not drop the cache of $tier");
	return;
}

my $recover_wait = 60;

# As 027: the device hung around the steps, the standby's processes
# watched, the device released; then the tier is enabled again with
# nobody acting, and the standby reads what the primary holds.
sub with_hung_device
{
	my ($name, $steps) = @_;
	drop_tier_cache();
	my $watch = bpext_watch_d_state($standby);
	bpext_device_hang($dev);
	eval { $steps->(); 1 } or fail("$name: the steps died: $@");
	my $until = time() + $hold;
	usleep(($until - time()) * 1e6) while time() < $until;
	my $released = bpext_device_release($dev);
	usleep(300_000);
	my $w = bpext_watch_d_state_end($watch, $released);
	cmp_ok($w->{samples}, '>=', 10, "$name: the standby's processes were watched ($w->{samples} samples)");
	is_deeply($w->{held}, [],
		"$name: no process of the standby but helpers is held in D state by the hung device");
	note("$name: helper held: $_") for @{ $w->{helpers} };
	note("$name: long wait elsewhere: $_") for @{ $w->{other} };

	my $t0 = time();
	my $back = bpext_wait_for_state($standby, 'enabled', $recover_wait);
	ok($back, "$name: the standby's tier is enabled again by itself once the device answers")
	  and note(sprintf('%s: back after %.1f s', $name, time() - $t0));
	if (!$back)
	{
		$recover_wait = 5;
		my $r = bpext_timed_psql($standby, 'postgres', 'SELECT bpext_enable()', 60);
		note("$name: bpext_enable() by hand: " . ($r->{done} ? "$r->{out}$r->{err}" : 'did not return in 60 s'));
		bpext_wait_for_state($standby, 'enabled', 30)
		  or BAIL_OUT("$name: the standby's tier cannot be enabled again");
	}
	ok(replayed(60), "$name: the standby catches up");
	is(big_on($standby), big_on($primary), "$name: the standby reads what the primary holds");
	return;
}

# --- bpext_prewarm on the standby while replay applies an AccessExclusiveLock ---
# The standby's tier emptied first, so that the prewarm has pages to store.
$standby->safe_psql('postgres', 'SELECT bpext_drop_clean_buffers()');
with_hung_device('prewarm', sub {
	my ($out, $err) = ('', '');
	my $t0 = time();
	my $prewarm = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $standby->connstr('postgres'),
		  '-c', "SELECT bpext_prewarm('big')" ],
		'<', \undef, '>', \$out, '2>', \$err);
	# The prewarm holds its lock on big before the primary's lock comes.
	my $locked = 0;
	for (1 .. 100)
	{
		last if $locked = $standby->safe_psql('postgres', q{
			SELECT count(*) > 0 FROM pg_locks
			 WHERE relation = 'big'::regclass AND mode = 'AccessShareLock'
			   AND pid <> pg_backend_pid()}) eq 't';
		usleep(20_000);
	}
	note("prewarm: " . ($locked ? 'holds its lock on big' : 'finished before the lock was seen'));
	my $t_lock = time();
	$primary->safe_psql('postgres', 'BEGIN; LOCK TABLE big IN ACCESS EXCLUSIVE MODE; COMMIT');
	my $ok = replayed($bound);
	ok($ok, sprintf('prewarm: the standby replays the lock within %d s (%.1f s)',
			$bound, time() - $t_lock));
	my $deadline = $t0 + $bound;
	while ($prewarm->pumpable && time() < $deadline)
	{
		eval { $prewarm->pump_nb };
		usleep(50_000);
	}
	my $done = !$prewarm->pumpable;
	ok($done, sprintf('prewarm: bpext_prewarm on the standby returns within %d s (%.1f s)',
			$bound, time() - $t0));
	if ($done)
	{
		my $ret = $prewarm->finish ? 0 : $prewarm->full_result(0) >> 8;
		if ($ret == 0)
		{
			note("prewarm: it stored $out pages");
		}
		else
		{
			like($err, qr/ERROR:  /, 'prewarm: a clear error') and note("prewarm: $err");
		}
	}
	else
	{
		$prewarm->kill_kill;
	}
});

# --- replay and a restartpoint -----------------------------------------------------
# A checkpoint on the primary first, so that the standby has a restartpoint
# to make once it has replayed the updates.
with_hung_device('restartpoint', sub {
	$primary->safe_psql('postgres', q{
		UPDATE big SET v = v + 1 WHERE id % 7 = 0;
		CHECKPOINT;
	});
	my $t0 = time();
	ok(replayed($bound), sprintf('restartpoint: the standby replays the updates within %d s (%.1f s)',
			$bound, time() - $t0));
	my $r = bpext_timed_psql($standby, 'postgres', 'CHECKPOINT', $bound);
	ok($r->{done}, sprintf('restartpoint: CHECKPOINT on the standby returns within %d s (%.1f s)',
			$bound, $r->{secs}));
	is($r->{ret}, 0, 'restartpoint: it succeeds') or diag($r->{err}) if $r->{done};
});

$standby->stop;
$primary->stop;
done_testing();

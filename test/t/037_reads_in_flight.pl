
# Copyright (c) 2026, bpext developers

# Tier reads that wait for the device are at the device side by side: one
# reader helper (bpext.tier_readers = 1) with bpext.tier_read_depth = 16
# keeps as many reads in flight as there are sessions waiting, through
# io_uring.  With one pread at a time it kept one.  The reads are made to
# stay in flight on a device that really hangs (test/hung_device.sh), and
# are counted where the kernel counts them: the device's queue
# (/sys/block/loopN/inflight).
#
#  1. bpext.io_timeout = 600s (a helper waiting for its reads then looks
#     for new requests by itself only every 60 s).  The device hangs; 8
#     sessions each read one block of a table held in the tier
#     (bpext.direct_io = on: every tier read goes to the helper).  First
#     one session asks, then, once its read is at the device, the other 7:
#     within 30 s the device has 8 reads in flight from the single helper
#     (woken for each new request while it waits for its reads),
#     bpext_stats.reads_at_device says 8 (none waits for a helper), and
#     extension_outstanding_io counts the 8 sessions waiting.  The device answers: every session gets its row,
#     served by the tier (8 more hits), with no I/O error.
#  2. bpext.io_timeout = 1s.  The same, with the device left hung: every
#     session gets its row (from the data file) within io_timeout + 5 s,
#     the tier goes to state 7 and nothing but helpers is held in D state,
#     although the helper is killed with its reads at the device; their
#     slots come back while the device still hangs.  The device
#     answers, and the tier comes back by itself.
#  3. 1 again, on what 2 left behind.
#
# Where the kernel refuses io_uring (the worker then logs that reader
# helpers cannot use it), the in-flight checks are skipped, saying why.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use File::Path ();
use IPC::Run ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

bpext_needs_contrib('pg_prewarm');
my $dev = bpext_hung_device();

# Whatever happens, the device answers again before the server is stopped.
END
{
	unlink "$dev/ctl/hang" if defined $dev;
}

my $sessions = 8;
my $dir = "$dev/ssd/037";
File::Path::rmtree($dir);
mkdir $dir or die "could not create $dir: $!";

open(my $lfh, '<', "$dev/loopdev") or die "could not read $dev/loopdev: $!";
my $loop = <$lfh> // '';
close $lfh;
chomp $loop;
$loop =~ s{^/dev/}{};
my $inflight_file = "/sys/block/$loop/inflight";
ok(-r $inflight_file, "the device's queue is readable ($inflight_file)");

# Reads the device has taken and not answered.
sub device_reads_in_flight
{
	open(my $fh, '<', $inflight_file) or return -1;
	my ($reads) = split ' ', (<$fh> // '-1');
	close $fh;
	return $reads;
}

my $node = bpext_init_node('inflight', tier_size => '64MB', max_size => '64MB',
	tier_path => "$dir/tier", conf => q{
bpext.direct_io = on
bpext.tier_readers = 1
bpext.tier_read_depth = 16
bpext.io_timeout = '600s'
bpext.recovery_interval = '1s'
log_statement = none
});
$node->start;
bpext_setup($node);

# A table of 1,000 pages held whole in the tier, none of it in shared
# buffers; blocks far apart, one per session and phase.
$node->safe_psql('postgres', q{
	CREATE TABLE t (id int, pad text) WITH (fillfactor = 10);
	INSERT INTO t SELECT i, repeat('x', 500) FROM generate_series(1, 1000) i;
	VACUUM t;
	CHECKPOINT;
});
is($node->safe_psql('postgres', q{SELECT pg_relation_size('t') / 8192}),
	'1000', 'one row per page');
is($node->safe_psql('postgres', q{SELECT bpext_prewarm('t')}), '1000',
	'the table is in the tier');

# The sessions, connected and with what they need of the catalogs cached
# (a warm-up read of block 0), so that once the device hangs the only
# shared-buffer miss each makes is its own block.
my @session;
for my $i (1 .. $sessions)
{
	my %s = (in => '', out => '', err => '');
	$s{h} = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres') ],
		'<', \$s{in}, '>', \$s{out}, '2>', \$s{err});
	push @session, \%s;
}
my $monitor = { in => '', out => '', err => '' };
$monitor->{h} = IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $node->connstr('postgres') ],
	'<', \$monitor->{in}, '>', \$monitor->{out}, '2>', \$monitor->{err});

# Send sql to a session and wait up to limit seconds for a line matching
# want.  Returns the output so far and whether it came.
sub ask
{
	my ($s, $sql, $want, $limit) = @_;
	$s->{out} = '';
	$s->{in} .= "$sql\n";
	return wait_for($s, $want, $limit);
}

sub wait_for
{
	my ($s, $want, $limit) = @_;
	my $deadline = time() + $limit;
	while (time() < $deadline)
	{
		eval { $s->{h}->pump_nb };
		return (1, $s->{out}) if $s->{out} =~ $want;
		usleep(20_000);
	}
	return (0, $s->{out} . $s->{err});
}

sub warm_up
{
	for my $s (@session, $monitor)
	{
		my ($ok, $out) = ask($s,
			q{SELECT 'warm', id FROM t WHERE ctid = '(0,1)'; SELECT 'warm', extension_outstanding_io FROM bpext_stats;},
			qr/warm\|\d+\n.*warm\|\d+/s, 30);
		$ok or BAIL_OUT("a session did not warm up: $out");
	}
	return;
}

# Sessions from..to ask for their blocks of this phase.
sub send_reads
{
	my ($first, $from, $to) = @_;
	for my $i ($from .. $to)
	{
		my $block = $first + 100 * $i;
		$session[$i]{out} = '';
		$session[$i]{in} .= "SELECT 'row', id FROM t WHERE ctid = '($block,1)';\n";
		eval { $session[$i]{h}->pump_nb };
	}
	return map { $first + 100 * $_ } 0 .. $#session;
}

# Each session asks for its block of this phase; returns the blocks.
sub read_blocks
{
	my ($first) = @_;
	return send_reads($first, 0, $#session);
}

# The most reads the device had in flight, sampled until it had want or
# for secs seconds.
sub most_in_flight
{
	my ($want, $secs) = @_;
	my $most = 0;
	my $deadline = time() + $secs;
	while (time() < $deadline && $most < $want)
	{
		my $n = device_reads_in_flight();
		$most = $n if $n > $most;
		usleep(20_000);
	}
	return $most;
}

# Wait up to limit seconds for every session's row; true if each came and
# is the row of its block (id = block + 1), with how long the last took.
sub rows_back
{
	my ($limit, @blocks) = @_;
	my $start = time();
	my $right = 0;
	for my $i (0 .. $#session)
	{
		my ($ok, $out) =
		  wait_for($session[$i], qr/row\|\d+\n/, $limit - (time() - $start));
		my $want = $blocks[$i] + 1;
		if ($ok && $out =~ /row\|(\d+)/ && $1 == $want)
		{
			$right++;
		}
		else
		{
			diag("session $i (block $blocks[$i]): " . ($ok ? "row $out, not $want" : "no row: $out"));
		}
	}
	return ($right == @session, time() - $start);
}

# Before the device hangs, the tier's writes must be done: a direct write
# into a part of the file not written before holds the file's inode lock
# (ext4 converts the extent when it completes), so while it hangs at the
# device every read of the file waits for that lock in the kernel, short
# of the device (in CI, on a busy machine, bpext_prewarm's writes were
# still going when phase 3 hung the device: bpext had 8 reads in its
# ring, the device 1).
sub writes_done
{
	bpext_wait_for_quiet_worker($node);
	return;
}

sub uring_refused
{
	return bpext_count_in_log($node, qr/reader helpers cannot use io_uring/) > 0;
}

# --- 1. and 3. reads in flight side by side -----------------------------------
# The device hangs, and the first session asks for its block; once the
# helper has that read at the device (and so waits in its ring), the other
# sessions ask for theirs.  Within 30 s the device has every read: the
# waiting helper is woken for each new request (without the wake-up it
# would take them only at its ring's 60 s backstop).  The device answers
# and every row comes from the tier.
sub in_flight_phase
{
	my ($phase, $first) = @_;
	bpext_evict_shared_buffers($node);
	warm_up();
	writes_done();
	my $before = bpext_stats($node);
	bpext_device_hang($dev);
	send_reads($first, 0, 0);
	my $one = most_in_flight(1, 30);
	my @blocks = send_reads($first, 1, $#session);
	my $most = most_in_flight($sessions, 30);
	my ($outstanding, $at_device, $waiting) = (0, 0, -1);
	my (undef, $out) = ask($monitor,
		q{SELECT 'outstanding', extension_outstanding_io, reads_at_device, reads_waiting_for_helper FROM bpext_stats;},
		qr/outstanding\|\d+\|\d+\|\d+/, 10);
	($outstanding, $at_device, $waiting) = ($1, $2, $3)
	  if $out =~ /outstanding\|(\d+)\|(\d+)\|(\d+)/;
	bpext_device_release($dev);

	SKIP:
	{
		skip 'this kernel refuses io_uring to the reader helpers (the server log says why)', 5
		  if uring_refused();
		is($one, 1, "$phase: the first session's read is at the device");
		cmp_ok($most, '>=', $sessions,
			"$phase: within 30 s of the others' requests the device has $sessions reads in flight from one reader helper");
		is($at_device, $sessions,
			"$phase: bpext_stats.reads_at_device says the helpers have $sessions at the device");
		is($waiting, 0, "$phase: bpext_stats.reads_waiting_for_helper: none waits for a helper");
		cmp_ok($outstanding, '>=', $sessions,
			"$phase: bpext_stats.extension_outstanding_io counts the $sessions sessions waiting");
	}
	note("$phase: at most $most reads in flight at the device; bpext_stats: "
		  . "extension_outstanding_io $outstanding, reads_at_device $at_device, "
		  . "reads_waiting_for_helper $waiting");

	my ($all) = rows_back(30, @blocks);
	ok($all, "$phase: every session gets the row of its block once the device answers");
	my $after = bpext_stats($node);
	cmp_ok($after->{hits} - $before->{hits}, '>=', $sessions,
		"$phase: the $sessions blocks were served by the tier");
	is($after->{io_errors} - $before->{io_errors}, 0, "$phase: no I/O error");
	is($node->safe_psql('postgres', 'SELECT state FROM bpext_configuration'),
		$BpextTest::STATE{enabled}, "$phase: the tier is still enabled");
	return;
}

in_flight_phase(1, 10);

# --- 2. the same, the device left hung past io_timeout ------------------------
{
	$node->safe_psql('postgres', q{
		ALTER SYSTEM SET bpext.io_timeout = '1s';
		SELECT pg_reload_conf();
	});
	bpext_evict_shared_buffers($node);
	warm_up();
	writes_done();
	my $watch = bpext_watch_d_state($node);
	bpext_device_hang($dev);
	my @blocks = read_blocks(20);

	my $sent = time();
	my $most = most_in_flight(2, 0.8);
	my ($all, $secs) = rows_back(1 + 5 - (time() - $sent), @blocks);
	ok($all, '2: every session gets the row of its block within io_timeout + 5 s while the device hangs')
	  and note(sprintf('2: the last row came after %.1f s', $secs));
	ok(bpext_wait_for_state($node, 'error', 10), '2: the tier went to state 7');

	# The worker kills the helper, its reads still at the device; their
	# slots come back although the device has not answered them.
	my ($queue, $left);
	for (1 .. 100)
	{
		$queue = $node->safe_psql('postgres',
			'SELECT reads_waiting_for_helper, reads_at_device FROM bpext_stats');
		$left = device_reads_in_flight();
		last if $queue eq '0|0';
		usleep(100_000);
	}
	SKIP:
	{
		skip 'this kernel refuses io_uring: a helper stuck in pread keeps its slot', 1
		  if uring_refused();
		is($queue, '0|0',
			'2: with the device still hung, no tier read is left waiting for a helper or at the device in bpext_stats');
	}
	note("2: bpext_stats $queue; the device still had $left reads in flight");
	$most = $left if $left > $most;
	my $released = bpext_device_release($dev);
	my $held = bpext_watch_d_state_end($watch, $released);
	is_deeply($held->{held}, [], '2: nothing but helpers was held in D state')
	  or diag(join("\n", @{ $held->{held} }));
	note("2: at most $most reads in flight at the device; helpers held: "
		  . scalar(@{ $held->{helpers} }));
	SKIP:
	{
		skip 'this kernel refuses io_uring to the reader helpers', 1
		  if uring_refused();
		cmp_ok($most, '>=', 2, '2: the device had several reads in flight when it hung');
	}
	ok(bpext_wait_for_state($node, 'enabled', 60),
		'2: the tier comes back by itself once the device answers');
}

# --- 3. after all that, the same as 1 ---------------------------------------------
# The tier enabled anew, its new helper does what the first did: the killed
# helper left no slot taken, no wait-word that keeps its successor from
# being woken, and no ring marked as failed.
# The tier came back empty: the table goes into it again.
$node->safe_psql('postgres', q{
	ALTER SYSTEM SET bpext.io_timeout = '600s';
	SELECT pg_reload_conf();
});
is($node->safe_psql('postgres', q{SELECT bpext_prewarm('t')}), '1000',
	'3: the table is in the tier again');
in_flight_phase(3, 30);

for my $s (@session, $monitor)
{
	$s->{in} .= "\\q\n";
	eval { $s->{h}->finish };
}
$node->stop;
File::Path::rmtree($dir);
done_testing();

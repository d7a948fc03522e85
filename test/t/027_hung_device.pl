
# Copyright (c) 2026, bpext developers

# A tier device that stops answering never holds PostgreSQL, on a device
# that really hangs (test/hung_device.sh: ext4 on a loop device on a FUSE
# file whose every request waits while the device is hung, so that every
# process doing I/O that reaches it sleeps in the kernel in state D, where
# no signal reaches it).  The fault injector's hangs (018, 022, 025) are
# sleeps in user space; this is the kernel's own.
#
# A primary with bpext.io_timeout = 1s, 16 MB of shared buffers, dual
# writes and read admission, its tier on the device, pgbench data
# prewarmed into it.  Scenario by scenario, each starting with the tier
# enabled, the device stops answering, and then each of these returns
# within io_timeout + 5 s (success or a clear ERROR):
#
#  - steady-state TPC-B (4 clients) and a CHECKPOINT under it;
#  - bpext_resize up, bpext_resize down, bpext_disable, bpext_enable;
#  - bpext_drop_clean_buffers and DROP DATABASE;
#  - bpext_prewarm;
#  - a warm start and a cold start of the server (it comes up and serves
#    queries);
#  - pg_ctl stop -m fast, pg_ctl stop -m immediate, and a crash restart
#    (SIGKILL of a backend) after which the server serves queries again.
#
# All along, the node's processes are watched every 100 ms: none is held
# in D state by the hung device but bpext's helper processes (their title
# says "helper").  Then the device answers again and, with nobody acting
# (no bpext_enable, no reload), the tier is enabled again
# (bpext.recovery_interval = 1s: the worker probes the device through a
# helper), within 60 s; and nothing is lost: TPC-B's invariants, pgbench's
# transactions all in pgbench_history, the table counts, amcheck at the
# end.  A scenario whose tier does not come back gets it back by hand
# (bpext_enable), and each ends with a clean restart, so that the next one
# starts with the tier enabled and a worker with no history of failures.
#
# Every wait is bounded, so that a build that hangs fails instead of
# hanging the suite; the device is released on every way out (END).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use File::Path ();
use IO::Handle;
use IPC::Run ();
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

bpext_needs_contrib('pg_prewarm', 'amcheck');
my $dev = bpext_hung_device();

my $io_timeout = 1;
my $bound = $io_timeout + 5;    # what the acceptance allows each operation
my $hold = 2;                   # the device stays hung this long after the last step
my $scale = 10;

# Whatever happens, the device answers again before the servers are
# stopped (PostgreSQL::Test::Cluster's END block runs after this one).
END
{
	unlink "$dev/ctl/hang" if defined $dev;
}

my $dir = "$dev/ssd/027";
File::Path::rmtree($dir);
mkdir $dir or die "could not create $dir: $!";

# --- the device hangs for real ------------------------------------------------
# A direct-I/O write and its fsync stay in D state, without running once,
# while the device hangs, and finish once it answers.
{
	bpext_device_hang($dev);
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		exec('dd', 'if=/dev/zero', "of=$dir/probe", 'bs=64k', 'count=16',
			'oflag=direct', 'conv=fsync', 'status=none')
		  or POSIX::_exit(127);
	}
	my ($held, $last, $run) = (0, '', 0);
	for (1 .. 100)
	{
		my ($state, $switches) = ('gone', 0);
		if (open(my $fh, '<', "/proc/$pid/stat"))
		{
			($state) = (<$fh> // '') =~ /^\d+ \(.*\) (\S)/;
			close $fh;
		}
		if (open(my $fh, '<', "/proc/$pid/status"))
		{
			local $/;
			my $status = <$fh> // '';
			close $fh;
			$switches += $1 while $status =~ /ctxt_switches:\s+(\d+)/g;
		}
		$run = ($state eq 'D' && $switches eq $last) ? $run + 1 : 0;
		$last = $switches;
		if ($run >= 20)
		{
			$held = 1;
			last;
		}
		usleep(100_000);
	}
	ok($held, 'the device: dd is held in D state for 2 s while it hangs');
	like(bpext_device_status($dev), qr/^hung held=[1-9]/,
		'the device: it holds requests');
	bpext_device_release($dev);
	my $gone = 0;
	for (1 .. 100)
	{
		last if $gone = waitpid($pid, POSIX::WNOHANG()) == $pid;
		usleep(100_000);
	}
	ok($gone && $? == 0, 'the device: dd finishes once the device answers');
	if (!$gone)
	{
		kill('KILL', $pid);
		BAIL_OUT('the hung device does not let go');
	}
	unlink "$dir/probe";
}

# --- the node -------------------------------------------------------------------
my $tier = "$dir/primary.tier";
my $node = bpext_init_node('hung_primary', tier_size => '256MB',
	max_size => '512MB', tier_path => $tier,
	conf => qq{
bpext.io_timeout = '${io_timeout}s'
bpext.write_policy = 'dual_write'
bpext.admission = 'read'
bpext.recovery_interval = '1s'
restart_after_crash = on
log_statement = none
max_connections = 30
});
$node->start;
bpext_setup($node);
$node->safe_psql('postgres', 'CREATE EXTENSION amcheck');
my $has_recovery = $node->safe_psql('postgres',
	q{SELECT count(*) FROM pg_settings WHERE name = 'bpext.recovery_interval'});
is($has_recovery, '1', 'bpext.recovery_interval is a setting of this build');
$node->command_ok([ 'pgbench', '-i', '-q', '-s', $scale, 'postgres' ], 'pgbench -i');
$node->safe_psql('postgres', q{
	VACUUM ANALYZE;
	CHECKPOINT;
	SELECT bpext_prewarm('pgbench_accounts'), bpext_prewarm('pgbench_accounts_pkey'),
	       bpext_prewarm('pgbench_tellers'), bpext_prewarm('pgbench_branches');
});
bpext_evict_shared_buffers($node);

# What must hold after every scenario: TPC-B's invariants, and the sums and
# counts as they were (only the TPC-B scenario changes them).
my $expected_tpcb = bpext_tpcb_check($node, 'postgres');
my $expected_accounts = $scale * 100000;

sub check_data
{
	my ($name, %o) = @_;
	my $tpcb = bpext_tpcb_check($node, 'postgres');
	my ($a, $t, $b, $h) = split /\|/, $tpcb;
	ok($a == $t && $t == $b && $b == $h, "$name: TPC-B invariants ($tpcb)");
	if ($o{changed})
	{
		$expected_tpcb = $tpcb;
	}
	else
	{
		is($tpcb, $expected_tpcb, "$name: nothing lost");
	}
	is($node->safe_psql('postgres', 'SELECT count(*) FROM pgbench_accounts'),
		$expected_accounts, "$name: every account is there");
	return;
}

# The end of a scenario: the data checked, then a clean restart with the
# device answering, so that the next scenario starts with a worker that has
# no history of failures (how soon it probes a device again may depend on
# how lately the tier failed before: a device that keeps failing must not
# be retried in a tight loop).
sub end_scenario
{
	my ($name, %o) = @_;
	my $state = delete $o{state} // 'enabled';
	check_data($name, %o);
	$node->restart;
	bpext_wait_for_state($node, $state, 60)
	  or BAIL_OUT("$name: the tier is not $state after a restart with the device answering");
	return;
}

# How long the tier may take to come back by itself.  A build without
# bpext.recovery_interval cannot bring it back: it fails the check quickly,
# and the tier is enabled by hand for the next scenario.
my $recover_wait = $has_recovery ? 60 : 5;

# After the device answers again: the tier is enabled again with nobody
# acting.  If not, it is enabled by hand for the next scenario.
sub tier_back
{
	my ($name) = @_;
	my $start = time();
	my $back = bpext_wait_for_state($node, 'enabled', $recover_wait);
	ok($back, "$name: the tier is enabled again by itself once the device answers")
	  and note(sprintf('%s: back after %.1f s', $name, time() - $start));
	return if $back;
	my $r = bpext_timed_psql($node, 'postgres', 'SELECT bpext_enable()', 60);
	note("$name: bpext_enable() by hand: " . ($r->{done} ? "$r->{out}$r->{err}" : 'did not return in 60 s'));
	bpext_wait_for_state($node, 'enabled', 30)
	  or BAIL_OUT("$name: the tier cannot be enabled again");
	return;
}

# Run sql while the device hangs; it must return within the bound,
# successfully if must_succeed, else successfully or with an ERROR.
sub returns
{
	my ($name, $sql, %o) = @_;
	my $r = bpext_timed_psql($node, $o{db} // 'postgres', $sql, $bound);
	ok($r->{done}, sprintf('%s returns within %d s (%.1f s)', $name, $bound, $r->{secs}));
	if ($r->{done})
	{
		if ($o{must_succeed})
		{
			is($r->{ret}, 0, "$name succeeds") or diag($r->{err});
		}
		elsif ($r->{ret} != 0)
		{
			like($r->{err}, qr/ERROR:  /, "$name: a clear error")
			  and note("$name: $r->{err}");
		}
		else
		{
			note("$name: $r->{out}");
		}
	}
	return $r;
}

# The tier file written back and the kernel's cache of it dropped (fsync,
# then posix_fadvise DONTNEED through dd), so that tier reads must go to
# the device, as they do on a server whose memory holds other things.
sub drop_tier_cache
{
	return unless -e $tier;
	if (open(my $fh, '+<', $tier))
	{
		$fh->sync or diag("could not fsync $tier: $!");
		close $fh;
	}
	system('dd', "if=$tier", 'iflag=nocache', 'count=0', 'status=none') == 0
	  or diag("could not drop the cache of $tier");
	return;
}

# One scenario: the node's processes watched, the device hung, the steps
# run, the device kept hung $hold s more (so that whatever went to it is
# still held), then released.  No process of the node but helpers was
# held by the device.
sub with_hung_device
{
	my ($name, $steps) = @_;
	drop_tier_cache();
	my $watch = bpext_watch_d_state($node);
	bpext_device_hang($dev);
	eval { $steps->(); 1 } or fail("$name: the steps died: $@");
	my $until = time() + $hold;
	usleep(($until - time()) * 1e6) while time() < $until;
	my $status = bpext_device_status($dev);
	my $released = bpext_device_release($dev);
	usleep(300_000);    # a sample after the release
	my $w = bpext_watch_d_state_end($watch, $released);
	note("$name: the device was '$status' at the release");
	cmp_ok($w->{samples}, '>=', 10, "$name: the node's processes were watched ($w->{samples} samples)");
	is_deeply($w->{held}, [],
		"$name: no process of the node but helpers is held in D state by the hung device");
	note("$name: helper held: $_") for @{ $w->{helpers} };
	note("$name: long wait elsewhere: $_") for @{ $w->{other} };
	return;
}

# A node that did not stop in time does once the device answers (the
# shutdown asked for goes on).
sub stopped_after_all
{
	my ($name) = @_;
	my $pid = $node->{_pid};
	for (1 .. 600)
	{
		last unless $pid && kill(0, $pid);
		usleep(100_000);
	}
	$node->_update_pid(-1);
	return unless defined $node->{_pid};
	my ($ok) = bpext_timed_stop($node, 'immediate', 60);
	BAIL_OUT("$name: the server does not stop even with the device answering")
	  unless $ok;
	return;
}

# pgbench in the background against the node.
sub pgbench_start
{
	my (@args) = @_;
	my ($out, $err) = ('', '');
	local $ENV{PGAPPNAME} = 'pgbench';
	my $h = IPC::Run::start(
		[ 'pgbench', '-n', '-h', $node->host, '-p', $node->port, @args, 'postgres' ],
		'<', \undef, '>', \$out, '2>', \$err);
	return { h => $h, out => \$out, err => \$err, started => time() };
}

# Wait for a pgbench to end, until deadline (it is killed then).  Returns
# (finished, exit code, output).
sub pgbench_wait
{
	my ($run, $deadline) = @_;
	while ($run->{h}->pumpable && time() < $deadline)
	{
		eval { $run->{h}->pump_nb };
		usleep(100_000);
	}
	my $finished = !$run->{h}->pumpable;
	my $ret = -1;
	if ($finished)
	{
		$ret = $run->{h}->finish ? 0 : $run->{h}->full_result(0) >> 8;
	}
	else
	{
		$run->{h}->kill_kill;
	}
	return ($finished, $ret, ${ $run->{out} } . ${ $run->{err} });
}

# The end of a pgbench whose server stopped or restarted under it: it
# exits (with an error) at once; it is killed if not within 10 s.
sub pgbench_end
{
	my ($run) = @_;
	my ($finished, $ret, $out) = pgbench_wait($run, time() + 10);
	note('pgbench: ' . ($finished ? "exited with $ret" : 'killed') . ":\n$out");
	return;
}

# --- steady-state TPC-B, and a checkpoint under it -------------------------------
{
	my $history = $node->safe_psql('postgres', 'SELECT count(*) FROM pgbench_history');
	my $secs = 15;
	my $run = pgbench_start('-c', 4, '-j', 2, '-T', $secs);
	sleep 3;
	my ($finished, $ret, $out);
	with_hung_device('TPC-B', sub {
		# Misses the tier cannot serve while the device hangs: one
		# times out, and the tier goes to state 7.
		ok(bpext_wait_for_state($node, 'error', $bound),
			"TPC-B: the tier goes to state 7 within $bound s");
		returns('TPC-B: CHECKPOINT under load', 'CHECKPOINT', must_succeed => 1);
		($finished, $ret, $out) = pgbench_wait($run, $run->{started} + $secs + $bound);
		ok($finished, "TPC-B: pgbench -T $secs finishes within $bound s of its end");
	});
	is($ret, 0, 'TPC-B: pgbench ran without an error') or diag($out);
	my ($n) = $out =~ /number of transactions actually processed: (\d+)/;
	$n //= 0;
	cmp_ok($n, '>', 0, "TPC-B: $n transactions");
	is($node->safe_psql('postgres', 'SELECT count(*) FROM pgbench_history') - $history,
		$n, 'TPC-B: every transaction pgbench counted is in pgbench_history');
	tier_back('TPC-B');
	$expected_tpcb = bpext_tpcb_check($node, 'postgres');
	end_scenario('TPC-B');
}

# --- bpext_resize up and down, bpext_disable, bpext_enable ----------------------
with_hung_device('resize up', sub {
	returns('resize up: bpext_resize(384MB)', "SELECT bpext_resize('384MB')");
});
tier_back('resize up');
end_scenario('resize up');

with_hung_device('resize down', sub {
	returns('resize down: bpext_resize(192MB)', "SELECT bpext_resize('192MB')");
});
tier_back('resize down');
end_scenario('resize down');

with_hung_device('disable', sub {
	returns('disable: bpext_disable()', 'SELECT bpext_disable()');
});
ok(bpext_wait_for_state($node, 'disabled', 60),
	'disable: the tier is disabled once the device answers');
end_scenario('disable', state => 'disabled');

with_hung_device('enable', sub {
	returns('enable: bpext_enable()', "SELECT bpext_enable('$tier', '256MB')");
});
tier_back('enable');
end_scenario('enable');

# --- bpext_drop_clean_buffers, DROP DATABASE ------------------------------------
$node->safe_psql('postgres', 'CREATE DATABASE hungdb');
$node->safe_psql('hungdb', q{
	CREATE TABLE d (id int PRIMARY KEY, pad text);
	INSERT INTO d SELECT i, repeat('d', 200) FROM generate_series(1, 50000) i;
	CHECKPOINT;
});
with_hung_device('drop', sub {
	returns('drop: bpext_drop_clean_buffers()', 'SELECT bpext_drop_clean_buffers()');
	returns('drop: DROP DATABASE', 'DROP DATABASE hungdb', must_succeed => 1);
});
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_database WHERE datname = 'hungdb'}),
	'0', 'drop: the database is gone');
tier_back('drop');
end_scenario('drop');

# --- bpext_prewarm ---------------------------------------------------------------
# The tier emptied first, so that the prewarm has every page to write.
$node->safe_psql('postgres', 'SELECT bpext_drop_clean_buffers()');
with_hung_device('prewarm', sub {
	returns('prewarm: bpext_prewarm(pgbench_accounts)',
		"SELECT bpext_prewarm('pgbench_accounts')");
});
tier_back('prewarm');
end_scenario('prewarm');

# --- a warm start and a cold start ---------------------------------------------------
# The server stopped with the device answering (cleanly: the map saved; or
# not: a cold start), then started while it hangs: it comes up within the
# bound and serves queries, reading what the tier held from the data files.
for my $start ([ 'warm start', 'fast' ], [ 'cold start', 'immediate' ])
{
	my ($name, $mode) = @$start;
	$node->safe_psql('postgres', q{
		SELECT bpext_prewarm('pgbench_accounts'), bpext_prewarm('pgbench_accounts_pkey')});
	$node->stop($mode);
	with_hung_device($name, sub {
		local $ENV{PGCTLTIMEOUT} = $bound;
		my $t0 = time();
		my $up = $node->start(fail_ok => 1);
		ok($up, sprintf('%s: the server starts within %d s (%.1f s)', $name, $bound, time() - $t0));
		if (!$up)
		{
			return;
		}
		my $r = returns("$name: a query over every account",
			'SELECT count(*) FROM pgbench_accounts', must_succeed => 1);
		is($r->{out}, $expected_accounts, "$name: the query's answer") if $r->{done};
	});
	if (!defined $node->{_pid})
	{
		# It did not come up in time; once the device answers it must.
		local $ENV{PGCTLTIMEOUT} = 60;
		$node->_update_pid(-1);
		$node->start unless defined $node->{_pid};
	}
	$node->poll_query_until('postgres', 'SELECT true')
	  or BAIL_OUT("$name: the server does not come up");
	tier_back($name);
	end_scenario($name);
}

# --- fast and immediate shutdown, a crash restart ------------------------------------
# Each under TPC-B (4 clients), the device hung for io_timeout + 2 s first:
# the tier has gone to state 7, and the worker and its helpers have had
# writes, write-backs and reads held.

for my $mode (qw(fast immediate))
{
	my $name = "$mode shutdown";
	my $stopped;
	my $load = pgbench_start('-c', 4, '-j', 2, '-T', 120);
	sleep 2;
	with_hung_device($name, sub {
		sleep($io_timeout + 2);
		my $secs;
		($stopped, $secs) = bpext_timed_stop($node, $mode, $bound);
		ok($stopped, sprintf('%s: pg_ctl stop -m %s returns within %d s (%.1f s)',
				$name, $mode, $bound, $secs));
	});
	stopped_after_all($name) unless $stopped;
	pgbench_end($load);
	$node->start;
	ok(bpext_wait_for_state($node, 'enabled', 60),
		"$name: the tier is enabled within 60 s of the next start");
	end_scenario($name, changed => 1);
}

{
	my $name = 'crash restart';
	my $load = pgbench_start('-c', 4, '-j', 2, '-T', 120);
	sleep 2;
	my $offset = -s $node->logfile;
	with_hung_device($name, sub {
		sleep($io_timeout + 2);
		my $backend = $node->safe_psql('postgres', q{
			SELECT pid FROM pg_stat_activity
			 WHERE application_name = 'pgbench' AND state <> 'idle'
			 ORDER BY pid LIMIT 1});
		$backend ||= $node->safe_psql('postgres', q{
			SELECT pid FROM pg_stat_activity
			 WHERE application_name = 'pgbench' ORDER BY pid LIMIT 1});
		ok($backend, "$name: a pgbench backend to kill ($backend)")
		  or diag($node->safe_psql('postgres',
			  'SELECT pid, backend_type, application_name, state, wait_event FROM pg_stat_activity'));
		my $t0 = time();
		kill('KILL', $backend) if $backend;
		my $ready = 0;
		while (time() < $t0 + $bound)
		{
			my $log = slurp_file($node->logfile, $offset);
			if ($log =~ /all server processes terminated; reinitializing[\s\S]*database system is ready to accept connections/)
			{
				$ready = 1;
				last;
			}
			usleep(100_000);
		}
		ok($ready, sprintf('%s: the server is back within %d s (%.1f s)',
				$name, $bound, time() - $t0));
		returns("$name: a query after it", 'SELECT count(*) FROM pgbench_branches',
			must_succeed => 1) if $ready;
	});
	pgbench_end($load);
	$node->poll_query_until('postgres', 'SELECT true')
	  or BAIL_OUT("$name: the server does not come back");
	tier_back($name);
	end_scenario($name, changed => 1);
}

is(bpext_amcheck($node, 'postgres'), '', 'at the end: amcheck finds nothing wrong');
my $stats = bpext_stats($node);
note("at the end: io_errors $stats->{io_errors}, crc_failures $stats->{crc_failures}");
is($stats->{crc_failures}, 0, 'at the end: no tier page failed its checksum');

$node->stop;
done_testing();


# Copyright (c) 2026, bpext developers

# No process that PostgreSQL or a session waits for makes a tier-file call
# that can wait on the device: with every such call held (the fault
# injector's read_sleep, write_sleep, truncate_sleep and call_sleep: reads,
# writes, truncations, opens that may write, fsync, fdatasync,
# sync_file_range, fallocate, flock, fchmod, unlink, stat, lstat, access,
# statvfs), only processes titled as bpext helpers are ever held, and
# everything a session or pg_ctl asks for ends within bpext.io_timeout
# plus 5 s: the worker's own writeback (it used to call sync_file_range
# itself, once a second), bpext_resize up and down, bpext_disable,
# bpext_enable, bpext_prewarm, reads through the tier, CHECKPOINT and an
# update, a fast shutdown, a start.  With bpext.io_timeout = 0 a fast
# shutdown still ends while the worker's helper is held.  When the calls
# are let go, the tier comes back by itself (bpext.recovery_interval), and
# every row reads right.  See doc/hung-device.md.
#
# The injector's hold is a sleep that a signal can end, so this is the
# bound the code keeps, not a device in D state (the hung-device tests
# make one); what it shows is which process makes each call.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

bpext_needs_contrib('pg_prewarm');

my $so = bpext_build_fault_injector();
plan skip_all => 'the fault injector could not be built' unless $so;

my $hold_ms = 600_000;    # longer than the whole test
my $bound_s = 6;          # bpext.io_timeout (1 s) + 5 s
my $give_up_s = 20;       # how long a build that blocks may take to fail
my $nrows = 2000;
my @holds = qw(read_sleep write_sleep truncate_sleep call_sleep);

my $ssd = PostgreSQL::Test::Utils::tempdir('ssd');
my $ctl = PostgreSQL::Test::Utils::tempdir('faults');
my $tier = "$ssd/held.tier";

my $node = bpext_init_node('held_calls', tier_size => '64MB',
	max_size => '128MB', tier_path => $tier,
	conf => qq{
bpext.io_timeout = '1s'
bpext.recovery_interval = 0
bpext.write_policy = 'dual_write'
});
bpext_start_with_faults($node, $so, "$ssd/", $ctl);
bpext_setup($node);
bpext_load_table($node, 'postgres', 't', $nrows);
$node->safe_psql('postgres', 'CHECKPOINT');
ok(bpext_wait_for_state($node, 'enabled'), 'the tier is enabled');

sub hold
{
	my @which = @_ ? @_ : @holds;
	bpext_fault($node, $_, 1, $hold_ms) for @which;
	return;
}

sub release
{
	bpext_fault($node, $_, 0) for @holds;
	return;
}

sub set_conf
{
	my ($line) = @_;
	$node->append_conf('postgresql.conf', "$line\n");
	$node->reload;
	return;
}

# Run sql; returns (finished without an error, seconds it took, stderr).
sub timed
{
	my ($sql) = @_;
	my $timed_out = 0;
	my $start = time();
	my ($ret, $out, $err) = $node->psql('postgres', $sql,
		timeout => $give_up_s, timed_out => \$timed_out);
	my $took = time() - $start;
	return (!$timed_out && $ret == 0, $timed_out ? 1e6 : $took, $err);
}

# sql ends (with or without an error) within the bound.
sub ends_in_bound
{
	my ($name, $sql) = @_;
	my ($ok, $took, $err) = timed($sql);
	cmp_ok($took, '<', $bound_s, "$name: ends within io_timeout + 5 s");
	return ($ok, $err);
}

# The held calls of processes not titled as helpers, from the injector's
# log ("pid fault fd N title T").
sub held_outside_helpers
{
	my $log = "$ctl/injected.log";
	return () unless -e $log;
	return grep { !/ title .*helper/ }
	  grep { /^\d+ (read_blocked|write_sleep|truncate_sleep|call_sleep) / }
	  split /\n/, slurp_file($log);
}

# Where the injector's log ends now.
sub log_offset
{
	return -s "$ctl/injected.log" // 0;
}

# Wait until a process whose title matches title is held, according to
# what the injector logged after offset.
sub wait_for_held
{
	my ($title, $offset) = @_;
	my $log = "$ctl/injected.log";
	for (1 .. $give_up_s * 10)
	{
		return 1 if -e $log && grep { / title .*$title/ }
		  grep { /^\d+ (read_blocked|write_sleep|truncate_sleep|call_sleep) / }
		  split /\n/, slurp_file($log, $offset);
		usleep(100_000);
	}
	return 0;
}

# With everything let go, the tier comes back by itself.
sub comes_back
{
	my ($name) = @_;
	release();
	ok(bpext_wait_for_state($node, 'enabled', 60),
		"$name: the tier comes back by itself once the calls are let go");
	return;
}

# With everything let go, bpext_enable() brings it back (and the next
# failure starts its probes afresh).
sub enable_again
{
	my ($name) = @_;
	release();
	$node->safe_psql('postgres', 'SELECT bpext_enable()');
	ok(bpext_wait_for_state($node, 'enabled'), "$name: bpext_enable() brings it back");
	return;
}

sub changed_rows
{
	my ($ver) = @_;
	return "UPDATE t SET ver = $ver, v = bpext_expected_v(id, $ver) WHERE id % 100 = 0";
}

# --- the worker's own writeback (its once-a-second sync_file_range) ---------
set_conf("bpext.recovery_interval = '1s'");
$node->safe_psql('postgres', changed_rows(1) . '; CHECKPOINT');
hold('call_sleep');
$node->safe_psql('postgres', changed_rows(2) . '; CHECKPOINT');
ok(bpext_wait_for_state($node, 'error', $bound_s),
	'writeback: the tier goes to ERROR when its writeback does not answer');
like(bpext_config($node)->{last_error}, qr/has not returned after \d+ ms/,
	'writeback: the error says the call did not answer');
comes_back('writeback');
set_conf('bpext.recovery_interval = 0');

# --- bpext_resize up, and down --------------------------------------------------
hold();
my ($ok, $err) = ends_in_bound('resize up', "SELECT bpext_resize('128MB')");
ok(!$ok, 'resize up: it fails');
like($err, qr/HINT:.*did not answer/, 'resize up: the hint names the device');
enable_again('resize up');
is(bpext_config($node)->{current_size_in_kb}, 128 * 1024,
	'resize up: the new size, once the device answers');

hold();
ends_in_bound('resize down', "SELECT bpext_resize('64MB')");
enable_again('resize down');
is(bpext_config($node)->{current_size_in_kb}, 64 * 1024,
	'resize down: the new size, once the device answers');

# --- bpext_disable, then bpext_enable -------------------------------------------
hold();
($ok, $err) = ends_in_bound('disable', 'SELECT bpext_disable()');
ok($ok, 'disable: it succeeds');
is(bpext_config($node)->{state}, 0, 'disable: the tier is DISABLED');
release();

hold();
($ok, $err) = ends_in_bound('enable', "SELECT bpext_enable('$tier', '64MB')");
ok(!$ok, 'enable: it fails');
like($err, qr/HINT:.*did not answer/,
	'enable: the hint names the device, not bpext.path and bpext.size');
enable_again('enable');

# --- bpext_prewarm, reads through the tier, CHECKPOINT and an update --------
hold();
ends_in_bound('prewarm', "SELECT bpext_prewarm('t')");
enable_again('prewarm');

cmp_ok($node->safe_psql('postgres', "SELECT bpext_prewarm('t')"), '>', 0,
	'reads: t is in the tier');
bpext_evict_shared_buffers($node);
hold('read_sleep');
my ($read_ok, $took) = timed(
	'SELECT count(*) FROM t WHERE v = bpext_expected_v(id, ver)');
ok($read_ok, 'reads: the scan succeeds');
cmp_ok($took, '<', $bound_s, 'reads: ends within io_timeout + 5 s');
enable_again('reads');

hold();
ends_in_bound('checkpoint', changed_rows(3) . '; CHECKPOINT; ' . changed_rows(4));
enable_again('checkpoint');

# --- a fast shutdown, and a start, with every call held ---------------------
$node->safe_psql('postgres', changed_rows(5) . '; CHECKPOINT');
hold();
$node->safe_psql('postgres', changed_rows(6));
{
	local $ENV{PGCTLTIMEOUT} = $give_up_s;
	my $start = time();
	ok($node->stop('fast', fail_ok => 1), 'fast shutdown: it ends');
	cmp_ok(time() - $start, '<', $bound_s,
		'fast shutdown: within io_timeout + 5 s');
	$start = time();
	$node->append_conf('postgresql.conf', "bpext.recovery_interval = '1s'\n");
	bpext_start_with_faults($node, $so, "$ssd/", $ctl, fail_ok => 1);
	cmp_ok(time() - $start, '<', $bound_s + 5, 'start: the server is up');
}
ok(bpext_wait_for_state($node, 'error', $bound_s),
	'start: the tier is in ERROR');
comes_back('start');
set_conf('bpext.recovery_interval = 0');

# --- bpext.io_timeout = 0: no time bound, but a shutdown is answered -------
# The worker waits for its helper's writeback as long as it takes, and
# still ends at once on SIGTERM.  (No map is saved at this shutdown.)
set_conf("bpext.io_timeout = 0\nbpext.warm_restart = off");
ok($node->poll_query_until('postgres',
		q{SELECT current_setting('bpext.io_timeout') = '0'}),
	'io_timeout 0: set');
my $offset = log_offset();
hold('call_sleep');
$node->safe_psql('postgres', changed_rows(7) . '; CHECKPOINT');
ok(wait_for_held(qr/writer helper/, $offset),
	'io_timeout 0: the worker\'s helper is held in its writeback');
ok(bpext_wait_for_state($node, 'enabled'), 'io_timeout 0: the tier stays enabled');
{
	local $ENV{PGCTLTIMEOUT} = $give_up_s;
	my $start = time();
	ok($node->stop('fast', fail_ok => 1),
		'io_timeout 0: a fast shutdown ends while the worker waits on its helper');
	cmp_ok(time() - $start, '<', $bound_s, 'io_timeout 0: within 5 s');
}
release();

# The postmaster saves the map at exit with no time bound either, and a
# second request to stop (here an immediate shutdown) ends that wait.
$node->append_conf('postgresql.conf', "bpext.warm_restart = on\n");
bpext_start_with_faults($node, $so, "$ssd/", $ctl);
ok(bpext_wait_for_state($node, 'enabled'), 'io_timeout 0: enabled again');
$offset = log_offset();
hold('write_sleep');
{
	local $ENV{PGCTLTIMEOUT} = $give_up_s;
	system_log('pg_ctl', '--no-wait', '-D', $node->data_dir, '-m', 'fast', 'stop');
	ok(wait_for_held(qr/postmaster helper/, $offset),
		'io_timeout 0: the save at exit waits on a held write');
	my $start = time();
	system_log('pg_ctl', '-D', $node->data_dir, '-m', 'immediate', 'stop');
	my $gone = 0;
	for (1 .. $give_up_s * 10)
	{
		last if ($gone = !-e $node->data_dir . '/postmaster.pid');
		usleep(100_000);
	}
	ok($gone, 'io_timeout 0: an immediate shutdown ends the save at exit');
	cmp_ok(time() - $start, '<', $bound_s, 'io_timeout 0: within 5 s');
	$node->_update_pid(0);
	ok($node->log_contains(
			qr/tier map was not saved at shutdown: a shutdown was requested while waiting for the tier file/),
		'io_timeout 0: the log says why the map was not saved');
}
release();
$node->append_conf('postgresql.conf', "bpext.io_timeout = '1s'\n");
bpext_start_with_faults($node, $so, "$ssd/", $ctl);
ok(bpext_wait_for_state($node, 'enabled'), 'after it all: the tier is enabled');

# --- nothing but helpers was ever held, and nothing is lost -------------------
is_deeply([ held_outside_helpers() ], [],
	'only processes titled as bpext helpers were ever held on the tier file');
bpext_check_table($node, 'postgres', 't', rows => $nrows,
	ver => 'CASE WHEN id % 100 = 0 THEN 7 ELSE 0 END', name => 'after it all');
cmp_ok($node->safe_psql('postgres', "SELECT bpext_prewarm('t')"), '>', 0,
	'after it all: bpext_prewarm loads t');
bpext_evict_shared_buffers($node);
my $before = bpext_stat($node, 'extension_page_reads');
bpext_check_table($node, 'postgres', 't', rows => $nrows,
	ver => 'CASE WHEN id % 100 = 0 THEN 7 ELSE 0 END', scan => 'index',
	name => 'after it all, through the tier');
cmp_ok(bpext_stat($node, 'extension_page_reads') - $before, '>', 0,
	'after it all: the tier serves reads');

$node->stop;
done_testing();

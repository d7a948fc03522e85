
# Copyright (c) 2026, bpext developers

# No bpext process outlives its server, not even one stuck in a tier read
# on a device that hangs.  Tier reads that must wait for the device are
# done by reader helpers (src/tier_readers.c), which a hung read leaves
# blocked; they must not stay once the server has stopped, whether it
# stopped by a fast shutdown, an immediate shutdown or a crash restart
# (src/worker_children.c: each helper is a child of the bpext worker that
# the kernel kills when the worker exits; the worker also kills its helpers
# when it lets go of the tier file).  A helper in an uninterruptible wait
# in the kernel dies only when that wait ends; the fault injector's hang
# (read_sleep) is a sleep a signal can end, as a killable wait on a FUSE
# or NFS file is.  It is the hang of build without the fix that stays: there
# each read held for ten minutes kept a helper that long after its server
# had gone (titled "bpext tier worker", its parent init, holding the tier
# file).
#
# Three times, with t's pages in the tier and every tier read that must
# wait for the device held for ten minutes:
#
#  - a read times out (bpext.io_timeout = 1s), the tier goes to ERROR,
#    then a fast shutdown;
#  - with no timeout (bpext.io_timeout = 0, so the tier stays enabled and
#    the worker does nothing about the read), a query waits on a hung
#    read, then an immediate shutdown;
#  - the same, then a crash restart (SIGKILL of that backend), with new
#    reads no longer held but the one held still so.
#
# Each time, once the device answers again, no process of the server (by
# its title) and none holding the tier file is left, and the server starts
# again (it must, whether or not an old helper is still there: a helper
# holds neither shared memory nor the tier file's lock) and reads every row
# right through its tier.  Waits are generous and no time is asserted.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

bpext_needs_contrib('pg_prewarm');

my $so = bpext_build_fault_injector();
plan skip_all => 'the fault injector could not be built' unless $so;

my $hang_ms = 600_000;    # longer than the whole test
my $wait_s = 60;          # how long anything that must happen may take
my $nrows = 2000;

my $ssd = PostgreSQL::Test::Utils::tempdir('ssd');
my $ctl = PostgreSQL::Test::Utils::tempdir('faults');
my $tier = "$ssd/hung_helpers.tier";

# A name no other test uses: processes are found by their title.
my $node = bpext_init_node('hung_helpers', tier_size => '64MB',
	max_size => '64MB', tier_path => $tier,
	conf => qq{
bpext.io_timeout = '1s'
bpext.warm_restart = off
restart_after_crash = on
});
bpext_start_with_faults($node, $so, "$ssd/", $ctl);
bpext_setup($node);
bpext_load_table($node, 'postgres', 't', $nrows);
$node->safe_psql('postgres', 'CHECKPOINT');
ok(bpext_wait_for_state($node, 'enabled'), 'the tier is enabled');

# The processes left of the node's servers: those whose title names it,
# and any that holds its tier file open.
sub leftovers
{
	my $name = $node->name;
	my @left;
	opendir(my $dh, '/proc') or die "could not read /proc: $!";
	for my $pid (grep { /^\d+$/ } readdir $dh)
	{
		my $cmd = '';
		if (open(my $fh, '<', "/proc/$pid/cmdline"))
		{
			$cmd = <$fh> // '';
			close $fh;
		}
		my $holds = 0;
		if (opendir(my $fds, "/proc/$pid/fd"))
		{
			for my $fd (grep { /^\d+$/ } readdir $fds)
			{
				my $target = readlink("/proc/$pid/fd/$fd") // '';
				$holds = 1 if $target =~ /^\Q$tier\E( \(deleted\))?$/;
			}
			closedir $fds;
		}
		push @left, "$pid $cmd" if $holds || $cmd =~ /^postgres: \Q$name\E: /;
	}
	closedir $dh;
	return @left;
}

# Processes in pids that still exist, after waiting for them to go.
sub still_there
{
	my @pids = @_;
	for (1 .. $wait_s * 10)
	{
		@pids = grep { -e "/proc/$_" } @pids;
		last unless @pids;
		usleep(100_000);
	}
	return @pids;
}

# What leftovers returns, after waiting for it to be empty.
sub wait_no_leftovers
{
	my @left;
	for (1 .. $wait_s * 10)
	{
		@left = leftovers();
		last unless @left;
		usleep(100_000);
	}
	return @left;
}

# t's pages in the tier and not in shared buffers, so that a read of a row
# goes to the tier; then every tier read that must wait for the device
# hangs.  The helpers that were held up so far.
sub hang_reads
{
	cmp_ok($node->safe_psql('postgres', "SELECT bpext_prewarm('t')"), '>', 0,
		't is in the tier');
	bpext_evict_shared_buffers($node);
	my @before = bpext_fault_pids($node, 'read_blocked');
	bpext_fault($node, 'read_sleep', 1, $hang_ms);
	return @before;
}

# Wait until a process other than those in before is held up by the hung
# device: the helpers doing the reads.
sub wait_for_held
{
	my @before = @_;
	my %before = map { $_ => 1 } @before;
	for (1 .. $wait_s * 10)
	{
		my @held = grep { !$before{$_} } bpext_fault_pids($node, 'read_blocked');
		return @held if @held;
		usleep(100_000);
	}
	return ();
}

# With the device answering again: nothing left, and a start that works.
sub check_after_stop
{
	my ($name, @held) = @_;
	bpext_fault($node, 'read_sleep', 0);
	is_deeply([ still_there(@held) ], [],
		"$name: the helpers held up by the hung device are gone");
	is_deeply([ wait_no_leftovers() ], [],
		"$name: no process of the server is left");

	bpext_start_with_faults($node, $so, "$ssd/", $ctl);
	ok(bpext_wait_for_state($node, 'enabled'),
		"$name: the tier is enabled after the start");
	bpext_check_table($node, 'postgres', 't', rows => $nrows,
		name => "$name: after the start");
	return;
}

# --- a read times out, the tier goes to ERROR, a fast shutdown --------------
my @before = hang_reads();
is( $node->safe_psql('postgres',
		'SELECT v = bpext_expected_v(id, ver) FROM t WHERE id = 1'),
	't', 'timeout: the row is read right, from the data file');
ok(bpext_wait_for_state($node, 'error', $wait_s),
	'timeout: the tier is in ERROR (7)');
my @held = wait_for_held(@before);
cmp_ok(scalar(@held), '>', 0, 'timeout: a helper is held up');
ok($node->stop('fast', fail_ok => 1),
	'timeout: the fast shutdown finishes with the device hung');
check_after_stop('fast shutdown', @held);

# --- no timeout: a query waits on a hung read ---------------------------------

# Start a query that waits on a hung read; its backend's pid, and the
# session.  The session connects before the reads hang: the eviction can
# leave catalog pages in the tier, and a connection that needs one of them
# would wait for ever in its start-up (bpext.io_timeout is 0).
sub hang_a_query
{
	$node->append_conf('postgresql.conf', "bpext.io_timeout = 0\n");
	$node->reload;
	ok($node->poll_query_until('postgres',
			q{SELECT current_setting('bpext.io_timeout') = '0'}),
		'bpext.io_timeout is 0');
	my $session = $node->background_psql('postgres', on_error_stop => 0);
	my $backend = $session->query_safe('SELECT pg_backend_pid()');
	my @before = hang_reads();
	$session->query_until(qr/sent/, qq{\\echo sent
SELECT v = bpext_expected_v(id, ver) FROM t WHERE id = 1;
});
	my @held = wait_for_held(@before);
	cmp_ok(scalar(@held), '>', 0, 'no timeout: a helper is held up');

	# No query now: with no timeout, any of its tier reads would hang too.
	return ($session, $backend, @held);
}

# --- an immediate shutdown ----------------------------------------------------
my ($session, $backend);
($session, $backend, @held) = hang_a_query();
ok($node->stop('immediate', fail_ok => 1),
	'immediate: the shutdown finishes with the device hung');
eval { $session->quit; };    # psql has gone with its connection
check_after_stop('immediate shutdown', @held);

# --- a crash restart ------------------------------------------------------------
($session, $backend, @held) = hang_a_query();

# New reads are no longer held (the restarted worker reads the tier file
# as it enables the tier again); the read already held stays held.
bpext_fault($node, 'read_sleep', 0);
my $offset = -s $node->logfile;
kill('KILL', $backend);
bpext_wait_crash_restart($node, $offset);
eval { $session->quit; };
is_deeply([ still_there(@held) ], [],
	'crash restart: the helpers held up by the hung device are gone');
ok(bpext_wait_for_state($node, 'enabled', $wait_s),
	'crash restart: the tier is enabled again');
bpext_check_table($node, 'postgres', 't', rows => $nrows,
	name => 'crash restart: after it');
cmp_ok($node->safe_psql('postgres', "SELECT bpext_prewarm('t')"), '>', 0,
	'crash restart: t is in the tier again');
bpext_evict_shared_buffers($node);
my $reads = bpext_stat($node, 'extension_page_reads');
bpext_check_table($node, 'postgres', 't', rows => $nrows,
	name => 'crash restart: from the tier');
cmp_ok(bpext_stat($node, 'extension_page_reads'), '>', $reads,
	'crash restart: the tier serves pages');

$node->stop;
is_deeply([ wait_no_leftovers() ], [],
	'at the end: no process of the server is left');
done_testing();

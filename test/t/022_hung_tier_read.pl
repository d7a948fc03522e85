
# Copyright (c) 2026, bpext developers

# A tier device that hangs on reads (instead of failing) holds up nothing
# of PostgreSQL's.  A tier read serves a shared-buffer miss inside
# smgrread, while PostgreSQL holds the buffer's I/O flag: a read that
# never returned held the query, and with it everything that waits on
# that buffer (DROP or TRUNCATE of the relation, a standby's replay of the
# block, a fast shutdown).  Now a backend reads the tier with RWF_NOWAIT
# (which only the page cache can answer) and hands any other read to a
# reader helper that it waits for at most bpext.io_timeout
# (src/tier_readers.c); then the block comes from the data file.
#
# With every tier read that must wait for the device held for ten minutes
# (the fault injector's read_sleep: RWF_NOWAIT reads fail with EAGAIN,
# blocking reads block), on a primary and a streaming standby with a tier
# of its own, both holding the pages of t: a SELECT of a row returns the
# right answer from the data file within a few seconds, on the primary
# and on the standby; then CHECKPOINT, an update of the same row, the
# standby's replay of it and pg_ctl stop -m fast (10 s) all finish, and no
# server process is ever among those blocked.  Each tier is
# in ERROR with one WARNING naming the read, and after the device answers
# again and a restart, nothing is lost.
#
# Every wait is bounded, so that on a build whose backends read the tier
# themselves the test fails instead of hanging.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

bpext_needs_contrib('pg_prewarm');

my $so = bpext_build_fault_injector();
plan skip_all => 'the fault injector could not be built' unless $so;

my $hang_ms = 600_000;    # longer than any wait below
my $wait_s = 20;          # how long anything that must finish may take
my $nrows = 2000;

my $ssd = PostgreSQL::Test::Utils::tempdir('ssd');
my $ctl = PostgreSQL::Test::Utils::tempdir('faults');

my $primary = bpext_init_node('primary', tier_size => '64MB',
	max_size => '64MB', tier_path => "$ssd/primary.tier",
	init => { allows_streaming => 1 },
	conf => qq{
bpext.io_timeout = '1s'
bpext.warm_restart = off
});
bpext_start_with_faults($primary, $so, "$ssd/", $ctl);
bpext_setup($primary);
bpext_load_table($primary, 'postgres', 't', $nrows);
$primary->safe_psql('postgres', 'CHECKPOINT');

my $standby = bpext_init_standby($primary, 'standby', "$ssd/standby.tier");
bpext_start_with_faults($standby, $so, "$ssd/", $ctl);
$primary->wait_for_catchup($standby);
ok(bpext_wait_for_state($primary, 'enabled'), 'the primary enables its tier');
ok(bpext_wait_for_state($standby, 'enabled'), 'the standby enables its tier');

# t's pages in both tiers, and in neither's shared buffers.
foreach my $node ($primary, $standby)
{
	cmp_ok($node->safe_psql('postgres', "SELECT bpext_prewarm('t')"), '>', 0,
		$node->name . ': t is in the tier');
	bpext_evict_shared_buffers($node);
}

# Run sql on node, giving up after $wait_s: its output, or undef if it did
# not finish without an error.
sub finishes
{
	my ($node, $sql) = @_;
	my $timed_out = 0;
	my ($ret, $out, $err) = $node->psql('postgres', $sql,
		timeout => $wait_s, timed_out => \$timed_out);
	diag("$sql: $err") if $err ne '' && !$timed_out;
	return (!$timed_out && $ret == 0) ? $out : undef;
}

# The PostgreSQL processes of a node (what pg_stat_activity shows).
sub server_pids
{
	my ($node) = @_;
	my $out = finishes($node, 'SELECT pid FROM pg_stat_activity');
	return defined $out ? split(/\n/, $out) : ();
}

my $primary_offset = -s $primary->logfile;
my $standby_offset = -s $standby->logfile;

# --- every tier read that must wait for the device hangs ---------------------
bpext_fault($primary, 'read_sleep', 1, $hang_ms);

my $start = time;
is( finishes($primary,
		'SELECT v = bpext_expected_v(id, ver) FROM t WHERE id = 1'),
	't', 'hung read: the row is read right');
my $took = time - $start;
cmp_ok($took, '<', 5, "hung read: ... within a few seconds ($took s)");
cmp_ok(bpext_faults_injected($primary, 'read_blocked'), '>', 0,
	'hung read: a tier read met the hung device');
ok(bpext_wait_for_state($primary, 'error', $wait_s),
	'hung read: the primary\'s tier is in ERROR (7)');

# A hot-standby read of the same page, from the standby's tier.
$start = time;
is( finishes($standby,
		'SELECT ver || \',\' || (v = bpext_expected_v(id, ver)) FROM t WHERE id IN (1, 2) ORDER BY id'),
	"0,true\n0,true", 'hung read: the standby reads the page right');
$took = time - $start;
cmp_ok($took, '<', 5, "hung read: ... within a few seconds ($took s)");
ok(bpext_wait_for_state($standby, 'error', $wait_s),
	'hung read: the standby\'s tier is in ERROR (7)');

ok(defined finishes($primary, 'CHECKPOINT'), 'hung read: CHECKPOINT finishes');
ok( defined finishes($primary,
		'UPDATE t SET ver = 1, v = bpext_expected_v(id, 1) WHERE id = 1'),
	'hung read: an update of the same row finishes');
my $caught_up = eval {
	local $PostgreSQL::Test::Utils::timeout_default = $wait_s * 2;
	$primary->wait_for_catchup($standby);
	1;
};
ok($caught_up, 'hung read: the standby replays the update of the same page');
is(finishes($standby, 'SELECT ver FROM t WHERE id = 1'), '1',
	'hung read: the standby has the update');

# Only the reader helpers waited on the hung device.
my @blocked = bpext_fault_pids($primary, 'read_blocked');
my %blocked = map { $_ => 1 } @blocked;
my @waited = grep { $blocked{$_} } (server_pids($primary), server_pids($standby));
is_deeply(\@waited, [], 'no server process waited on a hung tier read')
  or diag("blocked: @blocked");

foreach my $node ($primary, $standby)
{
	my $name = $node->name;
	my $log = slurp_file($node->logfile,
		$node == $primary ? $primary_offset : $standby_offset);
	my $warnings = () = $log =~ /WARNING:  bpext tier disabled after an error/g;
	is($warnings, 1, "$name: one WARNING");
	like($log,
		qr/bpext tier disabled after an error: a tier read in process \d+ has not returned after \d+ ms \(bpext.io_timeout is 1000 ms\)/,
		"$name: the WARNING names the hung read");
}

# --- a fast shutdown, with the device still hung ----------------------------
{
	local $ENV{PGCTLTIMEOUT} = 10;
	ok($standby->stop('fast', fail_ok => 1),
		'hung read: pg_ctl stop -m fast finishes on the standby');
	ok($primary->stop('fast', fail_ok => 1),
		'hung read: pg_ctl stop -m fast finishes on the primary');
}
bpext_fault($primary, 'read_sleep', 0);

# --- and nothing lost ----------------------------------------------------------
bpext_start_with_faults($primary, $so, "$ssd/", $ctl);
bpext_start_with_faults($standby, $so, "$ssd/", $ctl);
ok(bpext_wait_for_state($primary, 'enabled'), 'after restart: tier enabled');
$primary->wait_for_catchup($standby);
foreach my $node ($primary, $standby)
{
	bpext_check_table($node, 'postgres', 't', rows => $nrows,
		ver => 'CASE WHEN id = 1 THEN 1 ELSE 0 END',
		name => $node->name . ' after restart');
}

# And the tier serves through the helpers again: a page the page cache
# cannot give at once (RWF_NOWAIT fails while read_sleep is on) comes
# from a helper, which answers within the timeout.
$primary->safe_psql('postgres', "SELECT bpext_prewarm('t')");
bpext_evict_shared_buffers($primary);
my $before = bpext_stat($primary, 'extension_page_reads');
bpext_fault($primary, 'read_sleep', 1, 100);
bpext_check_table($primary, 'postgres', 't', rows => $nrows,
	ver => 'CASE WHEN id = 1 THEN 1 ELSE 0 END',
	name => 'slow device: reads through the helpers');
bpext_fault($primary, 'read_sleep', 0);
cmp_ok(bpext_stat($primary, 'extension_page_reads'), '>', $before,
	'slow device: the helpers served tier pages');
is(bpext_config($primary)->{state}, 5,
	'slow device: a read slower than usual but within the timeout leaves the tier on');

$standby->stop;
$primary->stop;
done_testing();

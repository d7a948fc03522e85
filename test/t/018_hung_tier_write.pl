
# Copyright (c) 2026, bpext developers

# A tier device that hangs on writes (instead of failing) holds up nothing
# of PostgreSQL's.  Dual writes used to write the tier inside smgrwrite,
# while FlushBuffer held the buffer's I/O flag and content lock: a hung
# tier write then held CHECKPOINT (waiting on the I/O flag), every update
# of the page (the content lock), a fast shutdown, and a standby's replay.
# Now smgr calls only queue the page for the bpext worker
# (src/store_queue.c), whose tier writes go through a helper process it
# abandons after bpext.io_timeout (src/tier_writer.c).
#
# With every tier write held up for ten minutes (the fault injector's
# write_sleep), on a primary and on a streaming standby with a tier of its
# own, all of these must finish: CHECKPOINT, a second update of the same
# row, the standby's replay of the same pages, and pg_ctl stop -m fast.
# On 15 the bgwriter also evicts a dirty page while the fault is on.  Then
# the tier is in ERROR with one WARNING naming the hung write, nothing is
# lost, and bpext_enable() brings the tier back.
#
# Every wait is bounded, so that on a build that still writes the tier in
# smgr calls the test fails instead of hanging.

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
bpext.write_policy = 'dual_write'
bpext.warm_restart = off
bgwriter_lru_maxpages = 1000
bgwriter_lru_multiplier = 10
bgwriter_delay = 10ms
});
bpext_start_with_faults($primary, $so, "$ssd/", $ctl);
bpext_setup($primary);
bpext_load_table($primary, 'postgres', 't', $nrows);
# A table larger than shared buffers, for the standby to replay through.
$primary->safe_psql('postgres', q{
	CREATE TABLE big (id int PRIMARY KEY, v int, pad text);
	INSERT INTO big SELECT i, 0, repeat('b', 500) FROM generate_series(1, 50000) i;
	CHECKPOINT;
});

$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->append_conf('postgresql.conf', "bpext.path = '$ssd/standby.tier'\n");
$standby->{bpext_tier_path} = "$ssd/standby.tier";
bpext_start_with_faults($standby, $so, "$ssd/", $ctl);
$primary->wait_for_catchup($standby);
ok(bpext_wait_for_state($standby, 'enabled'), 'the standby enables its tier');


# Run sql on node, giving up after $wait_s: true if it finished without an
# error.
sub finishes
{
	my ($node, $sql) = @_;
	my $timed_out = 0;
	my ($ret, $out, $err) = $node->psql('postgres', $sql,
		timeout => $wait_s, timed_out => \$timed_out);
	diag("$sql: $err") if $err ne '' && !$timed_out;
	return !$timed_out && $ret == 0;
}

# Wait up to $wait_s for the write fault to have been hit more than before.
sub wait_for_hang
{
	my ($before) = @_;
	for (1 .. $wait_s * 40)
	{
		return 1 if bpext_faults_injected($primary, 'write_sleep') > $before;
		usleep(25_000);
	}
	return 0;
}

# The PostgreSQL processes of a node (what pg_stat_activity shows).
sub server_pids
{
	my ($node) = @_;
	my $timed_out = 0;
	my ($ret, $out) = $node->psql('postgres',
		'SELECT pid FROM pg_stat_activity',
		timeout => $wait_s, timed_out => \$timed_out);
	return $timed_out ? () : split(/\n/, $out);
}

my $primary_offset = -s $primary->logfile;
my $standby_offset = -s $standby->logfile;

sub update_row
{
	my ($ver) = @_;
	return finishes($primary,
		"UPDATE t SET ver = $ver, v = bpext_expected_v(id, $ver) WHERE id = 1");
}

# --- a dirty page evicted while every tier write hangs --------------------------
bpext_fault($primary, 'write_sleep', 1, $hang_ms);
ok(update_row(1), 'hung write: the update finishes');
ok(finishes($primary, "SELECT pg_prewarm('bpext_evictor')"),
	'hung write: evicting the updated page finishes');
ok(wait_for_hang(0), 'hung write: a tier write met the hung device');

ok(finishes($primary, 'CHECKPOINT'), 'hung write: CHECKPOINT finishes');
ok(update_row(2), 'hung write: a second update of the row finishes');

# The standby replays changes to more pages than its shared buffers hold,
# so its startup process writes them out (and used to dual-write them).
ok(finishes($primary, 'UPDATE big SET v = v + 1'),
	'hung write: an update of every page of a large table finishes');
ok(finishes($primary, "SELECT pg_prewarm('bpext_evictor')"),
	'hung write: evicting it finishes');
my $caught_up = eval {
	local $PostgreSQL::Test::Utils::timeout_default = $wait_s * 2;
	$primary->wait_for_catchup($standby);
	1;
};
ok($caught_up, 'hung write: the standby replays the same pages');

# --- the device answers again ------------------------------------------------
bpext_fault($primary, 'write_sleep', 0);
foreach my $node ($primary, $standby)
{
	my $name = $node->name;
	ok(bpext_wait_for_state($node, 'error', $wait_s),
		"$name: the tier is in ERROR (7)");
	my $log = slurp_file($node->logfile,
		$node == $primary ? $primary_offset : $standby_offset);
	my $warnings = () = $log =~ /WARNING:  bpext tier disabled after an error/g;
	is($warnings, 1, "$name: one WARNING");
	like($log, qr/bpext tier disabled after an error: a tier write in process \d+ has not returned after \d+ ms/,
		"$name: the WARNING names the hung write");
	bpext_check_table($node, 'postgres', 't', rows => $nrows,
		ver => 'CASE WHEN id = 1 THEN 2 ELSE 0 END', name => "$name: nothing lost");
	is($node->safe_psql('postgres', 'SELECT sum(v) FROM big'), 50000,
		"$name: the large table has its update");
}
$primary->safe_psql('postgres', 'SELECT bpext_enable()');
ok(bpext_wait_for_state($primary, 'enabled', $wait_s),
	'bpext_enable() brings the tier back');

# --- the bgwriter evicts dirty pages while the device hangs -----------------
# (bgwriter_lru_maxpages and bgwriter_delay make it run well ahead of the
# clock hand, which reads of the evictor table keep moving.)
my $before = bpext_faults_injected($primary, 'write_sleep');
$primary->safe_psql('postgres', 'UPDATE big SET v = v + 1 WHERE id % 10 = 0');
bpext_fault($primary, 'write_sleep', 1, $hang_ms);
my $hit = 0;
for (1 .. 10)
{
	last unless finishes($primary, "SELECT pg_prewarm('bpext_evictor')");
	last if ($hit = wait_for_hang($before));
}
ok($hit, 'bgwriter: a tier write met the hung device');
ok(finishes($primary, 'CHECKPOINT'), 'bgwriter: CHECKPOINT finishes');
ok(finishes($primary, 'UPDATE big SET v = v + 1 WHERE id = 10'),
	'bgwriter: an update of a page it wrote finishes');

# No PostgreSQL process ever waited on the hung device: only the tier
# workers' helpers did.
my %hung = map { $_ => 1 } bpext_fault_pids($primary, 'write_sleep');
my @waited = grep { $hung{$_} } (server_pids($primary), server_pids($standby));
is_deeply(\@waited, [], 'no server process waited on a hung tier write');

# --- a fast shutdown, with the device still hung ----------------------------
{
	local $ENV{PGCTLTIMEOUT} = $wait_s;
	ok($standby->stop('fast', fail_ok => 1),
		'hung write: pg_ctl stop -m fast finishes on the standby');
	ok($primary->stop('fast', fail_ok => 1),
		'hung write: pg_ctl stop -m fast finishes on the primary');
}
bpext_fault($primary, 'write_sleep', 0);

# --- and nothing lost ----------------------------------------------------------
bpext_start_with_faults($primary, $so, "$ssd/", $ctl);
bpext_start_with_faults($standby, $so, "$ssd/", $ctl);
ok(bpext_wait_for_state($primary, 'enabled'), 'after restart: tier enabled');
$primary->wait_for_catchup($standby);
foreach my $node ($primary, $standby)
{
	my $name = $node->name;
	bpext_check_table($node, 'postgres', 't', rows => $nrows,
		ver => 'CASE WHEN id = 1 THEN 2 ELSE 0 END',
		name => "$name after restart");
	is($node->safe_psql('postgres', 'SELECT sum(v) FROM big'), 55001,
		"$name after restart: the large table has every update");
}

$standby->stop;
$primary->stop;
done_testing();

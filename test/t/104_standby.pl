
# Copyright (c) 2026, bpext developers

# A primary and a streaming hot standby, both preloading bpext with a tier
# configured (each its own file).  The standby uses its tier while it
# replays WAL: hot-standby reads are served from it and return exactly what
# the primary committed, under eviction pressure, while pgbench writes on
# the primary and through CREATE DATABASE (both strategies, the standby's
# tier holding the dropped incarnation's pages) and DROP DATABASE being
# replayed; bpext_prewarm works there.  After promotion the tier stays
# enabled and serves reads, and the contents are still right.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

bpext_needs_contrib('pg_prewarm', 'amcheck');

my $nrows = 40000;    # about 9MB

my $primary = bpext_init_node('primary', tier_size => '64MB', max_size => '64MB',
	init => { allows_streaming => 1 }, conf => "log_statement = none\n");
my $primary_tier = bpext_tier_path($primary);
$primary->start;
bpext_setup($primary);
bpext_load_table($primary, 'postgres', 't', $nrows);
$primary->command_ok([ 'pgbench', '-i', '-q', '-s', '2', 'postgres' ],
	'pgbench -i on the primary');
$primary->safe_psql('postgres',
	'CREATE UNLOGGED TABLE unlogged_t AS SELECT g FROM generate_series(1, 1000) g');
$primary->safe_psql('postgres', 'CREATE DATABASE tmpl');
$primary->safe_psql('tmpl', 'CREATE EXTENSION bpext');
bpext_create_helpers($primary, 'tmpl');
bpext_load_table($primary, 'tmpl', 'dt', 5000, 1);

# A slot that holds the primary's WAL from before the backup until the
# standby has streamed it: on a busy machine the standby can start late
# enough for checkpoints to have recycled what it needs.
$primary->safe_psql('postgres',
	"SELECT pg_create_physical_replication_slot('standby', true)");
$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->append_conf('postgresql.conf', "primary_slot_name = 'standby'\n");
my $standby_tier = $standby->basedir . '/bpext.tier';
# The backup carries the primary's settings: give the standby its own file.
$standby->append_conf('postgresql.conf', "bpext.path = '$standby_tier'\n");
$standby->{bpext_tier_path} = $standby_tier;
$standby->start;
$primary->wait_for_catchup($standby);

isnt($standby_tier, $primary_tier, 'primary and standby have their own tier files');
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't',
	'the standby is in recovery');

# The standby's tier is on while it replays.
sub standby_tier_used
{
	my ($name) = @_;
	my $cfg = bpext_config($standby);
	is($cfg->{state}, 5, "$name: standby tier enabled (state 5)");
	is($cfg->{path}, $standby_tier, "$name: standby uses its own file");
	ok(-e $standby_tier, "$name: standby tier file exists");
	ok(bpext_worker_pid($standby), "$name: the bpext worker runs on the standby");
	my $s = bpext_stats($standby);
	is($s->{crc_failures} + $s->{io_errors}, 0, "$name: no tier errors on the standby");
	return;
}

ok(bpext_wait_for_state($standby, 'enabled'), 'the standby enables its tier');
standby_tier_used('after start');
is(bpext_config($primary)->{state}, 5, 'the primary tier is enabled');

cmp_ok($standby->safe_psql('postgres', "SELECT bpext_prewarm('t')"), '>', 0,
	'bpext_prewarm works on the standby');
my ($ret, $out, $err) =
  $standby->psql('postgres', "SELECT bpext_prewarm('unlogged_t')");
like($err, qr/unlogged relation "unlogged_t" cannot be prewarmed into the tier during recovery/,
	'but not for an unlogged relation, rebuilt behind bpext at promotion');

# --- hot-standby reads during replay ---------------------------------------------
# pgbench writes on the primary the whole time; "t" is changed in known
# ways, round by round, and read on the standby under eviction pressure.
my ($pgb_out, $pgb_err) = ('', '');
my $pgbench = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '2', '-j', '1', '-T', '600',
	  $primary->connstr('postgres') ],
	'>', \$pgb_out, '2>', \$pgb_err);

my $ver = '0';
for my $round (1 .. 4)
{
	my $mod = $round + 1;
	$primary->safe_psql('postgres', qq{
		UPDATE t SET ver = ver + $round, v = bpext_expected_v(id, ver + $round)
		 WHERE id % $mod = 0;
	});
	$ver = "($ver) + CASE WHEN id % $mod = 0 THEN $round ELSE 0 END";
	$primary->safe_psql('postgres', 'CHECKPOINT') if $round % 2;
	$primary->wait_for_catchup($standby);

	# The primary's tier serves the same reads.
	bpext_evict_shared_buffers($primary);
	bpext_check_table($primary, 'postgres', 't', rows => $nrows, ver => $ver,
		scan => 'index', name => "round $round, primary");

	bpext_evict_shared_buffers($standby);
	bpext_check_table($standby, 'postgres', 't', rows => $nrows, ver => $ver,
		scan => 'index', name => "round $round, standby");
	bpext_check_lookups($standby, 'postgres', 't', rows => $nrows, ver => $ver,
		lookups => 3000, seed => $round, name => "round $round, standby");
	bpext_check_table($standby, 'postgres', 't', rows => $nrows, ver => $ver,
		scan => 'seq', name => "round $round, standby");
}
standby_tier_used('during replay');
# How many reads each tier serves depends on how far the eviction push keeps
# up while pgbench runs; that each served some shows the checks above read
# through it.
my $primary_reads = bpext_stat($primary, 'extension_page_reads');
cmp_ok($primary_reads, '>', 0,
	"meanwhile the primary served $primary_reads reads from its tier");
my $standby_reads = bpext_stat($standby, 'extension_page_reads');
cmp_ok($standby_reads, '>', 0,
	"the standby served $standby_reads hot-standby reads from its tier");

# --- CREATE / DROP DATABASE replayed -----------------------------------------------
for my $strategy ('WAL_LOG', 'FILE_COPY')
{
	for my $gen (1 .. 2)
	{
		my $name = "CREATE DATABASE STRATEGY $strategy, generation $gen";
		$primary->safe_psql('postgres',
			"CREATE DATABASE rdb TEMPLATE tmpl STRATEGY $strategy");
		# Each incarnation gets other contents.
		my $v = 10 * $gen;
		$primary->safe_psql('rdb',
			"UPDATE dt SET ver = $v, v = bpext_expected_v(id, $v) WHERE id % 2 = 0");
		$primary->wait_for_catchup($standby);
		bpext_evict_shared_buffers($standby);
		bpext_check_table($standby, 'rdb', 'dt', rows => 5000,
			ver => "CASE WHEN id % 2 = 0 THEN $v ELSE 1 END",
			scan => 'index', name => "$name, on the standby");
		# Put the database's pages in the standby's tier before it is
		# dropped: replaying the drop must take them out.
		cmp_ok($standby->safe_psql('rdb', "SELECT bpext_prewarm('dt')"), '>=', 0,
			"$name: prewarmed on the standby");
		bpext_check_table($standby, 'rdb', 'dt', rows => 5000,
			ver => "CASE WHEN id % 2 = 0 THEN $v ELSE 1 END",
			scan => 'index', name => "$name, on the standby from its tier");
		my $rdb_oid = $standby->safe_psql('postgres',
			"SELECT oid FROM pg_database WHERE datname = 'rdb'");
		bpext_check_table($standby, 'tmpl', 'dt', rows => 5000, ver => '1',
			name => "$name, template on the standby");
		$primary->safe_psql('postgres', 'DROP DATABASE rdb');
		$primary->wait_for_catchup($standby);
		is($standby->safe_psql('postgres',
				"SELECT count(*) FROM pg_database WHERE datname = 'rdb'"),
			'0', "$name: DROP DATABASE replayed");
		is($standby->safe_psql('postgres', qq{
				SELECT count(*) FROM bpext_buffer_descriptors
				 WHERE is_in_bpool_extension AND database_id = $rdb_oid}),
			'0', "$name: the replayed drop took its pages out of the standby's tier");
	}
}
standby_tier_used('after databases were created and dropped');

# pgbench's invariants, read on the standby at a consistent point.
$pgbench->kill_kill;
$pgbench->finish;
$primary->wait_for_catchup($standby);
my ($a, $tl, $b, $h) = split /\|/, bpext_tpcb_check($standby, 'postgres');
ok($a == $tl && $tl == $b && $b == $h,
	"TPC-B invariants on the standby ($a, $tl, $b, $h)");
cmp_ok($h, '!=', 0, 'pgbench changed balances');
is(bpext_tpcb_check($primary, 'postgres'), "$a|$tl|$b|$h",
	'the standby has what the primary has');

# --- promotion ------------------------------------------------------------------------
my $offset = -s $standby->logfile;
$standby->promote;
ok($standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'),
	'standby promoted');
ok(bpext_wait_for_state($standby, 'enabled'), 'promoted: tier enabled (state 5)');
ok(bpext_worker_pid($standby), 'promoted: the bpext worker runs');
my $cfg = bpext_config($standby);
is($cfg->{path}, $standby_tier, 'promoted: its own tier file');
is($cfg->{current_size_in_kb}, 64 * 1024, 'promoted: tier size');
is(bpext_file_size($standby_tier), bpext_tier_file_bytes(64), 'promoted: file size');
is(bpext_file_mode($standby_tier), 0600, 'promoted: file mode 0600');
is(bpext_count_in_log($standby, qr/bpext tier (enabled|disabled)/, $offset), 0,
	'promoted: the tier stayed on through promotion');

# Reads served by the new primary's tier, and right.  How many of t's
# pages the tier still holds when they are read is not the code's to
# promise: the 64 MB tier also holds what the standby's reads and replay
# put there, and once it is full every page stored evicts one (the
# prewarms, and the pushes from emptying shared buffers, as many as the
# worker gets to make).  So t is prewarmed last, and what is checked is
# that the promoted tier serves reads at all, and right.
$standby->safe_psql('postgres',
	"SELECT bpext_prewarm('pgbench_accounts'), bpext_prewarm('t'), bpext_prewarm('t_pkey')");
bpext_evict_shared_buffers($standby);
my $before = bpext_stat($standby, 'extension_page_reads');
bpext_check_table($standby, 'postgres', 't', rows => $nrows, ver => $ver,
	scan => 'index', name => 'promoted, through the tier');
bpext_check_lookups($standby, 'postgres', 't', rows => $nrows, ver => $ver,
	lookups => 3000, seed => 42, name => 'promoted, through the tier');
is(bpext_tpcb_check($standby, 'postgres'), "$a|$tl|$b|$h",
	'promoted: TPC-B sums through the tier');
my $reads = bpext_stat($standby, 'extension_page_reads') - $before;
cmp_ok($reads, '>', 0, "promoted: the tier served $reads pages");

# Writes on the promoted node go through its tier, too.
$standby->safe_psql('postgres',
	'UPDATE t SET ver = 99, v = bpext_expected_v(id, 99) WHERE id % 7 = 0; CHECKPOINT;');
my $ver2 = "CASE WHEN id % 7 = 0 THEN 99 ELSE $ver END";
bpext_evict_shared_buffers($standby);
bpext_check_table($standby, 'postgres', 't', rows => $nrows, ver => $ver2,
	scan => 'index', name => 'promoted, after writes');
$standby->safe_psql('postgres', 'CREATE EXTENSION amcheck');
is(bpext_amcheck($standby, 'postgres'), '', 'promoted: amcheck');

my $s = bpext_stats($standby);
is($s->{crc_failures} + $s->{io_errors}, 0, 'promoted: no tier errors');
is(bpext_config($primary)->{state}, 5, 'the old primary tier is still enabled');
is(bpext_count_in_log($primary, qr/WARNING:.*bpext/), 0, 'no bpext warning on the primary');
is(bpext_count_in_log($standby, qr/WARNING:.*bpext/), 0, 'no bpext warning on the standby');

$standby->stop;
$primary->stop;
done_testing();


# Copyright (c) 2026, bpext developers

# Crash consistency.  pgbench runs TPC-B against a database three times the
# size of shared_buffers (16MB) with a tier smaller than the database
# (32MB), so pages keep moving between shared buffers, the tier and the
# data files, while a second session keeps loading pages into the tier
# with bpext_prewarm.  At a random moment a process is killed with SIGKILL:
# a pgbench backend, the bpext_prewarm backend (in the middle of its tier
# writes), the bpext worker, and the postmaster with all its children (as
# a power cut would stop them).  Each kill is followed by crash recovery.
#
# After every restart:
#  - pgbench's TPC-B invariants hold: sum(abalance) = sum(tbalance) =
#    sum(bbalance) = sum(delta) of pgbench_history;
#  - a table whose contents are known (updated, without a checkpoint, just
#    before the kill) holds exactly what it must;
#  - amcheck finds nothing wrong (verify_heapam on every table,
#    bt_index_check with heapallindexed on every B-tree index), checked
#    while the pages are served from the tier;
#  - every table's contents read through the tier equal its contents read
#    with the tier off (bpext_disable(), shared buffers emptied), and the
#    tier is enabled again afterwards.
#
# The moments are random; the seed is printed and can be fixed with
# BPEXT_CRASH_SEED to replay a run.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

bpext_needs_contrib('pg_prewarm', 'amcheck');

my $seed = $ENV{BPEXT_CRASH_SEED} // (time() ^ $$) % 100000;
srand($seed);
note("random seed $seed (set BPEXT_CRASH_SEED=$seed to replay)");

my $scale = 3;          # pgbench_accounts about 40MB
my $tier_mb = 32;
my $known_rows = 20000;

my $node = bpext_init_node(
	'main',
	tier_size => "${tier_mb}MB",
	max_size => "${tier_mb}MB",
	shared_buffers => '16MB',
	conf => qq{
max_connections = 40
# pgbench's statements would fill the log.
log_statement = none
restart_after_crash = on
# Checkpoints of their own accord during the run, too.
checkpoint_timeout = 30s
max_wal_size = 64MB
});
my $path = bpext_tier_path($node);
$node->start;
bpext_setup($node);
$node->safe_psql('postgres', 'CREATE EXTENSION amcheck');

$node->command_ok(
	[ 'pgbench', '-i', '-q', '-s', $scale, '--foreign-keys', 'postgres' ],
	'pgbench -i');
bpext_load_table($node, 'postgres', 'known', $known_rows);
$node->safe_psql('postgres', 'CHECKPOINT');

my @tables = qw(pgbench_accounts pgbench_branches pgbench_tellers
  pgbench_history known);

# What each row of "known" must hold: updated once per cycle.
my $known_ver = '0';

sub tier_reads
{
	return bpext_stat($node, 'extension_page_reads');
}

# Load every table and index into the tier and empty shared buffers, so
# that the next reads are served by the tier.
sub through_the_tier
{
	$node->safe_psql('postgres', q{
		SELECT sum(bpext_prewarm(c.oid))
		  FROM pg_class c
		 WHERE c.relnamespace = 'public'::regnamespace
		   AND c.relkind IN ('r', 'i') AND c.relname !~ '^bpext_evictor';
	});
	bpext_evict_shared_buffers($node);
	return;
}

# Everything checked after a restart.
sub check_consistency
{
	my ($name) = @_;

	ok(bpext_wait_for_state($node, 'enabled'), "$name: tier enabled again");
	my $cfg = bpext_config($node);
	is($cfg->{path}, $path, "$name: same tier file");

	# Right after recovery (the tier starts empty at every restart).
	my ($a, $t, $b, $h) = split /\|/, bpext_tpcb_check($node, 'postgres');
	ok($a == $t && $t == $b && $b == $h,
		"$name: TPC-B invariants after recovery ($a, $t, $b, $h)");
	bpext_check_table($node, 'postgres', 'known', rows => $known_rows,
		ver => $known_ver, name => "$name, after recovery");

	# Through the tier.
	through_the_tier();
	my $before = tier_reads();
	my $tpcb = bpext_tpcb_check($node, 'postgres');
	is($tpcb, "$a|$t|$b|$h", "$name: TPC-B sums read through the tier");
	bpext_check_table($node, 'postgres', 'known', rows => $known_rows,
		ver => $known_ver, scan => 'index', name => "$name, through the tier");
	my $with_tier = bpext_table_hashes($node, 'postgres', \@tables);
	my $n = tier_reads() - $before;
	# The tier (32MB) is smaller than what the checks read, so the pages
	# the eviction push admits while they run displace prewarmed ones: how
	# many of the checks' reads the tier serves depends on the machine's
	# load (976 in one run on 18, 232 in a busy one on 19).  That the tier
	# served some proves the checks ran through it.
	cmp_ok($n, '>', 0, "$name: the checks read $n pages from the tier");

	through_the_tier();
	$before = tier_reads();
	is(bpext_amcheck($node, 'postgres'), '', "$name: amcheck (through the tier)");
	$n = tier_reads() - $before;
	cmp_ok($n, '>', 0, "$name: amcheck read $n pages from the tier");

	# With the tier off.
	is($node->safe_psql('postgres', 'SELECT bpext_disable()'),
		'BUFFER POOL EXTENSION DISABLED', "$name: bpext_disable()");
	bpext_evict_shared_buffers($node);
	$before = tier_reads();
	my $without_tier = bpext_table_hashes($node, 'postgres', \@tables);
	is(tier_reads() - $before, 0, "$name: tier off, nothing read from it");
	is_deeply($with_tier, $without_tier,
		"$name: every table reads the same with the tier and without");

	is($node->safe_psql('postgres',
			"SELECT bpext_enable('$path', '${tier_mb}MB')"),
		'BUFFER POOL EXTENSION ENABLED', "$name: bpext_enable() again");

	my $s = bpext_stats($node);
	is($s->{crc_failures}, 0, "$name: no tier checksum failures");
	is($s->{io_errors}, 0, "$name: no tier I/O errors");
	return;
}

check_consistency('before any crash');

# --- the load ---------------------------------------------------------------

my ($pgb_out, $pgb_err, $pgbench);
my ($pw_out, $pw_err, $prewarmer);

sub start_load
{
	($pgb_out, $pgb_err) = ('', '');
	$pgbench = IPC::Run::start(
		[
			'pgbench', '-n', '-c', '4', '-j', '2', '-T', '120',
			'-M', 'prepared',
			$node->connstr('postgres') . ' application_name=pgbench'
		],
		'>', \$pgb_out, '2>', \$pgb_err);

	# Pages of the largest table and its index, prewarmed into the tier
	# over and over: the table does not fit, so every call writes.
	($pw_out, $pw_err) = ('', '');
	$prewarmer = IPC::Run::start(
		[
			'psql', '-XAtq', '-d',
			$node->connstr('postgres') . ' application_name=prewarmer',
			'-c',
			q{SELECT sum(bpext_prewarm('pgbench_accounts') + bpext_prewarm('pgbench_accounts_pkey'))
			    FROM generate_series(1, 100000)}
		],
		'>', \$pw_out, '2>', \$pw_err);
	return;
}

# Both load generators die with the server; collect them.
sub stop_load
{
	for my $h ($pgbench, $prewarmer)
	{
		next unless $h;
		my $deadline = time() + 30;
		while ($h->pumpable && time() < $deadline)
		{
			eval { $h->pump_nb; };
			usleep(50_000);
		}
		$h->kill_kill if $h->pumpable;
		eval { $h->finish; };
	}
	($pgbench, $prewarmer) = (undef, undef);
	return;
}

# Commit an update of "known" (no checkpoint): recovery must replay it.
sub update_known
{
	my ($cycle) = @_;
	my $mod = $cycle + 2;
	$node->safe_psql('postgres', qq{
		UPDATE known SET ver = ver + $cycle, v = bpext_expected_v(id, ver + $cycle)
		 WHERE id % $mod = 0;
	});
	$known_ver = "($known_ver) + CASE WHEN id % $mod = 0 THEN $cycle ELSE 0 END";
	return;
}

sub backend_pid
{
	my ($where) = @_;
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE $where ORDER BY random() LIMIT 1");
}

# --- the crashes ------------------------------------------------------------

my @victims = ('pgbench backend', 'bpext_prewarm backend', 'bpext worker',
	'postmaster and all children');
my $cycle = 0;
my $log_start = -s $node->logfile;

for my $victim (@victims)
{
	$cycle++;
	my $name = "crash $cycle ($victim)";
	my $offset = -s $node->logfile;

	start_load();
	# Let the load get going: tier reads and tier writes under way.
	my $reads = tier_reads();
	my $writes = bpext_stat($node, 'extension_page_writes');
	ok( $node->poll_query_until('postgres',
			"SELECT extension_page_reads > $reads + 200 AND extension_page_writes > $writes + 200 FROM bpext_stats"
		),
		"$name: the tier is busy before the crash");
	ok( $node->poll_query_until('postgres',
			q{SELECT count(*) = 1 FROM pg_stat_activity
			   WHERE application_name = 'prewarmer' AND state = 'active'}),
		"$name: bpext_prewarm is running");
	update_known($cycle);

	# The random moment.
	my $delay = 0.2 + rand(2.0);
	note(sprintf("%s: killing after %.2f s", $name, $delay));
	usleep(int($delay * 1_000_000));

	if ($victim eq 'pgbench backend')
	{
		my $pid = backend_pid("application_name = 'pgbench'");
		ok($pid && kill('KILL', $pid), "$name: SIGKILL to backend $pid");
	}
	elsif ($victim eq 'bpext_prewarm backend')
	{
		my $pid = backend_pid("application_name = 'prewarmer'");
		ok($pid && kill('KILL', $pid), "$name: SIGKILL to backend $pid");
	}
	elsif ($victim eq 'bpext worker')
	{
		my $pid = bpext_worker_pid($node);
		ok($pid && kill('KILL', $pid), "$name: SIGKILL to the bpext worker $pid");
	}
	else
	{
		my $nchildren = () = bpext_child_pids($node);
		bpext_kill_all($node);
		pass("$name: SIGKILL to the postmaster and its $nchildren children");
	}

	if ($victim eq 'postmaster and all children')
	{
		stop_load();
		$node->start;
		ok($node->log_contains(
				qr/database system was interrupted|was not properly shut down; automatic recovery in progress/,
				$offset),
			"$name: crash recovery ran");
	}
	else
	{
		bpext_wait_crash_restart($node, $offset);
		stop_load();
		pass("$name: the server reinitialized and accepts connections");
	}
	like($pgb_err, qr/aborted|server closed the connection|terminating connection|connection to server/,
		"$name: pgbench saw the crash");

	check_consistency($name);
}

# Nothing tier-related went wrong along the way.
is(bpext_count_in_log($node, qr/bpext tier disabled after an error|bpext could not/,
		$log_start),
	0, 'no tier errors in the log');
ok(!$node->log_contains(qr/PANIC|TRAP:/, $log_start), 'no PANIC or assertion failure');
# Only the processes the test killed died.
is(bpext_count_in_log($node, qr/was terminated by signal (?!9:)\d+/, $log_start),
	0, 'no process died of anything but the SIGKILLs sent');

$node->stop;
done_testing();

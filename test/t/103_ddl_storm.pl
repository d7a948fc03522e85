
# Copyright (c) 2026, bpext developers

# A DDL storm under load.  For a bounded time (60 s; BPEXT_STORM_SECONDS
# changes it), at the same time:
#
#  - pgbench runs TPC-B;
#  - a "tables" stream cycles through CREATE TABLE / DROP TABLE, TRUNCATE
#    and refill (in one transaction), VACUUM FULL, CLUSTER, REINDEX TABLE
#    CONCURRENTLY and ALTER TABLE SET TABLESPACE back and forth;
#  - a "databases" stream cycles through CREATE DATABASE with STRATEGY
#    WAL_LOG and FILE_COPY, DROP DATABASE, and ALTER DATABASE SET
#    TABLESPACE back and forth;
#  - a checker empties shared buffers (16MB) over and over and compares
#    the content hashes of the tables the storm rewrites with their known
#    contents, computed from generate_series, by sequential and by index
#    scans.
#
# The first third runs with bpext's default policies, the second with
# bpext.admission = read, the last also with write_policy = invalidate.
#
# Every table the storm touches holds known contents (rows 1..n of version
# v, see BpextTest.pm), so a stale page served from the tier after a file
# was rewritten, moved, truncated or dropped shows up as a wrong hash.
# The streams check what they create, too.  Afterwards: every table right,
# amcheck clean, TPC-B invariants hold, no tier error.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use IPC::Run;
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

bpext_needs_contrib('pg_prewarm', 'amcheck');

my $storm_secs = $ENV{BPEXT_STORM_SECONDS} // 60;
my $nrows = 8000;    # about 1.8MB per table

my $node = bpext_init_node('main', tier_size => '64MB', max_size => '64MB',
	shared_buffers => '16MB', conf => qq{
max_connections = 40
log_statement = none
});
$node->start;
bpext_setup($node);
my $ts_dir = PostgreSQL::Test::Utils::tempdir('ts1');
$node->safe_psql('postgres', qq{
	CREATE EXTENSION amcheck;
	CREATE TABLESPACE ts1 LOCATION '$ts_dir';
});

# Checks a table of known contents; 'ok' or what is wrong.
my $known_check = q{
CREATE FUNCTION known_check(tbl regclass, n int, ver int) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	got text;
	want text;
BEGIN
	EXECUTE format('SELECT count(*) || '':'' || coalesce(md5(string_agg(r.id || '','' || r.ver || '','' || r.v, '';'' ORDER BY r.id)), '''') FROM %s r WHERE r.id > -1', tbl)
	  INTO got;
	SELECT count(*) || ':' || coalesce(md5(string_agg(i || ',' || ver || ',' || bpext_expected_v(i, ver), ';' ORDER BY i)), '')
	  INTO want
	  FROM generate_series(1, n) i;
	IF got = want THEN
		RETURN 'ok';
	END IF;
	RETURN format('%s: got %s, want %s', tbl, got, want);
END $$;
};
$node->safe_psql('postgres', $known_check);

# The tables the storm rewrites, with their contents (all version 0).
my @storm_tables = qw(vf_t cl_t ri_t tr_t ts_t);
bpext_load_table($node, 'postgres', $_, $nrows) for @storm_tables;

# The template of the databases the storm creates, and a database it moves
# between tablespaces.
$node->safe_psql('postgres', 'CREATE DATABASE tmpl');
$node->safe_psql('tmpl', 'CREATE EXTENSION bpext');
bpext_create_helpers($node, 'tmpl');
$node->safe_psql('tmpl', $known_check);
bpext_load_table($node, 'tmpl', 'dt', $nrows, 3);
$node->safe_psql('postgres', 'CREATE DATABASE dm TEMPLATE tmpl');

$node->command_ok([ 'pgbench', '-i', '-q', '-s', '2', 'postgres' ], 'pgbench -i');
$node->safe_psql('postgres', 'CHECKPOINT');

my $results = PostgreSQL::Test::Utils::tempdir('results');

# --- the streams ----------------------------------------------------------------
# Each runs in a child process until the deadline and writes its tally to
# $results/<name>: "rounds N", "checks N", then one line per failure.

sub run_stream
{
	my ($name, $deadline, $body) = @_;
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	return $pid if $pid;

	# The child: no TAP output, and no END blocks (they would stop the
	# node) on the way out.
	my %tally = (rounds => 0, checks => 0);
	my @failures;
	my $sql = sub {
		my ($db, $query) = @_;
		my ($ret, $out, $err) = $node->psql($db, $query,
			on_error_stop => 1, timeout => 120);
		if ($ret != 0 || $err =~ /ERROR|FATAL|PANIC/)
		{
			push @failures, "[$db] $query\n  => ret $ret: $err";
			return undef;
		}
		return $out;
	};
	my $check = sub {
		my ($db, $table, $n, $ver, $scan) = @_;
		my $set = $scan eq 'index'
		  ? 'SET enable_seqscan = off; SET enable_bitmapscan = off;'
		  : 'SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;';
		my $got = $sql->($db, "$set SELECT known_check('$table', $n, $ver)");
		$tally{checks}++;
		push @failures, "[$db] $table ($scan scan): $got"
		  if defined $got && $got ne 'ok';
		return;
	};
	eval {
		while (time() < $deadline)
		{
			$body->($sql, $check, $tally{rounds});
			$tally{rounds}++;
		}
		1;
	} or push @failures, "died: $@";

	open(my $fh, '>', "$results/$name") or POSIX::_exit(2);
	print $fh "rounds $tally{rounds}\nchecks $tally{checks}\n";
	print $fh "failure $_\n" for @failures;
	close $fh;
	POSIX::_exit(0);
}

my $start_stats = bpext_stats($node);
my $log_offset = -s $node->logfile;
my $deadline = time() + $storm_secs;
my @children;

# pgbench: TPC-B for the whole storm.
my ($pgb_out, $pgb_err) = ('', '');
my $pgbench = IPC::Run::start(
	[
		'pgbench', '-n', '-c', '2', '-j', '1', '-T', $storm_secs,
		$node->connstr('postgres') . ' application_name=pgbench'
	],
	'>', \$pgb_out, '2>', \$pgb_err);

push @children, run_stream('tables', $deadline, sub {
	my ($sql, $check, $round) = @_;
	my $new = "new_t$round";

	# CREATE TABLE, check, DROP TABLE.
	$sql->('postgres', qq{
		CREATE TABLE $new (id int PRIMARY KEY, ver int NOT NULL, v text NOT NULL);
		INSERT INTO $new SELECT i, $round, bpext_expected_v(i, $round)
		  FROM generate_series(1, $nrows) i;
	});
	$sql->('postgres', "SELECT pg_prewarm('bpext_evictor')");
	$check->('postgres', $new, $nrows, $round, $round % 2 ? 'seq' : 'index');
	$sql->('postgres', "DROP TABLE $new");

	# TRUNCATE and refill with the same contents, in one transaction.
	$sql->('postgres', qq{
		BEGIN;
		TRUNCATE tr_t;
		INSERT INTO tr_t SELECT i, 0, bpext_expected_v(i, 0)
		  FROM generate_series(1, $nrows) i;
		COMMIT;
	});
	$sql->('postgres', 'VACUUM FULL vf_t');
	$sql->('postgres', 'CLUSTER cl_t USING cl_t_pkey');
	$sql->('postgres', 'REINDEX TABLE CONCURRENTLY ri_t');
	my $ts = $round % 2 ? 'pg_default' : 'ts1';
	$sql->('postgres', "ALTER TABLE ts_t SET TABLESPACE $ts");
	$check->('postgres', $_, $nrows, 0, 'index') for qw(tr_t vf_t cl_t ri_t ts_t);
});

push @children, run_stream('databases', $deadline, sub {
	my ($sql, $check, $round) = @_;
	my $strategy = $round % 2 ? 'FILE_COPY' : 'WAL_LOG';
	my $db = "storm_db$round";

	$sql->('postgres', "CREATE DATABASE $db TEMPLATE tmpl STRATEGY $strategy");
	$sql->('postgres', "SELECT pg_prewarm('bpext_evictor')");
	$check->($db, 'dt', $nrows, 3, 'index');
	$sql->($db, 'UPDATE dt SET ver = 4, v = bpext_expected_v(id, 4)');
	$sql->('postgres', "SELECT pg_prewarm('bpext_evictor')");
	$check->($db, 'dt', $nrows, 4, 'seq');
	$sql->('postgres', "DROP DATABASE $db");

	my $ts = $round % 2 ? 'pg_default' : 'ts1';
	$sql->('postgres', "ALTER DATABASE dm SET TABLESPACE $ts");
	$sql->('postgres', "SELECT pg_prewarm('bpext_evictor')");
	$check->('dm', 'dt', $nrows, 3, $round % 2 ? 'seq' : 'index');
});

push @children, run_stream('checker', $deadline, sub {
	my ($sql, $check, $round) = @_;
	$sql->('postgres', "SELECT pg_prewarm('bpext_evictor')");
	$check->('postgres', $_, $nrows, 0, $round % 2 ? 'seq' : 'index')
	  for @storm_tables;
});

# The tier's policies change during the storm: a third with the defaults
# (pushes at eviction, dual writes), a third also admitting every page
# read, a third admitting reads and only invalidating on writes.
my @phases = (
	[ $storm_secs / 3, "ALTER SYSTEM SET bpext.admission = 'read'" ],
	[ 2 * $storm_secs / 3, "ALTER SYSTEM SET bpext.write_policy = 'invalidate'" ]);
my %exit;
while (keys %exit < @children)
{
	for my $pid (@children)
	{
		next if exists $exit{$pid};
		$exit{$pid} = $? >> 8 if waitpid($pid, POSIX::WNOHANG()) == $pid;
	}
	if (@phases && time() >= $deadline - $storm_secs + $phases[0][0])
	{
		my $phase = shift @phases;
		$node->safe_psql('postgres', "$phase->[1]; SELECT pg_reload_conf();");
		note("storm: $phase->[1]");
	}
	usleep(100_000);
}
is($exit{$_}, 0, "stream process $_ exited cleanly") for @children;
is($node->safe_psql('postgres', 'SHOW bpext.admission') . ' '
	  . $node->safe_psql('postgres', 'SHOW bpext.write_policy'),
	'read invalidate', 'the storm ran under each policy');
$pgbench->finish;
my $storm_stats = bpext_stats($node);

# --- what the streams saw -----------------------------------------------------------

my %min_rounds = (tables => 3, databases => 3, checker => 5);
for my $name (sort keys %min_rounds)
{
	my $tally = slurp_file("$results/$name");
	my ($rounds) = $tally =~ /^rounds (\d+)$/m;
	my ($checks) = $tally =~ /^checks (\d+)$/m;
	my @failures = $tally =~ /^failure (.*(?:\n  .*)*)$/mg;
	cmp_ok($rounds, '>=', $min_rounds{$name},
		"$name: $rounds rounds, $checks content checks");
	is(scalar(@failures), 0, "$name: no failed statement or wrong contents")
	  or diag(join("\n", @failures[ 0 .. ($#failures < 9 ? $#failures : 9) ]));
}
like($pgb_out, qr/number of transactions actually processed: [1-9]/,
	'pgbench ran transactions during the storm')
  or diag('pgbench exited with ' . ($pgbench->result // 'nothing')
	  . ", its standard error:\n$pgb_err");
unlike($pgb_err, qr/ERROR|aborted/, 'pgbench saw no error');

my $reads = $storm_stats->{extension_page_reads} - $start_stats->{extension_page_reads};
my $inval = $storm_stats->{invalidations} - $start_stats->{invalidations};
# How many pages the tier holds, serves and loses to the storm's DDL depends
# on how far the eviction push and the worker keep up on a busy machine;
# that it served some and had some invalidated shows the checks read
# through it, where a stale page would show.
cmp_ok($reads, '>', 0, "the tier served $reads pages during the storm");
cmp_ok($inval, '>', 0, "the storm invalidated $inval tier pages");

# --- afterwards ---------------------------------------------------------------------

is(bpext_config($node)->{state}, 5, 'tier still enabled');
bpext_evict_shared_buffers($node);
for my $t (@storm_tables)
{
	bpext_check_table($node, 'postgres', $t, rows => $nrows, scan => 'index',
		name => 'after the storm');
	bpext_check_table($node, 'postgres', $t, rows => $nrows, scan => 'seq',
		name => 'after the storm');
}
bpext_check_table($node, 'dm', 'dt', rows => $nrows, ver => '3',
	scan => 'index', name => 'after the storm, database dm');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_database WHERE datname LIKE 'storm_db%'"),
	'0', 'every storm database was dropped');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_class WHERE relname LIKE 'new_t%'"),
	'0', 'every storm table was dropped');

my ($a, $t, $b, $h) = split /\|/, bpext_tpcb_check($node, 'postgres');
ok($a == $t && $t == $b && $b == $h, "TPC-B invariants ($a, $t, $b, $h)");

is(bpext_amcheck($node, 'postgres'), '', 'amcheck: database postgres');
$node->safe_psql('dm', 'CREATE EXTENSION amcheck');
is(bpext_amcheck($node, 'dm'), '', 'amcheck: database dm');

my $s = bpext_stats($node);
is($s->{crc_failures}, 0, 'no tier checksum failures');
is($s->{io_errors}, 0, 'no tier I/O errors');
is(bpext_count_in_log($node, qr/WARNING:.*bpext|PANIC|TRAP:/, $log_offset),
	0, 'no bpext warning or crash in the log');

$node->stop;
done_testing();

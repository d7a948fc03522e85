# Copyright (c) 2026, bpext developers

# The scan worker pool: every scan gives the same result serial and
# parallel, uses the workers when it may, shows in bpext_scan_history and
# in the 898-style log line, stops promptly on a query cancel, and finishes
# when a worker is terminated in the middle of it or when the pool is gone.

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

bpext_needs_contrib('pg_prewarm');

my $node = bpext_init_node('main', tier_size => '256MB',
	shared_buffers => '32MB',
	conf => "bpext.scan_workers = 2\nbpext.scan_task_buffers = 256\n");
$node->start;
bpext_setup($node);
bpext_load_table($node, 'postgres', 't', 100000);

sub wait_for_pool
{
	my ($n) = @_;
	$node->poll_query_until('postgres', qq{
		SELECT count(*) = $n FROM pg_stat_activity
		 WHERE backend_type = 'bpext scan worker'})
	  or die "the scan pool did not come up";
	return;
}

sub last_scan
{
	my $row = $node->safe_psql('postgres', q{
		SELECT command, operation, coalesce(database_id, 0), scanned_buffers,
		       total_iterated_buffers, parallel_tasks
		  FROM bpext_scan_history ORDER BY scan_id DESC LIMIT 1});
	my @f = split /\|/, $row;
	return {
		command => $f[0],
		operation => $f[1],
		database_id => $f[2],
		scanned => $f[3],
		iterated => $f[4],
		tasks => $f[5] };
}

# A digest of the view, by a query that touches no buffer the view lists
# as pinned or recently used in between.  usage_count and pinning_count
# move with every query and are left out.
my $digest_query = q{
	SELECT count(*) || ':' || md5(string_agg(
	         concat_ws(',', database_id, file_id, page_id, page_level,
	                   allocation_unit_id, page_type, row_count,
	                   free_space_in_bytes, is_modified, read_microsec,
	                   is_in_bpool_extension, bufferid, reltablespace,
	                   reldatabase, relfilenode, relforknumber,
	                   relblocknumber),
	         ';' ORDER BY is_in_bpool_extension, bufferid))
	  FROM bpext_buffer_descriptors(%s) d};

sub digest
{
	my ($mode, $contents) = @_;
	return $node->safe_psql('postgres',
		"SET bpext.parallel_scan = $mode; "
		  . sprintf($digest_query, $contents ? 'true' : 'false'));
}

wait_for_pool(2);
is( $node->safe_psql('postgres', q{
		SELECT string_agg(DISTINCT backend_type, ',') FROM pg_stat_activity
		 WHERE backend_type LIKE 'bpext%'}),
	'bpext scan worker,bpext tier worker',
	'the pool is visible in pg_stat_activity');

# Fill the tier by reading the table through small shared buffers, then
# let the server settle: the view must not change between the two runs.
$node->safe_psql('postgres', 'SELECT bpext_prewarm(\'t\'); CHECKPOINT;');
is(last_scan()->{operation}, 'PrewarmExtension', 'bpext_prewarm is a scan');
cmp_ok(last_scan()->{tasks}, '>=', 2, 'bpext_prewarm ran in parallel');
cmp_ok(bpext_config($node)->{allocated_pages}, '>', 2500,
	'the tier holds the table');
sleep 1;

# -------------------------------------------------- same result both ways
for my $contents (0, 1)
{
	my $what = $contents ? 'with contents' : 'without contents';
	my ($serial, $parallel, $serial_again);
	for my $try (1 .. 5)
	{
		$serial = digest('off', $contents);
		is(last_scan()->{tasks}, 1, "serial scan $what has one task")
		  if $try == 1;
		$parallel = digest('on', $contents);
		my $scan = last_scan();
		if ($try == 1)
		{
			cmp_ok($scan->{tasks}, '>=', 2,
				"parallel scan $what has two or more tasks");
			is($scan->{operation}, 'BufferDescriptors', 'operation');
			is($scan->{command}, 'SELECT', 'command');
		}
		$serial_again = digest('off', $contents);
		last if $serial eq $parallel && $parallel eq $serial_again;
	}
	is($parallel, $serial, "descriptors $what: serial and parallel agree");
	my ($rows) = split /:/, $parallel;
	cmp_ok($rows, '>', 6500, "descriptors $what list buffers and tier pages");
}

# Small scans stay serial.
$node->safe_psql('postgres', q{
	SET bpext.scan_task_buffers = 100000;
	SELECT count(*) FROM bpext_buffer_descriptors});
is(last_scan()->{tasks}, 1, 'a scan smaller than two tasks is serial');

# bpext.parallel_scan is for superusers.
$node->safe_psql('postgres', 'CREATE ROLE plain LOGIN');
my ($ret, $out, $err) = $node->psql('postgres',
	'SET bpext.parallel_scan = off', extra_params => [ '-U', 'plain' ]);
like($err, qr/permission denied to set parameter "bpext.parallel_scan"/,
	'bpext.parallel_scan is superuser-only');

# -------------------------------------------------- the 898-style log line
my $offset = -s $node->logfile;
$node->safe_psql('postgres', q{
	SET bpext.log_scan_min_duration = 0;
	SELECT count(*) FROM bpext_buffer_descriptors});
is( bpext_count_in_log($node,
		qr/LOG:  buffer pool scan took [0-9.]+ s: database ID 0, command 'SELECT', operation 'BufferDescriptors', scanned buffers \d+, total iterated buffers \d+, wait time \d+ ms, parallel tasks [23]/,
		$offset),
	1,
	'a scan over bpext.log_scan_min_duration logs one line');
$offset = -s $node->logfile;
$node->safe_psql('postgres', 'SELECT count(*) FROM bpext_buffer_descriptors');
is(bpext_count_in_log($node, qr/buffer pool scan took/, $offset),
	0, 'shorter scans are not logged');

# -------------------------------------------------- flush
my $dboid = $node->safe_psql('postgres',
	"SELECT oid FROM pg_database WHERE datname = 'postgres'");
$node->safe_psql('postgres', 'UPDATE t SET ver = ver WHERE id % 10 = 0');
my $dirty = $node->safe_psql('postgres', q{
	SELECT count(*) FROM bpext_buffer_descriptors
	 WHERE is_modified AND database_id =
	       (SELECT oid FROM pg_database WHERE datname = current_database())});
cmp_ok($dirty, '>', 500, 'an UPDATE dirtied buffers');
my $flushed = $node->safe_psql('postgres', 'SELECT bpext_flush()');
cmp_ok($flushed, '>=', $dirty - 50, 'bpext_flush wrote the dirty buffers');
my $scan = last_scan();
is($scan->{operation}, 'FlushCache', 'flush operation');
is($scan->{database_id}, $dboid, 'flush database_id');
# Whether the workers wake before the backend has done all the (cheap)
# tasks depends on scheduling; the pool's use is checked below.
like($scan->{tasks}, qr/^[123]$/, 'flush ran in one to three processes');
is( $node->safe_psql('postgres', qq{
		SELECT count(*) FROM bpext_buffer_descriptors
		 WHERE is_modified AND database_id = $dboid
		   AND allocation_unit_id = pg_relation_filenode('t')}),
	0, 'no buffer of the table is dirty after bpext_flush');
($ret, $out, $err) = $node->psql('postgres', "SELECT bpext_flush('nosuchdb')");
like($err, qr/database "nosuchdb" does not exist/, 'bpext_flush of a missing database');
($ret, $out, $err) = $node->psql('postgres', 'SELECT bpext_flush()',
	extra_params => [ '-U', 'plain' ]);
like($err, qr/permission denied for function bpext_flush/,
	'bpext_flush is not for everyone');
$node->safe_psql('postgres', 'GRANT pg_checkpoint TO plain');
is($node->safe_psql('postgres', 'SELECT bpext_flush() >= 0',
		extra_params => [ '-U', 'plain' ]),
	't', 'pg_checkpoint members may flush');

# -------------------------------------------------- drop clean buffers
$node->safe_psql('postgres', 'UPDATE t SET ver = ver WHERE id % 100 = 0');
my $dirty_before = $node->safe_psql('postgres',
	"SELECT count(*) FROM bpext_buffer_descriptors WHERE is_modified");
my $reads_before = bpext_stat($node, 'extension_page_reads');
# The pages the UPDATE wrote reach the tier through the store queue,
# asynchronously, and a full queue drops them: what the tier holds now is
# the prewarmed table less what the UPDATE rewrote, plus whatever of that
# came back.
my $in_tier = bpext_config($node)->{allocated_pages};
cmp_ok($in_tier, '>', 3000, "the tier holds most of the table ($in_tier pages)");
my $dropped = $node->safe_psql('postgres', 'SELECT bpext_drop_clean_buffers()');
$scan = last_scan();
is($scan->{operation}, 'DropCleanBuffers', 'drop clean operation');
like($scan->{tasks}, qr/^[123]$/, 'drop clean ran in one to three processes');
cmp_ok($dropped, '>=', $in_tier,
	'bpext_drop_clean_buffers dropped at least the tier\'s pages');
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM bpext_buffer_descriptors
		 WHERE NOT is_modified AND NOT is_in_bpool_extension
		   AND allocation_unit_id = pg_relation_filenode('t')}),
	0, 'no clean page of the table is left in shared buffers');
cmp_ok(
	$node->safe_psql('postgres',
		"SELECT count(*) FROM bpext_buffer_descriptors WHERE is_modified"),
	'>=', $dirty_before - 5,
	'dirty buffers stay');
cmp_ok(bpext_config($node)->{allocated_pages}, '<', 100,
	'the tier is empty');
bpext_check_table($node, 'postgres', 't', rows => 100000,
	name => 'after bpext_drop_clean_buffers');
cmp_ok(bpext_stat($node, 'extension_page_reads') - $reads_before, '<', 10,
	'the table was read from its data file');
($ret, $out, $err) = $node->psql('postgres', 'SELECT bpext_drop_clean_buffers()',
	extra_params => [ '-U', 'plain' ]);
like($err, qr/permission denied/, 'bpext_drop_clean_buffers is superuser-only');

# -------------------------------------------------- prewarm, parallel and serial
$node->safe_psql('postgres', 'CHECKPOINT; SELECT bpext_drop_clean_buffers()');
my $relpages = $node->safe_psql('postgres',
	"SELECT pg_relation_size('t') / 8192");
my $loaded = $node->safe_psql('postgres', "SELECT bpext_prewarm('t')");
cmp_ok($loaded, '>=', $relpages - 200, 'parallel bpext_prewarm loaded the table');
$node->safe_psql('postgres', 'SELECT bpext_drop_clean_buffers()');
is( $node->safe_psql('postgres',
		"SET bpext.parallel_scan = off; SELECT bpext_prewarm('t')"),
	$loaded, 'serial bpext_prewarm loads as many pages');
# On a single CPU the backend finishes these cheap tasks before a woken
# worker is scheduled at all.
my $ncpu = `nproc` // 2;
chomp $ncpu;
my $parallel_drops = 0;
for my $try (1 .. ($ncpu > 1 ? 20 : 0))
{
	$node->safe_psql('postgres',
		"SELECT pg_prewarm('t'); SELECT bpext_drop_clean_buffers()");
	$parallel_drops++ if last_scan()->{tasks} >= 2;
	last if $parallel_drops;
}
SKIP:
{
	skip 'one CPU', 1 if $ncpu <= 1;
	cmp_ok($parallel_drops, '>', 0, 'the workers take part in bpext_drop_clean_buffers')
	  or diag $node->safe_psql('postgres', q{
	SELECT string_agg(concat_ws(' ', scan_id, command, operation, parallel_tasks,
	                            total_iterated_buffers, round(elapsed_ms), round(wait_ms)), E'\n')
	  FROM bpext_scan_history});
}
$node->safe_psql('postgres', "SELECT bpext_prewarm('t')");
$reads_before = bpext_stat($node, 'extension_page_reads');
bpext_check_table($node, 'postgres', 't', rows => 100000,
	name => 'after bpext_prewarm');
cmp_ok(bpext_stat($node, 'extension_page_reads') - $reads_before,
	'>', $relpages / 2, 'the prewarmed table was read from the tier');

# -------------------------------------------------- DROP DATABASE, shrink
$node->safe_psql('postgres', 'CREATE DATABASE gone');
$node->safe_psql('gone', 'CREATE EXTENSION bpext');
bpext_create_helpers($node, 'gone');
bpext_load_table($node, 'gone', 'g', 30000);
my $gonepages = $node->safe_psql('gone', "SELECT bpext_prewarm('g')");
my $goneoid = $node->safe_psql('postgres',
	"SELECT oid FROM pg_database WHERE datname = 'gone'");
my $before = bpext_config($node)->{allocated_pages};
$node->safe_psql('postgres', 'DROP DATABASE gone');
ok( $node->poll_query_until('postgres', qq{
		SELECT operation = 'InvalidatePages' FROM bpext_scan_history
		 WHERE command = 'DROP DATABASE' AND database_id = $goneoid}),
	'DROP DATABASE has the tier worker scan the tier for the database');
# The tier worker may have given some of the slots back first.
cmp_ok($before - bpext_config($node)->{allocated_pages},
	'>=', $gonepages, 'the dropped database\'s pages left the tier');
is( $node->safe_psql('postgres', qq{
		SELECT count(*) FROM bpext_buffer_descriptors
		 WHERE database_id = $goneoid}),
	0, 'none of them is listed');

$node->safe_psql('postgres', "SELECT bpext_prewarm('t')");
$node->safe_psql('postgres', "SELECT bpext_resize('32MB')");
my $shrink = $node->safe_psql('postgres', q{
	SELECT command || '|' || parallel_tasks || '|' || scanned_buffers
	  FROM bpext_scan_history WHERE operation = 'ShrinkExtension'
	 ORDER BY scan_id DESC LIMIT 1});
like($shrink, qr/^bpext tier worker\|[1-3]\|\d+$/, 'shrinking scans the slots taken away');
cmp_ok(bpext_config($node)->{allocated_pages}, '<=', 4095,
	'the tier holds no more than its new size');
bpext_check_table($node, 'postgres', 't', rows => 100000, name => 'after shrink');
$node->safe_psql('postgres', "SELECT bpext_resize('256MB')");
$node->safe_psql('postgres', "SELECT bpext_prewarm('t')");

# -------------------------------------------------- cancel
$node->append_conf('postgresql.conf', "bpext.scan_task_delay = 3000\n");
$node->reload;
sleep 1;
my $expected = digest('off', 0);
for my $i (1 .. 10)
{
	my $t0 = time;
	($ret, $out, $err) = $node->psql('postgres', q{
		SET statement_timeout = '300ms';
		SELECT count(*) FROM bpext_buffer_descriptors});
	my $took = time - $t0;
	if ($i == 1)
	{
		like($err, qr/canceling statement due to statement timeout/,
			'a parallel scan can be cancelled');
		cmp_ok($took, '<', 2.5, 'the cancel does not wait for the workers');
	}
}
$node->append_conf('postgresql.conf', "bpext.scan_task_delay = 0\n");
$node->reload;
sleep 1;
my $t0 = time;
is(digest('on', 0), $expected, 'after ten cancelled scans, a scan gives the same rows');
cmp_ok(time - $t0, '<', 3, 'promptly');
cmp_ok(last_scan()->{tasks}, '>=', 2, 'and the pool takes part again');

# -------------------------------------------------- a worker terminated mid-scan
# The scan runs while other sessions look up a worker and terminate it.
# Shared buffers have free buffers here, so a catalog page those sessions
# read for the first time would be a row the scan may or may not list:
# rehearse the sequence once, so that the expected rows are taken with
# every page it touches already read.
sub terminate_a_scan_worker
{
	my $pid = $node->safe_psql('postgres', q{
		SELECT pid FROM pg_stat_activity WHERE backend_type = 'bpext scan worker'
		 ORDER BY pid LIMIT 1});
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	return;
}
terminate_a_scan_worker();
wait_for_pool(2);
$node->safe_psql('postgres', sprintf($digest_query, 'false'));
$expected = digest('off', 0);
$node->append_conf('postgresql.conf', "bpext.scan_task_delay = 1000\n");
$node->reload;
sleep 1;
$offset = -s $node->logfile;
my ($stdout, $stderr) = ('', '');
my $h = IPC::Run::start(
	[ 'psql', '-X', '-At', '-d', $node->connstr('postgres'),
	  '-c', sprintf($digest_query, 'false') ],
	'>', \$stdout, '2>', \$stderr,
	IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
usleep(400_000);
terminate_a_scan_worker();
ok(eval { $h->finish; 1 }, 'the scan that lost a worker finished');
chomp $stdout;
is($stdout, $expected, 'a scan that lost a worker gives the same rows');
is($stderr, '', 'and no error');
is( bpext_count_in_log($node,
		qr/terminating background worker "bpext scan worker" due to administrator command/,
		$offset),
	1, 'the worker was terminated');
wait_for_pool(2);

# -------------------------------------------------- no pool at all
# Terminated workers come back after a second; scan while they are away.
$node->safe_psql('postgres', q{
	SELECT pg_terminate_backend(pid) FROM pg_stat_activity
	 WHERE backend_type = 'bpext scan worker'});
wait_for_pool(0);
my $alone = digest('on', 0);
is(last_scan()->{tasks}, 1, 'with the pool gone, the leader scans alone');
is($alone, digest('off', 0), 'and gives the same rows');
$node->append_conf('postgresql.conf', "bpext.scan_task_delay = 0\n");
$node->reload;
wait_for_pool(2);

$node->stop;

# -------------------------------------------------- pool size vs max_worker_processes
my $big = bpext_init_node('big', tier_size => 0,
	conf => "bpext.scan_workers = 20\nmax_worker_processes = 8\n");
ok(!$big->start(fail_ok => 1), 'too many scan workers: the server does not start');
like(slurp_file($big->logfile),
	qr/bpext.scan_workers \(20\) and the bpext tier worker need more background workers than max_worker_processes \(8\) allows/,
	'and says why');

my $auto = bpext_init_node('auto', tier_size => 0,
	conf => "max_worker_processes = 4\n");
$auto->start;
$auto->poll_query_until('postgres', q{
	SELECT count(*) > 0 FROM pg_stat_activity
	 WHERE backend_type = 'bpext scan worker'});
sleep 1;
is( $auto->safe_psql('postgres', q{
		SELECT count(*) FROM pg_stat_activity
		 WHERE backend_type = 'bpext scan worker'}),
	1, 'the default pool leaves half of max_worker_processes free');
$auto->stop;

done_testing();


# Copyright (c) 2026, bpext developers

# PostgreSQL 18's asynchronous reads, under each io_method (sync, worker,
# io_uring where the kernel allows it; the test says when it does not):
#
#  - tier hits are served: a table the tier holds whole, read by sequential
#    scans (combined reads of io_combine_limit blocks) and index scans, is
#    served from the tier, every row right, with data checksums verified by
#    PostgreSQL's own completion callbacks;
#  - the same for a larger table with half of it in shared buffers (short
#    runs of tier hits), read by parallel scans whose leader is signalled
#    all along;
#  - misses stay PostgreSQL's own reads: with the tier empty the same scans
#    read the data files, every row right;
#  - a tier read in flight races the invalidation of its page: the tier
#    read is held up (the fault injector's read_sleep) while another
#    session drops every page from the tier; the read must not be served,
#    the scan must read the page from the data file and return every row
#    right, and the tier must stay healthy;
#  - asynchronous data-file reads in flight race writes and admission:
#    while one session scans a table the tier does not hold, another
#    updates rows with checkpoints (dual writes) and prewarms the table
#    into the tier, repeatedly; every row of every scan must be right.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use POSIX ();
use Time::HiRes qw(usleep);

my $probe = PostgreSQL::Test::Cluster->new('probe');
plan skip_all => 'asynchronous I/O is PostgreSQL 18 and later'
  if $probe->pg_version < 18;
bpext_needs_contrib('pg_prewarm', 'pg_buffercache');

my $so = bpext_build_fault_injector();
plan skip_all => 'the fault injector could not be built' unless $so;

my $nrows = 40000;

sub delta
{
	my ($before, $after, $key) = @_;
	return $after->{$key} - $before->{$key};
}

sub right_rows
{
	my ($session, $table) = @_;
	return $session->query_safe(qq{
		SET enable_indexscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FILTER (WHERE v IS DISTINCT FROM bpext_expected_v(id, ver))
		       || ',' || count(*) FROM $table;
	});
}

sub run_method
{
	my ($method) = @_;
	my $ssd = PostgreSQL::Test::Utils::tempdir("ssd_$method");
	my $node = bpext_init_node("aio_$method",
		tier_size => '128MB',
		tier_path => "$ssd/bpext.tier",
		checksums => 1,
		conf => qq{
io_method = $method
io_combine_limit = 16
});
	my $ctl = PostgreSQL::Test::Utils::tempdir();
	if (!bpext_start_with_faults($node, $so, "$ssd/", $ctl,
			fail_ok => 1))
	{
		my $log = slurp_file($node->logfile);
		my ($why) = $log =~ /^.*(?:FATAL|ERROR):\s+(.*)$/m;
		BAIL_OUT("io_method $method: the server did not start: "
			  . ($why // 'see the log'))
		  if $method ne 'io_uring';
		diag("io_method io_uring is not available on this machine: "
			  . ($why // 'the server did not start'));
		return;
	}
	is($node->safe_psql('postgres', 'SHOW io_method'),
		$method, "$method: the server runs with io_method $method");
	bpext_setup($node);
	bpext_load_table($node, 'postgres', 't', $nrows);
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $heap_pages = $node->safe_psql('postgres',
		"SELECT pg_relation_size('t') / 8192");

	# --- hits: the tier holds the whole table --------------------------------
	$node->safe_psql('postgres', "SELECT bpext_drop_clean_buffers()");
	is($node->safe_psql('postgres', "SELECT bpext_prewarm('t')"),
		$heap_pages, "$method: the table's $heap_pages pages are prewarmed");
	bpext_evict_shared_buffers($node);
	my $before = bpext_stats($node);
	bpext_check_table($node, 'postgres', 't',
		rows => $nrows, scan => 'seq', name => "$method, tier hits");
	bpext_check_table($node, 'postgres', 't',
		rows => $nrows, scan => 'index', name => "$method, tier hits");
	my $after = bpext_stats($node);
	cmp_ok(delta($before, $after, 'extension_page_reads'), '>=', $heap_pages,
		"$method: the tier served the table ("
		  . delta($before, $after, 'extension_page_reads') . " page reads)");
	is($after->{crc_failures} + $after->{io_errors}, 0,
		"$method: no tier errors");
	cmp_ok(
		$node->safe_psql('postgres', q{
			SELECT count(*) FROM bpext_buffer_descriptors
			 WHERE NOT is_in_bpool_extension AND read_microsec IS NOT NULL
			   AND relfilenode = pg_relation_filenode('t')}),
		'>', 0, "$method: buffers served from the tier have a read time");

	# numa_node: what pg_buffercache_numa says for the same buffers, where
	# the server can tell; else NULL.
	if ($method eq 'sync')
	{
		$node->safe_psql('postgres', 'CREATE EXTENSION IF NOT EXISTS pg_buffercache');
		my $numa = $node->safe_psql('postgres', 'SELECT pg_numa_available()');
		is($node->safe_psql('postgres', q{
			SELECT count(*) FILTER (WHERE d.numa_node IS NOT DISTINCT FROM
			         CASE WHEN pg_numa_available() THEN n.node END)
			       || ',' || count(*)
			  FROM bpext_buffer_descriptors d
			  JOIN (SELECT bufferid, min(numa_node) AS node
			          FROM pg_buffercache_numa GROUP BY bufferid) n
			    ON n.bufferid = d.bufferid
			 WHERE NOT d.is_in_bpool_extension
			   AND d.relfilenode = pg_relation_filenode('t')}) =~ /^([1-9]\d*),\1$/
			  ? 'same' : 'different',
			'same',
			"numa_node of the table's buffers agrees with pg_buffercache_numa (NUMA "
			  . ($numa eq 't' ? 'available' : 'not available: NULL') . ')');
	}

	# --- hits interleaved with shared buffers, under signals ----------------
	# A 70 MB table held whole by the tier, half its buffers evicted at
	# random before each scan, so that reads are short runs of tier hits,
	# read by a parallel scan whose leader is sent SIGUSR1 (a procsignal
	# with no reason set: it only sets the latch) every 100 microseconds
	# meanwhile.  A pending signal once cut the read that completes a
	# served I/O short, which PostgreSQL reports as a failed read.
	$node->safe_psql('postgres', q{
		CREATE EXTENSION IF NOT EXISTS pg_buffercache;
		CREATE TABLE p AS
		  SELECT g AS id, repeat(chr(65 + g % 26), 200) AS pad
		    FROM generate_series(1, 300000) g;
		CHECKPOINT;
		SELECT bpext_prewarm('p');
	});
	$before = bpext_stats($node);
	my $scan = $node->background_psql('postgres', on_error_stop => 0);
	my $scan_pid = $scan->query_safe(q{
		SET max_parallel_workers_per_gather = 2;
		SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0;
		SET min_parallel_table_scan_size = 0;
		SELECT pg_backend_pid();
	});
	my $want = '0,300000,' . (300000 * 300001 / 2);
	my $signalled_ok = 0;
	for my $round (1 .. 10)
	{
		$node->safe_psql('postgres', q{
			SELECT count(pg_buffercache_evict(bufferid)) FROM pg_buffercache
			 WHERE relfilenode = pg_relation_filenode('p') AND random() < 0.5});
		my $signaller = fork();
		die "fork failed: $!" unless defined $signaller;
		if ($signaller == 0)
		{
			while (kill('USR1', $scan_pid)) { usleep(100); }
			POSIX::_exit(0);
		}
		my ($out, $ret) = $scan->query(q{
			SELECT count(*) FILTER (WHERE pad <> repeat(chr(65 + id % 26), 200))
			       || ',' || count(*) || ',' || sum(id) FROM p;
		});
		kill('KILL', $signaller);
		waitpid($signaller, 0);
		$signalled_ok++ if $ret == 0 && $out eq $want;
		diag("$method, signalled round $round: $out $scan->{stderr}")
		  if $ret != 0 || $out ne $want;
		$scan->{stderr} = '';
	}
	$scan->quit;
	is($signalled_ok, 10,
		"$method: scans of a table half in shared buffers, half in the tier, whose leader is signalled all along, read every row right");
	$after = bpext_stats($node);
	cmp_ok(delta($before, $after, 'extension_page_reads'), '>', 10000,
		"$method: ... the tier serving the evicted half ("
		  . delta($before, $after, 'extension_page_reads') . " page reads)");
	$node->safe_psql('postgres', 'DROP TABLE p');

	# --- misses: the tier holds nothing --------------------------------------
	$node->safe_psql('postgres', "SELECT bpext_drop_clean_buffers()");
	$before = bpext_stats($node);
	bpext_check_table($node, 'postgres', 't',
		rows => $nrows, scan => 'seq', name => "$method, misses");
	$after = bpext_stats($node);
	cmp_ok(delta($before, $after, 'data_file_reads'), '>=', $heap_pages,
		"$method: the data file served the table when the tier was empty");
	is(delta($before, $after, 'extension_page_reads'), 0,
		"$method: ... and the tier nothing");

	# --- a tier read in flight while its page is invalidated ------------------
	# The read held up is a scan's 41st or 42nd tier read: past the read
	# stream's ramp-up, in a combined read of several blocks, and in the
	# middle of one in at least one of the two runs.  The blocks of the
	# combined read before it are served; it and the rest must be read from
	# the data file (a partial read, which PostgreSQL completes by reading
	# the rest again).
	for my $unhurt (40, 41)
	{
		my $name = "$method, tier read $unhurt held";
		$node->safe_psql('postgres', "SELECT bpext_prewarm('t')");
		bpext_evict_shared_buffers($node);
		$before = bpext_stats($node);
		my $reader = $node->background_psql('postgres');
		my $reader_pid = $reader->query_safe('SELECT pg_backend_pid()');
		bpext_fault($node, 'read_sleep', 1, "1500 $unhurt");
		$reader->query_until(qr/reading/, qq{
			\\echo reading
			SET enable_indexscan = off; SET enable_bitmapscan = off;
			SELECT count(*) FILTER (WHERE v IS DISTINCT FROM bpext_expected_v(id, ver))
			       || ',' || count(*) FROM t;
		});
		ok(bpext_wait_for_fault_pid($node, 'read_sleep', $reader_pid),
			"$name: a scan is in the middle of a tier read");
		cmp_ok($node->safe_psql('postgres', 'SELECT bpext_drop_clean_buffers()'),
			'>=', $heap_pages / 2,
			"$name: every page is dropped from the tier meanwhile");
		bpext_fault($node, 'read_sleep', 0);
		my $out = $reader->query_safe(q{SELECT 'done'});
		like($out, qr/^0,$nrows\n.*done$/s,
			"$name: the scan whose tier read was invalidated returns every row right");
		$reader->quit;
		$after = bpext_stats($node);
		cmp_ok(delta($before, $after, 'extension_page_reads'), '>=', $unhurt,
			"$name: ... served from the tier up to the read held");
		cmp_ok(delta($before, $after, 'data_file_reads'), '>=',
			$heap_pages - $unhurt - 1,
			"$name: ... and from the data file after it");
		is($after->{crc_failures} + $after->{io_errors}, 0,
			"$name: ... with no tier error");
		is(bpext_config($node)->{state}, 5, "$name: ... and the tier stays on");
	}

	# --- asynchronous data-file reads racing writes and admission -------------
	my $out;
	my $writer = $node->background_psql('postgres');
	my $scanner = $node->background_psql('postgres');
	for my $round (1 .. 4)
	{
		$node->safe_psql('postgres', "SELECT bpext_drop_clean_buffers()");
		$scanner->query_until(qr/scanning/, qq{
			\\echo scanning
			SET enable_indexscan = off; SET enable_bitmapscan = off;
			SELECT count(*) FILTER (WHERE v IS DISTINCT FROM bpext_expected_v(id, ver))
			       || ',' || count(*) FROM t;
		});
		$writer->query_safe(qq{
			UPDATE t SET ver = ver + 1, v = bpext_expected_v(id, ver + 1)
			 WHERE id % 97 = $round;
			CHECKPOINT;
			SELECT bpext_prewarm('t');
			UPDATE t SET ver = ver + 1, v = bpext_expected_v(id, ver + 1)
			 WHERE id % 89 = $round;
			CHECKPOINT;
		});
		$out = $scanner->query_safe(q{SELECT 'done'});
		like($out, qr/^0,$nrows\n.*done$/s,
			"$method, race round $round: a scan racing writes and admission reads every row right");
		is(right_rows($scanner, 't'), "0,$nrows",
			"$method, race round $round: ... and so does the next one");
	}
	$writer->quit;
	$scanner->quit;
	$after = bpext_stats($node);
	is($after->{crc_failures} + $after->{io_errors}, 0,
		"$method: no tier errors after the races");
	$node->stop;
	return;
}

run_method($_) for qw(sync worker io_uring);

done_testing();

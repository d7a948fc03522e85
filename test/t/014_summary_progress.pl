# Copyright (c) 2026, bpext developers

# The monitoring of large tiers (SQL 1.3):
#  1. bpext_buffer_summary, counted inside the scan workers, agrees exactly
#     with the full listing per relation fork and with the counters, in
#     parallel (many tasks) and serially, and with the tier off.
#  2. bpext_progress shows a running prewarm from another session (slowed
#     down by the fault library's write_sleep on the tier file), and is
#     empty once it is over, also when it is cancelled.
#  3. Updating 1.2 -> 1.3 gives the same objects as a fresh install.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $so = bpext_build_fault_injector();
plan skip_all => 'no C compiler to build the fault injector' unless $so;

my $ssd = PostgreSQL::Test::Utils::tempdir('ssd');
my $ctl = PostgreSQL::Test::Utils::tempdir('faults');
my $node = bpext_init_node('main', tier_size => '128MB', max_size => '128MB',
	tier_path => "$ssd/bpext.tier",
	conf => "bpext.scan_workers = 2\nbpext.io_timeout = 0\n");
bpext_start_with_faults($node, $so, "$ssd/", $ctl);
bpext_setup($node);
bpext_load_table($node, 'postgres', 't', 60000);
$node->safe_psql('postgres', q{SELECT bpext_prewarm('t'); SELECT bpext_prewarm('t_pkey')});

# 1. The summary against the listing and the counters.  The cluster is
# quiet (autovacuum off, nothing running), so the figures are exact.
my $by_fork_listing = q{
	SELECT reldatabase, reltablespace, relfilenode, relforknumber,
	       count(*) FILTER (WHERE NOT is_in_bpool_extension) AS ram_pages,
	       count(*) FILTER (WHERE is_in_bpool_extension) AS ssd_pages,
	       count(*) FILTER (WHERE is_modified) AS dirty_pages
	  FROM bpext_buffer_descriptors GROUP BY 1, 2, 3, 4};
my $by_fork_summary = q{
	SELECT database_id, reltablespace, relfilenode, relforknumber,
	       ram_pages, ssd_pages, dirty_pages FROM bpext_buffer_summary};

# Both scans in one statement, run twice: the first warms the caches the
# statement itself needs, so that the second reads no new page between
# its two scans.  After a checkpoint nothing is dirty and nothing moves.
sub compare
{
	my ($select) = @_;
	my $q = qq{
		WITH l AS ($by_fork_listing), s AS ($by_fork_summary)
		SELECT $select};
	return $node->safe_psql('postgres', "CHECKPOINT; $q; $q");
}

sub check_summary
{
	my ($name) = @_;
	my $r = (split /\n/, compare(q{
		(SELECT count(*) FROM (TABLE l EXCEPT TABLE s) x) || ',' ||
		(SELECT count(*) FROM (TABLE s EXCEPT TABLE l) x) || ',' ||
		(SELECT count(*) FROM s) || ',' ||
		(SELECT coalesce(sum(ssd_pages), 0) FROM s) || ',' ||
		(SELECT extension_allocated_pages FROM bpext_stats) || ',' ||
		(SELECT coalesce(sum(ram_pages), 0) FROM s)}))[1];
	my ($missing, $extra, $rows, $ssd, $allocated, $ram) = split /,/, $r;
	is("$missing,$extra", '0,0',
		"$name: the summary has the listing's counts for each of its $rows relation forks");
	is($ssd, $allocated,
		"$name: its SSD pages ($ssd) are the tier's allocated pages");
	is( $node->safe_psql('postgres', q{
			SELECT (SELECT sum(ssd_pages) FROM bpext_database_buffers) =
			       (SELECT sum(ssd_pages) FROM bpext_buffer_summary)}),
		't', "$name: bpext_database_buffers adds up to it");
	return ($ssd, $ram);
}

$node->safe_psql('postgres', q{
	ALTER SYSTEM SET bpext.scan_task_buffers = 64; SELECT pg_reload_conf()});
my ($ssd_pages, $ram) = check_summary('parallel, small tasks');
cmp_ok($ssd_pages, ">", 1000, "the tier holds the prewarmed table ($ssd_pages pages)");
is( $node->safe_psql('postgres', q{
		SELECT count(*) > 0 AND bool_and(command = 'SELECT')
		  FROM bpext_scan_history WHERE operation = 'BufferSummary'}),
	't', 'bpext_scan_history lists the summary scans');

$node->safe_psql('postgres', q{
	ALTER SYSTEM SET bpext.parallel_scan = off; SELECT pg_reload_conf()});
check_summary('serial');
$node->safe_psql('postgres', q{
	ALTER SYSTEM RESET bpext.parallel_scan;
	ALTER SYSTEM RESET bpext.scan_task_buffers; SELECT pg_reload_conf()});

$node->safe_psql('postgres', q{SELECT bpext_disable()});
is( (split /\n/, compare(q{
		(SELECT count(*) FROM (TABLE l EXCEPT TABLE s) x) || ',' ||
		(SELECT count(*) FROM (TABLE s EXCEPT TABLE l) x) || ',' ||
		(SELECT sum(ssd_pages) FROM s) || ',' ||
		(SELECT sum(ram_pages) > 0 FROM s)}))[1],
	'0,0,0,true', 'tier off: the summary counts shared buffers only, as the listing');
$node->safe_psql('postgres', q{SELECT bpext_enable(size => '128MB')});
bpext_wait_for_state($node, 'enabled');

# 2. A slow prewarm, seen from another session.  Every write to the tier
# file blocks for 200 ms; a batch is 64 pages.
is($node->safe_psql('postgres', 'SELECT count(*) FROM bpext_progress'),
	'0', 'nothing under way: bpext_progress is empty');
my $pages = $node->safe_psql('postgres',
	q{SELECT pg_relation_size('t') / 8192});
bpext_fault($node, 'write_sleep', 1, 200);
my $bg = $node->background_psql('postgres');
$bg->query_until(qr/started/, q{
	\echo started
	SELECT bpext_prewarm('t');
});
ok( $node->poll_query_until('postgres', qq{
		SELECT operation = 'prewarm' AND relid = 't'::regclass
		   AND database_id = (SELECT oid FROM pg_database WHERE datname = 'postgres')
		   AND datname = 'postgres' AND pages_total = $pages
		   AND pages_done > 0 AND pages_done < pages_total
		   AND pages_per_second > 0 AND started_at <= now()
		  FROM bpext_progress}),
	'bpext_progress shows the prewarm half done from another session');
my $pid = $node->safe_psql('postgres',
	q{SELECT pid FROM bpext_progress WHERE operation = 'prewarm'});
is( $node->safe_psql('postgres', qq{
		SELECT backend_type FROM pg_stat_activity WHERE pid = $pid}),
	'client backend', 'its pid is the backend that called bpext_prewarm');
bpext_fault($node, 'write_sleep', 0);
$bg->quit;
ok( $node->poll_query_until('postgres',
		q{SELECT count(*) = 0 FROM bpext_progress}),
	'bpext_progress is empty once the prewarm is over');

# Cancelled half-way, it leaves nothing behind either.
$node->safe_psql('postgres', q{SELECT bpext_drop_clean_buffers()});
bpext_fault($node, 'write_sleep', 1, 200);
# The same session asks: the slot goes with the aborted statement, not
# only with the session.
my $session = $node->background_psql('postgres', on_error_stop => 0);
$session->query_safe(q{SET statement_timeout = '1s'});
my $log_offset = -s $node->logfile;
my ($out, $err) = $session->query(q{SELECT bpext_prewarm('t')});
ok($err && $node->log_contains(
		qr/canceling statement due to statement timeout/, $log_offset),
	'a prewarm stops at statement_timeout');
bpext_fault($node, 'write_sleep', 0);
# (15's BackgroundPsql keeps an error's stderr: use query, not query_safe.)
$session->query(q{RESET statement_timeout});
is(scalar $session->query('SELECT count(*) FROM bpext_progress'),
	'0', 'bpext_progress is empty after the cancelled prewarm');
$session->quit;

# 3. Update path: 1.2 -> 1.3 makes what a fresh install makes.
my $surface = q{
	SELECT pg_describe_object(d.classid, d.objid, 0) || ' | ' ||
	       coalesce(CASE d.classid
	           WHEN 'pg_proc'::regclass THEN
	               (SELECT pg_get_functiondef(p.oid) || ' acl=' || coalesce(p.proacl::text, '')
	                  FROM pg_proc p WHERE p.oid = d.objid)
	           WHEN 'pg_class'::regclass THEN
	               (SELECT c.relkind::text || ' acl=' || coalesce(c.relacl::text, '') ||
	                       CASE WHEN c.relkind = 'v' THEN ' ' || pg_get_viewdef(c.oid) ELSE '' END
	                  FROM pg_class c WHERE c.oid = d.objid)
	       END, '')
	  FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
	 WHERE d.refclassid = 'pg_extension'::regclass AND e.extname = 'bpext'
	   AND d.deptype = 'e'
	 ORDER BY 1};
$node->safe_psql('postgres', 'CREATE DATABASE upd; CREATE DATABASE fresh');
$node->safe_psql('upd', q{CREATE EXTENSION bpext VERSION '1.2'});
is($node->safe_psql('upd', q{SELECT count(*) FROM pg_class WHERE relname = 'bpext_buffer_summary'}),
	'0', '1.2 has no summary view');
$node->safe_psql('upd', q{ALTER EXTENSION bpext UPDATE TO '1.3'});
$node->safe_psql('fresh', q{CREATE EXTENSION bpext VERSION '1.3'});
is($node->safe_psql('fresh',
		"SELECT extversion FROM pg_extension WHERE extname = 'bpext'"),
	'1.3', 'a fresh install of 1.3');
my $updated = $node->safe_psql('upd', $surface);
my $fresh = $node->safe_psql('fresh', $surface);
like($fresh, qr/bpext_progress_1_3.*\n.*/, 'the surface lists the 1.3 objects');
is($updated, $fresh, '1.2 -> 1.3: the same objects, definitions and privileges as a fresh 1.3');
is( $node->safe_psql('upd', q{
		SELECT has_table_privilege('pg_monitor', 'bpext_buffer_summary', 'SELECT')
		   AND has_table_privilege('pg_monitor', 'bpext_database_buffers', 'SELECT')
		   AND has_table_privilege('pg_monitor', 'bpext_progress', 'SELECT')
		   AND NOT has_function_privilege('public', 'bpext_buffer_summary_1_3()', 'EXECUTE')
		   AND NOT has_function_privilege('public', 'bpext_progress_1_3()', 'EXECUTE')
		   AND NOT has_table_privilege('public', 'bpext_progress', 'SELECT')}),
	't', '1.3: pg_monitor may read the new views, PUBLIC may not');
is($node->safe_psql('upd', q{SELECT count(*) >= 0 FROM bpext_buffer_summary, bpext_progress}),
	't', 'the updated views read');

$node->stop;
done_testing();

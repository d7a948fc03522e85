
# Copyright (c) 2026, bpext developers

# bpext.adaptive_admission: the tier pauses admission while the pages it
# serves are in the kernel's page cache as data-file pages too (reading
# them from their data files would cost what a tier hit costs), and
# resumes it when they are not.  Driven by what the code observes, never
# by timing: the probes ask the kernel (mincore) about the data-file pages
# of tier hits, and the test decides what the kernel holds: it reads t's
# files before, and drops them from the page cache (dd iflag=nocache)
# when it wants them uncached.
#
#  1. t (three times shared_buffers) is in the page cache and whole in the
#     tier; random lookups hit the tier.  Admission pauses: the state, a
#     count, one LOG line, and nearly all probes found the page cached.
#  2. While paused: the tier serves only its probes (one miss in 128 looks
#     in it, the others read their data files); no page is pushed (lookups
#     on u, which the tier does not hold, evict its pages from shared
#     buffers) nor dual-written (u's pages, dirtied and evicted by a
#     backend); a write to t still invalidates the tier's copy, and t
#     reads back right.
#  3. bpext.adaptive_admission = off resumes admission at once (a count, a
#     LOG line), and u's pages are pushed again.  On again, it pauses again.
#  4. t's data-file pages dropped from the page cache: admission resumes
#     (the probes find them uncached), with a count and a LOG line.
#  5. The 1.3 -> 1.4 update makes what a fresh 1.4 makes: the new
#     bpext_stats columns, and bpext_configuration.map_bytes_per_page as
#     numeric to two decimals.

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

my $nrows = 300000;

my $node = bpext_init_node('main', tier_size => '256MB',
	conf => "bpext.adaptive_admission = on\n");
$node->start;
bpext_setup($node);
bpext_load_table($node, 'postgres', 't', $nrows);
bpext_load_table($node, 'postgres', 'u', 150000);
$node->safe_psql('postgres', 'CHECKPOINT');
my $pages = $node->safe_psql('postgres', "SELECT pg_relation_size('t') / 8192");
cmp_ok($pages, '>', 3 * 2048, "t is over three times shared_buffers ($pages pages)");

# The files of t and its index (every segment).
my $pgdata = $node->data_dir;
my @t_files;
for my $rel ('t', 't_pkey')
{
	my $path = $node->safe_psql('postgres', "SELECT pg_relation_filepath('$rel')");
	push @t_files, grep { -f $_ } ("$pgdata/$path", glob("$pgdata/$path.[0-9]*"));
}

# Read a file through, so that the kernel caches it.
sub read_file_through
{
	my ($file) = @_;
	open(my $fh, '<', $file) or die "could not open $file: $!";
	binmode $fh;
	my $buf;
	1 while read($fh, $buf, 1 << 20);
	close $fh;
	return;
}

# Random point lookups in a table, not checked (bpext_check_lookups
# checks them elsewhere): they keep missing shared buffers.
sub lookups
{
	my ($table, $rows, $seed) = @_;
	# A nested loop over t's index, in one process, that reads each row's
	# heap page (19 counts a NOT NULL column as count(*), which an
	# index-only scan answers without the heap).
	$node->safe_psql('postgres', qq{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SET enable_mergejoin = off; SET enable_hashjoin = off;
		SET max_parallel_workers_per_gather = 0;
		SELECT sum(length(r.v)) FROM generate_series(0, 19999) g
		  JOIN $table r ON r.id = ((g::bigint * 7919 + $seed) % $rows) + 1;
	});
	return;
}

sub paused
{
	return bpext_stat($node, 'admission_paused') ? 1 : 0;
}

# Drop t's files from the kernel's page cache.  The tests' servers run
# with fsync = off, so the pages a checkpoint wrote may still be dirty
# there, and the kernel drops only clean pages: write them out first.
sub drop_t_from_page_cache
{
	system('sync', @t_files) == 0
	  or die "sync could not write out t's files";
	for my $file (@t_files)
	{
		system('dd', "if=$file", 'iflag=nocache', 'count=0', 'status=none') == 0
		  or die "dd could not drop $file from the page cache";
	}
	return;
}

# Lookups in t until admission is paused (want 1) or not (want 0); false
# if that has not happened after timeout_s seconds.  With uncached, t's
# files are dropped from the page cache before each round (a page that
# hint bits dirtied since is written again, into the page cache).
sub lookups_until_paused
{
	my ($want, $timeout_s, $uncached) = @_;
	my $seed = 0;
	my $start = time;
	while (time - $start < $timeout_s)
	{
		return 1 if paused() == $want;
		drop_t_from_page_cache() if $uncached;
		lookups('t', $nrows, $seed++);
	}
	return 0;
}

# Lookups in u, then u's pages dirtied by a backend and evicted by it.
sub push_and_dual_write_u
{
	my ($round) = @_;
	lookups('u', 150000, 11 + $round);
	$node->safe_psql('postgres', "UPDATE u SET ver = ver + 1 WHERE id % 7 = $round % 7");
	bpext_evict_shared_buffers($node);
	lookups('u', 150000, 13 + $round);
	return;
}

# 1. Pause.
read_file_through($_) for @t_files;
$node->safe_psql('postgres', q{
	SELECT bpext_prewarm('t'::regclass), bpext_prewarm('t_pkey'::regclass);
});
my $log_offset = -s $node->logfile;
ok(lookups_until_paused(1, 240), 'admission pauses while the hits are page-cache reads');
my $s = bpext_stats($node);
is($s->{admission_pauses}, 1, 'one pause counted');
cmp_ok($s->{hits_probed}, '>=', 1000, "hits were probed ($s->{hits_probed})");
cmp_ok($s->{hits_probed_cached}, '>=', 0.99 * $s->{hits_probed},
	"nearly every probed page was cached ($s->{hits_probed_cached} of $s->{hits_probed})");
is(bpext_count_in_log($node, qr/bpext paused admission to the tier: [\d.]+% of the pages it served were in the kernel's page cache/, $log_offset),
	1, 'the pause is logged once');

# 2. While paused.
my $before = bpext_stats($node);
push_and_dual_write_u($_) for 1 .. 3;
lookups('t', $nrows, 101);
$node->safe_psql('postgres', q{UPDATE t SET ver = 1, v = bpext_expected_v(id, 1) WHERE id <= 2000; CHECKPOINT});
my $after = bpext_stats($node);
ok(paused(), 'still paused');
is($after->{pages_pushed} - $before->{pages_pushed}, 0, 'paused: no page pushed');
is($after->{pages_dual_written} - $before->{pages_dual_written}, 0,
	'paused: no page dual-written');
my $paused_hits = $after->{hits} - $before->{hits};
my $paused_reads = $after->{data_file_reads} - $before->{data_file_reads};
cmp_ok($paused_hits, '>', 0, 'paused: the tier still serves its probes');
cmp_ok(32 * $paused_hits, '<', $paused_reads,
	"paused: nearly every miss reads its data file ($paused_hits tier hits, $paused_reads data-file reads)");
cmp_ok($after->{hits_probed} - $before->{hits_probed}, '>', 0, 'paused: the probes go on');
cmp_ok($after->{invalidations} - $before->{invalidations}, '>', 0,
	'paused: writes still invalidate');
bpext_check_table($node, 'postgres', 't', rows => $nrows,
	present => 'true', ver => 'CASE WHEN id <= 2000 THEN 1 ELSE 0 END',
	name => 'paused: t after the update');

# 3. The setting off resumes at once; on, it pauses again.
$log_offset = -s $node->logfile;
$node->append_conf('postgresql.conf', "bpext.adaptive_admission = off\n");
$node->reload;
ok($node->poll_query_until('postgres', 'SELECT NOT admission_paused FROM bpext_stats'),
	'off: admission resumes');
is(bpext_stat($node, 'admission_resumes'), 1, 'off: the resume is counted');
is(bpext_count_in_log($node, qr/bpext resumed admission to the tier: bpext.adaptive_admission is off/, $log_offset),
	1, 'off: the resume is logged');
$before = bpext_stats($node);
push_and_dual_write_u($_) for 4 .. 5;
$after = bpext_stats($node);
cmp_ok($after->{pages_pushed} - $before->{pages_pushed}, '>', 100,
	'admitting: pages are pushed again');
cmp_ok($after->{pages_dual_written} - $before->{pages_dual_written}, '>', 0,
	'admitting: pages are dual-written again');

$node->append_conf('postgresql.conf', "bpext.adaptive_admission = on\n");
$node->reload;
$node->safe_psql('postgres', 'CHECKPOINT');
read_file_through($_) for @t_files;
$node->safe_psql('postgres', q{
	SELECT bpext_prewarm('t'::regclass), bpext_prewarm('t_pkey'::regclass);
});
ok(lookups_until_paused(1, 240), 'on again: admission pauses again');
is(bpext_stat($node, 'admission_pauses'), 2, 'two pauses counted');

# 4. The data-file pages leave the page cache: admission resumes.
$node->safe_psql('postgres', 'CHECKPOINT');
$log_offset = -s $node->logfile;
ok(lookups_until_paused(0, 240, 1), 'admission resumes once the hits would read the disk');
$s = bpext_stats($node);
is($s->{admission_resumes}, 2, 'the resume is counted');
is(bpext_count_in_log($node, qr/bpext resumed admission to the tier: [\d.]+% of the pages it served were not in the kernel's page cache/, $log_offset),
	1, 'the resume is logged once');
bpext_check_lookups($node, 'postgres', 't', rows => $nrows, lookups => 20000,
	ver => 'CASE WHEN id <= 2000 THEN 1 ELSE 0 END', name => 'resumed');

# 5. The update path, and the exact bytes per page.
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
$node->safe_psql('upd', q{CREATE EXTENSION bpext VERSION '1.3'});
$node->safe_psql('upd', q{ALTER EXTENSION bpext UPDATE TO '1.4'});
$node->safe_psql('fresh', q{CREATE EXTENSION bpext VERSION '1.4'});
is($node->safe_psql('upd', $surface), $node->safe_psql('fresh', $surface),
	'1.3 -> 1.4: the same objects, definitions and privileges as a fresh 1.4');
is( $node->safe_psql('upd', q{
		SELECT has_table_privilege('pg_monitor', 'bpext_configuration', 'SELECT')
		   AND has_table_privilege('pg_monitor', 'bpext_stats', 'SELECT')
		   AND NOT has_table_privilege('public', 'bpext_configuration', 'SELECT')
		   AND NOT has_function_privilege('public', 'bpext_configuration_1_4()', 'EXECUTE')
		   AND NOT has_function_privilege('public', 'bpext_stats_1_4()', 'EXECUTE')}),
	't', '1.4: pg_monitor may read the views, PUBLIC may not');
is( $node->safe_psql('upd', q{
		SELECT pg_typeof(map_bytes_per_page)::text || ' ' || scale(map_bytes_per_page)
		  FROM bpext_configuration}),
	'numeric 2', 'map_bytes_per_page is numeric, to two decimals');
# The 1.0 to 1.3 functions keep showing whole bytes: the figure cut down.
is( $node->safe_psql('upd', q{
		SELECT floor(c.map_bytes_per_page) = o.map_bytes_per_page
		       AND c.map_bytes_per_page > o.map_bytes_per_page
		  FROM bpext_configuration c, bpext_configuration_1_1() o}),
	't', 'map_bytes_per_page: the exact figure, of which 1.1 shows the whole bytes');

# 1.4 -> 1.5, the latest: bpext_stats gains the reads handed to the reader
# helpers, and the 1.4 function keeps its columns.
$node->safe_psql('postgres', 'CREATE DATABASE upd5; CREATE DATABASE fresh5');
$node->safe_psql('upd5', q{CREATE EXTENSION bpext VERSION '1.4'});
$node->safe_psql('upd5', q{ALTER EXTENSION bpext UPDATE});
$node->safe_psql('fresh5', q{CREATE EXTENSION bpext});
is($node->safe_psql('fresh5',
		"SELECT extversion FROM pg_extension WHERE extname = 'bpext'"),
	'1.5', 'a fresh install is 1.5');
is($node->safe_psql('upd5', $surface), $node->safe_psql('fresh5', $surface),
	'1.4 -> 1.5: the same objects, definitions and privileges as a fresh 1.5');
is( $node->safe_psql('upd5', q{
		SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute
		 WHERE attrelid = 'bpext_stats'::regclass AND attnum > 35}),
	'reads_waiting_for_helper,reads_at_device',
	'1.5: bpext_stats ends with the reads waiting for a helper and at the device');
is( $node->safe_psql('upd5', q{
		SELECT reads_waiting_for_helper >= 0 AND reads_at_device >= 0
		   AND has_table_privilege('pg_monitor', 'bpext_stats', 'SELECT')
		   AND NOT has_function_privilege('public', 'bpext_stats_1_5()', 'EXECUTE')
		  FROM bpext_stats}),
	't', '1.5: the new counters read, pg_monitor may read them, PUBLIC may not');
is($node->safe_psql('upd5', q{SELECT count(*) FROM bpext_stats_1_4()}), '1',
	'1.5: the 1.4 function still answers');

$node->stop;
done_testing();

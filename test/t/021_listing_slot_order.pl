# Copyright (c) 2026, bpext developers

# bpext_buffer_descriptors lists the tier in slot order without the map's
# locks (tier_map_foreach_slot):
#  1. On a quiet tier the listing is exact: one row per allocated page,
#     each slot and each page once, and every listed page reads back as
#     itself (bpext_buffer_descriptors(true)).
#  2. A dead page (its relation truncated, more pages than are dropped
#     one by one, the worker's sweep held off) is in a HASHED slot but is
#     never listed.
#  3. Listings while pages are published, evicted and invalidated by
#     another session never list a slot twice, and never fail.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = bpext_init_node('main', tier_size => '160MB', max_size => '160MB',
	conf => "bpext.scan_workers = 2\nbpext.scan_task_buffers = 64\n");
$node->start;
bpext_setup($node);
# About 8 rows a page: more pages than a truncation drops one by one
# (BPEXT_EAGER_INVALIDATE_BLOCKS, 8192).
$node->safe_psql('postgres', q{
	CREATE TABLE big AS SELECT g AS id, repeat('x', 900) AS pad
	  FROM generate_series(1, 80000) g;
	CREATE TABLE small AS SELECT g AS id FROM generate_series(1, 5000) g;
	CHECKPOINT;
	SELECT bpext_prewarm('big'); SELECT bpext_prewarm('small')});
my $big_pages = $node->safe_psql('postgres',
	q{SELECT pg_relation_size('big') / 8192});
cmp_ok($big_pages, '>', 8192, "big has $big_pages pages");

my $tier_rows = q{
	SELECT * FROM bpext_buffer_descriptors WHERE is_in_bpool_extension};

# 1. Quiet tier.
is( $node->safe_psql('postgres', qq{
		WITH l AS ($tier_rows)
		SELECT (SELECT count(*) FROM l) = (SELECT extension_allocated_pages FROM bpext_stats),
		       (SELECT count(DISTINCT bufferid) FROM l) = (SELECT count(*) FROM l),
		       (SELECT count(*) FROM (SELECT DISTINCT reltablespace, reldatabase,
		                relfilenode, relforknumber, relblocknumber FROM l) x) =
		       (SELECT count(*) FROM l),
		       (SELECT count(*) FROM l WHERE relfilenode = pg_relation_filenode('big')) = $big_pages}),
	't|t|t|t',
	'quiet tier: one row per allocated page, each slot and page once, all of big');
is( $node->safe_psql('postgres', q{
		SELECT count(*) > 0, count(*) FILTER (WHERE page_type IS NULL)
		  FROM bpext_buffer_descriptors(true) WHERE is_in_bpool_extension}),
	't|0', 'every listed tier page reads back as itself');

# 2. Dead pages in HASHED slots.  With the worker stopped, nothing sweeps
# them: they still count as allocated.
my $old_node = $node->safe_psql('postgres',
	q{SELECT pg_relation_filenode('big')});
my $worker = bpext_worker_pid($node);
ok($worker, 'the bpext worker is running');
bpext_stop_worker($node);
$node->safe_psql('postgres', q{TRUNCATE big});
my ($allocated, $listed, $old_rows, $summary_old) = split /\|/,
  $node->safe_psql('postgres', qq{
	SELECT (SELECT extension_allocated_pages FROM bpext_stats),
	       (SELECT count(*) FROM ($tier_rows) l),
	       (SELECT count(*) FROM bpext_buffer_descriptors WHERE relfilenode = $old_node),
	       (SELECT count(*) FROM bpext_buffer_summary WHERE relfilenode = $old_node)});
kill 'CONT', $worker;
cmp_ok($allocated - $listed, '>=', $big_pages,
	"the truncated table's $big_pages pages are still in the map, dead");
is("$old_rows,$summary_old", '0,0',
	'no dead page is listed (nor counted by the summary)');

# 3. Listings under concurrent publication, eviction and invalidation.
$node->safe_psql('postgres', q{
	INSERT INTO big SELECT g, repeat('y', 900) FROM generate_series(1, 40000) g;
	CHECKPOINT});
my $bg = $node->background_psql('postgres');
$bg->query_until(qr/started/, q{
	\echo started
	DO $$
	BEGIN
		FOR i IN 1..40 LOOP
			PERFORM bpext_prewarm('big');
			PERFORM bpext_prewarm('small');
			UPDATE small SET id = id + 1 WHERE id % 7 = i % 7;
			COMMIT;
			TRUNCATE small;
			INSERT INTO small SELECT g FROM generate_series(1, 5000) g;
			COMMIT;
			IF i % 10 = 0 THEN
				PERFORM bpext_drop_clean_buffers();
			END IF;
			COMMIT;
		END LOOP;
	END $$;
});
my $bad = 0;
my $runs = 0;
for my $i (1 .. 15)
{
	my $dups = $node->safe_psql('postgres', qq{
		SELECT count(*) - count(DISTINCT bufferid) FROM ($tier_rows) l});
	$bad++ if $dups ne '0';
	$runs++;
}
$bg->quit;
is($bad, 0, "$runs listings under concurrent change never list a slot twice");
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'the server is still up');
ok(!$node->log_contains('TRAP|server process .* was terminated'),
	'no backend crashed');

$node->stop;
done_testing();


# Copyright (c) 2026, bpext developers

# The page index when its groups of buckets fill up (tier_map_index.c):
# with bpext.test_index_groups = 1 the index has room for 6144 pages
# (128 groups of 4 buckets of 12 entries) in a tier of 8191 slots, so
# that most buckets keep entries away from home, entries move back home
# as others leave, and publications into a full group are refused.
#  1. Storing more pages than the index has room for: the index never
#     holds more than its room, and every page not stored is counted
#     (admission_skips for a full group).
#  2. Every page the tier lists is found by a lookup: reading every block
#     of the table through smgr is served by the tier for at least as
#     many blocks as it holds, and each block served is byte for byte the
#     data file's.
#  3. After writes to part of the table (invalidations removing entries,
#     at home and away, and moving others back) and a second prewarm, the
#     same holds, and the table reads back right.
#  4. A dropped database's pages are swept (dead entries unlinked piece by
#     piece): the map then counts only the pages it lists.
#  5. A warm restart with the same index loads every page that was held.
#  6. bpext_drop_clean_buffers empties the index: nothing listed, nothing
#     counted, nothing served.
# Needs a test-hook build (bpext.test_index_groups, bpext_test_read_block);
# skipped otherwise.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# bpext_evict_shared_buffers reads a relation through pg_prewarm.
bpext_needs_contrib('pg_prewarm');

my $room = 128 * 4 * 12;

my $node = bpext_init_node('main', tier_size => '64MB', max_size => '64MB',
	conf => "bpext.test_index_groups = 1\n");
$node->start;
bpext_setup($node);
my ($ret) = $node->psql('postgres',
	slurp_file("$FindBin::RealBin/../sql/bpext_test.sql"));
if ($ret != 0
	|| $node->safe_psql('postgres',
		"SELECT current_setting('bpext.test_index_groups', true)") ne '1')
{
	$node->stop;
	plan skip_all => 'bpext is not a BPEXT_TEST_HOOKS=1 build';
}

# About 7000 pages of t: more than the index's room, less than the tier.
my $nrows = 245000;
bpext_load_table($node, 'postgres', 't', $nrows);
$node->safe_psql('postgres', q{
	CHECKPOINT; SELECT bpext_drop_clean_buffers(); SELECT bpext_stats_reset()});
my $pages = $node->safe_psql('postgres',
	"SELECT pg_relation_size('t') / 8192");
cmp_ok($pages, '>', $room, "t has $pages pages, more than the index's room ($room)");

sub held
{
	my ($rel) = @_;
	my $where = defined $rel
	  ? "AND relfilenode = pg_relation_filenode('$rel') AND relforknumber = 0"
	  : '';
	return $node->safe_psql('postgres', qq{
		SELECT count(*) FROM bpext_buffer_descriptors(false)
		 WHERE is_in_bpool_extension $where});
}

# Every block of t read through smgr (not shared buffers) must be the data
# file's; the tier must serve at least the blocks it holds.
sub read_every_block
{
	my ($name) = @_;
	my $held = held('t');
	my $before = bpext_stat($node, 'extension_page_reads');
	my $wrong = $node->safe_psql('postgres', qq{
		SELECT count(*) FROM generate_series(0, pg_relation_size('t') / 8192 - 1) b
		 WHERE bpext_test_read_block('t', b) IS DISTINCT FROM
		       pg_read_binary_file(pg_relation_filepath('t'), b * 8192, 8192)});
	my $served = bpext_stat($node, 'extension_page_reads') - $before;
	is($wrong, 0, "$name: every block of t read through smgr is the data file's");
	cmp_ok($served, '>=', $held,
		"$name: the tier served $served blocks, at least the $held of t it holds");
	return $held;
}

# 1. More pages than the index has room for.
$node->safe_psql('postgres', "SELECT bpext_prewarm('t')");
my $listed = held();
cmp_ok($listed, '<=', $room, "the tier lists $listed pages, no more than the index's room");
my $held = held('t');
cmp_ok($held, '>', $room / 2, "the tier holds $held pages of t");
my $stats = bpext_stats($node);
my $refused = $stats->{admission_skips} + $stats->{publish_races};
cmp_ok($refused, '>=', $pages - $held,
	"every page of t not held was refused and counted ($refused)");

# 2. Every page held is found.
read_every_block('crowded');

# 3. Writes to the first 2000 pages (ids 1 to 70000), checkpointed: their
# copies go, others move back home, new images may be stored; then the
# rest is stored again where there is room.
$node->safe_psql('postgres', q{
	UPDATE t SET ver = 1, v = bpext_expected_v(id, 1)
	 WHERE id <= 70000 AND id % 3 = 0;
	VACUUM t;
	CHECKPOINT});
my $ver = 'CASE WHEN id <= 70000 AND id % 3 = 0 THEN 1 ELSE 0 END';
read_every_block('after writes');
$node->safe_psql('postgres', "SELECT bpext_prewarm('t')");
read_every_block('prewarmed again');
bpext_evict_shared_buffers($node);
bpext_check_table($node, 'postgres', 't', rows => $nrows, ver => $ver,
	scan => 'index', name => 'after writes');

# 4. A dropped database: its pages are dead until the sweep unlinks them.
$node->safe_psql('postgres', 'CREATE DATABASE gone');
bpext_create_helpers($node, 'gone');
bpext_load_table($node, 'gone', 'g', 35000);
$node->safe_psql('gone', "CREATE EXTENSION bpext; CHECKPOINT; SELECT bpext_prewarm('g')");
$node->safe_psql('postgres', 'DROP DATABASE gone');
ok( $node->poll_query_until('postgres', qq{
		SELECT (SELECT extension_allocated_pages FROM bpext_stats) =
		       (SELECT count(*) FROM bpext_buffer_descriptors(false)
		         WHERE is_in_bpool_extension)}),
	'the dropped database\'s pages are swept: the map counts only what it lists');
read_every_block('after the sweep');

# 5. A warm restart, same index: every page of t held is loaded again.
$node->safe_psql('postgres', 'CHECKPOINT');
$held = held('t');
my $offset = -s $node->logfile;
$node->restart;
ok(bpext_wait_for_state($node, 'enabled'), 'tier enabled after the restart');
ok( $node->wait_for_log(
		qr/bpext: warm start: \d+ of \d+ saved tier pages reused/, $offset),
	'warm start logged');
is(held('t'), $held, "warm restart: all $held pages of t held before are held again");
read_every_block('after the warm restart');

# 6. Emptied.
$node->safe_psql('postgres', 'SELECT bpext_drop_clean_buffers()');
is(bpext_stat($node, 'extension_allocated_pages'), 0, 'emptied: no page counted');
is(held(), 0, 'emptied: no page listed');
my $before = bpext_stat($node, 'extension_page_reads');
read_every_block('emptied');
is(bpext_stat($node, 'extension_page_reads') - $before, 0, 'emptied: nothing served');

$node->stop;
done_testing();

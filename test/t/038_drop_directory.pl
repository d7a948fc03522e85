
# Copyright (c) 2026, bpext developers

# bpext_drop_clean_buffers and the slot directory (slot_directory.c,
# "Emptying the whole map").  A drop of the whole map gives the directory
# a new id instead of having the worker write every chunk it emptied:
#  1. After the drop, the bpext worker and its helpers write far less than
#     the chunks that held the dropped pages (a build that rewrites them
#     writes all of them, in the worker's next rounds).
#  2. Pages stored after the drop are in the directory: a clean restart
#     reuses them and serves them.  Of the dropped table, whose rows
#     changed after the drop, it reuses at most the pages stored since
#     (pushed from shared buffers), and every row reads as changed.
#  3. A drop followed at once by a clean stop (the worker or the
#     postmaster writes what is left) starts warm without any page it
#     dropped, and every row reads right.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

# bpext_evict_shared_buffers reads a relation through pg_prewarm.
bpext_needs_contrib('pg_prewarm');

my $node = bpext_init_node('main', tier_size => '128MB', max_size => '128MB',
	shared_buffers => '16MB');
$node->start;
bpext_setup($node);
bpext_load_table($node, 'postgres', 'a', 400000);
bpext_load_table($node, 'postgres', 'b', 20000);

sub tier_pages_of
{
	my ($table) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT count(*) FROM bpext_buffer_descriptors
		 WHERE is_in_bpool_extension
		   AND relfilenode IN (pg_relation_filenode('$table'),
		                       pg_relation_filenode('${table}_pkey'))});
}

# -------------------------------------------------- 1. the drop's writes
$node->safe_psql('postgres',
	"CHECKPOINT; SELECT bpext_prewarm('a'), bpext_prewarm('a_pkey')");
my $held = bpext_config($node)->{allocated_pages};
my $chunk_bytes = 8192 * int($held / 511);
cmp_ok($held, '>=', 10000, "the tier holds the table ($held pages)");
my $before = bpext_wait_for_quiet_worker($node);
my $dropped = $node->safe_psql('postgres', 'SELECT bpext_drop_clean_buffers()');
# No query until the worker is done: a catalog page a query reads could be
# stored, and its chunk written.
my $written = bpext_wait_for_quiet_worker($node) - $before;
cmp_ok($dropped, '>=', $held, 'the drop dropped every tier page');
is(bpext_config($node)->{allocated_pages}, 0, 'the tier is empty');
cmp_ok($written, '<', $chunk_bytes / 2,
	"after the drop the worker wrote $written bytes, not the "
	  . "$chunk_bytes bytes of the chunks that held the pages");

# -------------------------------------------------- 2. pages stored after it
my $a_ver = 'CASE WHEN id <= 2000 THEN 1 ELSE 0 END';
$node->safe_psql('postgres', q{
	UPDATE a SET ver = 1, v = bpext_expected_v(id, 1) WHERE id <= 2000;
	CHECKPOINT;
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM a WHERE id <= 20000;});
bpext_evict_shared_buffers($node);
$node->safe_psql('postgres',
	"SELECT bpext_prewarm('b'), bpext_prewarm('b_pkey'); CHECKPOINT;");
bpext_wait_for_quiet_worker($node);
my $b_pages = tier_pages_of('b');
my $a_pages = tier_pages_of('a');
cmp_ok($b_pages, '>', 50, "b is in the tier ($b_pages pages)");
note("pages of a pushed since the drop: $a_pages");
my $offset = -s $node->logfile;
$node->restart;
ok(bpext_wait_for_state($node, 'enabled'), 'tier enabled after the restart');
ok( $node->wait_for_log(
		qr/bpext: warm start: \d+ of \d+ saved tier pages reused/,
		$offset),
	'the saved map was loaded');
my $c = bpext_config($node);
is($c->{start_mode}, 'warm', 'warm start');
cmp_ok($c->{pages_reused}, '>=', $b_pages,
	"the pages stored after the drop were reused ($c->{pages_reused})");
cmp_ok(tier_pages_of('a'), '<=', $a_pages,
	'of a, only pages stored since the drop came back');
my $reads = bpext_stat($node, 'extension_page_reads');
bpext_check_table($node, 'postgres', 'b', rows => 20000, scan => 'index',
	name => 'b after the restart');
cmp_ok(bpext_stat($node, 'extension_page_reads') - $reads, '>', 0,
	'and were served from the tier');
bpext_check_table($node, 'postgres', 'a', rows => 400000, ver => $a_ver,
	scan => 'index', name => 'a after the restart');

# -------------------------------------------------- 3. a drop, then a stop
# (A checkpoint first: no page of a may be written, and stored, after the
# drop.)
$node->safe_psql('postgres',
	"CHECKPOINT; SELECT bpext_prewarm('a'), bpext_prewarm('a_pkey')");
$node->safe_psql('postgres', 'SELECT bpext_drop_clean_buffers()');
$offset = -s $node->logfile;
$node->restart;
ok(bpext_wait_for_state($node, 'enabled'), 'tier enabled after the second restart');
ok( $node->wait_for_log(
		qr/bpext: warm start: \d+ of \d+ saved tier pages reused/, $offset),
	'the saved map was loaded');
is(bpext_config($node)->{start_mode}, 'warm', 'warm start');
is(tier_pages_of('a'), 0, 'no dropped page came back after a drop and a stop');
is(tier_pages_of('b'), 0, 'nor any page held before the drop');
bpext_check_table($node, 'postgres', 'a', rows => 400000, ver => $a_ver,
	scan => 'index', name => 'a after the second restart');
is(bpext_stat($node, 'crc_failures'), 0, 'no checksum failure');

$node->stop;
done_testing();


# Copyright (c) 2026, bpext developers

# PostgreSQL 18: a tier read never waits while data-file reads of the same
# backend are staged but not submitted.
#
# A sequential scan's read stream stages its data-file reads in batch mode
# and submits them when it has started every read it wants; a run of tier
# hits among them is read synchronously by bpext_startreadv.  If the tier
# read is slow (here held up for 20 s by the fault injector's read_sleep,
# limited to the scanning backend), a second backend that needs a block
# the first one staged waits for it to submit, that is for the whole tier
# read.  bpext submits what is staged before it reads from the tier.
#
# Table s is laid out in runs of 4 blocks, alternately read from the data
# file (misses) and held by the tier (hits), so that every combined read
# of io_combine_limit = 16 blocks is split into a data-file read followed
# by a tier read.  Scanner A (io_method = worker, no synchronized start)
# is held in the tier read of the first block of one hit run; the second
# backend B then reads, by TID, every block of the 16 miss blocks before
# it.  B must finish while A is still held in that tier read.  A tier read
# shares its batch with a staged data-file read only while the stream's
# look-ahead distance grows (then one call starts several reads; once it
# stops growing, each call starts one), which depends on how the stream
# ramped up, so the test holds, in turn, the first read of each of the
# first hit runs after the first; with staged reads left waiting, at
# least one round keeps B waiting for the whole tier read.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $probe = PostgreSQL::Test::Cluster->new('probe');
plan skip_all => 'asynchronous I/O is PostgreSQL 18 and later'
  if $probe->pg_version < 18;
bpext_needs_contrib('pg_buffercache');

my $so = bpext_build_fault_injector();
plan skip_all => 'the fault injector could not be built' unless $so;

my $ssd = PostgreSQL::Test::Utils::tempdir('ssd');
my $node = bpext_init_node('staged',
	tier_size => '64MB',
	tier_path => "$ssd/bpext.tier",
	shared_buffers => '64MB',    # pins enough for a look-ahead of 32 blocks and more
	conf => qq{
io_method = worker
io_combine_limit = 16
bpext.io_timeout = 0    # the tier stays on through the 20 s reads held
});
my $ctl = PostgreSQL::Test::Utils::tempdir();
bpext_start_with_faults($node, $so, "$ssd/", $ctl);
bpext_setup($node);
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_buffercache;
	CREATE TABLE s AS
	  SELECT g AS id, repeat('s', 200) AS pad FROM generate_series(1, 15000) g;
	VACUUM s;
	CHECKPOINT;
});
my $pages = $node->safe_psql('postgres', "SELECT pg_relation_size('s') / 8192");
cmp_ok($pages, '>', 200, "s has $pages blocks");

sub is_hit { my ($blk) = @_; return int($blk / 4) % 2 == 1; }

# A TID scan of (b,1) for each block b: reads those blocks and no other.
sub tids
{
	my @blocks = @_;
	return "ARRAY[" . join(',', map { "'($_,1)'" } @blocks) . "]::tid[]";
}

sub set_admission
{
	my ($value) = @_;
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET bpext.admission = '$value'; SELECT pg_reload_conf();");
	$node->poll_query_until('postgres', 'SHOW bpext.admission', $value)
	  or die "bpext.admission did not become $value";
	return;
}

# The tier holds the hit blocks of s and nothing else of it; shared
# buffers hold none of s.
sub lay_out_tier
{
	my @hits = grep { is_hit($_) } 0 .. $pages - 1;

	# Out of shared buffers first, so that no page of s can be pushed into
	# the tier once it is emptied.
	$node->safe_psql('postgres', "SELECT pg_buffercache_evict_relation('s')");
	$node->safe_psql('postgres', 'SELECT bpext_drop_clean_buffers()');
	set_admission('read');
	is(join(',', bpext_admit_by_reading($node, 's', @hits)), '',
		'the hit blocks are read, and so admitted');
	set_admission('evict');
	is( $node->safe_psql('postgres', q{
			SELECT string_agg(DISTINCT relblocknumber::text, ',' ORDER BY relblocknumber::text)
			  FROM bpext_buffer_descriptors(false)
			 WHERE is_in_bpool_extension AND relfilenode = pg_relation_filenode('s')
			   AND relforknumber = 0}),
		join(',', sort @hits), 'the tier holds the hit blocks of s, and no other');
	return;
}

my $sum = 15000 * 15001 / 2;
for my $run (1 .. 4)
{
	# A's tier reads are the hit blocks in order: 4 per hit run.
	my $unhurt = 4 * $run;
	my $held = 8 * $run + 4;
	my $name = "tier read of block $held held";
	lay_out_tier();

	my $reader = $node->background_psql('postgres');
	my $a_pid = $reader->query_safe(q{
		SET synchronize_seqscans = off;
		SET max_parallel_workers_per_gather = 0;
		SET enable_indexscan = off; SET enable_bitmapscan = off;
		SELECT pg_backend_pid();
	});
	# The catalogs the scan needs, read now rather than under the fault.
	$reader->query_safe(q{EXPLAIN SELECT count(*) || ',' || sum(id) FROM s});
	my $before = bpext_stats($node);
	bpext_fault($node, 'read_sleep', 1, "20000 $unhurt $a_pid");
	$reader->query_until(qr/scanning/, q{
		\echo scanning
		SELECT count(*) || ',' || sum(id) FROM s;
	});
	ok(bpext_wait_for_fault_pid($node, 'read_sleep', $a_pid),
		"$name: the scan is held in a tier read");
	bpext_fault($node, 'read_sleep', 0);

	# B: the miss blocks before the held one, some of which A may have
	# staged.
	my @misses = grep { !is_hit($_) } ($held < 32 ? 0 : $held - 32) .. $held - 1;
	is($node->safe_psql('postgres',
			'SET enable_seqscan = off; SELECT count(*) FROM s WHERE ctid = ANY (' . tids(@misses) . ')'),
		scalar(@misses), "$name: B reads the miss blocks before it");

	# Still held: A waits in the tier read, and has no buffer for a block
	# past the combined read that holds it (16 blocks at most).
	is( $node->safe_psql('postgres', qq{
			SELECT (SELECT wait_event FROM pg_stat_activity WHERE pid = $a_pid)
			       || ',' || (SELECT count(*) FROM pg_buffercache
			                   WHERE relfilenode = pg_relation_filenode('s')
			                     AND relblocknumber >= $held + 16)}),
		'BpextTierRead,0',
		"$name: B finished while A was still held in its tier read");

	my $out = $reader->query_safe(q{SELECT 'done'});
	like($out, qr/^15000,$sum\n.*done$/s, "$name: A's scan reads every row");
	$reader->quit;
	my $after = bpext_stats($node);
	cmp_ok($after->{extension_page_reads} - $before->{extension_page_reads},
		'>=', $unhurt + 1, "$name: A's hits were served by the tier");
	is($after->{crc_failures} + $after->{io_errors}, 0, "$name: no tier error");
}

$node->stop;
done_testing();

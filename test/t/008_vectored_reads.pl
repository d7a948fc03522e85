
# Copyright (c) 2026, bpext developers

# PostgreSQL 17's vectored reads: a read stream hands the storage manager
# up to io_combine_limit blocks in one smgr_readv call, and bpext must serve
# the blocks the tier holds and read each run of the others from the data
# file with one call, with the right contents in every buffer.
#
# A table of about 250 pages is put in a state where, in every 16-block window, blocks 0, 5, 6 and 15 (the first block, a
# run of two in the middle and the last block) are in the tier and the
# others only in the data file, and none is in shared buffers.  A sequential
# scan with io_combine_limit = 16 then reads it in combined reads.  The tier
# must serve exactly its blocks, the data file the others in fewer calls
# than blocks, and the scan must see every row of every page exactly.  The
# same is checked with the tier holding every block but the first and last
# of each window, and holding none.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use JSON::PP;

my $node = bpext_init_node('main', tier_size => '64MB', conf => q{
bpext.admission = 'read'
io_combine_limit = 16
});

plan skip_all => 'vectored storage-manager reads are PostgreSQL 17 and later'
  if $node->pg_version < 17;
bpext_needs_contrib('pg_buffercache');

$node->start;
bpext_setup($node);
$node->safe_psql('postgres', 'CREATE EXTENSION pg_buffercache');

# A table of about 250 pages.
my $nrows = 5000;
$node->safe_psql('postgres', qq{
	CREATE TABLE vt (id int, pad text) WITH (autovacuum_enabled = off);
	INSERT INTO vt SELECT i, repeat(md5(i::text), 11)
	  FROM generate_series(1, $nrows) i;
	VACUUM vt;
	CHECKPOINT;
});
my $pages = $node->safe_psql('postgres', "SELECT pg_relation_size('vt') / 8192");
cmp_ok($pages, '>=', 200, "the table has $pages pages");

my $expected = $node->safe_psql('postgres', qq{
	SELECT md5(string_agg(i::text || repeat(md5(i::text), 11), ',' ORDER BY i))
	  FROM generate_series(1, $nrows) i});

# Put exactly the given blocks in the tier and nothing of vt in shared
# buffers: empty both, then read each block alone (read admission stores
# it), and evict vt's buffers from shared buffers.
sub stage
{
	my @blocks = @_;

	$node->safe_psql('postgres', 'SELECT bpext_drop_clean_buffers()');
	my @missing = bpext_admit_by_reading($node, 'vt', @blocks);
	$node->safe_psql('postgres', q{
		SELECT count(pg_buffercache_evict(bufferid)) FROM pg_buffercache
		 WHERE relfilenode = pg_relation_filenode('vt')});
	is( $node->safe_psql(
			'postgres', q{
		SELECT count(*) FROM pg_buffercache
		 WHERE relfilenode = pg_relation_filenode('vt')}),
		0,
		'no page of the table is in shared buffers');
	is(scalar(@missing), 0, 'read admission stored every block read');
	is( $node->safe_psql(
			'postgres', q{
		SELECT count(*) FROM bpext_buffer_descriptors
		 WHERE is_in_bpool_extension AND relfilenode = pg_relation_filenode('vt')}),
		scalar(@blocks),
		scalar(@blocks) . " pages of the table are in the tier");
	return;
}

# Scan vt with combined reads; check what came from where, and the rows.
# One session plans the scan first and reads the counters before and
# after it, so that the only reads in between are the scan's own.
sub scan_and_check
{
	my ($name, $tier_blocks) = @_;
	my $scan = q{SELECT md5(string_agg(id::text || pad, ',' ORDER BY id)) FROM vt};
	my $out = $node->safe_psql('postgres', qq{
		SET io_combine_limit = 16;
		\\o /dev/null
		EXPLAIN $scan;
		\\o
		SELECT row_to_json(s) FROM bpext_stats s;
		$scan;
		SELECT row_to_json(s) FROM bpext_stats s;
	});
	my ($before_json, $got, $after_json) = split /\n/, $out;
	my $before = JSON::PP::decode_json($before_json);
	my $after = JSON::PP::decode_json($after_json);
	my %d = map { $_ => $after->{$_} - $before->{$_} }
	  qw(extension_page_reads data_file_reads data_file_read_calls
	  crc_failures io_errors);

	is($got, $expected, "$name: every row of every page is right");
	is($d{extension_page_reads}, $tier_blocks,
		"$name: the tier served its $tier_blocks blocks");
	is($d{data_file_reads}, $pages - $tier_blocks,
		"$name: the data file served the other " . ($pages - $tier_blocks));
	is($d{crc_failures} + $d{io_errors}, 0, "$name: no tier errors");
	return \%d;
}

# Runs of consecutive blocks not in the given set.
sub miss_runs
{
	my %hit = map { $_ => 1 } @_;
	my $runs = 0;
	for my $b (0 .. $pages - 1)
	{
		$runs++ if !$hit{$b} && ($b == 0 || $hit{ $b - 1 });
	}
	return $runs;
}

# Nothing in the tier: plain combined reads, as the read stream issues
# them; how many it takes is the baseline for the mixed cases.
stage();
my $plain = scan_and_check('nothing in the tier', 0);
my $stream_reads = $plain->{data_file_read_calls};
cmp_ok($stream_reads, '<', $pages / 2,
	"the read stream combines blocks into larger reads ($stream_reads for $pages)");

# With hits in the tier, each read the stream issues becomes one data-file
# read per run of misses in it: at least one per run (no read spans a tier
# hit), at most one per run plus one per read the stream split a run at.
sub check_runs
{
	my ($name, $d, @hits) = @_;
	my $runs = miss_runs(@hits);
	my $calls = $d->{data_file_read_calls};

	cmp_ok($calls, '>=', $runs,
		"$name: no data-file read spans a block the tier served ($calls calls, $runs runs)");
	cmp_ok($calls, '<=', $runs + $stream_reads,
		"$name: one data-file read per run of misses in each combined read");
	cmp_ok($calls, '<', $d->{data_file_reads},
		"$name: runs of misses are read with one call, not one call per block");
	return;
}

# Hits at the first and last block of each window and a run of two in the
# middle; misses in two runs per window.
my @mixed = grep { my $o = $_ % 16; $o == 0 || $o == 5 || $o == 6 || $o == 15 }
  0 .. $pages - 1;
stage(@mixed);
check_runs('hits at both ends and in the middle',
	scan_and_check('hits at both ends and in the middle', scalar(@mixed)),
	@mixed);

# Misses at both ends of each window, hits in between.
my @inner = grep { my $o = $_ % 16; $o != 0 && $o != 15 } 0 .. $pages - 1;
stage(@inner);
check_runs('misses at both ends',
	scan_and_check('misses at both ends', scalar(@inner)), @inner);

# Every other block.
my @alternate = grep { $_ % 2 == 0 } 0 .. $pages - 1;
stage(@alternate);
my $d = scan_and_check('every other block', scalar(@alternate));
is($d->{data_file_read_calls}, $d->{data_file_reads},
	'every other block: each miss alone is one data-file read');

# Everything in the tier: no data-file read at all.
stage(0 .. $pages - 1);
$d = scan_and_check('everything in the tier', $pages);
is($d->{data_file_read_calls}, 0, 'everything in the tier: no data-file read');

my $cfg = bpext_config($node);
is($cfg->{state}, 5, 'tier still enabled');
ok(!$node->log_contains(qr/bpext tier disabled|bpext could not/),
	'no bpext warnings in the log');

$node->stop;
done_testing();


# Copyright (c) 2026, bpext developers

# Reads served from the tier return exactly what the data files hold.
#
# shared_buffers is 16MB and the tier 256MB; a ~70MB table with its index is
# read by random point lookups and by sequential and index scans, so most
# reads miss shared buffers and are served by the tier.  Every query's
# result is compared with what the table must hold, computed independently
# from generate_series.  Then the table is updated (with and without a
# checkpoint before the reads) and truncated and refilled, and read again
# under eviction pressure.  Data checksums are on, so a tier page whose
# checksum was not recomputed would fail verification in the buffer manager.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

bpext_needs_contrib('pg_prewarm');

my $nrows = 300000;
my $lookups = 8000;

my $node = bpext_init_node('main', tier_size => '256MB', checksums => 1);
$node->start;
bpext_setup($node);

my $cfg = bpext_config($node);
is($cfg->{state}, 5, 'tier enabled at start');
is($cfg->{current_size_in_kb}, 256 * 1024, 'tier size is bpext.size');

bpext_load_table($node, 'postgres', 't', $nrows);
my $heap_pages = $node->safe_psql('postgres',
	"SELECT pg_relation_size('t') / 8192");
cmp_ok($heap_pages, '>', 8000, "test table is about 70MB ($heap_pages pages)");

# The pages the loading backend wrote out to make room for more reach the
# tier through the store queue (dual write; the checkpointer's writes are
# not queued): the worker stores them a moment later, and a page that
# finds the queue full is not stored (admission_skips).  How many get
# there is the machine's doing; that the dual write stores pages is the
# code's.
$node->safe_psql('postgres', 'CHECKPOINT');
ok( $node->poll_query_until('postgres',
		'SELECT pages_dual_written > 0 FROM bpext_stats'),
	'pages the loading backend wrote out are stored in the tier (dual write)');
cmp_ok(bpext_config($node)->{allocated_pages},
	'>', 0, 'the tier holds pages');

# Read the table several ways; every result must be exact, and the tier
# must have served thousands of pages.
sub read_everything
{
	my ($phase, $rows, $ver, $seed) = @_;

	bpext_evict_shared_buffers($node);
	my $before = bpext_stats($node);
	my $started = time;
	bpext_check_lookups($node, 'postgres', 't',
		rows => $rows, ver => $ver, lookups => $lookups,
		seed => $seed, name => "$phase, first pass");
	bpext_check_lookups($node, 'postgres', 't',
		rows => $rows, ver => $ver, lookups => $lookups,
		seed => $seed + 1, name => "$phase, second pass");
	bpext_check_table($node, 'postgres', 't',
		rows => $rows, ver => $ver, scan => 'seq', name => $phase);
	bpext_check_table($node, 'postgres', 't',
		rows => $rows, ver => $ver, scan => 'index', name => $phase);
	my $after = bpext_stats($node);
	my $elapsed_ms = (time - $started) * 1000;

	my $reads = $after->{extension_page_reads} - $before->{extension_page_reads};
	cmp_ok($reads, '>=', 2000,
		"$phase: the tier served thousands of pages ($reads)");
	is($after->{hits} - $before->{hits}, $reads,
		"$phase: every tier hit was served");
	is($after->{crc_failures}, 0, "$phase: no checksum failures");
	is($after->{io_errors}, 0, "$phase: no I/O errors");

	# One backend read at a time (autovacuum is off), so the time counted
	# in tier reads is more than nothing and less than the phase took.
	my $read_ms = $after->{read_time_ms} - $before->{read_time_ms};
	ok($read_ms > 0 && $read_ms < $elapsed_ms,
		sprintf('%s: tier read time %.1f ms, within the phase\'s %.0f ms',
			$phase, $read_ms, $elapsed_ms));

	# The last scan filled shared buffers with pages of t; each says how
	# long the read that brought it in took, and no read took longer than
	# the whole phase.
	my ($timed, $longest_us) = split /\|/, $node->safe_psql('postgres', q{
		SELECT count(read_microsec), coalesce(max(read_microsec), 0)
		  FROM bpext_buffer_descriptors
		 WHERE NOT is_in_bpool_extension
		   AND allocation_unit_id = pg_relation_filenode('t')});
	cmp_ok($timed, '>=', 100,
		"$phase: shared buffers of t carry read_microsec ($timed)");
	cmp_ok($longest_us, '<', $elapsed_ms * 1000,
		"$phase: the longest read_microsec ($longest_us) within the phase");
	return;
}

read_everything('initial load', $nrows, '0', 11);

# UPDATE then CHECKPOINT: the new images reach the data files and the tier
# (dual write); the old copies must never be served again.
$node->safe_psql('postgres', q{
	UPDATE t SET ver = 1, v = bpext_expected_v(id, 1) WHERE id % 10 = 0;
});
my $ver1 = 'CASE WHEN id % 10 = 0 THEN 1 ELSE 0 END';
bpext_check_table($node, 'postgres', 't',
	rows => $nrows, ver => $ver1, name => 'right after update');
$node->safe_psql('postgres', 'CHECKPOINT');
read_everything('after update and checkpoint', $nrows, $ver1, 21);

# UPDATE without a checkpoint: the dirty pages are written when eviction
# takes them.
$node->safe_psql('postgres', q{
	UPDATE t SET ver = ver + 2, v = bpext_expected_v(id, ver + 2)
	 WHERE id % 17 = 0;
});
my $ver2 = "$ver1 + CASE WHEN id % 17 = 0 THEN 2 ELSE 0 END";
read_everything('after update without checkpoint', $nrows, $ver2, 31);

# TRUNCATE and refill with fewer rows of another version.
my $nrows2 = 150000;
$node->safe_psql('postgres', qq{
	TRUNCATE t;
	INSERT INTO t SELECT i, 7, bpext_expected_v(i, 7)
	  FROM generate_series(1, $nrows2) i;
	VACUUM t;
	CHECKPOINT;
});
read_everything('after truncate and refill', $nrows2, '7', 41);

my $final = bpext_config($node);
is($final->{state}, 5, 'tier still enabled');
is($final->{last_error}, undef, 'no tier error recorded');
ok(!$node->log_contains(qr/bpext tier disabled|bpext could not/),
	'no bpext warnings in the log');

$node->stop;
done_testing();

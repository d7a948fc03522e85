
# Copyright (c) 2026, bpext developers

# The tier page CRC (src/page_crc.c): every fast way this CPU has of
# computing it (AVX-512 folding, three crc32 streams) gives PostgreSQL's
# CRC-32C to the bit, on pages of pseudo-random bytes after keys of every
# length up to 63 bytes; and the way in use is the fastest of them (the
# postmaster checked it before choosing it).  A different value would make
# every tier file and saved map written before unreadable, and a wrong one
# would fail every read.  Needs a test-hook build (bpext_test_page_crc);
# skipped otherwise.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

bpext_needs_contrib('pg_prewarm');

my $node = bpext_init_node('main', tier_size => '32MB');
$node->start;
bpext_setup($node);
my ($ret, $out, $err) = $node->psql('postgres',
	slurp_file("$FindBin::RealBin/../sql/bpext_test.sql"));
if ($ret != 0)
{
	$node->stop;
	plan skip_all => 'bpext is not a BPEXT_TEST_HOOKS=1 build';
}

my $n = 3000;
my $report = $node->safe_psql('postgres', "SELECT bpext_test_page_crc($n)");
diag("page CRC: $report");
like($report, qr/in use: (fold|streams|postgres)$/, 'a way of computing the CRC is in use');
my ($in_use) = $report =~ /in use: (\w+)$/;
my %matched;
while ($report =~ /(fold|streams) (\d+)\/(\d+)/g)
{
	$matched{$1} = $2;
	is($2, $3, "$1: PostgreSQL's CRC-32C on all $3 pages");
}
if (exists $matched{fold})
{
	is($in_use, 'fold', 'the CPU folds with AVX-512: folding is in use');
}
elsif (exists $matched{streams})
{
	is($in_use, 'streams', 'the CPU has SSE 4.2 and no AVX-512 folding: three streams are in use');
}
else
{
	is($in_use, 'postgres', "no fast way on this CPU: PostgreSQL's CRC is in use");
}

# Pages stored and served with the CRC in use read back right.
bpext_load_table($node, 'postgres', 't', 20000);
$node->safe_psql('postgres', q{SELECT bpext_prewarm('t'::regclass)});
bpext_evict_shared_buffers($node);
bpext_check_table($node, 'postgres', 't', rows => 20000, scan => 'index',
	name => 'served from the tier');
my $s = bpext_stats($node);
cmp_ok($s->{hits}, '>', 100, "pages were served from the tier ($s->{hits} hits)");
is($s->{crc_failures}, 0, 'no CRC failure');

$node->stop;
done_testing();

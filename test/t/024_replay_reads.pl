
# Copyright (c) 2026, bpext developers

# A standby's WAL replay reads the pages it redoes through the tier.  With
# full_page_writes off, replaying an UPDATE has to read every heap page it
# changes (no page image comes with the record).  The standby's tier holds
# all of the table (bpext_prewarm) and its shared buffers none of it, and
# nothing writes those pages on the standby before replay reads them, so
# each is served from the tier: replay's smgrcreate(isRedo) before every
# block it reads must not invalidate a fork that already exists.  The
# table is right afterwards.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

bpext_needs_contrib('pg_prewarm');

my $nrows = 20000;

my $primary = bpext_init_node('primary', tier_size => '64MB', max_size => '64MB',
	init => { allows_streaming => 1 },
	conf => "full_page_writes = off\nlog_statement = none\n");
$primary->start;
bpext_setup($primary);
bpext_load_table($primary, 'postgres', 't', $nrows);
$primary->safe_psql('postgres', 'CHECKPOINT');

my $standby = bpext_init_standby($primary, 'standby');
$standby->start;
$primary->wait_for_catchup($standby);
ok(bpext_wait_for_state($standby, 'enabled'), 'the standby enables its tier');

my $pages_of_t = sub {
	my ($in_tier) = @_;
	return $standby->safe_psql('postgres', qq{
		SELECT count(*) FROM bpext_buffer_descriptors
		 WHERE relfilenode = pg_relation_filenode('t') AND relforknumber = 0
		   AND is_in_bpool_extension = $in_tier});
};
my $npages = $standby->safe_psql('postgres', "SELECT pg_relation_size('t') / 8192");
is($standby->safe_psql('postgres', "SELECT bpext_prewarm('t')"), $npages,
	"the standby's tier holds the $npages pages of t");
bpext_evict_shared_buffers($standby);
is($pages_of_t->('false'), 0, "none of t is in the standby's shared buffers");
is($pages_of_t->('true'), $npages, "all of t is in the standby's tier");

# An UPDATE of a row on every page of t, replayed with no query on the
# standby but these counters, which read no table page.
my $before = bpext_stat($standby, 'extension_page_reads');
$primary->safe_psql('postgres',
	'UPDATE t SET ver = 1, v = bpext_expected_v(id, 1) WHERE id % 2 = 0');
$primary->wait_for_catchup($standby);
my $reads = bpext_stat($standby, 'extension_page_reads') - $before;
cmp_ok($reads, '>=', $npages,
	"replay read the $npages pages of t from the standby's tier ($reads tier reads)");

bpext_check_table($standby, 'postgres', 't', rows => $nrows,
	ver => 'CASE WHEN id % 2 = 0 THEN 1 ELSE 0 END', scan => 'seq',
	name => 'after replay, on the standby');
bpext_check_table($primary, 'postgres', 't', rows => $nrows,
	ver => 'CASE WHEN id % 2 = 0 THEN 1 ELSE 0 END', scan => 'seq',
	name => 'on the primary');
my $s = bpext_stats($standby);
is($s->{crc_failures} + $s->{io_errors}, 0, 'no tier errors on the standby');

$standby->stop;
$primary->stop;
done_testing();

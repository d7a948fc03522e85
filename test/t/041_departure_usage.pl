# Copyright (c) 2026, bpext developers

# A page the tier holds that leaves shared buffers again gets a usage
# count in the tier, as a hit does (tier_map_note_departure, called by
# the push for each clean victim ahead of the clock hand):
#  1. a table stored whole by bpext_prewarm into an empty tier;
#  2. 200 of its pages at usage 1 read once by TID: tier hits, usage 2;
#  3. shared buffers turned over slowly (so that the worker finds the
#     pages among the next victims before they go): those it found are
#     at 3; the pages neither read nor in shared buffers kept their
#     counts (only a page the push finds among the victims gets one),
#     and no count passes the tier's maximum, 3.
# The tier is far from full, so its CLOCK hand never wears a count down.
# Against the push that only asks whether the tier holds the page, no
# page gets past 2.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# bpext_evict_shared_buffers reads through pg_prewarm.
bpext_needs_contrib('pg_prewarm');

my $node = bpext_init_node('main', tier_size => '256MB');
$node->start;
bpext_setup($node);

# About 2,000 pages, frozen and checkpointed: no hint bit is set from here
# on, so every page stays clean in shared buffers.
$node->safe_psql('postgres', q{
	CREATE TABLE t (id int, pad text);
	INSERT INTO t SELECT g, repeat('t', 1000) FROM generate_series(1, 14000) g;
	VACUUM (FREEZE) t;
	CHECKPOINT});
my $pages = $node->safe_psql('postgres', q{SELECT pg_relation_size('t') / 8192});
cmp_ok($pages, '>=', 1900, "t has $pages pages");

# Most of t is in shared buffers after the INSERT: turn them over first,
# then empty the tier and store t whole, so that every page of t is in
# the tier at usage 1 and (but for a few that stayed) not in shared
# buffers.
bpext_evict_shared_buffers($node);
bpext_wait_for_quiet_worker($node);
$node->safe_psql('postgres', q{SELECT bpext_drop_clean_buffers()});
$node->safe_psql('postgres', q{SELECT bpext_prewarm('t')});
bpext_wait_for_quiet_worker($node);

# The tier's usage count of each page of t it holds.
sub tier_usage
{
	my %usage = map { split /\|/ } split /\n/, $node->safe_psql('postgres', q{
		SELECT relblocknumber, usagecount FROM bpext_buffer_descriptors
		 WHERE is_in_bpool_extension AND relforknumber = 0
		   AND relfilenode = pg_relation_filenode('t')});
	return \%usage;
}
my $before = tier_usage();
is(scalar(keys %$before), $pages, 'every page of t is in the tier');
my %in_shared = map { $_ => 1 } split /\n/, $node->safe_psql('postgres', q{
	SELECT relblocknumber FROM bpext_buffer_descriptors
	 WHERE NOT is_in_bpool_extension AND relforknumber = 0
	   AND relfilenode = pg_relation_filenode('t')});

my @candidates = grep { $before->{$_} == 1 && !$in_shared{$_} }
  sort { $a <=> $b } keys %$before;
cmp_ok(scalar(@candidates), '>=', 200,
	'200 pages of t are at usage 1 in the tier and not in shared buffers')
  or die 'fewer than 200 pages of t to read';
my @chosen = @candidates[0 .. 199];
my %chosen = map { $_ => 1 } @chosen;
my $tids = join ',', map { "'($_,1)'" } @chosen;

my $hits = bpext_stat($node, 'hits');
is($node->safe_psql('postgres', qq{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM t WHERE ctid = ANY (ARRAY[$tids]::tid[])}),
	200, 'the 200 pages read by TID');
cmp_ok(bpext_stat($node, 'hits') - $hits, '>=', 200, 'they were tier hits');
my $after_hit = tier_usage();
is(scalar(grep { $after_hit->{$_} == 2 } @chosen), 200,
	'each hit added a usage count');

# Turn shared buffers over one evictor page at a time, 16 pages per 20 ms:
# the clock hand moves slowly enough for the worker's push rounds to look
# at each page before it goes.
$node->safe_psql('postgres', q{
	DO $$
	DECLARE
		b int;
	BEGIN
		FOR b IN 0 .. pg_relation_size('bpext_evictor') / 8192 - 1 LOOP
			PERFORM count(*) FROM bpext_evictor
			 WHERE ctid = format('(%s,1)', b)::tid;
			IF b % 16 = 0 THEN
				PERFORM pg_sleep(0.02);
			END IF;
		END LOOP;
	END $$});
bpext_wait_for_quiet_worker($node);
note('pages of t still in shared buffers: ', $node->safe_psql('postgres', q{
	SELECT count(*) FROM bpext_buffer_descriptors
	 WHERE NOT is_in_bpool_extension AND relfilenode = pg_relation_filenode('t')}));

my $after = tier_usage();
my @untouched = grep { !$chosen{$_} && !$in_shared{$_} } keys %$before;
is(scalar(grep { ($after->{$_} // -1) != $before->{$_} } @untouched), 0,
	'the pages neither read nor in shared buffers kept their usage counts');
note('of the ', scalar(keys %in_shared), ' other pages of t that were in ',
	'shared buffers, ',
	scalar(grep { ($after->{$_} // -1) > $before->{$_} } keys %in_shared),
	' got a count when they left');
my $at3 = grep { ($after->{$_} // -1) == 3 } @chosen;
my $at2 = grep { ($after->{$_} // -1) == 2 } @chosen;
note("of the 200 pages read: $at3 at usage 3, $at2 at usage 2");
is($at2 + $at3, 200, 'the pages read are at usage 2 or 3, none past the maximum');
cmp_ok($at3, '>', 0,
	'pages read from the tier that left shared buffers again got a usage count');

done_testing();


# Copyright (c) 2026, bpext developers

# The tier sizing advisor (bpext_sizing, src/sizing.c), with the tier off:
# the curve must exist before the SSD does.
#
# A cyclic scan over a relation of N pages, much bigger than
# shared_buffers, read P times, has a known miss-ratio curve: every read
# misses shared buffers, the first pass is first references, and every
# later read of a page comes exactly N - 1 other pages after the last one.
# Under bpext.admission = read, which admits every page read, a tier of
# fewer than N pages serves none of them (LRU, and the tier's CLOCK, evict
# each page before it comes round again), one of N pages or more serves
# all but the first pass: hit ratio (P - 1) / P.  The advisor must show
# that step, sampling every page, sampling 5% of them, and with a memory
# budget too small for the sample it starts with (so that it lowers its
# rate as SHARDS-adj does).  Under admission = evict, the default, a
# tier never gets the pages of such a scan (it reads through a ring of
# buffers that the clock hand never reaches), and the curve must say so.  The curve is monotone, a reset
# empties it, and the window says what it covers.  Then: a page kept in
# shared buffers is dated by its last sight there (5), the pages shared
# buffers and a tier would both hold are measured (6), and a small
# sample's footprint is counted, not scaled up (7).  Up to part 7 the
# advisor may take references as fast as they come; part 8 limits them
# (bpext.sizing_samples_per_second), and the rate goes down.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $passes = 10;

# No autovacuum: a worker that reads a page twice after a reset (its 128
# buffers make that likely) is a re-reference the reset check cannot allow
# for (seen once on 18 under CI's load).
my $node = bpext_init_node('main', tier_size => 0, shared_buffers => '1MB',
	conf => "bpext.sizing_sample_rate = 1.0\nbpext.sizing_samples_per_second = 0\n"
	  . "bpext.admission = read\n"
	  . "synchronize_seqscans = off\nautovacuum = off\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION bpext');

is($node->safe_psql('postgres', 'SELECT state FROM bpext_configuration'),
	'0', 'the tier is off');

# Relations of about 2300, 3000 and 3700 pages (7 rows of 1 kB a page).
# The curve's rows double from 16 pages: 2048 is 0.89 of the first, 4096
# is 1.11 of the last, so together they pin the step to N within 11%;
# 3000 sits far from both rows, for the sampled runs.
my %n;
for my $t ([ 'cyc_a', 16100 ], [ 'cyc', 21000 ], [ 'cyc_b', 25900 ])
{
	my ($name, $rows) = @$t;
	$node->safe_psql('postgres', qq{
		CREATE TABLE $name (id int, pad text);
		INSERT INTO $name SELECT i, repeat('c', 1000) FROM generate_series(1, $rows) i;
		VACUUM $name;
	});
	$n{$name} = $node->safe_psql('postgres', "SELECT pg_relation_size('$name') / 8192");
	cmp_ok(abs($n{$name} - $rows / 7), '<=', 10, "$name has $n{$name} pages");
}
$node->safe_psql('postgres', 'CHECKPOINT');

# Scan a relation $passes times after a reset; return the curve as
# [tier_pages, hit_ratio] pairs and the window as a hash.
sub cyclic_scan
{
	my ($table) = @_;
	$node->safe_psql('postgres', 'SELECT bpext_sizing_reset()');
	$node->safe_psql('postgres', "SELECT count(*) FROM $table") for 1 .. $passes;
	my @curve = map { [ split /\|/ ] } split /\n/,
	  $node->safe_psql('postgres',
		'SELECT tier_pages, hit_ratio FROM bpext_sizing ORDER BY tier_pages');
	my %w;
	@w{qw(sample_rate sampled_misses sampled_pages sample_capacity first misses)}
	  = split /\|/, $node->safe_psql('postgres', q{
		SELECT sample_rate, sampled_misses, sampled_pages, sample_capacity,
		       first_reference_ratio, misses
		  FROM bpext_sizing_window});
	return (\@curve, \%w);
}

# The step: no row below (1 - margin) N serves more than 3% of the misses,
# every row above (1 + margin) N serves (P - 1) / P of them, within 5
# points.
sub check_step
{
	my ($curve, $n, $margin, $what) = @_;
	my $full = ($passes - 1) / $passes;
	my ($below, $above) = (0, 0);
	my $prev = 0;
	my $monotone = 1;

	for my $row (@$curve)
	{
		my ($pages, $ratio) = @$row;
		$monotone = 0 if $ratio < $prev;
		$prev = $ratio;
		if ($pages < (1 - $margin) * $n)
		{
			$below++;
			cmp_ok($ratio, '<=', 0.03, "$what: $pages pages serve nothing");
		}
		elsif ($pages > (1 + $margin) * $n)
		{
			$above++;
			cmp_ok(abs($ratio - $full), '<=', 0.05,
				"$what: $pages pages serve all but the first pass ($ratio)");
		}
	}
	ok($monotone, "$what: the curve is monotone");
	cmp_ok($below, '>=', 5, "$what: rows below the step");
	cmp_ok($above, '>=', 5, "$what: rows above the step");
	return;
}

# 1. Every page sampled: the step is within 12% of N on both sides.
my ($curve, $w);
($curve, $w) = cyclic_scan('cyc_a');
check_step($curve, $n{cyc_a}, 0.12, 'exact, 2300 pages');
ok((grep { $_->[0] == 2048 } @$curve), 'a row at 0.89 N');
($curve, $w) = cyclic_scan('cyc_b');
check_step($curve, $n{cyc_b}, 0.12, 'exact, 3700 pages');
ok((grep { $_->[0] == 4096 } @$curve), 'a row at 1.11 N');

# Under admission = evict, the scan's pages never reach the tier: the
# curve is the miniatures' (sizing_mini.c), not LRU's.
$node->append_conf('postgresql.conf', "bpext.admission = evict\n");
$node->reload;
$node->poll_query_until('postgres', "SELECT current_setting('bpext.admission') = 'evict'")
  or die 'admission was not reloaded';
($curve, $w) = cyclic_scan('cyc_a');
my ($ring_most) = sort { $b <=> $a } map { $_->[1] } @$curve;
cmp_ok($ring_most, '<=', 0.05,
	"admission = evict: no tier serves a scan through a ring ($ring_most at most)");
$node->append_conf('postgresql.conf', "bpext.admission = read\n");
$node->reload;
$node->poll_query_until('postgres', "SELECT current_setting('bpext.admission') = 'read'")
  or die 'admission was not reloaded';

my $n = $n{cyc};
($curve, $w) = cyclic_scan('cyc');
is($w->{sample_rate}, 1, 'every page sampled');
# A few pages stay in shared buffers from one pass to the next.
cmp_ok($w->{sampled_misses}, '>=', 0.95 * $passes * $n, 'the reads were seen');
cmp_ok($w->{sampled_pages}, '>=', $n, 'the sample holds the relation');
cmp_ok(abs($w->{first} - 1 / $passes), '<=', 0.02,
	'the first pass is first references');
is($curve->[0][0], 128 / 8, 'the curve starts at an eighth of shared_buffers');
cmp_ok($curve->[-1][0], '>=', 32 * $n,
	'and goes on to 64 times the data the window touched (within a doubling)');
check_step($curve, $n, 0.1, 'exact');

# 2. A reset empties it (the queries' own catalog misses, after the scans
# pushed the catalogs out of shared buffers, are all first references).
my $after_reset = $node->safe_psql('postgres', qq{
	SELECT bpext_sizing_reset();
	SELECT bool_and(hit_ratio = 0) AND bool_and(reads_saved_per_second = 0)
	  FROM bpext_sizing;
	SELECT sampled_pages < $n / 4, coalesce(first_reference_ratio, 1) = 1,
	       since > now() - interval '1 minute'
	  FROM bpext_sizing_window});
is($after_reset, "\nt\nt|t|t", 'a reset empties the curve and starts a new window');

# 3. 5% sampling stays within bounds.
$node->append_conf('postgresql.conf', "bpext.sizing_sample_rate = 0.05\n");
$node->reload;
($curve, $w) = cyclic_scan('cyc');
cmp_ok(abs($w->{sample_rate} - 0.05), '<', 1e-6, 'the reset took the new sample rate');
cmp_ok(abs($w->{misses} - $passes * $n) / ($passes * $n), '<=', 0.25,
	"the estimated misses ($w->{misses}) are within 25% of the reads");
check_step($curve, $n, 0.1, '5% sample');

# 4. A budget too small for the sample: the rate goes down, the sample
# stays within the budget, and the step stays where it is.
$node->append_conf('postgresql.conf',
	"bpext.sizing_memory = '64kB'\nbpext.sizing_sample_rate = 1.0\n");
$node->restart;
($curve, $w) = cyclic_scan('cyc');
cmp_ok($w->{sample_capacity}, '<', $n / 2, "the budget holds $w->{sample_capacity} pages");
cmp_ok($w->{sample_rate}, '<', 0.5, "the rate went down to $w->{sample_rate}");
cmp_ok($w->{sampled_pages}, '<=', $w->{sample_capacity}, 'the sample fits');
check_step($curve, $n, 0.1, 'adjusted sample');

# 5. A page that stays in shared buffers is dated by when it was last seen
# there, not by the miss that brought it in: the tier gets it when it
# leaves shared buffers.  h (20 pages) is read once, then cyc is scanned
# (through a ring: h stays in shared buffers) and, after a few passes of
# the worker's sweep, d (600 pages, by TID: no ring, 10 at a time, 0.1 s
# apart, so that the worker sees h leave as the push would: a page is
# seen at usage 0 a quarter of shared buffers, 32 buffers, 0.3 s, before
# the hand takes it, time enough for a worker on a busy machine) pushes h
# out.  h's second reads come some 600 misses after the sweep last saw h
# but 3600 after h's first miss: a 1024-page tier serves them only if the
# sweep counts.  The tables are vacuumed first, so that reading them sets no
# hint bit: a page written when it leaves shared buffers is dated by that
# write, sweep or not.
$node->append_conf('postgresql.conf',
	"bpext.sizing_memory = '4MB'\nbpext.sizing_sample_rate = 1.0\n"
	  . "bpext.admission = evict\n");
$node->restart;
$node->safe_psql('postgres', q{
	CREATE TABLE h (id int, pad text);
	INSERT INTO h SELECT i, repeat('h', 1000) FROM generate_series(1, 140) i;
	CREATE TABLE d (id int, pad text);
	INSERT INTO d SELECT i, repeat('d', 1000) FROM generate_series(1, 4200) i;
	VACUUM h;
	VACUUM d;
	CHECKPOINT;
});
my $h_pages = $node->safe_psql('postgres', "SELECT pg_relation_size('h') / 8192");
my $d_pages = $node->safe_psql('postgres', "SELECT pg_relation_size('d') / 8192");
my $h_tids = join(',', map { "'($_,1)'" } 0 .. $h_pages - 1);
my $d_tids = join(',', map { "'($_,1)'" } 0 .. $d_pages - 1);
my $h_resident = q{SELECT count(*) FROM bpext_buffer_descriptors
	 WHERE NOT is_in_bpool_extension AND relfilenode = pg_relation_filenode('h')};

# One session throughout, its catalog caches filled before the reset, so
# that the only misses are the tables' own.
my @out = split /\n/, $node->safe_psql('postgres', qq{
	SET enable_seqscan = off;
	SELECT count(*) FROM h WHERE ctid = ANY (ARRAY[$h_tids]::tid[]) AND false;
	SELECT count(*) FROM d WHERE ctid = ANY (ARRAY[$d_tids]::tid[]) AND false;
	SELECT count(*) FROM ($h_resident) x WHERE false;
	SELECT count(*) FROM bpext_sizing z, bpext_sizing_window w WHERE false;
	SELECT bpext_sizing_reset();
	SELECT count(*) FROM h WHERE ctid = ANY (ARRAY[$h_tids]::tid[]);
	SET enable_seqscan = on;
	SELECT count(*) FROM cyc;
	SET enable_seqscan = off;
	$h_resident;
	SELECT pg_sleep(3);
	SELECT sum(x.n)
	  FROM generate_series(0, $d_pages - 1, 10) b0,
	       LATERAL (SELECT count(*) AS n FROM d WHERE ctid = ANY (ARRAY(
				SELECT format('(%s,1)', b)::tid
				  FROM generate_series(b0, least(b0 + 9, $d_pages - 1)) b))) x,
	       LATERAL pg_sleep(0.1 + 0 * b0) s;
	$h_resident;
	SELECT count(*) FROM h WHERE ctid = ANY (ARRAY[$h_tids]::tid[]);
	SELECT round(z.hit_ratio * w.misses)
	  FROM bpext_sizing z, bpext_sizing_window w WHERE z.tier_pages = 256;
	SELECT round(z.hit_ratio * w.misses)
	  FROM bpext_sizing z, bpext_sizing_window w WHERE z.tier_pages = 1024;
	SELECT round(z.hit_ratio * w.misses)
	  FROM bpext_sizing z, bpext_sizing_window w WHERE z.tier_pages = 8192;
});
@out = grep { $_ ne '' } @out;
my ($h_read, $cyc_read, $kept, $d_read, $h_left, $h_again, $hits_256,
	$hits_1024, $hits_8192) = @out[ -9 .. -1 ];
is($h_read, $h_pages, "h read ($h_pages pages)");
is($d_read, $d_pages, "d read ($d_pages pages)");
cmp_ok($kept, '>=', $h_pages / 2, "$kept pages of h stayed in shared buffers through the scan");
is($h_left, 0, 'd pushed h out of shared buffers');
is($h_again, $h_pages, 'h read again');
# Short reuses (a few catalog and free-space-map pages) are served at
# every size; h's come in between 256 pages (d's 600 came after them) and
# 1024, and without the sweep only above 3600 (cyc's pages too).
cmp_ok($hits_1024 - $hits_256, '>=', $kept - 2,
	"a 1024-page tier, and not a 256-page one, serves the second reads of h's pages the sweep saw ($hits_256, $hits_1024)");
cmp_ok($hits_8192 - $hits_256, '>=', $h_pages - 2,
	"an 8192-page tier serves all of them ($hits_8192)");

# 6. The pages shared buffers and the tier would both hold are measured,
# not taken as the hit ratio's share of shared buffers.  hot6 (400 pages)
# stays in 4 MB of shared buffers throughout (touched every 10 reads),
# while cyc6 (1900 pages) is read by TID, 10 pages at a time, 6 times
# over: its reads come some 2300 distinct pages apart (cyc6 and hot6), so
# all but the first pass are served by a tier of 2048 pages, which with
# the 512 buffers, less the hundred or so cyc6 pages both would hold
# (those the tier served), holds about 2460.  Taking the pages both hold
# as 5/6 of shared buffers (the estimate before) leaves the union at
# 2048 + 512 / 6 and the estimate on the step, about 0.45.
$node->append_conf('postgresql.conf', "shared_buffers = '4MB'\n");
$node->restart;
$node->safe_psql('postgres', q{
	CREATE TABLE hot6 (id int, pad text);
	INSERT INTO hot6 SELECT i, repeat('h', 1000) FROM generate_series(1, 2800) i;
	CREATE TABLE cyc6 (id int, pad text);
	INSERT INTO cyc6 SELECT i, repeat('c', 1000) FROM generate_series(1, 13300) i;
	VACUUM hot6;
	VACUUM cyc6;
	CHECKPOINT;
});
my $hot6_pages = $node->safe_psql('postgres', "SELECT pg_relation_size('hot6') / 8192");
my $cyc6_pages = $node->safe_psql('postgres', "SELECT pg_relation_size('cyc6') / 8192");
@out = split /\n/, $node->safe_psql('postgres', qq{
	SET enable_seqscan = off;
	DO \$\$
	DECLARE
		hot tid[] := ARRAY(SELECT format('(%s,1)', b)::tid
							FROM generate_series(0, $hot6_pages - 1) b);
		n int;
	BEGIN
		SELECT count(*) INTO n FROM hot6 WHERE ctid = ANY (hot);
		PERFORM bpext_sizing_reset();
		FOR pass IN 1 .. 6 LOOP
			FOR b0 IN 0 .. $cyc6_pages - 1 BY 10 LOOP
				SELECT count(*) INTO n FROM hot6 WHERE ctid = ANY (hot);
				SELECT count(*) INTO n FROM cyc6 WHERE ctid = ANY (ARRAY(
					SELECT format('(%s,1)', b)::tid
					  FROM generate_series(b0, least(b0 + 9, $cyc6_pages - 1)) b));
				PERFORM pg_sleep(0.003);
			END LOOP;
		END LOOP;
	END
	\$\$;
	SELECT count(*) FROM bpext_buffer_descriptors
	 WHERE NOT is_in_bpool_extension AND relfilenode = pg_relation_filenode('hot6');
	SELECT round(hit_ratio::numeric, 3) FROM bpext_sizing WHERE tier_pages = 1024;
	SELECT round(hit_ratio::numeric, 3) FROM bpext_sizing WHERE tier_pages = 2048;
	SELECT round(hit_ratio::numeric, 3) FROM bpext_sizing WHERE tier_pages = 4096;
});
@out = grep { $_ ne '' } @out;
my ($hot6_kept, $at_1024, $at_2048, $at_4096) = @out[ -4 .. -1 ];
note("part 6: hot6 kept $hot6_kept, 1024 $at_1024, 2048 $at_2048, 4096 $at_4096");
cmp_ok($hot6_kept, '>=', $hot6_pages - 20,
	"hot6 stayed in shared buffers ($hot6_kept of $hot6_pages pages)");
cmp_ok($at_1024, '<=', 0.05, "a 1024-page tier serves none of cyc6's reads ($at_1024)");
cmp_ok($at_2048, '>=', 0.75,
	"a 2048-page tier serves all but cyc6's first pass ($at_2048): shared buffers hold hot6 alone");
cmp_ok($at_4096, '>=', 0.75, "so does a 4096-page tier ($at_4096)");

# 7. A small sample's scale is corrected by the page counter: at 0.1%, a
# scan of cyc_a (about 2300 pages) samples two or three of them, and the
# sample alone would say 2000 or 3000 pages touched; the counter, which
# sees every page, says 2300 within its 1% and the few catalog pages the
# sessions read.
$node->append_conf('postgresql.conf', "bpext.sizing_sample_rate = 0.001\n");
$node->restart;
($curve, $w) = cyclic_scan('cyc_a');
my $touched = $node->safe_psql('postgres', 'SELECT pages_touched FROM bpext_sizing_window');
note("part 7: $w->{sampled_pages} pages sampled, $touched pages touched, $n{cyc_a} in cyc_a");
cmp_ok($touched, '>=', 0.97 * $n{cyc_a}, "the pages touched ($touched) are counted, not scaled up from the sample");
cmp_ok($touched, '<=', 1.15 * $n{cyc_a}, "and are cyc_a's $n{cyc_a} and a few more");

# 8. At most bpext.sizing_samples_per_second references to sampled pages
# a second: 20 passes over cyc in one statement, every page sampled at
# first, make some 60,000 of them, 30 times the limit, in what takes a
# second or two, and more on a busy machine.  The advisor lowers its rate
# as soon as a limit's worth comes in under a second; if the machine is
# so slow that none ever did, the window lasted a second for every
# limit's worth.  Either way the references came no faster than the limit
# allows.
my $limit = 2000;
$node->append_conf('postgresql.conf',
	"bpext.sizing_sample_rate = 1.0\nbpext.sizing_samples_per_second = $limit\n");
$node->reload;
$node->poll_query_until('postgres',
	"SELECT current_setting('bpext.sizing_samples_per_second') = '$limit'")
  or die 'the limit was not reloaded';
my ($rate, $sampled, $seconds) = split /\|/, $node->safe_psql('postgres', q{
	SELECT bpext_sizing_reset();
	DO $$ BEGIN FOR i IN 1 .. 20 LOOP PERFORM count(*) FROM cyc; END LOOP; END $$;
	SELECT sample_rate, sampled_misses, seconds FROM bpext_sizing_window});
$rate =~ s/^\n//;
note("part 8: rate $rate, $sampled sampled misses in $seconds s");
SKIP:
{
	# So slow that even a build without the limit would keep within it.
	skip "the passes took $seconds s: too slow to tell", 1 if $seconds > 10;
	ok($rate < 1 || $sampled <= $limit * ($seconds + 1),
		"the limit holds: rate $rate, $sampled sampled misses in $seconds s");
}
cmp_ok($sampled, '>=', $limit / 2,
	'every page was sampled until the references reached the limit');

$node->stop;
done_testing();

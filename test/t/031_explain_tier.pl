
# Copyright (c) 2026, bpext developers

# The split of a statement's shared-buffer reads between the tier and the
# data files: EXPLAIN (ANALYZE, TIER) on 18 and later, bpext_explain_tier()
# on every major, the per-statement log line and the per-database counters.
#
# Two tables: t, whose every page is in the tier and none in shared
# buffers, and u, in neither.  A statement that reads both must then show
# each page of t as a tier hit and each page of u as a data-file read, at
# the node that scanned it and in the plan's total; at every node counted,
# hits plus data-file reads must be PostgreSQL's own shared read count for
# the node (BUFFERS, or bpext_explain_tier's shared_read); and the plan's
# total must equal what the session's statement added to bpext_stats and
# bpext_database_stats (their reads and their read times: the same
# counters, so the same microseconds).  Each statement runs in a session
# whose catalog caches a first run has filled, so that it reads nothing
# but t and u.  The same holds for a parallel plan whose workers do all
# the reading (parallel_leader_participation = off), which needs the
# workers' counts to reach the leader; but there the counters' deltas
# also hold the catalog pages each new worker reads while it starts,
# which neither PostgreSQL nor bpext counts in the plan.  A Hash node (run without
# ExecProcNode) shows no figures of its own, a node never run shows zeros,
# and EXPLAIN (TIER) without ANALYZE is refused.  Last, the update from
# 1.3 makes what a fresh 1.4 makes.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = bpext_init_node('main', tier_size => '64MB', max_size => '64MB');
my $has_explain_option = $node->pg_version >= 18;
$node->start;
bpext_setup($node, evict_mb => 1);

$node->safe_psql('postgres', q{
	CREATE TABLE t (id int, pad text) WITH (autovacuum_enabled = off);
	INSERT INTO t SELECT i, repeat(md5(i::text), 6) FROM generate_series(1, 24000) i;
	CREATE TABLE u (id int, pad text) WITH (autovacuum_enabled = off);
	INSERT INTO u SELECT i, repeat(md5(i::text), 6) FROM generate_series(1, 12000) i;
	VACUUM (FREEZE, ANALYZE) t, u;
	CHECKPOINT;
});
my $t_pages = $node->safe_psql('postgres', "SELECT pg_relation_size('t') / 8192");
my $u_pages = $node->safe_psql('postgres', "SELECT pg_relation_size('u') / 8192");
cmp_ok($t_pages, '>', 500, "t has $t_pages pages");
cmp_ok($u_pages, '>', 250, "u has $u_pages pages");

my $both = 'SELECT count(*) FROM t UNION ALL SELECT count(*) FROM u';
my $serial = 'SET max_parallel_workers_per_gather = 0;';
my $parallel = q{
	SET max_parallel_workers_per_gather = 2;
	SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0;
	SET min_parallel_table_scan_size = 0;
	SET parallel_leader_participation = off;};

# Run $statement in one session, after $settings and a first run of it
# (which fills the session's caches), with t in the tier alone and u in
# neither the tier nor shared buffers.  Returns the statement's output,
# where t's and u's pages were just before it, and what it added to the
# counters.  bpext_drop_clean_buffers() also drops the catalog pages the
# session has read; the queries that take the counters before and after
# run once before.  They read no relation at all: the view
# bpext_database_stats joins pg_database, whose page the statement may
# have pushed out of shared buffers, and a read of it on either side of
# the counters' snapshot would count in the delta; so they call the view's
# function for the database's oid, taken beforehand.
sub measure
{
	my ($settings, $statement) = @_;
	my $from = q{
		  FROM bpext_stats s
		  LEFT JOIN bpext_database_stats_1_4() d ON d.database_id = :dboid};
	my $before = qq{
		SELECT s.extension_page_reads AS s_hits, s.data_file_reads AS s_reads,
		       coalesce(d.tier_reads, 0) AS d_hits,
		       coalesce(d.data_file_reads, 0) AS d_reads,
		       coalesce(d.tier_read_time, 0) AS d_hit_ms,
		       coalesce(d.data_file_read_time, 0) AS d_read_ms,
		       coalesce(d.data_file_reads_not_timed, 0) AS d_untimed
		  $from \\gset};
	my $delta = qq{
		SELECT s.extension_page_reads - :s_hits, s.data_file_reads - :s_reads,
		       coalesce(d.tier_reads, 0) - :d_hits,
		       coalesce(d.data_file_reads, 0) - :d_reads,
		       coalesce(d.tier_read_time, 0) - :d_hit_ms,
		       coalesce(d.data_file_read_time, 0) - :d_read_ms,
		       coalesce(d.data_file_reads_not_timed, 0) - :d_untimed
		  $from;};
	my $out = $node->safe_psql('postgres', qq{
		$settings
		SELECT oid AS dboid FROM pg_database WHERE datname = current_database() \\gset
		\\o /dev/null
		$statement;
		SELECT bpext_drop_clean_buffers();
		SELECT bpext_prewarm('t');
		$before
		$delta
		\\o
		SELECT
		  count(*) FILTER (WHERE is_in_bpool_extension AND relfilenode = pg_relation_filenode('t') AND relforknumber = 0),
		  count(*) FILTER (WHERE NOT is_in_bpool_extension AND relfilenode IN (pg_relation_filenode('t'), pg_relation_filenode('u'))),
		  count(*) FILTER (WHERE is_in_bpool_extension AND relfilenode = pg_relation_filenode('u'))
		  FROM bpext_buffer_descriptors;
		$before
		\\echo ==statement
		$statement;
		\\echo ==counters
		$delta
	});
	my ($state, $result, $counters) =
	  $out =~ /\A(.*)\n==statement\n(.*)\n==counters\n(.*)\z/s
	  or die "unexpected output: $out";
	my %m;
	@m{qw(t_in_tier in_buffers u_in_tier)} = split /\|/, $state;
	@m{qw(s_hits s_reads d_hits d_reads d_hit_ms d_read_ms d_untimed)} =
	  split /\|/, $counters;
	$m{result} = $result;
	return \%m;
}

sub where_pages_were
{
	my ($name, $m) = @_;
	is($m->{t_in_tier}, $t_pages, "$name: every page of t was in the tier");
	is($m->{in_buffers}, 0, "$name: no page of t or u was in shared buffers");
	is($m->{u_in_tier}, 0, "$name: no page of u was in the tier");
	return;
}

# The plan's figures against the counters: the same reads, the same time.
sub same_as_counters
{
	my ($name, $m, $hits, $reads, $hit_ms, $read_ms, $untimed) = @_;
	is($m->{s_hits}, $hits, "$name: tier hits = bpext_stats' extension_page_reads delta");
	is($m->{s_reads}, $reads, "$name: data-file reads = bpext_stats' data_file_reads delta");
	is($m->{d_hits}, $hits, "$name: tier hits = bpext_database_stats' tier_reads delta");
	is($m->{d_reads}, $reads, "$name: data-file reads = bpext_database_stats' data_file_reads delta");
	ok(abs($m->{d_hit_ms} - $hit_ms) < 0.002,
		"$name: tier read time = bpext_database_stats' tier_read_time delta ($hit_ms, $m->{d_hit_ms})");
	ok(abs($m->{d_read_ms} - $read_ms) < 0.002,
		"$name: data-file read time = bpext_database_stats' data_file_read_time delta ($read_ms, $m->{d_read_ms})");
	is($m->{d_untimed}, $untimed,
		"$name: data-file reads not timed = bpext_database_stats' data_file_reads_not_timed delta");
	return;
}

# --- bpext_explain_tier(), every major ---------------------------------------------
sub explain_function
{
	my ($settings, $query) = @_;
	my $m = measure($settings, qq{
		SELECT node, parent_node, level, node_type, relation, tier_hits,
		       data_file_reads, tier_read_time, data_file_read_time,
		       data_file_reads_not_timed, shared_read
		  FROM bpext_explain_tier(\$q\$$query\$q\$)});
	my @rows;
	for my $line (split /\n/, $m->{result})
	{
		my %r;
		@r{qw(node parent level type relation hits reads hit_ms read_ms untimed shared_read)}
		  = split /\|/, $line, -1;
		push @rows, \%r;
	}
	return ($m, @rows);
}

# Every node counted: hits + data-file reads = PostgreSQL's shared read.
sub rows_add_up
{
	my ($name, @rows) = @_;
	my $counted = 0;
	for my $r (@rows)
	{
		next if $r->{hits} eq '';
		$counted++;
		is($r->{hits} + $r->{reads}, $r->{shared_read},
			"$name: $r->{type} (node $r->{node}): $r->{hits} hits + $r->{reads} data-file reads = shared read");
	}
	return $counted;
}

my ($m, @rows) = explain_function($serial, $both);
where_pages_were('bpext_explain_tier', $m);
is($rows[0]{level}, 0, 'bpext_explain_tier: the top node comes first');
is($rows[0]{hits}, $t_pages, "bpext_explain_tier: the plan's tier hits are t's pages");
is($rows[0]{reads}, $u_pages, "bpext_explain_tier: the plan's data-file reads are u's pages");
my ($scan_t) = grep { $_->{relation} eq 't' } @rows;
my ($scan_u) = grep { $_->{relation} eq 'u' } @rows;
is("$scan_t->{type}: $scan_t->{hits} $scan_t->{reads}", "Seq Scan: $t_pages 0",
	'bpext_explain_tier: the scan of t read every page from the tier');
is("$scan_u->{type}: $scan_u->{hits} $scan_u->{reads}", "Seq Scan: 0 $u_pages",
	'bpext_explain_tier: the scan of u read every page from its data file');
cmp_ok(rows_add_up('bpext_explain_tier', @rows), '>=', 4,
	'bpext_explain_tier: the aggregates and scans are counted');
same_as_counters('bpext_explain_tier', $m, $rows[0]{hits}, $rows[0]{reads},
	$rows[0]{hit_ms}, $rows[0]{read_ms}, $rows[0]{untimed});

($m, @rows) = explain_function($parallel, 'SELECT count(*) FROM t');
where_pages_were('bpext_explain_tier, parallel', $m);
my ($gather) = grep { $_->{type} eq 'Gather' } @rows;
my ($pscan) = grep { $_->{type} eq 'Parallel Seq Scan' } @rows;
ok($gather && $pscan, 'bpext_explain_tier, parallel: a Gather over a Parallel Seq Scan');
is($rows[0]{hits}, $t_pages,
	"bpext_explain_tier, parallel: the plan's tier hits are t's pages, all read by the workers");
is($pscan->{hits}, $t_pages, 'bpext_explain_tier, parallel: and so are the scan\'s');
rows_add_up('bpext_explain_tier, parallel', @rows);

# Every plan node in an EXPLAIN JSON plan, with its parent.
sub plan_nodes
{
	my ($plan, $parent) = @_;
	my @nodes = ([ $plan, $parent ]);
	push @nodes, plan_nodes($_, $plan) for @{ $plan->{Plans} // [] };
	return @nodes;
}

sub explain_json
{
	my ($settings, $query) = @_;
	my $m = measure($settings,
		"EXPLAIN (ANALYZE, BUFFERS, TIER, VERBOSE, FORMAT JSON) $query");
	my $top = decode_json($m->{result})->[0];
	return ($m, $top, plan_nodes($top->{Plan}, undef));
}

# Every node counted: hits + data-file reads = BUFFERS' shared read.
sub nodes_add_up
{
	my ($name, @nodes) = @_;
	my $counted = 0;
	for my $n (map { $_->[0] } @nodes)
	{
		next unless exists $n->{'Tier Hit Blocks'};
		$counted++;
		is($n->{'Tier Hit Blocks'} + $n->{'Tier Data-File Read Blocks'},
			$n->{'Shared Read Blocks'},
			"$name: $n->{'Node Type'}: $n->{'Tier Hit Blocks'} hits + "
			  . "$n->{'Tier Data-File Read Blocks'} data-file reads = shared read");
	}
	return $counted;
}

# --- EXPLAIN (ANALYZE, TIER), 18 and later ---------------------------------------
SKIP:
{
	skip 'EXPLAIN options of extensions are PostgreSQL 18 and later', 1
	  unless $has_explain_option;

	my ($ret, $out, $err) =
	  $node->psql('postgres', 'EXPLAIN (TIER) SELECT count(*) FROM t');
	like($err, qr/EXPLAIN option TIER requires ANALYZE/,
		'EXPLAIN (TIER) without ANALYZE is refused');

	my ($m, $top, @nodes) = explain_json($serial, $both);
	where_pages_were('EXPLAIN', $m);
	my $plan = $top->{Plan};
	is($top->{'Tier Hit Blocks'}, $t_pages, "EXPLAIN: the plan's tier hits are t's pages");
	is($top->{'Tier Data-File Read Blocks'}, $u_pages,
		"EXPLAIN: the plan's data-file reads are u's pages");
	is($top->{'Tier Hit Blocks'} + $top->{'Tier Data-File Read Blocks'},
		$plan->{'Shared Read Blocks'},
		"EXPLAIN: the plan's hits + data-file reads = its shared read");
	my ($t) = grep { ($_->[0]{'Relation Name'} // '') eq 't' } @nodes;
	my ($u) = grep { ($_->[0]{'Relation Name'} // '') eq 'u' } @nodes;
	is("$t->[0]{'Tier Hit Blocks'} $t->[0]{'Tier Data-File Read Blocks'}", "$t_pages 0",
		'EXPLAIN: the scan of t read every page from the tier');
	is("$u->[0]{'Tier Hit Blocks'} $u->[0]{'Tier Data-File Read Blocks'}", "0 $u_pages",
		'EXPLAIN: the scan of u read every page from its data file');
	cmp_ok(nodes_add_up('EXPLAIN', @nodes), '>=', 4,
		'EXPLAIN: the aggregates and scans are counted');
	same_as_counters('EXPLAIN', $m, $top->{'Tier Hit Blocks'},
		$top->{'Tier Data-File Read Blocks'}, $top->{'Tier Hit Time'},
		$top->{'Tier Data-File Read Time'},
		$top->{'Tier Data-File Reads Not Timed'});

	# The workers do all the reading: their counts must reach the leader.
	($m, $top, @nodes) = explain_json($parallel, 'SELECT count(*) FROM t');
	where_pages_were('EXPLAIN, parallel', $m);
	my ($g) = grep { $_->[0]{'Node Type'} eq 'Gather' } @nodes;
	cmp_ok($g->[0]{'Workers Launched'}, '>=', 1, 'EXPLAIN, parallel: workers ran');
	is($top->{'Tier Hit Blocks'}, $t_pages,
		"EXPLAIN, parallel: the plan's tier hits are t's pages, all read by the workers");
	is($g->[0]{'Tier Hit Blocks'}, $t_pages, 'EXPLAIN, parallel: and so are the Gather\'s');
	nodes_add_up('EXPLAIN, parallel', @nodes);
	ok(!exists $top->{'Tier Parallel Workers'},
		'EXPLAIN, parallel: no note that the workers were not counted');

	# A Hash node is run without ExecProcNode: no figures of its own, and
	# its reads in its parent's.
	($m, $top, @nodes) = explain_json(
		"$serial SET enable_mergejoin = off; SET enable_nestloop = off;",
		'SELECT count(*) FROM t JOIN u USING (id)');
	my ($hash) = grep { $_->[0]{'Node Type'} eq 'Hash' } @nodes;
	ok($hash && !exists $hash->[0]{'Tier Hit Blocks'},
		'EXPLAIN, hash join: the Hash node shows no tier figures');
	is($hash->[1]{'Tier Data-File Read Blocks'}, $u_pages,
		"EXPLAIN, hash join: the Hash Join's data-file reads include its Hash's, u's pages");
	nodes_add_up('EXPLAIN, hash join', @nodes);

	# A node never run shows zeros.
	($m, $top, @nodes) = explain_json($serial,
		'SELECT count(*) FROM t WHERE id > 0 AND (SELECT false)');
	my ($never) = grep { ($_->[0]{'Relation Name'} // '') eq 't' } @nodes;
	is( "$never->[0]{'Actual Loops'} $never->[0]{'Tier Hit Blocks'} "
		  . "$never->[0]{'Tier Data-File Read Blocks'}",
		'0 0 0', 'EXPLAIN: the scan never run shows no reads');

	# The text format, as a DBA reads it.
	$m = measure($serial, "EXPLAIN (ANALYZE, BUFFERS, TIER, TIMING OFF, COSTS OFF) $both");
	like($m->{result}, qr/^\s+Buffers: shared read=\Q$t_pages\E\n\s+Tier: hit=\Q$t_pages\E\n/m,
		'EXPLAIN, text: the scan of t, "Tier: hit=N" under its Buffers line');
	like($m->{result}, qr/^\s+Tier: data-file read=\Q$u_pages\E\n/m,
		'EXPLAIN, text: the scan of u, "Tier: data-file read=N"');
	like($m->{result},
		qr/^Tier Total: hit=\Q$t_pages\E data-file read=\Q$u_pages\E$/m,
		'EXPLAIN, text: the plan\'s total');
	unlike($m->{result}, qr/I\/O Timings/, 'EXPLAIN, text: no timings with TIMING OFF');
}

# --- bpext.log_tier_reads_min_duration ------------------------------------------------
for my $case ([ 'serial', $serial ], [ 'parallel', $parallel ])
{
	my ($name, $settings) = @$case;
	my $offset = -s $node->logfile;
	my $statement = "SELECT count(*) FROM t /* logged $name */";
	$m = measure("$settings SET bpext.log_tier_reads_min_duration = 0;", $statement);
	where_pages_were("log, $name", $m);
	my @lines = grep { /tier hits: .*\Q$statement\E/ }
	  split /\n/, slurp_file($node->logfile, $offset);
	# The first run fills the caches; the second is measured.
	is(scalar @lines, 2, "log, $name: one line per run of the statement");
	my ($hits, $reads) = ($lines[-1] // '') =~
	  /tier hits: (\d+) \([\d.]+ ms\)  data-file reads: (\d+) \(/;
	is($hits, $t_pages, "log, $name: the statement's tier hits are t's pages");
	next if $name eq 'parallel';
	is($m->{s_hits}, $hits, "log, $name: tier hits = bpext_stats' delta");
	is($m->{s_reads}, $reads, "log, $name: data-file reads = bpext_stats' delta");
}
my $offset = -s $node->logfile;
$node->safe_psql('postgres', 'SELECT count(*) FROM t /* not logged */');
ok(!$node->log_contains(qr/tier hits: .*not logged/, $offset),
	'log: nothing is logged with the setting at its default');

# --- the update from 1.3 -------------------------------------------------------------
my $surface = q{
	SELECT pg_describe_object(d.classid, d.objid, 0) || ' | ' ||
	       coalesce(CASE d.classid
	           WHEN 'pg_proc'::regclass THEN
	               (SELECT pg_get_functiondef(p.oid) || ' acl=' || coalesce(p.proacl::text, '')
	                  FROM pg_proc p WHERE p.oid = d.objid)
	           WHEN 'pg_class'::regclass THEN
	               (SELECT c.relkind::text || ' acl=' || coalesce(c.relacl::text, '') ||
	                       CASE WHEN c.relkind = 'v' THEN ' ' || pg_get_viewdef(c.oid) ELSE '' END
	                  FROM pg_class c WHERE c.oid = d.objid)
	       END, '')
	  FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
	 WHERE d.refclassid = 'pg_extension'::regclass AND e.extname = 'bpext'
	   AND d.deptype = 'e'
	 ORDER BY 1};
$node->safe_psql('postgres', 'CREATE DATABASE upd; CREATE DATABASE fresh');
$node->safe_psql('upd', q{CREATE EXTENSION bpext VERSION '1.3'});
$node->safe_psql('upd', q{ALTER EXTENSION bpext UPDATE TO '1.4'});
$node->safe_psql('fresh', q{CREATE EXTENSION bpext VERSION '1.4'});
is($node->safe_psql('upd', "SELECT extversion FROM pg_extension WHERE extname = 'bpext'"),
	'1.4', 'updated from 1.3 to 1.4');
is($node->safe_psql('upd', $surface), $node->safe_psql('fresh', $surface),
	'1.3 -> 1.4: the same objects, definitions and privileges as a fresh 1.4');
is( $node->safe_psql('upd', q{
		SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute
		 WHERE attrelid = 'bpext_database_stats'::regclass AND attnum > 5}),
	'tier_read_time,data_file_read_time,data_file_reads_not_timed',
	'1.4: bpext_database_stats\' new columns come last');
is( $node->safe_psql('upd', q{
		SELECT has_function_privilege('pg_monitor', 'bpext_database_stats_1_4()', 'EXECUTE')
		   AND NOT has_function_privilege('public', 'bpext_database_stats_1_4()', 'EXECUTE')
		   AND has_function_privilege('public', 'bpext_explain_tier(text)', 'EXECUTE')}),
	't', '1.4: pg_monitor reads the per-database times; anyone may run bpext_explain_tier');
is($node->safe_psql('upd', q{SELECT count(*) FROM bpext_explain_tier('SELECT 1')}),
	'1', '1.4: bpext_explain_tier works in the updated database');

$node->stop;
done_testing();


# Copyright (c) 2026, bpext developers

# monitoring/postgres_exporter.yaml against the real postgres_exporter
# (Debian's prometheus-postgres-exporter, unpacked by test/install-deps.sh
# without installing its service): the exporter runs as a pg_monitor
# member, /metrics is scraped on loopback, and every bpext metric is there
# with its help text and the value the views give at the same moment; every
# series monitoring/grafana-dashboard.json plots is among them.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use HTTP::Tiny;
use JSON::PP;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

bpext_needs_contrib('pg_prewarm');

my $exporter = $ENV{BPEXT_EXPORTER}
  // '/var/tmp/bpext-exporter/usr/bin/prometheus-postgres-exporter';
plan skip_all => "no postgres_exporter at $exporter (test/install-deps.sh unpacks it)"
  unless -x $exporter;
my $queries = "$FindBin::RealBin/../../monitoring/postgres_exporter.yaml";

my $nrows = 40000;
my $node = bpext_init_node('main', tier_size => '64MB', max_size => '64MB');
$node->start;
bpext_setup($node);
bpext_load_table($node, 'postgres', 't', $nrows);
bpext_fill_and_read($node, 'some tier traffic', $nrows);
$node->safe_psql('postgres', 'CREATE ROLE watcher LOGIN IN ROLE pg_monitor');

my $port = PostgreSQL::Test::Cluster::get_free_port();
my $dsn = sprintf('host=%s port=%d user=watcher dbname=postgres sslmode=disable',
	$node->host, $node->port);
my ($out, $err) = ('', '');
my $h = IPC::Run::start(
	[ $exporter, "--web.listen-address=127.0.0.1:$port",
	  "--extend.query-path=$queries", '--disable-default-metrics',
	  '--disable-settings-metrics' ],
	'>', \$out, '2>', \$err,
	init => sub { $ENV{DATA_SOURCE_NAME} = $dsn });

my $http = HTTP::Tiny->new(timeout => 10);
sub scrape
{
	for (1 .. 100)
	{
		my $r = $http->get("http://127.0.0.1:$port/metrics");
		return $r->{content} if $r->{success} && $r->{content} =~ /^bpext_stats_/m;
		usleep(100_000);
	}
	return undef;
}

# The views' values just before and just after a scrape, read in one
# session: once the server has settled (a first scrape has warmed the
# exporter's connection, the push has nothing left to do), they agree, and
# the scrape must give the same.
my $session = $node->background_psql('postgres');
my $stats_sql = q{SELECT row_to_json(s) FROM bpext_stats s};
my ($metrics, $before, $after);
for my $try (1 .. 20)
{
	$before = $session->query_safe($stats_sql);
	$metrics = scrape();
	$after = $session->query_safe($stats_sql);
	last if !defined $metrics || $before eq $after;
	usleep(500_000);
}
ok(defined $metrics, 'the exporter serves bpext metrics')
  or diag("exporter stderr: $err");
$metrics //= '';

# The value of a metric in the scrape, the first series whose labels
# contain the given text if any is given.
sub metric
{
	my ($name, $labels) = @_;
	for my $line (split /\n/, $metrics)
	{
		next unless $line =~ /^\Q$name\E(\{[^}]*\})?\s+(\S+)$/;
		return $2 if !defined $labels || index($1 // '', $labels) >= 0;
	}
	return undef;
}

# Every metric the queries file declares has a help text and a type.
my $checked = 0;
my %usage;
{
	my ($query, $col);
	for my $line (split /\n/, slurp_file($queries))
	{
		$query = $1 if $line =~ /^(bpext_\w+):/;
		$col = $1 if $line =~ /^    - (\w+):/;
		$usage{"${query}_$col"} = $1 if $line =~ /^        usage: (\w+)/;
	}
}
for my $name (sort keys %usage)
{
	next if $usage{$name} eq 'LABEL';
	like($metrics, qr/^# HELP \Q$name\E \S/m, "$name has a help text");
	my $type = $usage{$name} eq 'COUNTER' ? 'counter' : 'gauge';
	like($metrics, qr/^# TYPE \Q$name\E $type$/m, "$name is a $type");
	$checked++;
}
cmp_ok($checked, '>=', 30, "$checked bpext metrics declared");

# Values: bpext_stats.
is($after, $before, 'the views did not move during the scrape');
my %s = %{ _decode($after) };
for my $col (qw(extension_page_reads extension_page_writes extension_free_pages
	extension_allocated_pages lookups hits misses data_file_reads
	data_file_read_calls bytes_read bytes_written invalidations
	pages_pushed pages_dual_written pages_prewarmed crc_failures io_errors
	clean_evictions missed_pushes admission_pauses admission_resumes
	hits_probed hits_probed_cached))
{
	cmp_ok(metric("bpext_stats_$col") // 'NaN', '==', $s{$col},
		"bpext_stats_$col is $s{$col}");
}
cmp_ok($s{extension_page_reads}, '>', 1000, 'the tier has served reads');
ok(abs(metric('bpext_stats_read_seconds') - $s{read_time_ms} / 1000) < 1e-6,
	'bpext_stats_read_seconds is read_time_ms / 1000');
ok(abs(metric('bpext_stats_hit_ratio') - $s{hit_ratio}) < 1e-9,
	'bpext_stats_hit_ratio');

# bpext_configuration, with its labels.
my $cfg = bpext_config($node);
my $path = bpext_tier_path($node);
cmp_ok(metric('bpext_configuration_state', qq{path="$path"}) // -1, '==', 5,
	'bpext_configuration_state is 5, labelled with the path');
like($metrics, qr/^bpext_configuration_state\{[^}]*state_description="BUFFER POOL EXTENSION ENABLED"/m,
	'... and the state description');
cmp_ok(metric('bpext_configuration_current_size_bytes') // -1, '==',
	$cfg->{current_size_in_kb} * 1024, 'bpext_configuration_current_size_bytes');
cmp_ok(metric('bpext_configuration_allocated_pages') // -1, '==',
	$cfg->{allocated_pages}, 'bpext_configuration_allocated_pages');
cmp_ok(metric('bpext_configuration_last_error_time') // -1, '==', 0,
	'bpext_configuration_last_error_time is 0 without an error');

# bpext_database_stats, labelled by database, with its read times (1.4).
my ($tier_reads, $tier_read_time, $data_file_read_time, $not_timed) =
  split /\|/, $node->safe_psql('postgres', q{
	SELECT tier_reads, tier_read_time, data_file_read_time,
	       data_file_reads_not_timed
	  FROM bpext_database_stats WHERE datname = 'postgres'});
cmp_ok(metric('bpext_database_stats_tier_reads', 'datname="postgres"') // -1, '==', $tier_reads,
	"bpext_database_stats_tier_reads{datname=\"postgres\"} is $tier_reads");
ok( abs((metric('bpext_database_stats_tier_read_seconds', 'datname="postgres"') // -1)
		- $tier_read_time / 1000) < 1e-6,
	'bpext_database_stats_tier_read_seconds is tier_read_time / 1000');
ok( abs((metric('bpext_database_stats_data_file_read_seconds', 'datname="postgres"') // -1)
		- $data_file_read_time / 1000) < 1e-6,
	'bpext_database_stats_data_file_read_seconds is data_file_read_time / 1000');
cmp_ok(metric('bpext_database_stats_data_file_reads_not_timed', 'datname="postgres"') // -1,
	'==', $not_timed, "bpext_database_stats_data_file_reads_not_timed is $not_timed");

# Every series the Grafana dashboard plots is one the exporter serves.
my $dashboard = "$FindBin::RealBin/../../monitoring/grafana-dashboard.json";
my %used;
my $panels = JSON::PP::decode_json(slurp_file($dashboard))->{panels};
for my $panel (@$panels)
{
	my $exprs = join(' ', map { $_->{expr} } @{ $panel->{targets} });
	$used{$1} = 1 while $exprs =~ /\b(bpext_\w+)/g;
}
for my $name (sort keys %used)
{
	like($metrics, qr/^\Q$name\E[{ ]/m, "the dashboard's $name is served");
}

$h->kill_kill;
$node->stop;
done_testing();

sub _decode
{
	my ($json) = @_;
	my %h;
	while ($json =~ /"(\w+)":(null|"[^"]*"|[-0-9.e+]+)/g)
	{
		my ($k, $v) = ($1, $2);
		$v =~ s/^"|"$//g;
		$h{$k} = $v eq 'null' ? undef : $v;
	}
	return \%h;
}

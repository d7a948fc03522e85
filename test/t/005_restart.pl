
# Copyright (c) 2026, bpext developers

# After a restart, an immediate shutdown, a crash restart (a backend killed
# with SIGKILL) or the bpext worker's own death, the tier starts empty and
# valid: nothing of what it held before is served, even where WAL replay
# changed the data files, and it serves reads again afterwards.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

bpext_needs_contrib('pg_prewarm');

my $nrows = 100000;    # about 23MB: larger than shared_buffers (16MB)
my $nbuffers = 2048;   # shared_buffers in pages

# Warm restarts are 011_warm_restart's: here every start is cold.
my $node = bpext_init_node('main', tier_size => '256MB',
	conf => "restart_after_crash = on\nbpext.warm_restart = off\n");
my $path = bpext_tier_path($node);
$node->start;
bpext_setup($node);
bpext_load_table($node, 'postgres', 't', $nrows);
my $relpages = $node->safe_psql('postgres',
	"SELECT (pg_relation_size('t') + pg_relation_size('t_pkey')) / 8192");

# Fill the tier with the whole table; it then holds more pages than shared
# buffers could push into a fresh tier.
sub fill_tier
{
	my ($name) = @_;
	$node->safe_psql('postgres', q{
		CHECKPOINT;
		SELECT bpext_prewarm('t'), bpext_prewarm('t_pkey');
	});
	cmp_ok(bpext_config($node)->{allocated_pages},
		'>=', $relpages, "$name: the tier holds the whole table");
	return;
}

# Right after the tier is enabled again: nothing served yet, and nothing
# kept from before.  $exact: no page can have been pushed yet (a clean
# start: shared buffers hold nothing the clock hand has passed).
# $same_shmem: the server's shared memory (and bpext's counters) survived.
sub check_fresh
{
	my ($name, $exact, $same_shmem) = @_;
	ok(bpext_wait_for_state($node, 'enabled'), "$name: tier enabled again");
	my $row = $node->safe_psql('postgres', q{
		SELECT c.allocated_pages, s.extension_page_reads, s.hits
		  FROM bpext_configuration c, bpext_stats s});
	my ($allocated, $reads, $hits) = split /\|/, $row;
	if ($exact)
	{
		is($allocated, 0, "$name: the tier starts empty");
	}
	else
	{
		cmp_ok($allocated, '<=', $nbuffers,
			"$name: the tier starts empty (only pages pushed since: $allocated)");
	}
	# The counters live in shared memory: a new one starts them at zero.
	unless ($same_shmem)
	{
		is($reads, 0, "$name: nothing served yet");
		is($hits, 0, "$name: no hits yet");
	}
	is(bpext_file_mode($path), 0600, "$name: tier file mode 0600");
	is(bpext_file_size($path), bpext_tier_file_bytes(256), "$name: tier file size");
	return;
}

# Read the whole table (once, in order, so no page is read twice): nothing
# may come from the tier's old contents.  Then fill the tier and read again
# from it.
sub check_reads
{
	my ($name, $ver, $exact) = @_;
	bpext_evict_shared_buffers($node);
	my $before = bpext_stat($node, 'extension_page_reads');
	bpext_check_table($node, 'postgres', 't', rows => $nrows, ver => $ver,
		scan => 'index', name => "$name, first read");
	my $reads = bpext_stat($node, 'extension_page_reads') - $before;
	# After a clean start no page of the table can have entered the new
	# tier before this read; otherwise pages pushed from what recovery left
	# in shared buffers may be served (they are correct, as checked).
	cmp_ok($reads, '<', 100,
		"$name: first read found no old pages in the tier ($reads)")
	  if $exact;

	fill_tier($name);
	bpext_evict_shared_buffers($node);
	$before = bpext_stat($node, 'extension_page_reads');
	bpext_check_table($node, 'postgres', 't', rows => $nrows, ver => $ver,
		scan => 'index', name => "$name, from the tier");
	$reads = bpext_stat($node, 'extension_page_reads') - $before;
	cmp_ok($reads, '>', 1000, "$name: the tier serves reads again ($reads)");
	return;
}

# Update rows without a checkpoint: after a crash, WAL replay brings the
# data files to the new versions, while the tier held the old ones.
my $ver = '0';
my $round = 0;
sub update_without_checkpoint
{
	$round++;
	my $mod = $round + 2;
	$node->safe_psql('postgres', qq{
		UPDATE t SET ver = ver + $round, v = bpext_expected_v(id, ver + $round)
		 WHERE id % $mod = 0;
	});
	$ver = "($ver) + CASE WHEN id % $mod = 0 THEN $round ELSE 0 END";
	return;
}

my $log_start = -s $node->logfile;

# --- a clean restart --------------------------------------------------------
fill_tier('before restart');
$node->restart;
check_fresh('restart', 1);
check_reads('restart', $ver, 1);

# --- an immediate shutdown --------------------------------------------------
update_without_checkpoint();
$node->stop('immediate');
$node->start;
check_fresh('immediate shutdown', 0);
check_reads('immediate shutdown', $ver);

# --- a crash restart: a backend killed with SIGKILL -------------------------
update_without_checkpoint();
my $offset = -s $node->logfile;
my ($v_out, $v_err) = ('', '');
my $victim = IPC::Run::start(
	[
		'psql', '-XAtq', '-d',
		$node->connstr('postgres') . ' application_name=victim',
		'-c', 'SELECT pg_sleep(300)'
	],
	'>', \$v_out, '2>', \$v_err);
ok($node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = 'victim' AND wait_event = 'PgSleep'"),
	'victim backend is running');
my $pid = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE application_name = 'victim'");
ok(kill('KILL', $pid), "SIGKILL sent to backend $pid");
$victim->finish;
$node->wait_for_log(qr/all server processes terminated; reinitializing/, $offset);
$node->wait_for_log(qr/database system is ready to accept connections/, $offset);
check_fresh('crash restart', 0);
check_reads('crash restart', $ver);

# --- the bpext worker dies --------------------------------------------------
# It is restarted after a second, throws the map away and re-enables the
# tier with the same file.
update_without_checkpoint();
fill_tier('before worker restart');
my $worker = bpext_worker_pid($node);
ok($worker, "the bpext worker runs (pid $worker)");
kill('TERM', $worker);
my $restarted;
for (1 .. 300)
{
	$restarted = bpext_worker_pid($node);
	last if $restarted && $restarted != $worker;
	usleep(50_000);
}
isnt($restarted, $worker, 'the bpext worker is restarted');
check_fresh('worker restart', 0, 1);
check_reads('worker restart', $ver);

# No tier error along the way (the old file lock, for one, is gone with
# the processes that held it).
is(bpext_count_in_log($node, qr/WARNING:.*bpext|bpext could not/, $log_start),
	0, 'no bpext warnings in the log');
is(bpext_config($node)->{last_error}, undef, 'no tier error recorded');

$node->stop;
done_testing();

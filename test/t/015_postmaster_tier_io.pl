
# Copyright (c) 2026, bpext developers

# The postmaster's own tier I/O on a device that hangs: the save that
# finishes the map at exit (writes, an fsync and the header) and the
# decision at start (the header and the relation table).  Both run in a
# helper process the postmaster stops waiting for once bpext.io_timeout
# passes without an answer (src/helper_io.c).  With every tier read or
# write held up for ten minutes (the fault injector's *_sleep faults):
#
#  - a fast shutdown finishes, well within pg_ctl's wait, and says the map
#    was not saved, and why; the next start is cold;
#  - a start finishes and is cold, saying why, and the server serves every
#    row right from the data files;
#  - once the device answers again, the tier comes back by itself (the
#    worker's own open of the file, in a helper too, did not answer either:
#    bpext.recovery_interval), and a clean restart is warm.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $so = bpext_build_fault_injector();
plan skip_all => 'no C compiler to build the fault injector' unless $so;

my $nrows = 20000;
my $hang_ms = 600_000;    # longer than any wait below

my $ssd = PostgreSQL::Test::Utils::tempdir('ssd');
my $ctl = PostgreSQL::Test::Utils::tempdir('faults');
my $path = "$ssd/bpext.tier";

my $node = bpext_init_node('main', tier_size => '64MB', max_size => '64MB',
	tier_path => $path,
	conf => "bpext.io_timeout = '1s'\nbpext.recovery_interval = '1s'\n");
bpext_start_with_faults($node, $so, "$ssd/", $ctl);
bpext_setup($node);
bpext_load_table($node, 'postgres', 't', $nrows);

# The table in the tier, nothing dirty in shared buffers (a dual write
# from the shutdown checkpoint would itself hang), and the directory
# written by the worker, so that the save has only its own writes left.
sub fill_and_settle
{
	my ($name) = @_;
	$node->safe_psql('postgres', q{
		CHECKPOINT;
		SELECT bpext_prewarm('t'), bpext_prewarm('t_pkey');
		CHECKPOINT;
	});
	cmp_ok(bpext_config($node)->{allocated_pages}, '>', 0,
		"$name: the tier holds pages");
	sleep(2);    # the worker writes the slot directory once a second
	return;
}

# pg_ctl stop -m fast with a wait of its own: it fails if the postmaster
# is still there after that long.
sub stop_within
{
	my ($seconds) = @_;
	local $ENV{PGCTLTIMEOUT} = $seconds;
	return $node->stop('fast', fail_ok => 1);
}

# --- a shutdown while every tier write hangs ------------------------------------
fill_and_settle('hung write at shutdown');
my $offset = -s $node->logfile;
bpext_fault($node, 'write_sleep', 1, $hang_ms);
ok(stop_within(60), 'hung write at shutdown: pg_ctl stop -m fast finishes');
like(slurp_file($node->logfile, $offset),
	qr/bpext: the tier map was not saved at shutdown: the tier file did not answer within 1000 ms/,
	'hung write at shutdown: the log says the map was not saved, and why');
cmp_ok(bpext_faults_injected($node, 'write_sleep'), '>', 0,
	'hung write at shutdown: the save met the hung device');
bpext_fault($node, 'write_sleep', 0);

$offset = -s $node->logfile;
bpext_start_with_faults($node, $so, "$ssd/", $ctl);
ok(bpext_wait_for_state($node, 'enabled'), 'after the hung save: tier enabled');
ok($node->wait_for_log(qr/bpext: cold start: /, $offset),
	'after the hung save: the start is decided');
is(bpext_config($node)->{start_mode}, 'cold',
	'after the hung save: the start is cold');
bpext_check_table($node, 'postgres', 't', rows => $nrows, scan => 'index',
	name => 'after the hung save');

# --- a start while every tier read hangs ------------------------------------------
fill_and_settle('hung read at start');
$node->stop;
$offset = -s $node->logfile;
# Long enough for the postmaster to give up on its helper, and the worker
# on its own (its open of the file reads the header); the worker tries
# again by itself once the device answers.
bpext_fault($node, 'read_sleep', 1, 8000);
bpext_start_with_faults($node, $so, "$ssd/", $ctl);
ok($node->wait_for_log(
		qr/bpext: cold start: the tier file did not answer within 1000 ms/,
		$offset),
	'hung read at start: the start is cold, and says why');
bpext_check_table($node, 'postgres', 't', rows => $nrows, scan => 'seq',
	name => 'hung read at start, served from the data files');
bpext_fault($node, 'read_sleep', 0);
ok(bpext_wait_for_state($node, 'enabled', 60),
	'hung read at start: the tier is enabled once the device answers');
is(bpext_config($node)->{start_mode}, 'cold',
	'hung read at start: start_mode cold');

# --- the device answers again: a clean restart is warm ----------------------------
# A healthy fsync on a busy machine can take longer than the 1 s the hung
# cases use: this save must not be given up for that.
$node->safe_psql('postgres',
	"ALTER SYSTEM SET bpext.io_timeout = '60s'; SELECT pg_reload_conf();");
fill_and_settle('healthy again');
$offset = -s $node->logfile;
$node->stop;
like(slurp_file($node->logfile, $offset),
	qr/bpext: saved the tier map at shutdown/, 'healthy again: the map is saved');
$offset = -s $node->logfile;
bpext_start_with_faults($node, $so, "$ssd/", $ctl);
ok($node->wait_for_log(qr/bpext: warm start: \d+ of \d+ saved tier pages reused/,
		$offset),
	'healthy again: the start is warm');
bpext_check_table($node, 'postgres', 't', rows => $nrows, scan => 'index',
	name => 'healthy again');

$node->stop;
done_testing();


# Copyright (c) 2026, bpext developers

# The tier file's descriptor, handed to the bpext worker by the helper that
# opens it (helper_io.c), when the worker looks for more from the helper
# after the descriptor came and finds nothing there yet.  A worker that
# read what an earlier receive left in its buffer as a new descriptor
# closed the one it had been given and kept its number: its writer helper
# then wrote through whatever took that number next (a pipe, in the CI run
# of 108_enable_race that found it: "could not write to the tier file:
# Illegal seek"), which could have been a data file.  With
# bpext.test_helper_pause the helper waits before it says it is done, so
# that the worker's wait ends in between, every time.
#  1. The tier enabled at start, then moved to another file and switched
#     off and on, each time through such a helper: the tier stays
#     enabled, bpext_prewarm stores the table (through the writer helper),
#     the tier serves the table back, byte for byte, and no I/O error,
#     checksum failure or error state is seen.
#  2. The worker never hands a helper a descriptor that is not the tier
#     file (tier_file_worker_fd_valid): nothing in the log says it did.
# Needs a test-hook build (bpext.test_helper_pause); skipped otherwise.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# bpext_evict_shared_buffers reads a relation through pg_prewarm.
bpext_needs_contrib('pg_prewarm');

my @paths = (PostgreSQL::Test::Utils::tempdir('ssd_a') . '/bpext.tier',
	PostgreSQL::Test::Utils::tempdir('ssd_b') . '/bpext.tier');
my $node = bpext_init_node('main', tier_size => '64MB', max_size => '64MB',
	tier_path => $paths[0],
	conf => "bpext.test_helper_pause = 300\nbpext.io_timeout = 10s\n");
$node->start;
bpext_setup($node);
if ($node->safe_psql('postgres',
		"SELECT current_setting('bpext.test_helper_pause', true)") ne '300ms')
{
	$node->stop;
	plan skip_all => 'bpext is not a BPEXT_TEST_HOOKS=1 build';
}

my $nrows = 20000;    # about 600 pages
bpext_load_table($node, 'postgres', 't', $nrows);
my $offset = 0;

# The tier holds t, and serves it back right.
sub tier_serves_t
{
	my ($step) = @_;
	my $cfg = bpext_config($node);
	is($cfg->{state}, 5, "$step: the tier is enabled");
	# A page of t left dirty in shared buffers (hint bits, the load's
	# VACUUM) would be written when evicted below, taking its stored copy
	# out of the tier.
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $stored = $node->safe_psql('postgres', "SELECT bpext_prewarm('t')");
	cmp_ok($stored, '>', 500, "$step: bpext_prewarm stored $stored pages of t");
	bpext_evict_shared_buffers($node);
	my $before = bpext_stat($node, 'extension_page_reads');
	bpext_check_table($node, 'postgres', 't', rows => $nrows,
		name => "$step, through the tier");
	cmp_ok(bpext_stat($node, 'extension_page_reads') - $before,
		'>', 500, "$step: the tier served t");
	is(bpext_stat($node, 'io_errors'), 0, "$step: no io_errors");
	is(bpext_stat($node, 'crc_failures'), 0, "$step: no crc_failures");
	$cfg = bpext_config($node);
	is($cfg->{state}, 5, "$step: the tier is still enabled");
	is($cfg->{last_error} // '', '', "$step: no last_error");
	return;
}

tier_serves_t('enabled at start');

is($node->safe_psql('postgres', "SELECT bpext_enable('$paths[1]', '64MB')"),
	'BUFFER POOL EXTENSION ENABLED', 'moved to another file');
tier_serves_t('moved');

$node->safe_psql('postgres', 'SELECT bpext_disable()');
is($node->safe_psql('postgres', "SELECT bpext_enable('$paths[0]', '64MB')"),
	'BUFFER POOL EXTENSION ENABLED', 'switched off and on again');
tier_serves_t('on again');

is(bpext_count_in_log($node,
		qr/descriptor \d+ of the tier file|bpext tier disabled after an error/,
		$offset),
	0, 'no helper was handed a descriptor that is not the tier file');

$node->stop;
done_testing();

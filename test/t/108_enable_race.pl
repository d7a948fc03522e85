
# Copyright (c) 2026, bpext developers

# The tier moved between two files (bpext_enable with a new path), and
# switched off and on again, over and over, while pages are stored into it
# from every direction: dual writes of an updater's checkpoints, read
# admission by readers that evict as they go, and bpext_prewarm in a loop.
#
# A store that took its admission ticket while one file was in use must
# never publish into the map of the next: its page went into the old file,
# the map would point into the new one, and the next reader of that slot
# would find a checksum mismatch and switch the tier off (nothing wrong is
# served: the CRC catches it).  So: no crc_failures and no io_errors, the
# tier is in state 5 after every move, readers never see a wrong row, and
# the tier serves reads at the end.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

bpext_needs_contrib('pg_prewarm');

my $nrows = 60000;    # about 14MB, with 16MB of shared buffers
my $secs = 25;
my @paths = (PostgreSQL::Test::Utils::tempdir('ssd_a') . '/bpext.tier',
	PostgreSQL::Test::Utils::tempdir('ssd_b') . '/bpext.tier');

my $node = bpext_init_node('main', tier_size => '192MB', max_size => '256MB',
	tier_path => $paths[0],
	conf => "bpext.admission = 'read'\nbpext.write_policy = 'dual_write'\n");
$node->start;
bpext_setup($node);
bpext_load_table($node, 'postgres', 't', $nrows);
bpext_create_hammer($node, $nrows, 'r.ver', 2000);

# Updates a slice of t and checkpoints, so that every page written goes
# to the tier too; bpext_prewarm stores pages in batches.  Both run for
# secs seconds; prewarm fails while the tier is off, which is expected.
$node->safe_psql('postgres', q{
CREATE PROCEDURE updater(secs float8) LANGUAGE plpgsql AS $$
DECLARE
	stop timestamptz := clock_timestamp() + secs * interval '1 second';
	k int := 0;
BEGIN
	WHILE clock_timestamp() < stop LOOP
		UPDATE t SET ver = ver + 1, v = bpext_expected_v(id, ver + 1)
		 WHERE id % 50 = k % 50;
		COMMIT;
		CHECKPOINT;
		PERFORM pg_sleep(0.05);
		k := k + 1;
	END LOOP;
END $$;
CREATE FUNCTION prewarmer(secs float8) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	stop timestamptz := clock_timestamp() + secs * interval '1 second';
	n bigint := 0;
BEGIN
	WHILE clock_timestamp() < stop LOOP
		BEGIN
			n := n + bpext_prewarm('t') + bpext_prewarm('t_pkey');
		EXCEPTION WHEN object_not_in_prerequisite_state THEN
			PERFORM pg_sleep(0.01);
		END;
	END LOOP;
	RETURN n;
END $$;
});

my $crc_before = bpext_stat($node, 'crc_failures');
my $io_before = bpext_stat($node, 'io_errors');
my $races_before = bpext_stat($node, 'publish_races');
my $offset = -s $node->logfile;

my @loads;
for my $sql ("SELECT hammer($secs)", "SELECT hammer($secs)",
	"CALL updater($secs)", "SELECT prewarmer($secs)")
{
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d',
		  $node->connstr('postgres'), '-c', $sql ],
		'>', \$out, '2>', \$err);
	push @loads, [ $sql, $h, \$out, \$err ];
}

# Move the tier back and forth, and now and then off and on, until the
# loads are done.
my ($moves, $offs, $not_enabled) = (0, 0, 0);
my $stop = time + $secs;
my $i = 0;
while (time < $stop)
{
	$i++;
	if ($i % 5 == 0)
	{
		$node->safe_psql('postgres', 'SELECT bpext_disable()');
		$offs++;
	}
	my $state = $node->safe_psql('postgres',
		"SELECT bpext_enable('$paths[$i % 2]', '192MB')");
	$moves++;
	$not_enabled++ if $state ne 'BUFFER POOL EXTENSION ENABLED';
	usleep(int(rand(200_000)));
}
note("$moves moves between two files, $offs of them from off");
is($not_enabled, 0, 'every bpext_enable() left the tier enabled');

for my $l (@loads)
{
	my ($sql, $h, $out, $err) = @$l;
	$h->finish;
	is($h->result(0), 0, "$sql finished");
	unlike($$err, qr/ERROR|FATAL/, "$sql: no error") or diag($$err);
	note("$sql: $$out");
}

is(bpext_stat($node, 'crc_failures') - $crc_before, 0, 'no crc_failures');
is(bpext_stat($node, 'io_errors') - $io_before, 0, 'no io_errors');
is(bpext_count_in_log($node, qr/bpext tier disabled after an error/, $offset),
	0, 'the tier never switched itself off');
my $cfg = bpext_config($node);
is($cfg->{state}, 5, 'state 5 at the end');
is($cfg->{last_error} // '', '', 'no last_error');
note('publish races lost by stores: '
	  . (bpext_stat($node, 'publish_races') - $races_before));

# Everything reads back right, and the tier still serves.
my $ver = 'ver';
bpext_check_table($node, 'postgres', 't', rows => $nrows, ver => $ver,
	scan => 'seq', name => 'after the moves');
note('after the moves, t has '
	  . $node->safe_psql('postgres', "SELECT pg_relation_size('t') / 8192")
	  . ' pages; bpext_prewarm stores '
	  . $node->safe_psql('postgres', q{
	CHECKPOINT;
	SELECT bpext_prewarm('t') + bpext_prewarm('t_pkey');
}));
bpext_evict_shared_buffers($node);
my $before = bpext_stat($node, 'extension_page_reads');
bpext_check_table($node, 'postgres', 't', rows => $nrows, ver => $ver,
	scan => 'index', name => 'after the moves, through the tier');
cmp_ok(bpext_stat($node, 'extension_page_reads') - $before, '>', 1000,
	'the tier serves reads after the moves');
is(bpext_stat($node, 'crc_failures') - $crc_before, 0,
	'no crc_failures reading it back');

$node->stop;
done_testing();


# Copyright (c) 2026, bpext developers

# bpext_drop_clean_buffers cuts a piece's hash chains off their buckets
# under the partition lock and unhashes their slots after releasing it
# (tier_map_index.c, "Emptying the map").  The test-hook build's holds
# (src/test_hooks.c) stop a process at a chosen point until the test lets
# it go, so each race below happens in its worst order, with no timing:
#  1. A read through smgr has pinned and read a page's slot; a drop cuts
#     the slot's chain and is held before unhashing it; the page is changed
#     and written, and the write's invalidation cannot find the slot.  Let
#     go, the read must not trust its re-check (chain_cuts): it goes to the
#     data file and returns the page as written.
#  2. A drop is held with a slot past the tier's new end cut off its chain
#     but still HASHED; a shrink started then must wait for the drop
#     (wait_for_cuts, which notes cut_wait) instead of cutting the file with
#     the slot still hashed, and ends once the drop is let go.
#  3. The same for a disable (tier_map_clear).
#  4. While a drop of the whole map is held in its walk, the bpext worker
#     writes no slot directory chunk (slot_directory.c, "Emptying the
#     whole map"; a build that does writes the chunks that still hold
#     pages, under the drop's new directory id); once the drop is
#     cancelled, its session still open, the worker writes them.
# It needs a bpext built with `make BPEXT_TEST_HOOKS=1`, and is skipped
# otherwise.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use IPC::Run ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

my $node = bpext_init_node('main', tier_size => '16MB', max_size => '16MB',
	conf => "bpext.scan_workers = 0\n");
$node->start;
bpext_setup($node);

my ($ret, $out, $err) = $node->psql('postgres',
	slurp_file("$FindBin::RealBin/../sql/bpext_test.sql"));
if ($ret != 0)
{
	$node->stop;
	plan skip_all => 'bpext is not a BPEXT_TEST_HOOKS=1 build';
}
# Every process starts with the holds on.
$node->append_conf('postgresql.conf', "bpext.test_holds = on\n");
$node->restart;
bpext_wait_for_state($node, 'enabled') or die 'the tier is not enabled';

my $data = $node->data_dir;

# Hold the first process that gets to point for a slot of table (at or
# past min_slot); see src/test_hooks.c.
sub hold
{
	my ($point, $table, $min_slot) = @_;
	my $rel = $node->safe_psql('postgres',
		"SELECT pg_relation_filenode('$table')");
	unlink("$data/bpext_test_reached.$point");
	open(my $fh, '>', "$data/bpext_test_hold.tmp") or die $!;
	print $fh "$rel " . ($min_slot // 0) . "\n";
	close($fh) or die $!;
	rename("$data/bpext_test_hold.tmp", "$data/bpext_test_hold.$point")
	  or die "could not write the $point hold: $!";
	return;
}

sub release
{
	my ($point) = @_;
	unlink("$data/bpext_test_held.$point")
	  or die "nothing was held at $point: $!";
	return;
}

sub reached
{
	my ($point) = @_;
	return -e "$data/bpext_test_reached.$point";
}

sub background
{
	my ($sql, $out, $err) = @_;
	return IPC::Run::start(
		[ 'psql', '-X', '-At', '-v', 'ON_ERROR_STOP=1', '-d',
		  $node->connstr('postgres'), '-c', $sql ],
		'>', $out, '2>', $err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
}

sub in_tier
{
	my ($t) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT count(*) FROM bpext_buffer_descriptors
		 WHERE is_in_bpool_extension AND relfilenode = pg_relation_filenode('$t')});
}

sub size_kb
{
	return bpext_config($node)->{current_size_in_kb};
}

$node->safe_psql('postgres', q{
	CREATE TABLE t (id int, v text);
	INSERT INTO t VALUES (1, 'written-before-the-drop');
	CREATE TABLE f (id int, pad text);
	INSERT INTO f SELECT g, repeat('f', 1000) FROM generate_series(1, 7 * 1500) g;
	VACUUM t; VACUUM f; CHECKPOINT;
	SELECT bpext_drop_clean_buffers();
});

# 1. A read that a cut overlapped.
$node->safe_psql('postgres', "SELECT bpext_prewarm('t')");
is(in_tier('t'), 1, 'the page of t is in the tier');

my ($r_out, $r_err, $d_out, $d_err) = ('', '', '', '');
hold('read', 't');
my $reader = background(q{
	WITH r AS MATERIALIZED (SELECT bpext_test_read_block('t', 0) AS page)
	SELECT position(convert_to('written-after-the-cut', 'SQL_ASCII') IN page) > 0
	  FROM r}, \$r_out, \$r_err);
ok(bpext_wait_until(sub { reached('read') }),
	'the read has pinned and read the slot of t, and is held');

hold('cut', 't');
my $drop = background('SELECT bpext_drop_clean_buffers()', \$d_out, \$d_err);
ok(bpext_wait_until(sub { reached('cut') }),
	"a drop has cut the slot's chain and is held before unhashing it");

# Through shared buffers: the lookup misses (the chain is cut), and the
# write's invalidation does not find the cut slot.
$node->safe_psql('postgres', q{
	UPDATE t SET v = 'written-after-the-cut'; CHECKPOINT});

release('read');
$reader->finish;
chomp $r_out;
is($r_err, '', 'the read ended without an error');
is($r_out, 't', 'the read overlapped by the cut returned the page as written');

release('cut');
$drop->finish;
is($d_err, '', 'the drop ended without an error');

# 2. A shrink while a drop is held with a slot past the new end cut off.
my $new_slots = 8 * 1024 * 1024 / 8192 - 1;
$node->safe_psql('postgres', "SELECT bpext_prewarm('f')");
my $f_in_tier = in_tier('f');
cmp_ok($f_in_tier, '>', $new_slots,
	"$f_in_tier pages of f in the tier, so some are past slot $new_slots");

hold('cut', 'f', $new_slots);
($d_out, $d_err) = ('', '');
$drop = background('SELECT bpext_drop_clean_buffers()', \$d_out, \$d_err);
ok(bpext_wait_until(sub { reached('cut') }),
	'a drop has cut the chain of a slot of f past the new end and is held');
my $held_slot = slurp_file("$data/bpext_test_reached.cut");
chomp $held_slot;
cmp_ok($held_slot, '>=', $new_slots, "the slot held, $held_slot, is past the new end");

unlink("$data/bpext_test_reached.cut_wait");
$node->safe_psql('postgres',
	"ALTER SYSTEM SET bpext.size = '8MB'; SELECT pg_reload_conf()");
ok(bpext_wait_until(sub { reached('cut_wait') || size_kb() == 8192 }),
	'the shrink waits, or is over');
ok(reached('cut_wait'), 'the shrink waits for the cut chains');
is(size_kb(), 16384, 'the shrink is not over while the drop is held');

release('cut');
$drop->finish;
is($d_err, '', 'the drop ended without an error');
ok(bpext_wait_until(sub { size_kb() == 8192 }), 'the shrink is over once the drop is');
is( $node->safe_psql('postgres',
		'SELECT extension_free_pages + extension_allocated_pages FROM bpext_stats'),
	$new_slots, 'after the shrink, allocated + free pages = the new size');

# 3. A disable while a drop is held with a slot cut off.
$node->safe_psql('postgres', "SELECT bpext_prewarm('f')");
cmp_ok(in_tier('f'), '>', 0, 'f is in the tier again');
hold('cut', 'f');
($d_out, $d_err) = ('', '');
$drop = background('SELECT bpext_drop_clean_buffers()', \$d_out, \$d_err);
ok(bpext_wait_until(sub { reached('cut') }),
	'a drop has cut the chain of a slot of f and is held');

unlink("$data/bpext_test_reached.cut_wait");
$node->safe_psql('postgres',
	"ALTER SYSTEM SET bpext.size = 0; SELECT pg_reload_conf()");
ok( bpext_wait_until(
		sub { reached('cut_wait') || bpext_config($node)->{state} == 0 }),
	'the disable waits, or is over');
ok(reached('cut_wait'), 'the disable waits for the cut chains');
isnt(bpext_config($node)->{state}, 0,
	'the disable is not over while the drop is held');

release('cut');
$drop->finish;
is($d_err, '', 'the drop ended without an error');
ok(bpext_wait_for_state($node, 'disabled'), 'the disable is over once the drop is');

$node->safe_psql('postgres',
	"ALTER SYSTEM SET bpext.size = '8MB'; SELECT pg_reload_conf()");
ok(bpext_wait_for_state($node, 'enabled'), 'the tier is enabled again');
$node->safe_psql('postgres', "SELECT bpext_prewarm('t')");
is( $node->safe_psql('postgres',
		"SELECT v FROM t"),
	'written-after-the-cut', 't reads back as written');

# 4. The slot directory while a drop is held, then cancelled.  Each
# directory chunk starts with the id it was written under
# (src/slot_directory.c); the drop asks for a new one.
sub chunk_ids
{
	my $directory = size_kb() * 1024;    # past the header and the slots
	open(my $fh, '<:raw', bpext_tier_path($node))
	  or die "could not open the tier file: $!";
	my @ids;
	for my $chunk (0, 1)
	{
		sysseek($fh, $directory + $chunk * 8192, 0) or die $!;
		sysread($fh, my $id, 8) == 8 or die 'short read of a directory chunk';
		push @ids, unpack('Q<', $id);
	}
	close $fh;
	return "@ids";
}

$node->safe_psql('postgres', "SELECT bpext_prewarm('f')");
my $f_pages = in_tier('f');
cmp_ok($f_pages, '>', 511,
	"$f_pages pages of f in the tier, in both directory chunks");
bpext_wait_for_quiet_worker($node);
my $ids = chunk_ids();
like($ids, qr/^([1-9]\d*) \1$/, "both chunks are written, under one id ($ids)");
hold('cut', 'f');
($d_out, $d_err) = ('', '');
# The session stays on after the drop (no ON_ERROR_STOP): its backend's
# exit must not be what lets the directory be written again.
$drop = IPC::Run::start(
	[ 'psql', '-X', '-At', '-d', $node->connstr('postgres'),
	  '-c', 'SELECT bpext_drop_clean_buffers()',
	  '-c', 'SELECT pg_sleep(600)' ],
	'>', \$d_out, '2>', \$d_err);
ok(bpext_wait_until(sub { reached('cut') }), 'a drop of f is held in its walk');
sleep 4;    # the worker's directory rounds come once a second
is(chunk_ids(), $ids, 'while the drop is held the worker writes no chunk');
my $drop_pid = $node->safe_psql('postgres', q{
	SELECT pid FROM pg_stat_activity
	 WHERE query = 'SELECT bpext_drop_clean_buffers()'});
like($drop_pid, qr/^\d+$/, 'the held drop is found');
$node->safe_psql('postgres', "SELECT pg_cancel_backend($drop_pid)");
release('cut');
ok( bpext_wait_until(
		sub {
			$drop->pump_nb;
			$d_err =~ /canceling statement due to user request/;
		}),
	'the drop is cancelled once let go');
cmp_ok(bpext_config($node)->{allocated_pages}, '>', 0,
	'the cancelled drop left pages in the tier');
ok(bpext_wait_until(sub { chunk_ids() ne $ids }),
	'after the cancelled drop, its session still open, the worker writes '
	  . 'the chunks that still hold pages, under the new id');
$node->safe_psql('postgres', "SELECT pg_cancel_backend($drop_pid)");
$drop->finish;

ok(!$node->log_contains('TRAP|server process .* was terminated|checksum mismatch'),
	'no backend crashed, no checksum mismatch');
$node->stop;
done_testing();

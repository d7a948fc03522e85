
# Copyright (c) 2026, bpext developers

# Turning the tier on and off and resizing it, online, with SQL:
# bpext_enable(), bpext_disable(), bpext_resize().  The configuration view
# follows every step, the file on disk follows (created 0600, removed on
# disable, grown and shrunk), a re-enabled tier starts empty even if the
# data changed while it was off, reads stay correct while the size changes
# under them, and the tier never holds more pages than its current size.
# Only superusers may change the tier; pg_monitor members may watch it.

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

my $nrows = 100000;    # about 23MB: larger than shared_buffers

my $node = bpext_init_node('main', tier_size => 0, max_size => '256MB');
my $path = bpext_tier_path($node);
$node->start;
bpext_setup($node, wait => 0);

sub slots_of_mb { my ($mb) = @_; return $mb * 1024 * 1024 / 8192 - 1; }

# --- disabled at start ------------------------------------------------------
my $cfg = bpext_config($node);
is($cfg->{state}, 0, 'bpext.size = 0: state 0');
is($cfg->{state_description}, 'BUFFER POOL EXTENSION DISABLED',
	'bpext.size = 0: state description');
is($cfg->{current_size_in_kb}, 0, 'bpext.size = 0: no size');
is($cfg->{max_size_in_kb}, 256 * 1024, 'max_size_in_kb is bpext.max_size');
ok(!-e $path, 'bpext.size = 0: no tier file');

bpext_load_table($node, 'postgres', 't', $nrows);
# Nothing dirty: no later write can take a prewarmed page out again.
$node->safe_psql('postgres', 'CHECKPOINT');
my ($ret, $out, $err) =
  $node->psql('postgres', "SELECT bpext_prewarm('t')");
like($err, qr/the bpext tier is not enabled/, 'bpext_prewarm() needs the tier');

# --- enable -----------------------------------------------------------------
my $offset = -s $node->logfile;
is($node->safe_psql('postgres', "SELECT bpext_enable('$path', '64MB')"),
	'BUFFER POOL EXTENSION ENABLED', 'bpext_enable() returns the new state');
$cfg = bpext_config($node);
is($cfg->{state}, 5, 'enabled: state 5');
is($cfg->{path}, $path, 'enabled: path');
is($cfg->{current_size_in_kb}, 64 * 1024, 'enabled: current_size_in_kb');
# Nothing but what the worker could push from shared buffers since.
cmp_ok($cfg->{allocated_pages}, '<=', 2048, 'enabled: a new tier starts empty');
is(bpext_file_size($path), bpext_tier_file_bytes(64), 'enabled: file size on disk');
is(bpext_file_mode($path), 0600, 'enabled: file mode 0600');
ok($node->log_contains(qr/LOG:  bpext tier enabled: "\Q$path\E", 64 MB/, $offset),
	'enabled: logged');
my $auto = slurp_file($node->data_dir . '/postgresql.auto.conf');
like($auto, qr/bpext.path = '\Q$path\E'/, 'enabled: bpext.path persisted');
like($auto, qr/bpext.size = '64MB'/, 'enabled: bpext.size persisted');

my $loaded = $node->safe_psql('postgres',
	"SELECT bpext_prewarm('t') + bpext_prewarm('t_pkey')");
my $relpages = $node->safe_psql('postgres',
	"SELECT (pg_relation_size('t') + pg_relation_size('t_pkey')) / 8192");
cmp_ok($loaded, '>', 1000, "bpext_prewarm() loads pages ($loaded)");
cmp_ok($loaded, '<=', $relpages,
	"bpext_prewarm() loads at most the relation ($relpages pages)");
cmp_ok(bpext_config($node)->{allocated_pages},
	'>=', $relpages, 'after bpext_prewarm() the whole relation is in the tier');
is($node->safe_psql('postgres',
		"SELECT bpext_prewarm('t') + bpext_prewarm('t_pkey')"),
	'0', 'bpext_prewarm() again loads nothing');

sub read_back
{
	my ($name, $ver, $min_tier_reads) = @_;
	bpext_evict_shared_buffers($node);
	my $before = bpext_stat($node, 'extension_page_reads');
	bpext_check_table($node, 'postgres', 't', rows => $nrows, ver => $ver,
		scan => 'index', name => $name);
	my $reads = bpext_stat($node, 'extension_page_reads') - $before;
	if ($min_tier_reads)
	{
		cmp_ok($reads, '>=', $min_tier_reads,
			"$name: served by the tier ($reads pages)");
	}
	else
	{
		is($reads, 0, "$name: nothing served by the tier");
	}
	return;
}
read_back('enabled', '0', 1000);

# --- disable ----------------------------------------------------------------
is($node->safe_psql('postgres', 'SELECT bpext_disable()'),
	'BUFFER POOL EXTENSION DISABLED', 'bpext_disable() returns the new state');
$cfg = bpext_config($node);
is($cfg->{state}, 0, 'disabled: state 0');
is($cfg->{current_size_in_kb}, 0, 'disabled: no size');
is($cfg->{allocated_pages}, 0, 'disabled: nothing allocated');
ok(!-e $path, 'disabled: tier file removed');
is($node->safe_psql('postgres', 'SELECT bpext_disable()'),
	'BUFFER POOL EXTENSION DISABLED', 'bpext_disable() twice is harmless');

# Change the data while the tier is off; a re-enabled tier must not bring
# back what it held before.
$node->safe_psql('postgres', q{
	UPDATE t SET ver = 1, v = bpext_expected_v(id, 1) WHERE id % 2 = 0;
	CHECKPOINT;
});
my $ver = 'CASE WHEN id % 2 = 0 THEN 1 ELSE 0 END';
read_back('disabled', $ver, 0);

# --- re-enable --------------------------------------------------------------
($ret, $out, $err) = $node->psql('postgres', 'SELECT bpext_enable()');
like($err, qr/bpext.path and bpext.size must both be set/,
	're-enable without a size after disable: error');
is($node->safe_psql('postgres', "SELECT bpext_enable(size => '64MB')"),
	'BUFFER POOL EXTENSION ENABLED', 're-enable');
$cfg = bpext_config($node);
is($cfg->{state}, 5, 're-enabled: state 5');
is($cfg->{path}, $path, 're-enabled: same path');
# The old tier held the whole table, more than shared_buffers could have
# pushed since.
cmp_ok($cfg->{allocated_pages}, '<=', 2048,
	're-enabled: the old contents did not come back');
is(bpext_file_size($path), bpext_tier_file_bytes(64), 're-enabled: file size');
is(bpext_file_mode($path), 0600, 're-enabled: file mode 0600');
bpext_check_table($node, 'postgres', 't', rows => $nrows, ver => $ver,
	scan => 'index', name => 're-enabled');
$node->safe_psql('postgres', "SELECT bpext_prewarm('t'), bpext_prewarm('t_pkey')");
read_back('re-enabled', $ver, 1000);

# --- move the tier to another file, online ---------------------------------
my $path2 = $node->basedir . '/bpext2.tier';
is($node->safe_psql('postgres', "SELECT bpext_enable('$path2')"),
	'BUFFER POOL EXTENSION ENABLED', 'enable with another path');
ok(!-e $path, 'new path: old file removed');
is(bpext_file_size($path2), bpext_tier_file_bytes(64), 'new path: new file, same size');
is(bpext_file_mode($path2), 0600, 'new path: file mode 0600');
is(bpext_config($node)->{path}, $path2, 'new path: shown');
$node->safe_psql('postgres', "SELECT bpext_prewarm('t'), bpext_prewarm('t_pkey')");
read_back('new path', $ver, 1000);

# --- resize, online, under a reader -----------------------------------------
# A background session checks random rows in a loop while the tier grows
# and shrinks under it; it raises an error on the first wrong row.
bpext_create_hammer($node, $nrows, 'CASE WHEN r.id % 2 = 0 THEN 1 ELSE 0 END');

my ($h_out, $h_err) = ('', '');
my $hammer = IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c', 'SELECT hammer(5)' ],
	'>', \$h_out, '2>', \$h_err);

# Check that the tier never holds more than its size while it is shrunk.
sub check_bounded
{
	my ($mb, $name) = @_;
	my $slots = slots_of_mb($mb);
	my $worst = 0;
	for (1 .. 10)
	{
		my $s = bpext_stats($node);
		$worst = $s->{extension_allocated_pages}
		  if $s->{extension_allocated_pages} > $worst;
		usleep(50_000);
	}
	cmp_ok($worst, '<=', $slots,
		"$name: allocated pages never above the size ($worst <= $slots)");
	return;
}

for my $step ([ '128MB', 128 ], [ '16MB', 16 ], [ '8MB', 8 ], [ '64MB', 64 ])
{
	my ($size, $mb) = @$step;
	is($node->safe_psql('postgres', "SELECT bpext_resize('$size')"),
		'BUFFER POOL EXTENSION ENABLED', "resize to $size");
	$cfg = bpext_config($node);
	is($cfg->{current_size_in_kb}, $mb * 1024, "resize to $size: current_size_in_kb");
	is(bpext_file_size($path2), bpext_tier_file_bytes($mb),
		"resize to $size: file size on disk");
	cmp_ok($cfg->{allocated_pages}, '<=', slots_of_mb($mb),
		"resize to $size: allocated_pages within the size");
	# Fill it past its size: prewarm admits more pages than fit.
	$node->safe_psql('postgres', "SELECT bpext_prewarm('t')");
	check_bounded($mb, "resize to $size");
	my $s = bpext_stats($node);
	is($s->{extension_allocated_pages} + $s->{extension_free_pages},
		slots_of_mb($mb), "resize to $size: allocated + free = size");
}

$hammer->finish;
like($h_out, qr/^\d+$/, 'reader during resizes: finished');
cmp_ok($h_out || 0, '>', 1000, "reader during resizes: checked $h_out rows");
is($h_err, '', 'reader during resizes: no error');
cmp_ok(bpext_stat($node, 'extension_page_evictions'),
	'>', 0, 'a full tier evicts pages');
read_back('after resizes', $ver, 1000);

# --- privileges -------------------------------------------------------------
$node->safe_psql('postgres', q{
	CREATE ROLE alice LOGIN;
	CREATE ROLE watcher LOGIN IN ROLE pg_monitor;
	GRANT SELECT ON t TO watcher;
});
my $auto_before = slurp_file($node->data_dir . '/postgresql.auto.conf');

sub as_user
{
	my ($user, $sql) = @_;
	return $node->psql('postgres', $sql,
		connstr => $node->connstr('postgres') . " user=$user");
}

for my $user ('alice', 'watcher')
{
	for my $call ('bpext_enable()', 'bpext_disable()', "bpext_resize('32MB')")
	{
		(my $fn = $call) =~ s/\(.*//;
		($ret, $out, $err) = as_user($user, "SELECT $call");
		isnt($ret, 0, "$user: $call fails");
		like($err, qr/permission denied for function $fn/,
			"$user: $call: permission denied");
	}
}

($ret, $out, $err) = as_user('alice', 'SELECT state FROM bpext_configuration');
like($err, qr/permission denied for view bpext_configuration/,
	'alice: bpext_configuration is not readable');
($ret, $out, $err) = as_user('alice', 'SELECT hits FROM bpext_stats');
like($err, qr/permission denied for view bpext_stats/,
	'alice: bpext_stats is not readable');
($ret, $out, $err) = as_user('alice', 'SELECT * FROM bpext_stats_1_0()');
like($err, qr/permission denied for function bpext_stats_1_0/,
	'alice: bpext_stats_1_0() is not callable');
($ret, $out, $err) = as_user('alice', "SELECT bpext_prewarm('t')");
like($err, qr/permission denied for table t/,
	'alice: bpext_prewarm() needs SELECT on the table');

($ret, $out, $err) = as_user('watcher',
	'SELECT state, current_size_in_kb FROM bpext_configuration');
is($out, '5|65536', 'pg_monitor member reads bpext_configuration');
is($err, '', 'pg_monitor member: no error');
($ret, $out, $err) = as_user('watcher',
	'SELECT hits > 0, crc_failures FROM bpext_stats');
is($out, 't|0', 'pg_monitor member reads bpext_stats');
($ret, $out, $err) = as_user('watcher', "SELECT bpext_prewarm('t') >= 0");
is($out, 't', 'a user with SELECT may prewarm the table');

# Granting EXECUTE does not make a non-superuser able to change the tier.
$node->safe_psql('postgres', q{
	GRANT EXECUTE ON FUNCTION bpext_disable() TO alice;
	GRANT EXECUTE ON FUNCTION bpext_resize(text) TO alice;
});
($ret, $out, $err) = as_user('alice', 'SELECT bpext_disable()');
like($err, qr/permission denied for function bpext_disable/,
	'alice with EXECUTE: bpext_disable() still denied');
like($err, qr/Only superusers can change the bpext tier configuration/,
	'alice with EXECUTE: detail says superuser');
($ret, $out, $err) = as_user('alice', "SELECT bpext_resize('8MB')");
like($err, qr/permission denied for function bpext_resize/,
	'alice with EXECUTE: bpext_resize() still denied');
is(slurp_file($node->data_dir . '/postgresql.auto.conf'),
	$auto_before, 'denied calls changed no setting');
$cfg = bpext_config($node);
is($cfg->{state}, 5, 'denied calls: tier still enabled');
is($cfg->{current_size_in_kb}, 64 * 1024, 'denied calls: size unchanged');

$node->stop;
done_testing();

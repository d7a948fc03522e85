
# Copyright (c) 2026, bpext developers

# bpext.min_free_space: a tier never preallocates a file system that also
# holds the cluster's files (data directory, pg_wal, tablespaces) below the
# reserve.  bpext_enable() and bpext_resize() refuse such a size with an
# ERROR and write nothing to postgresql.auto.conf; a reload and a server
# start (cold or warm) log a WARNING and keep the tier as it was (or in
# the error state), never failing the server.  Only the growth counts:
# shrinking, and reusing a file of the same size, always work.  A file
# system that holds none of the cluster's files needs no reserve.
#
# The reserve is set above the free space of the test's file system
# ('100%', or its whole size in MB), so the refusals do not depend on how
# much room the machine has left.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use File::Path qw(rmtree);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = bpext_init_node('main', tier_size => 0, max_size => '256MB');
my $path = bpext_tier_path($node);
my $auto_conf = $node->data_dir . '/postgresql.auto.conf';
$node->start;
bpext_setup($node, wait => 0);

# The size and free space, in MB, of the file system holding dir.
sub fs_of
{
	my ($dir) = @_;
	my @lines = split /\n/, `df -Pk '$dir'`;
	my @f = split /\s+/, $lines[-1];
	die "cannot read df output for $dir" unless @f >= 4 && $f[1] =~ /^\d+$/;
	return (int($f[1] / 1024), int($f[3] / 1024));
}

# The MB the messages give: the file's bytes (slots and slot directory),
# rounded up, as src/free_space.c rounds what a growth takes.
sub mb_up { my ($bytes) = @_; return int(($bytes + 1024 * 1024 - 1) / (1024 * 1024)); }
my $growth64 = mb_up(bpext_tier_file_bytes(64));
my $held64 = int(bpext_tier_file_bytes(64) / (1024 * 1024));
my $growth128 = mb_up(bpext_tier_file_bytes(128) - bpext_tier_file_bytes(64));

my ($fs_mb, $free_mb) = fs_of($node->data_dir);
note("data directory's file system: $fs_mb MB, $free_mb MB free");
my ($tier_fs_mb) = fs_of($node->basedir);
is($tier_fs_mb, $fs_mb, 'the tier file and the data directory share a file system');

# Set bpext.min_free_space and wait until new sessions see it.
sub set_reserve
{
	my ($value) = @_;
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET bpext.min_free_space = '$value'; SELECT pg_reload_conf();");
	$node->poll_query_until('postgres',
		"SELECT current_setting('bpext.min_free_space') = '$value'")
	  or die "bpext.min_free_space did not become $value";
	return;
}

# Run sql, expecting an error; returns the verbose error output.
sub fails
{
	my ($sql, $name) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', $sql,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	isnt($ret, 0, "$name: fails");
	return $err;
}

# Wait for the worker to have acted on a 128 MB bpext.size (refused, or
# done), then report whether it logged the refusal the regexp describes.
sub worker_refused
{
	my ($regexp, $offset) = @_;
	$node->wait_for_log(
		qr/WARNING:  bpext could not (enable|resize) the tier|LOG:  bpext tier (resized to|enabled: "[^"]*",) 128 MB/,
		$offset);
	return $node->log_contains($regexp, $offset);
}

sub tier_state
{
	my $cfg = bpext_config($node);
	return "$cfg->{state} $cfg->{current_size_in_kb}";
}

# --- the setting ---------------------------------------------------------
is($node->safe_psql('postgres',
		"SELECT boot_val FROM pg_settings WHERE name = 'bpext.min_free_space'"),
	'10%', 'bpext.min_free_space defaults to 10%');
for my $bad ('101%', '-1%', 'x%', 'lots', '-5MB')
{
	my $err = fails("ALTER SYSTEM SET bpext.min_free_space = '$bad'",
		"bpext.min_free_space = '$bad'");
	like($err, qr/invalid value for parameter "bpext.min_free_space"/,
		"bpext.min_free_space = '$bad': refused");
}
like(fails("SET bpext.min_free_space = '1%'", 'SET in a session'),
	qr/cannot be changed now/, 'bpext.min_free_space is set by reload');

# --- bpext_enable() refused ----------------------------------------------
set_reserve('100%');
my $err = fails("SELECT bpext_enable('$path', '64MB')",
	'enable above the reserve');
like($err,
	qr/ERROR:  53100: bpext could not enable the tier: a tier file of 64 MB at "\Q$path\E" would leave less than bpext.min_free_space free on the file system it shares with the data directory/,
	'enable above the reserve: message names the file, the size and the data directory');
like($err,
	qr/DETAIL:  That file system has \d+ MB free\. The tier file holds 0 MB there now and would take $growth64 MB more for the 64 MB asked, and bpext.min_free_space \(100%\) keeps \d+ MB free\./,
	'enable above the reserve: detail gives free space, size and reserve');
like($err,
	qr/HINT:  Choose a smaller size, put the tier file on a file system that holds none of the cluster's files \(data directory, pg_wal, tablespaces\), or lower bpext.min_free_space\./,
	'enable above the reserve: hint says how to fix it');
is(tier_state(), '0 0', 'enable above the reserve: tier still disabled');
ok(!-e $path, 'enable above the reserve: no file created');
unlike(slurp_file($auto_conf), qr/bpext\.(size|path)/,
	'enable above the reserve: nothing written to postgresql.auto.conf');

# The same with the reserve as a size: the whole file system.
set_reserve("${fs_mb}MB");
like(fails("SELECT bpext_enable('$path', '64MB')", 'enable, reserve in MB'),
	qr/bpext could not enable the tier: .*bpext.min_free_space \(${fs_mb}MB\) keeps $fs_mb MB free/s,
	'enable, reserve in MB: refused, the reserve is the size given');
is(tier_state(), '0 0', 'enable, reserve in MB: tier still disabled');

# --- no reserve: it works --------------------------------------------------
set_reserve('0');
is($node->safe_psql('postgres', "SELECT bpext_enable('$path', '64MB')"),
	'BUFFER POOL EXTENSION ENABLED', 'no reserve: enable works');
is(tier_state(), '5 65536', 'no reserve: 64 MB tier');
is(bpext_file_size($path), bpext_tier_file_bytes(64), 'no reserve: file on disk');

# --- bpext_resize() refused; only the growth counts -------------------------
set_reserve('100%');
$err = fails("SELECT bpext_resize('128MB')", 'resize above the reserve');
like($err,
	qr/ERROR:  53100: bpext could not resize the tier: a tier file of 128 MB at "\Q$path\E" would leave less than bpext.min_free_space free/,
	'resize above the reserve: message');
like($err, qr/The tier file holds $held64 MB there now and would take $growth128 MB more for the 128 MB asked/,
	'resize above the reserve: only the growth counts');
is(tier_state(), '5 65536', 'resize above the reserve: size unchanged');
is(bpext_file_size($path), bpext_tier_file_bytes(64),
	'resize above the reserve: file unchanged');
like(slurp_file($auto_conf), qr/bpext.size = '64MB'/,
	'resize above the reserve: postgresql.auto.conf unchanged');

is($node->safe_psql('postgres', "SELECT bpext_resize('32MB')"),
	'BUFFER POOL EXTENSION ENABLED', 'shrinking works whatever the reserve');
is(tier_state(), '5 32768', 'shrunk to 32 MB');
like(fails("SELECT bpext_resize('64MB')", 'growing back'),
	qr/bpext could not resize the tier: a tier file of 64 MB/,
	'growing back above the reserve: refused');
is($node->safe_psql('postgres', 'SELECT bpext_enable()'),
	'BUFFER POOL EXTENSION ENABLED',
	'bpext_enable() at the current size needs no room');
is(tier_state(), '5 32768', 'still 32 MB');

# --- a reload of a larger bpext.size: WARNING, the tier keeps its size -------
my $offset = -s $node->logfile;
$node->safe_psql('postgres',
	"ALTER SYSTEM SET bpext.size = '128MB'; SELECT pg_reload_conf();");
ok( worker_refused(
		qr/WARNING:  bpext could not resize the tier: a tier file of 128 MB at "\Q$path\E" would leave less than bpext.min_free_space free on the file system it shares with the data directory\n.*DETAIL:  That file system has \d+ MB free/,
		$offset),
	'reload above the reserve: WARNING with the reason and the numbers');
my $cfg = bpext_config($node);
is("$cfg->{state} $cfg->{current_size_in_kb}", '5 32768',
	'reload above the reserve: tier enabled at its old size');
like($cfg->{last_error}, qr/would leave less than bpext.min_free_space free/,
	'reload above the reserve: last_error says why');
is(bpext_file_size($path), bpext_tier_file_bytes(32),
	'reload above the reserve: file unchanged');
is($node->safe_psql('postgres', 'SELECT 1'), '1',
	'reload above the reserve: the server works');

# --- server start: warm reuse that would grow the file ----------------------
bpext_load_table($node, 'postgres', 't', 20000);
$node->safe_psql('postgres', "CHECKPOINT; SELECT bpext_prewarm('t');");
$offset = -s $node->logfile;
$node->restart;
ok( worker_refused(
		qr/WARNING:  bpext could not resize the tier: a tier file of 128 MB at "\Q$path\E" would leave less than bpext.min_free_space free/,
		$offset),
	'warm start above the reserve: WARNING');
$cfg = bpext_config($node);
is($cfg->{start_mode}, 'warm', 'warm start above the reserve: the start was warm');
is("$cfg->{state} $cfg->{current_size_in_kb}", '5 32768',
	'warm start above the reserve: tier enabled at the saved size');
bpext_check_table($node, 'postgres', 't', rows => 20000,
	name => 'warm start above the reserve');

# --- server start: cold, an existing file that would grow --------------------
$node->safe_psql('postgres',
	"ALTER SYSTEM SET bpext.warm_restart = off; SELECT pg_reload_conf();");
$offset = -s $node->logfile;
$node->restart;
ok( worker_refused(
		qr/WARNING:  bpext could not enable the tier: a tier file of 128 MB at "\Q$path\E" would leave less than bpext.min_free_space free/,
		$offset),
	'cold start above the reserve: WARNING');
ok(bpext_wait_for_state($node, 'error'),
	'cold start above the reserve: state 7 (error)');
$cfg = bpext_config($node);
like($cfg->{last_error}, qr/would leave less than bpext.min_free_space free/,
	'cold start above the reserve: last_error says why');
bpext_check_table($node, 'postgres', 't', rows => 20000,
	name => 'cold start above the reserve: the server works');

# A reload back to the file's own size reuses it: no growth, no room needed.
$node->safe_psql('postgres',
	"ALTER SYSTEM SET bpext.size = '32MB'; SELECT pg_reload_conf();");
ok(bpext_wait_for_state($node, 'enabled'),
	'reload to the existing file size: enabled above the reserve');
is(tier_state(), '5 32768', 'reload to the existing file size: 32 MB');

# Same at server start.
$offset = -s $node->logfile;
$node->restart;
ok(bpext_wait_for_state($node, 'enabled'),
	'cold start at the existing file size: enabled above the reserve');
is(tier_state(), '5 32768', 'cold start at the existing file size: 32 MB');

# --- a size within the reserve works -----------------------------------------
my $half = int($free_mb / 2);
SKIP:
{
	skip "only $free_mb MB free", 4 if $half < 512;
	set_reserve("${half}MB");
	is($node->safe_psql('postgres', "SELECT bpext_resize('64MB')"),
		'BUFFER POOL EXTENSION ENABLED',
		"growth within a reserve of $half MB works");
	is(tier_state(), '5 65536', 'grown to 64 MB');
	set_reserve('1%');
	is($node->safe_psql('postgres', "SELECT bpext_resize('96MB')"),
		'BUFFER POOL EXTENSION ENABLED', 'growth within a reserve of 1% works');
	is(tier_state(), '5 98304', 'grown to 96 MB');
}

# --- a file system of the tier's own: no reserve ----------------------------
my $own = "/dev/shm/bpext-013-$$";
my $own_dev = -d '/dev/shm' && -w '/dev/shm' ? (stat('/dev/shm'))[0] : undef;
SKIP:
{
	skip 'no writable /dev/shm on a file system of its own', 9
	  unless defined $own_dev && $own_dev != (stat($node->data_dir))[0];
	mkdir $own or die "mkdir $own: $!";
	set_reserve('100%');
	is($node->safe_psql('postgres', "SELECT bpext_enable('$own/bpext.tier', '64MB')"),
		'BUFFER POOL EXTENSION ENABLED',
		'a file system without cluster files: enabled whatever the reserve');
	is(tier_state(), '5 65536', 'tier on its own file system: 64 MB');
	is(bpext_file_size("$own/bpext.tier"), bpext_tier_file_bytes(64),
		'tier on its own file system: file on disk');

	# Once a tablespace lives there, the file system needs its reserve.
	mkdir "$own/ts" or die "mkdir $own/ts: $!";
	$node->safe_psql('postgres', "CREATE TABLESPACE reserve_ts LOCATION '$own/ts'");
	my $ts = $node->safe_psql('postgres',
		"SELECT oid FROM pg_tablespace WHERE spcname = 'reserve_ts'");
	like(fails("SELECT bpext_resize('128MB')", 'resize beside a tablespace'),
		qr/bpext could not resize the tier: .* on the file system it shares with tablespace $ts/,
		'a tablespace on the tier\'s file system: resize refused, the tablespace named');
	is(tier_state(), '5 65536', 'beside a tablespace: size unchanged');

	$node->safe_psql('postgres', 'DROP TABLESPACE reserve_ts');
	is($node->safe_psql('postgres', 'SELECT bpext_disable()'),
		'BUFFER POOL EXTENSION DISABLED', 'tier on its own file system: disabled');

	# pg_wal there too (a symbolic link from the data directory) counts.
	my $walnode = bpext_init_node('wal', tier_size => 0, max_size => '64MB',
		init => { extra => [ "--waldir=$own/wal" ] });
	ok(-l $walnode->data_dir . '/pg_wal', 'pg_wal is a symbolic link');
	$walnode->append_conf('postgresql.conf', "bpext.min_free_space = '100%'\n");
	$walnode->start;
	$walnode->safe_psql('postgres', 'CREATE EXTENSION bpext');
	my ($ret, $out, $err) = $walnode->psql('postgres',
		"SELECT bpext_enable('$own/bpext.tier', '32MB')");
	like($err,
		qr/bpext could not enable the tier: .* on the file system it shares with pg_wal/,
		'pg_wal on the tier\'s file system: enable refused, pg_wal named');
	ok(!-e "$own/bpext.tier", 'beside pg_wal: no file created');
	$walnode->stop;
	rmtree($own);
}

$node->stop;
done_testing();


# Copyright (c) 2026, bpext developers

# Bad tier settings never stop the server, never damage a file bpext did not
# create, and say clearly what is wrong: a WARNING in the log, state 7
# (error) with the reason in bpext_configuration, an ERROR from
# bpext_enable().  Covered: a missing directory (at startup), an existing
# file that is not a tier file (with content, empty), a directory, symbolic
# links, a relative path (rejected by the setting's check), a size above
# bpext.max_size (refused, or capped at server start), another cluster's tier file, and loading bpext
# without shared_preload_libraries.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

bpext_needs_contrib('pg_prewarm');

my $node = bpext_init_node(
	'main',
	tier_size => '32MB',
	max_size => '64MB',
	tier_path => PostgreSQL::Test::Utils::tempdir() . '/no_such_dir/bpext.tier');
my $base = $node->basedir;
my $missing = bpext_tier_path($node);

# --- a missing directory at startup ----------------------------------------
$node->start;
bpext_setup($node, wait => 0);
ok(bpext_wait_for_state($node, 'error'), 'missing directory: state 7 (error)');
my $cfg = bpext_config($node);
is($cfg->{state_description}, 'BUFFER POOL EXTENSION ERROR',
	'missing directory: state description');
like($cfg->{last_error}, qr/directory does not exist/,
	'missing directory: last_error says why');
ok(defined $cfg->{last_error_time}, 'missing directory: last_error_time set');
is($cfg->{current_size_in_kb}, 0, 'missing directory: no tier in use');
ok( $node->log_contains(
		qr/WARNING:  bpext could not enable the tier: could not create "\Q$missing\E": the directory does not exist/
	),
	'missing directory: WARNING in the log names the file and the reason');
ok(!-e $missing, 'missing directory: nothing created');

# The server works, without the tier.
bpext_load_table($node, 'postgres', 't', 20000);
bpext_evict_shared_buffers($node);
bpext_check_table($node, 'postgres', 't', rows => 20000,
	name => 'tier in error state');
is(bpext_stat($node, 'extension_page_reads'),
	0, 'tier in error state: nothing read from it');

# bpext_enable() with the same settings fails with the reason.
my ($ret, $out, $err) = $node->psql('postgres', 'SELECT bpext_enable()');
isnt($ret, 0, 'bpext_enable() with a missing directory fails');
like($err, qr/ERROR:  the bpext tier is in state "BUFFER POOL EXTENSION ERROR"/,
	'bpext_enable() error names the state');
like($err, qr/DETAIL:  Last error: .*directory does not exist/,
	'bpext_enable() error gives the reason');

# Try one bad path with bpext_enable(); returns the error output.
sub enable_fails
{
	my ($path, $what, $reason) = @_;
	my $offset = -s $node->logfile;
	my ($ret, $out, $err) =
	  $node->psql('postgres', "SELECT bpext_enable('$path', '32MB')");
	isnt($ret, 0, "$what: bpext_enable() fails");
	like($err, qr/ERROR:  the bpext tier is in state "BUFFER POOL EXTENSION ERROR"/,
		"$what: bpext_enable() error names the state");
	like($err, qr/DETAIL:  Last error: .*$reason/,
		"$what: bpext_enable() error gives the reason");
	ok($node->log_contains(
			qr/WARNING:  bpext could not enable the tier: .*$reason/, $offset),
		"$what: WARNING in the log");
	my $cfg = bpext_config($node);
	is($cfg->{state}, 7, "$what: state 7 (error)");
	like($cfg->{last_error}, qr/$reason/, "$what: last_error says why");
	is($node->safe_psql('postgres', 'SELECT count(*) FROM t'),
		'20000', "$what: queries still work");
	return;
}

# --- an existing file that is not a tier file ------------------------------
my $precious = "$base/precious.dat";
append_to_file($precious, join('', map { "line $_ of a file bpext must not touch\n" } 1 .. 2000));
chmod 0644, $precious;
my $precious_md5 = bpext_file_md5($precious);
my $precious_size = bpext_file_size($precious);
enable_fails($precious, 'non-tier file',
	qr/is not a bpext tier file; bpext will not overwrite it/);
is(bpext_file_md5($precious), $precious_md5, 'non-tier file: content unchanged');
is(bpext_file_size($precious), $precious_size, 'non-tier file: size unchanged');
is(bpext_file_mode($precious), 0644, 'non-tier file: mode unchanged');

my $empty = "$base/empty.dat";
append_to_file($empty, '');
enable_fails($empty, 'empty file', qr/is not a bpext tier file/);
is(bpext_file_size($empty), 0, 'empty file: still empty');

mkdir "$base/a_directory" or die;
enable_fails("$base/a_directory", 'directory', qr/could not open .*a_directory/);
ok(-d "$base/a_directory", 'directory: still a directory');

# --- symbolic links --------------------------------------------------------
my $dangling = "$base/dangling.link";
symlink("$base/link_target.dat", $dangling) or die "symlink: $!";
enable_fails($dangling, 'dangling symlink', qr/is a symbolic link/);
ok(!-e "$base/link_target.dat", 'dangling symlink: target not created');

my $to_precious = "$base/precious.link";
symlink($precious, $to_precious) or die "symlink: $!";
enable_fails($to_precious, 'symlink to a file', qr/is a symbolic link/);
is(bpext_file_md5($precious), $precious_md5,
	'symlink to a file: target content unchanged');

# --- a relative path -------------------------------------------------------
($ret, $out, $err) = $node->psql('postgres',
	"ALTER SYSTEM SET bpext.path = 'relative/bpext.tier'");
isnt($ret, 0, 'relative path: ALTER SYSTEM fails');
like($err, qr/invalid value for parameter "bpext.path"/,
	'relative path: ALTER SYSTEM error');
like($err, qr/bpext.path must be an absolute path/,
	'relative path: ALTER SYSTEM error detail');
($ret, $out, $err) =
  $node->psql('postgres', "SELECT bpext_enable('relative/bpext.tier')");
isnt($ret, 0, 'relative path: bpext_enable() fails');
like($err, qr/tier file path must be absolute/,
	'relative path: bpext_enable() error');
unlike(slurp_file($node->data_dir . '/postgresql.auto.conf'),
	qr/relative/, 'relative path: not written to postgresql.auto.conf');

# --- a good path brings the tier back --------------------------------------
my $good = "$base/good.tier";
is($node->safe_psql('postgres', "SELECT bpext_enable('$good', '32MB')"),
	'BUFFER POOL EXTENSION ENABLED', 'good path: bpext_enable() succeeds');
$cfg = bpext_config($node);
is($cfg->{state}, 5, 'good path: state 5');
is($cfg->{path}, $good, 'good path: path shown');
is($cfg->{current_size_in_kb}, 32 * 1024, 'good path: size');
is(bpext_file_size($good), bpext_tier_file_bytes(32), 'good path: file size on disk');
is(bpext_file_mode($good), 0600, 'good path: file mode 0600');
is(bpext_file_md5($precious), $precious_md5, 'precious file still unchanged');

# --- a size above bpext.max_size -------------------------------------------
# Shared memory for the map is sized from bpext.max_size at server start.
# While the server runs, a larger size is refused wherever it is given; one
# found in the configuration at server start caps the tier with a WARNING
# and never keeps the server from starting ('32TB' typed for '32GB' once
# did: the map then asked for more memory than the machine has).
my $auto_conf = $node->data_dir . '/postgresql.auto.conf';

($ret, $out, $err) =
  $node->psql('postgres', "SELECT bpext_enable('$good', '32TB')");
isnt($ret, 0, 'bpext_enable() above max_size fails');
like($err, qr/ERROR:  tier size 32TB exceeds bpext.max_size/,
	'bpext_enable() above max_size: error');
like($err, qr/DETAIL:  The server reserved shared memory for at most 64 MB/,
	'bpext_enable() above max_size: detail');
like($err, qr/HINT:  Choose a smaller size, or raise bpext.max_size and restart the server/,
	'bpext_enable() above max_size: hint');

($ret, $out, $err) = $node->psql('postgres', "SELECT bpext_resize('128MB')");
isnt($ret, 0, 'bpext_resize() above max_size fails');
like($err, qr/ERROR:  tier size 128MB exceeds bpext.max_size/,
	'bpext_resize() above max_size: error');
like($err, qr/HINT:  Choose a smaller size, or raise bpext.max_size and restart the server/,
	'bpext_resize() above max_size: hint');

($ret, $out, $err) =
  $node->psql('postgres', "ALTER SYSTEM SET bpext.size = '32TB'");
isnt($ret, 0, 'ALTER SYSTEM above max_size fails');
like($err, qr/ERROR:  invalid value for parameter "bpext.size": 33554432/,
	'ALTER SYSTEM above max_size: error');
like($err, qr/DETAIL:  The tier's map in shared memory was sized at server start for at most 64 MB/,
	'ALTER SYSTEM above max_size: detail');
unlike(slurp_file($auto_conf), qr/32TB|128MB/,
	'sizes above max_size: none written to postgresql.auto.conf');
$cfg = bpext_config($node);
is($cfg->{state}, 5, 'sizes above max_size refused: tier still enabled');
is($cfg->{current_size_in_kb}, 32 * 1024,
	'sizes above max_size refused: size unchanged');

# In postgresql.conf, a reload keeps the old value, as for any bad setting.
# (postgresql.auto.conf, where bpext_enable() put the size, would win.)
$node->safe_psql('postgres', 'ALTER SYSTEM RESET bpext.size');
$node->append_conf('postgresql.conf', "bpext.size = '32TB'\n");
my $offset = -s $node->logfile;
$node->reload;
$node->wait_for_log(qr/invalid value for parameter "bpext.size": 33554432/,
	$offset);
is($node->safe_psql('postgres', 'SHOW bpext.size'),
	'32MB', 'size above max_size in postgresql.conf: reload keeps the old value');

# At server start, the tier is capped at bpext.max_size: the server starts.
$offset = -s $node->logfile;
$node->restart;
is($node->safe_psql('postgres', 'SELECT 1'), '1',
	'size above max_size at server start: the server starts');
$node->wait_for_log(
	qr/WARNING:  bpext.size \(33554432 MB\) exceeds bpext.max_size; the tier is limited to 64 MB/,
	$offset);
ok($node->poll_query_until('postgres',
		'SELECT current_size_in_kb FROM bpext_configuration', 64 * 1024),
	'size above max_size at server start: capped at max_size');
$cfg = bpext_config($node);
is($cfg->{state}, 5, 'size above max_size at server start: tier enabled');
is($cfg->{max_size_in_kb}, 64 * 1024, 'size above max_size: max_size_in_kb');
is(bpext_file_size($good), bpext_tier_file_bytes(64),
	'size above max_size: file is max_size on disk');

# The tier works at its clamped size.
bpext_evict_shared_buffers($node);
$node->safe_psql('postgres', "SELECT bpext_prewarm('t')");
bpext_evict_shared_buffers($node);
my $reads = bpext_stat($node, 'extension_page_reads');
bpext_check_table($node, 'postgres', 't', rows => 20000, scan => 'index',
	name => 'clamped tier');
cmp_ok(bpext_stat($node, 'extension_page_reads') - $reads,
	'>', 100, 'clamped tier serves reads');

# --- another cluster's tier file -------------------------------------------
# A second cluster pointed at the first one's tier file refuses it (the
# header carries the system identifier), and the first is unaffected.
my $other = bpext_init_node('other', tier_size => '32MB', preload => 0);
$other->start;

# Without shared_preload_libraries, bpext refuses to load and says how.
($ret, $out, $err) = $other->psql('postgres', 'CREATE EXTENSION bpext');
isnt($ret, 0, 'not preloaded: CREATE EXTENSION fails');
like($err, qr/ERROR:  bpext must be loaded via shared_preload_libraries/,
	'not preloaded: CREATE EXTENSION error');
like($err, qr/HINT:  Add bpext to shared_preload_libraries/,
	'not preloaded: CREATE EXTENSION hint');
($ret, $out, $err) =
  $other->psql('postgres', "LOAD 'bpext'; SELECT 1;", on_error_stop => 0);
like($err, qr/ERROR:  bpext must be loaded via shared_preload_libraries/,
	'not preloaded: LOAD error');
like($err, qr/HINT:  Add bpext to shared_preload_libraries/,
	'not preloaded: LOAD hint');
($ret, $out, $err) = $other->psql('postgres',
	"LOAD 'bpext';\nLOAD 'bpext';\nSELECT 42;", on_error_stop => 0);
is($out, '42', 'not preloaded: the session survives repeated LOADs');
my $nload = () = $err =~ /must be loaded via shared_preload_libraries/g;
is($nload, 2, 'not preloaded: every LOAD fails');
is($other->safe_psql('postgres',
		"SELECT count(*) FROM pg_extension WHERE extname = 'bpext'"),
	'0', 'not preloaded: no extension left behind');

$other->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'bpext'
bpext.path = '$good'
bpext.size = '32MB'
bpext.max_size = '64MB'
});
$other->restart;
$other->safe_psql('postgres', 'CREATE EXTENSION bpext');
ok(bpext_wait_for_state($other, 'error'),
	"another cluster's tier file: state 7");
like(bpext_config($other)->{last_error}, qr/is the tier file of another cluster/,
	"another cluster's tier file: last_error says why");
ok($other->log_contains(qr/WARNING:  bpext could not enable the tier: .*is the tier file of another cluster/),
	"another cluster's tier file: WARNING in the log");

$cfg = bpext_config($node);
is($cfg->{state}, 5, "another cluster's tier file: owner still enabled");
bpext_evict_shared_buffers($node);
bpext_check_table($node, 'postgres', 't', rows => 20000, scan => 'index',
	name => 'owner after the other cluster tried its file');
is(bpext_stat($node, 'crc_failures'), 0, 'owner: no checksum failures');
is(bpext_file_size($good), bpext_tier_file_bytes(64), 'owner: tier file size unchanged');

$other->stop;
$node->stop;
done_testing();

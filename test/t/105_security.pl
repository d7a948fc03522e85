
# Copyright (c) 2026, bpext developers

# Bad input and security, beyond what 003_bad_config.pl and 004_online.pl
# check:
#
#  - no bpext.* setting can be changed by a non-superuser, whichever way
#    (SET, set_config, ALTER SYSTEM, ALTER ROLE/DATABASE SET, connection
#    options), each with a clear error; nor can bpext_stats_reset() be
#    called, nor bpext_enable() even with EXECUTE granted;
#  - pg_monitor members read every view (bpext_database_stats,
#    bpext_buffer_descriptors, bpext_buffer_descriptors(true),
#    bpext_relation_buffers too), other users none of them;
#  - paths: a missing directory given to bpext_enable(), a path too long,
#    with a newline, with a quote (which must work and survive a restart),
#    a device, a FIFO, a tier file of another format, a relative path and
#    a non-tier file in postgresql.conf at server start, a symbolic link
#    put in place of the tier file while it is in use; files that are not
#    bpext's are never changed;
#  - the tier file is 0600 also in a cluster with group access, and an
#    own tier file found with a looser mode is set back to 0600;
#  - a physical copy of the cluster (same system identifier) cannot use a
#    tier file that the original has open.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use Fcntl qw(O_WRONLY O_CREAT O_EXCL);
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

bpext_needs_contrib('pg_prewarm');

my $nrows = 20000;

my $node = bpext_init_node('main', tier_size => '32MB', max_size => '64MB',
	init => { allows_streaming => 1 });
my $path = bpext_tier_path($node);
my $base = $node->basedir;
$node->start;
bpext_setup($node);
bpext_load_table($node, 'postgres', 't', $nrows);
$node->safe_psql('postgres', q{
	CREATE ROLE alice LOGIN;
	CREATE ROLE watcher LOGIN IN ROLE pg_monitor;
	CREATE DATABASE alicedb OWNER alice;
	SELECT bpext_prewarm('t'), bpext_prewarm('t_pkey');
});
bpext_evict_shared_buffers($node);
bpext_check_table($node, 'postgres', 't', rows => $nrows, scan => 'index',
	name => 'baseline');

sub as_user
{
	my ($user, $sql, $db) = @_;
	return $node->psql($db // 'postgres', $sql,
		connstr => $node->connstr($db // 'postgres') . " user=$user");
}

# --- settings ------------------------------------------------------------------------
my $auto_conf = $node->data_dir . '/postgresql.auto.conf';
my $auto_before = slurp_file($auto_conf);
my %settings = map { split /\|/ } split /\n/, $node->safe_psql('postgres',
	q{SELECT name, setting FROM pg_settings WHERE name LIKE 'bpext.%' ORDER BY 1});
cmp_ok(scalar(keys %settings), '>=', 9, 'bpext has its settings');

for my $name (sort keys %settings)
{
	my $value = $settings{$name};
	# Superuser-settable parameters say "permission denied", the others
	# that they cannot be changed.
	my $changed = qr/(parameter "\Q$name\E" cannot be changed (now|without restarting the server)|permission denied to set parameter "\Q$name\E")/;
	my ($ret, $out, $err);

	($ret, $out, $err) = as_user('alice', "SET $name = '$value'");
	like($err, $changed, "alice: SET $name refused");
	($ret, $out, $err) =
	  as_user('alice', "SELECT set_config('$name', '$value', false)");
	like($err, $changed, "alice: set_config('$name') refused");
	for my $user ('alice', 'watcher')
	{
		($ret, $out, $err) = as_user($user, "ALTER SYSTEM SET $name = '$value'");
		like($err, qr/permission denied to set parameter "\Q$name\E"/,
			"$user: ALTER SYSTEM SET $name refused");
	}
	($ret, $out, $err) = as_user('alice', "ALTER ROLE alice SET $name = '$value'");
	like($err, $changed, "alice: ALTER ROLE SET $name refused");
	# alice owns alicedb, which lets her set ordinary parameters for it.
	($ret, $out, $err) =
	  as_user('alice', "ALTER DATABASE alicedb SET $name = '$value'");
	like($err, $changed, "alice: ALTER DATABASE SET $name refused");
}
$node->connect_fails(
	$node->connstr('postgres') . " user=alice options='-c bpext.size=1GB'",
	'alice: bpext.size as a connection option refused',
	expected_stderr => qr/parameter "bpext.size" cannot be changed now/);
is(slurp_file($auto_conf), $auto_before, 'settings: postgresql.auto.conf unchanged');
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_db_role_setting WHERE array_to_string(setconfig, ',') LIKE '%bpext%'}),
	'0', 'settings: no per-role or per-database bpext setting stored');
is(bpext_config($node)->{state}, 5, 'settings: tier still enabled');

# --- functions -----------------------------------------------------------------------
my $reset_before = bpext_stat($node, 'stats_reset');
for my $user ('alice', 'watcher')
{
	my ($ret, $out, $err) = as_user($user, 'SELECT bpext_stats_reset()');
	isnt($ret, 0, "$user: bpext_stats_reset() fails");
	like($err, qr/permission denied for function bpext_stats_reset/,
		"$user: bpext_stats_reset(): permission denied");
}
is(bpext_stat($node, 'stats_reset'), $reset_before, 'counters were not reset');

$node->safe_psql('postgres',
	'GRANT EXECUTE ON FUNCTION bpext_enable(text, text) TO alice');
my ($ret, $out, $err) =
  as_user('alice', "SELECT bpext_enable('$base/alice.tier', '32MB')");
like($err, qr/permission denied for function bpext_enable/,
	'alice with EXECUTE: bpext_enable() still denied');
like($err, qr/DETAIL:  Only superusers can change the bpext tier configuration/,
	'alice with EXECUTE: bpext_enable(): detail says why');
ok(!-e "$base/alice.tier", 'alice with EXECUTE: no file created');
is(slurp_file($auto_conf), $auto_before, 'alice with EXECUTE: no setting written');
$node->safe_psql('postgres',
	'REVOKE EXECUTE ON FUNCTION bpext_enable(text, text) FROM alice');

# --- monitoring ----------------------------------------------------------------------
# bpext_relation_buffers must find pages of t in the tier.  Since t was
# prewarmed, the evictor's 32 MB went through the 32 MB tier, and which of
# t's pages are left depends on the tier's replacement order: store t again.
$node->safe_psql('postgres', "SELECT bpext_prewarm('t')");
my %views = (
	bpext_configuration => 'SELECT count(*) FROM bpext_configuration WHERE state = 5',
	bpext_stats => 'SELECT count(*) FROM bpext_stats WHERE extension_page_reads > 0',
	bpext_database_stats =>
	  q{SELECT count(*) FROM bpext_database_stats WHERE datname = 'postgres' AND tier_reads > 0},
	bpext_buffer_descriptors =>
	  'SELECT count(*) > 0 FROM bpext_buffer_descriptors WHERE is_in_bpool_extension',
	'bpext_buffer_descriptors(true)' =>
	  q{SELECT count(*) > 0 FROM bpext_buffer_descriptors(true) WHERE is_in_bpool_extension AND page_type = 'heap'},
	bpext_relation_buffers =>
	  q{SELECT count(*) FROM bpext_relation_buffers WHERE relation = 't'::regclass AND relforknumber = 0 AND ssd_pages > 0},
);
my %want = (
	bpext_configuration => '1',
	bpext_stats => '1',
	bpext_database_stats => '1',
	bpext_buffer_descriptors => 't',
	'bpext_buffer_descriptors(true)' => 't',
	bpext_relation_buffers => '1');
for my $view (sort keys %views)
{
	($ret, $out, $err) = as_user('watcher', $views{$view});
	is($out, $want{$view}, "pg_monitor member reads $view");
	is($err, '', "pg_monitor member: $view without error");

	($ret, $out, $err) = as_user('alice', $views{$view});
	(my $object = $view) =~ s/\(true\)//;
	like($err,
		qr/permission denied for (view|function) \Q$object\E/,
		"alice: $view: permission denied");
}
for my $fn ('bpext_configuration_1_0()', 'bpext_database_stats_1_0()')
{
	($ret, $out, $err) = as_user('alice', "SELECT count(*) FROM $fn");
	(my $name = $fn) =~ s/\(\)//;
	like($err, qr/permission denied for function \Q$name\E/,
		"alice: $fn: permission denied");
}

# --- paths given to bpext_enable() ----------------------------------------------------
sub enable_refused
{
	my ($target, $what, $reason) = @_;
	my $offset = -s $node->logfile;
	my ($ret, $out, $err) =
	  $node->psql('postgres', "SELECT bpext_enable($target, '32MB')");
	isnt($ret, 0, "$what: bpext_enable() fails");
	like($err, $reason, "$what: the error says why");
	is($node->safe_psql('postgres', 'SELECT count(*) FROM t'),
		$nrows, "$what: queries still work");
	return $err;
}

sub enable_good
{
	my ($what) = @_;
	is($node->safe_psql('postgres', "SELECT bpext_enable('$path', '32MB')"),
		'BUFFER POOL EXTENSION ENABLED', "$what: the good path enables the tier again");
	return;
}

# A missing directory, at run time (003 checks it at server start).
enable_refused("'$base/no_such_dir/bpext.tier'", 'missing directory',
	qr/DETAIL:  Last error: could not create "\Q$base\E\/no_such_dir\/bpext.tier": the directory does not exist/);
ok(!-e "$base/no_such_dir", 'missing directory: not created');
is(bpext_config($node)->{state}, 7, 'missing directory: state 7');
enable_good('missing directory');

# Too long for the shared state.
$auto_before = slurp_file($auto_conf);
enable_refused(q{'/' || repeat('x/', 600) || 'bpext.tier'}, 'path too long',
	qr/invalid value for parameter "bpext.path".*\n.*DETAIL:  bpext.path is longer than 1023 bytes/);
is(slurp_file($auto_conf), $auto_before, 'path too long: not written');

# A newline would break postgresql.auto.conf.
enable_refused(qq{E'$base/a\\nb.tier'}, 'newline in the path',
	qr/ERROR:  .*must not contain a newline|ERROR:  invalid value for parameter "bpext.path"/);
is(slurp_file($auto_conf), $auto_before, 'newline in the path: not written');
ok(!-e "$base/a", 'newline in the path: nothing created');
is(bpext_config($node)->{state}, 5, 'bad paths refused before use: tier still enabled');

# A device and a FIFO: never regular files.
enable_refused(q{'/dev/null'}, 'a device',
	qr/DETAIL:  Last error: "\/dev\/null" exists and is not a regular file/);
ok(-c '/dev/null', 'a device: /dev/null is still a device');
my $fifo = "$base/a.fifo";
POSIX::mkfifo($fifo, 0600) or die "mkfifo: $!";
enable_refused("'$fifo'", 'a FIFO',
	qr/DETAIL:  Last error: "\Q$fifo\E" exists and is not a regular file/);
ok(-p $fifo, 'a FIFO: still a FIFO');
enable_good('device and FIFO');

# A tier file of another format version (a future bpext's, say).
my $other_format = "$base/other_format.tier";
{
	my $header = 'BPEXTIER' . pack('VVQ<V', 99, 8192, 0, 100);
	sysopen(my $fh, $other_format, O_WRONLY | O_CREAT | O_EXCL, 0600) or die $!;
	syswrite($fh, $header . ("\0" x (8192 * 3 - length $header)));
	close $fh;
}
my $other_md5 = bpext_file_md5($other_format);
enable_refused("'$other_format'", 'another format',
	qr/DETAIL:  Last error: "\Q$other_format\E" is a bpext tier file of another format \(version 99, block size 8192\)/);
is(bpext_file_md5($other_format), $other_md5, 'another format: file unchanged');

# A quote in the path is written to postgresql.auto.conf correctly and
# survives a restart.
my $quoted = "$base/it's.tier";
(my $quoted_sql = $quoted) =~ s/'/''/g;
is($node->safe_psql('postgres', "SELECT bpext_enable('$quoted_sql', '32MB')"),
	'BUFFER POOL EXTENSION ENABLED', 'quote in the path: enabled');
is(bpext_file_size($quoted), bpext_tier_file_bytes(32), 'quote in the path: the file has that name');
$node->restart;
ok(bpext_wait_for_state($node, 'enabled'), 'quote in the path: enabled after a restart');
is(bpext_config($node)->{path}, $quoted, 'quote in the path: same path after a restart');
enable_good('quote in the path');
ok(!-e $quoted, 'quote in the path: old file removed when the path changed');

# --- a symbolic link put in place of the tier file while it is in use -------------------
{
	my $name = 'symlink swapped in';
	my $precious = "$base/precious.dat";
	append_to_file($precious, "precious line $_\n") for 1 .. 3000;
	my $precious_md5 = bpext_file_md5($precious);
	my $offset = -s $node->logfile;
	symlink($precious, "$base/swap.link") or die "symlink: $!";
	rename("$base/swap.link", $path) or die "rename: $!";

	ok(bpext_wait_for_state($node, 'error', 10), "$name: state 7");
	like(bpext_config($node)->{last_error}, qr/has been replaced|symbolic link|disappeared/,
		"$name: last_error says why");
	# Everything that writes to the tier, in new sessions.
	$node->safe_psql('postgres', q{
		UPDATE t SET ver = 1, v = bpext_expected_v(id, 1) WHERE id % 2 = 0;
		CHECKPOINT;
	});
	my ($r, $o, $e) = $node->psql('postgres', "SELECT bpext_prewarm('t')");
	like($e, qr/the bpext tier is not enabled/, "$name: bpext_prewarm() refused");
	bpext_evict_shared_buffers($node);
	bpext_check_table($node, 'postgres', 't', rows => $nrows,
		ver => 'CASE WHEN id % 2 = 0 THEN 1 ELSE 0 END', scan => 'index',
		name => $name);
	enable_refused('NULL', "$name, bpext_enable()",
		qr/DETAIL:  Last error: "\Q$path\E" is a symbolic link; bpext does not follow links/);
	is($node->safe_psql('postgres', 'SELECT bpext_disable()'),
		'BUFFER POOL EXTENSION DISABLED', "$name: bpext_disable()");
	is(bpext_file_md5($precious), $precious_md5, "$name: the link's target is unchanged");
	is(bpext_count_in_log($node, qr/WARNING:  bpext tier disabled after an error/, $offset),
		1, "$name: one WARNING");
	unlink $path;
	enable_good($name);
}

# --- a physical copy of the cluster -----------------------------------------------------
# Same system identifier: the tier file's header would pass; the lock
# taken by the original keeps the copy off it.
$node->backup('copy');
my $copy = PostgreSQL::Test::Cluster->new('copy');
$copy->init_from_backup($node, 'copy');
$copy->append_conf('postgresql.conf', "bpext.path = '$path'\nbpext.size = '32MB'\n");
$copy->append_conf('postgresql.auto.conf', "bpext.path = '$path'\nbpext.size = '32MB'\n");
$copy->start;
ok(bpext_wait_for_state($copy, 'error'), 'cluster copy: state 7');
like(bpext_config($copy)->{last_error}, qr/"\Q$path\E" is in use by another server/,
	'cluster copy: the tier file is in use by the original');
is(bpext_config($node)->{state}, 5, 'cluster copy: the original keeps its tier');
is(bpext_file_size($path), bpext_tier_file_bytes(32), 'cluster copy: the tier file is intact');
$node->safe_psql('postgres', "SELECT bpext_prewarm('t'), bpext_prewarm('t_pkey')");
bpext_evict_shared_buffers($node);
my $before = bpext_stat($node, 'extension_page_reads');
bpext_check_table($node, 'postgres', 't', rows => $nrows,
	ver => 'CASE WHEN id % 2 = 0 THEN 1 ELSE 0 END', scan => 'index',
	name => 'original, beside its copy');
cmp_ok(bpext_stat($node, 'extension_page_reads') - $before, '>', 100,
	'original, beside its copy: served by the tier');
is(bpext_stat($node, 'crc_failures'), 0, 'original: no checksum failures');
$copy->stop;

# --- settings in postgresql.conf at server start, in a group-access cluster --------------
my $other = bpext_init_node('grp', tier_size => '32MB', max_size => '32MB',
	tier_path => 'relative/bpext.tier', init => { extra => ['--allow-group-access'] });
$other->start;
$other->safe_psql('postgres', 'CREATE EXTENSION bpext');
is($other->safe_psql('postgres', 'SELECT 1'), '1',
	'relative path at server start: the server runs');
ok($other->log_contains(
		qr/WARNING:  invalid value for parameter "bpext.path": "relative\/bpext.tier"/),
	'relative path at server start: WARNING names the setting');
ok($other->log_contains(qr/bpext.path must be an absolute path/),
	'relative path at server start: and says why');
isnt(bpext_config($other)->{state}, 5, 'relative path at server start: no tier');
ok(!-e $other->data_dir . '/relative', 'relative path at server start: nothing created');

# A non-tier file named in postgresql.conf: refused at start, unchanged.
my $precious2 = $other->basedir . '/precious2.dat';
append_to_file($precious2, "not a tier file\n" x 1000);
my $precious2_md5 = bpext_file_md5($precious2);
$other->append_conf('postgresql.conf', "bpext.path = '$precious2'\n");
$other->restart;
ok(bpext_wait_for_state($other, 'error'), 'non-tier file at server start: state 7');
like(bpext_config($other)->{last_error}, qr/is not a bpext tier file; bpext will not overwrite it/,
	'non-tier file at server start: last_error says why');
is(bpext_file_md5($precious2), $precious2_md5, 'non-tier file at server start: unchanged');

# The tier file is 0600 where the cluster's own files are 0640.
my $grp_tier = $other->basedir . '/grp.tier';
is($other->safe_psql('postgres', "SELECT bpext_enable('$grp_tier')"),
	'BUFFER POOL EXTENSION ENABLED', 'group-access cluster: tier enabled');
is(bpext_file_mode($other->data_dir . '/PG_VERSION'), 0640,
	'group-access cluster: its files are 0640');
is(bpext_file_mode($grp_tier), 0600, 'group-access cluster: the tier file is 0600');

# An own tier file found with a looser mode is set back to 0600 when reused.
$other->stop;
chmod 0644, $grp_tier or die "chmod: $!";
$other->start;
ok(bpext_wait_for_state($other, 'enabled'), 'loose mode: own tier file reused at start');
is(bpext_file_mode($grp_tier), 0600, 'loose mode: set back to 0600');
$other->stop;

$node->stop;
done_testing();

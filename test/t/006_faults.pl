
# Copyright (c) 2026, bpext developers

# The tier is an optimisation: when its file is damaged, deleted, truncated
# or replaced while the server runs, queries keep returning the right rows
# (from the data files), the tier switches itself off (state 7) with one
# WARNING and the reason in bpext_configuration, and bpext_enable() brings
# it back.  bpext never writes into, or removes, a file it did not create.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use Fcntl qw(O_RDWR O_WRONLY O_CREAT SEEK_SET);
use IO::Handle;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

bpext_needs_contrib('pg_prewarm');

my $nrows = 60000;    # about 14MB
my $tier_mb = 64;
my $nslots = $tier_mb * 1024 * 1024 / 8192 - 1;

my $node = bpext_init_node('main', tier_size => "${tier_mb}MB");
my $path = bpext_tier_path($node);
$node->start;
bpext_setup($node);
bpext_load_table($node, 'postgres', 't', $nrows);

my $disabled_re = qr/WARNING:  bpext tier disabled after an error/;

# After a failure: state 7, the reason, exactly one WARNING.
sub check_failed
{
	my ($name, $reason, $offset) = @_;
	my $cfg = bpext_config($node);
	is($cfg->{state}, 7, "$name: state 7 (error)");
	is($cfg->{state_description}, 'BUFFER POOL EXTENSION ERROR',
		"$name: state description");
	like($cfg->{last_error}, $reason, "$name: last_error says why");
	ok(defined $cfg->{last_error_time}, "$name: last_error_time set");
	is($cfg->{current_size_in_kb}, 0, "$name: no size while in error");
	ok($node->poll_query_until('postgres',
			'SELECT allocated_pages FROM bpext_configuration', '0'),
		"$name: the map is emptied");
	is(bpext_count_in_log($node, $disabled_re, $offset),
		1, "$name: exactly one WARNING");
	like(slurp_file($node->logfile, $offset),
		qr/$disabled_re: .*$reason/, "$name: the WARNING gives the reason");
	return;
}

sub reenable
{
	my ($name) = @_;
	is($node->safe_psql('postgres', 'SELECT bpext_enable()'),
		'BUFFER POOL EXTENSION ENABLED', "$name: bpext_enable() re-enables");
	my $cfg = bpext_config($node);
	is($cfg->{state}, 5, "$name: state 5");
	is(bpext_file_size($path), bpext_tier_file_bytes($tier_mb), "$name: file size");
	is(bpext_file_mode($path), 0600, "$name: file mode 0600");
	bpext_fill_and_read($node, "$name, re-enabled", $nrows);
	return;
}

bpext_fill_and_read($node, 'baseline', $nrows);

# --- corrupt tier pages -----------------------------------------------------
# Slots are handed out from 0 upwards in a fresh tier; overwrite a third of
# those used so far with garbage, behind the server's back.
my $used = bpext_stat($node, 'extension_page_writes');
# (Before the damage: any new session may hit it while reading catalogs.)
my $crc_before = bpext_stat($node, 'crc_failures');
my $offset = -s $node->logfile;
$used = $nslots if $used > $nslots;
bpext_evict_shared_buffers($node);
srand(42);
my $ncorrupt = 0;
sysopen(my $fh, $path, O_RDWR) or die "open $path: $!";
for my $slot (0 .. $used - 1)
{
	next unless rand() < 1 / 3;
	my $garbage = join('', map { chr(int(rand(256))) } 1 .. 64) x 128;
	sysseek($fh, 8192 * (1 + $slot), SEEK_SET) or die "seek: $!";
	syswrite($fh, $garbage) == 8192 or die "write: $!";
	$ncorrupt++;
}
$fh->sync;
close $fh;
cmp_ok($ncorrupt, '>', 500, "corrupted $ncorrupt of $used tier slots");

bpext_check_table($node, 'postgres', 't', rows => $nrows, scan => 'index',
	name => 'reading corrupted tier pages');
bpext_check_lookups($node, 'postgres', 't', rows => $nrows,
	lookups => 3000, seed => 3, name => 'reading corrupted tier pages');
cmp_ok(bpext_stat($node, 'crc_failures') - $crc_before,
	'>', 0, 'corruption: counted in crc_failures');
check_failed('corruption', qr/checksum mismatch in a tier page/, $offset);
bpext_reads_still_right($node, 'after corruption', $nrows);
is(bpext_count_in_log($node, $disabled_re, $offset),
	1, 'corruption: still exactly one WARNING after more reads');
reenable('corruption');

# --- delete the tier file ---------------------------------------------------
$offset = -s $node->logfile;
unlink $path or die "unlink $path: $!";
my $start = time();
ok(bpext_wait_for_state($node, 'error', 10), 'deleted file: state 7');
my $elapsed = time() - $start;
cmp_ok($elapsed, '<', 3, sprintf('deleted file: noticed within %.1f s', $elapsed));
check_failed('deleted file', qr/has disappeared/, $offset);
bpext_reads_still_right($node, 'after deletion', $nrows);
ok(!-e $path, 'deleted file: not recreated while in error');
reenable('deleted file');

# --- truncate the tier file -------------------------------------------------
$offset = -s $node->logfile;
truncate($path, 8192 * 100) or die "truncate $path: $!";
ok(bpext_wait_for_state($node, 'error', 10), 'truncated file: state 7');
# The worker's check or a backend reading past the new end may notice
# first; or, when a write lands past the new end after the truncation (a
# push the fill above queued, the writer helper lagging on a loaded
# machine, or a chunk of the slot directory, which lies past the pages),
# a backend reading a page of the hole below it, which reads as zeros.
check_failed('truncated file',
	qr/has been truncated|could not read from the tier file|checksum mismatch in a tier page/,
	$offset);
bpext_reads_still_right($node, 'after truncation', $nrows);
reenable('truncated file');

# --- after an error, bpext_disable() removes the (own) file ----------------
truncate($path, 8192 * 100) or die "truncate $path: $!";
ok(bpext_wait_for_state($node, 'error', 10), 'truncated again: state 7');
is($node->safe_psql('postgres', 'SELECT bpext_disable()'),
	'BUFFER POOL EXTENSION DISABLED', 'bpext_disable() in error state');
is(bpext_config($node)->{state}, 0, 'disabled after error: state 0');
ok(!-e $path, 'disabled after error: tier file removed');
is($node->safe_psql('postgres', "SELECT bpext_enable(size => '${tier_mb}MB')"),
	'BUFFER POOL EXTENSION ENABLED', 'enabled again after disable');
bpext_fill_and_read($node, 'enabled after disable', $nrows);

# --- replace the tier file with another file -------------------------------
# The worker notices within a second.  Meanwhile, and after, nothing may be
# written into the file that took the tier file's place.  To be inside
# that window deterministically, the worker is stopped (SIGSTOP, in its
# latch wait: bpext_stop_worker) while a new session reads with read
# admission (every miss is stored in the tier).  The tier is emptied
# first and the worker's pushes are slowed down, so that the session's
# reads all miss and none is served from the foreign file (where a
# checksum mismatch would stop the tier first).
$node->safe_psql('postgres', q{
	ALTER SYSTEM SET bpext.admission = 'read';
	ALTER SYSTEM SET bpext.push_interval = '10s';
	ALTER SYSTEM SET bpext.push_lookahead = 1;
	SELECT bpext_disable();
});
$node->safe_psql('postgres', "SELECT bpext_enable(size => '${tier_mb}MB')");
is($node->safe_psql('postgres', 'SHOW bpext.admission'), 'read',
	'read admission on');
my $foreign = $node->basedir . '/foreign.dat';
sysopen($fh, $foreign, O_WRONLY | O_CREAT, 0644) or die "open: $!";
syswrite($fh, ("not a tier file\n" x 512) x ($tier_mb * 128)) or die "write: $!";
close $fh;
my $foreign_md5 = bpext_file_md5($foreign);

my $worker = bpext_worker_pid($node);
ok($worker, "the bpext worker runs (pid $worker)");
$offset = -s $node->logfile;
my $writes_before = bpext_stat($node, 'extension_page_writes');
bpext_stop_worker($node);
my $ok = eval {
	rename($foreign, $path) or die "rename: $!";
	# A new session opens the tier file by its path.
	$node->safe_psql('postgres', 'SELECT count(*) FROM t WHERE v <> \'\'');
	1;
};
my $err_stopped = $@;
kill('CONT', $worker);
ok($ok, 'a session ran while the tier file was replaced') or diag($err_stopped);
ok(bpext_wait_for_state($node, 'error', 10), 'replaced file: state 7');
like(bpext_config($node)->{last_error}, qr/has been replaced|checksum mismatch/,
	'replaced file: last_error says why');
is(bpext_count_in_log($node, $disabled_re, $offset),
	1, 'replaced file: exactly one WARNING');
my $writes = bpext_stat($node, 'extension_page_writes') - $writes_before;
is(bpext_file_md5($path), $foreign_md5,
	"replaced file: the file that took its place was not written to ($writes tier page writes meanwhile)");
bpext_reads_still_right($node, 'after replacement', $nrows);

# It is not ours: bpext_enable() refuses it, bpext_disable() keeps it.
my ($ret, $out, $err) = $node->psql('postgres', 'SELECT bpext_enable()');
like($err, qr/is not a bpext tier file; bpext will not overwrite it/,
	'replaced file: bpext_enable() refuses the foreign file');
is($node->safe_psql('postgres', 'SELECT bpext_disable()'),
	'BUFFER POOL EXTENSION DISABLED', 'replaced file: bpext_disable()');
ok(-e $path, 'replaced file: bpext_disable() did not remove the foreign file');
is(bpext_file_md5($path), $foreign_md5, 'replaced file: content unchanged');

unlink $path;
is($node->safe_psql('postgres', "SELECT bpext_enable(size => '${tier_mb}MB')"),
	'BUFFER POOL EXTENSION ENABLED', 'enabled again once the path is free');
bpext_fill_and_read($node, 'after replacement, re-enabled', $nrows);

$node->stop;
done_testing();

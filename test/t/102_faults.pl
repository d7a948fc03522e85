
# Copyright (c) 2026, bpext developers

# The tier's disk misbehaves; 006_faults.pl covers a damaged, deleted,
# truncated or foreign tier file on an idle server.  Here:
#
#  - read errors (EIO) while queries are served from the tier;
#  - write errors (EIO) while pages are stored (bpext_prewarm, the worker's
#    pushes);
#  - a full file system: writes failing with ENOSPC (dual writes from a
#    checkpoint), short writes, and posix_fallocate failing when the tier
#    is created (bpext_enable) or grown (bpext_resize);
#  - a tier file made unreadable (mode 000), noticed when it is next
#    opened;
#  - the tier file truncated (truncate -s) under concurrent readers;
#  - the tier file replaced by an older copy of itself (right header, same
#    cluster, stale slots);
#  - a hung device: a tier read that does not return (bpext.io_timeout).
#
# In every case: no query fails or returns a wrong row, one WARNING, state 7
# in bpext_configuration with the reason, the io_errors or crc_failures
# counter moves (not for the hung device, whose read has not failed), and
# once the cause is fixed SELECT bpext_enable() brings the tier back (state
# 5, reads served from it).
#
# How faults are injected: the server runs as an ordinary user here (the
# test suites run as postgres, without sudo), so no small tmpfs or failing
# FUSE file system can be mounted.  Instead the server is started with an
# LD_PRELOAD library (test/fault_inject/bpext_fault_inject.c, built here
# with cc) that fails I/O on files under the tier's directory while a
# control file exists.  It sits where the C library does, so bpext sees
# exactly the errors a sick or full disk returns.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use Fcntl qw(O_DIRECTORY O_RDWR);
use File::Copy ();
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

bpext_needs_contrib('pg_prewarm');

my $so = bpext_build_fault_injector();
plan skip_all => 'no C compiler to build the fault injector' unless $so;

my $nrows = 60000;    # about 14MB
my $tier_mb = 64;

my $ssd = PostgreSQL::Test::Utils::tempdir('ssd');
my $ctl = PostgreSQL::Test::Utils::tempdir('faults');
my $path = "$ssd/bpext.tier";

my $node = bpext_init_node('main', tier_size => "${tier_mb}MB",
	max_size => '128MB', tier_path => $path);
bpext_start_with_faults($node, $so, "$ssd/", $ctl);
bpext_setup($node);
bpext_load_table($node, 'postgres', 't', $nrows);

my $disabled_re = qr/WARNING:  bpext tier disabled after an error/;
my $enable_re = qr/WARNING:  bpext could not enable the tier/;
my $ver = '0';

# After a failure: state 7 with the reason, one WARNING, the map emptied,
# the counter moved.
sub check_failed
{
	my ($name, $reason, $offset, $counter, $before, $warning_re) = @_;
	$warning_re //= $disabled_re;
	ok(bpext_wait_for_state($node, 'error', 10), "$name: state 7 (error)");
	my $cfg = bpext_config($node);
	is($cfg->{state_description}, 'BUFFER POOL EXTENSION ERROR',
		"$name: state description");
	like($cfg->{last_error}, $reason, "$name: last_error says why");
	ok($node->poll_query_until('postgres',
			'SELECT allocated_pages FROM bpext_configuration', '0'),
		"$name: the map is emptied");
	is(bpext_count_in_log($node, $warning_re, $offset),
		1, "$name: exactly one WARNING");
	like(slurp_file($node->logfile, $offset),
		qr/$warning_re: .*$reason/, "$name: the WARNING gives the reason");
	if ($counter)
	{
		my $now = bpext_stat($node, $counter);
		cmp_ok($now, '>', $before, "$name: $counter counted ($before -> $now)");
	}
	return;
}

sub reenable
{
	my ($name) = @_;
	is($node->safe_psql('postgres', 'SELECT bpext_enable()'),
		'BUFFER POOL EXTENSION ENABLED', "$name: bpext_enable() re-enables");
	my $cfg = bpext_config($node);
	is($cfg->{state}, 5, "$name: state 5");
	is($cfg->{current_size_in_kb}, $tier_mb * 1024, "$name: size");
	is(bpext_file_size($path), bpext_tier_file_bytes($tier_mb), "$name: file size");
	bpext_fill_and_read($node, "$name, re-enabled", $nrows, $ver);
	return;
}

# Run sql in a session started before; returns its output.
sub in_session
{
	my ($session, $sql) = @_;
	return $session->query_safe($sql);
}

bpext_fill_and_read($node, 'baseline', $nrows, $ver);

# --- read errors --------------------------------------------------------------
{
	my $name = 'read EIO';
	my $offset = -s $node->logfile;
	my $io_before = bpext_stat($node, 'io_errors');
	bpext_fault($node, 'read_eio', 1);
	bpext_evict_shared_buffers($node);
	bpext_check_table($node, 'postgres', 't', rows => $nrows, ver => $ver,
		scan => 'index', name => "$name, reading while the disk fails");
	bpext_check_lookups($node, 'postgres', 't', rows => $nrows, ver => $ver,
		lookups => 3000, seed => 1, name => "$name, reading while the disk fails");
	cmp_ok(bpext_faults_injected($node, 'read_eio'), '>', 0,
		"$name: the fault was hit");
	check_failed($name, qr/could not read from the tier file: Input\/output error/,
		$offset, 'io_errors', $io_before);
	bpext_reads_still_right($node, "$name, after", $nrows, $ver);

	# Re-enabled too early, while the disk still fails: refused, with the
	# reason (the header cannot be read).
	my ($ret, $out, $err) = $node->psql('postgres', 'SELECT bpext_enable()');
	isnt($ret, 0, "$name: bpext_enable() while the disk still fails fails");
	like($err, qr/DETAIL:  Last error: could not read .*Input\/output error/,
		"$name: bpext_enable() says why");
	is(bpext_config($node)->{state}, 7, "$name: still state 7");

	bpext_fault($node, 'read_eio', 0);
	reenable($name);
}

# --- write errors -------------------------------------------------------------
{
	my $name = 'write EIO';
	my $offset = -s $node->logfile;
	my $io_before = bpext_stat($node, 'io_errors');
	# The worker's pushes, dual writes and bpext_prewarm all write; empty
	# the tier so that prewarm has pages to store.
	$node->safe_psql('postgres', 'SELECT bpext_disable()');
	$node->safe_psql('postgres', "SELECT bpext_enable(size => '${tier_mb}MB')");
	bpext_fault($node, 'write_eio', 1);
	# The worker's push may hit the fault before the prewarm starts; then
	# the prewarm finds the tier off, which is the next check's point.
	my ($pw_ret, $loaded, $pw_err) =
	  $node->psql('postgres', "SELECT bpext_prewarm('t')");
	ok( ($pw_ret == 0 && $loaded =~ /^\d+$/)
		  || $pw_err =~ /ERROR:  the bpext tier is not enabled/,
		"$name: bpext_prewarm() hitting the error does not fail ("
		  . ($pw_ret == 0 ? "$loaded pages" : 'the push hit it first') . ')');
	# Once the tier is off, prewarming it is refused, as when it is disabled.
	my ($ret, $out, $err) =
	  $node->psql('postgres', "SELECT bpext_prewarm('t_pkey')");
	like($err, qr/ERROR:  the bpext tier is not enabled/,
		"$name: bpext_prewarm() after the error says the tier is off");
	cmp_ok(bpext_faults_injected($node, 'write_eio'), '>', 0,
		"$name: the fault was hit");
	# Whichever write meets the fault first fails the tier: a store's, or
	# the worker's write of the slot directory (due once a second, and at
	# once when a miss wakes the worker from its rest).
	check_failed($name,
		qr/could not write (?:to the tier file|the slot directory): Input\/output error/,
		$offset, 'io_errors', $io_before);
	bpext_reads_still_right($node, "$name, after", $nrows, $ver);
	bpext_fault($node, 'write_eio', 0);
	reenable($name);
}

# --- a hung device ---------------------------------------------------------------
# A tier read blocks for 10 s (bpext.io_timeout is 1 s here).  Nothing
# takes back a read the kernel waits on, but the session never waits on
# the device itself: its read goes to a reader helper (src/tier_readers.c),
# which it stops waiting for after the timeout; the tier is switched off,
# so that other sessions read the data files instead of joining it, and
# the session reads the block from its data file.  With the worker running
# and with it stopped (the session notices on its own).  The tier is then
# enabled again while the helper's read may still be under way on the old
# file, which must not switch the new one off.  The worker is stopped in
# its latch wait (bpext_stop_worker): stopped mid-round, it could hold a
# tier-map lock that the sessions would then queue on.
#
# The other session reads another table, and the stuck one has its plan
# ready: a session that wants the very page being read waits for that read
# in PostgreSQL's buffer manager, wherever the page comes from.  And nothing connects to the server until
# the timeout has passed: a backend that starts a tier read before then
# joins the stuck one, as it should.
my $other_rows = 20000;

sub hung_read
{
	my ($name, $stop_worker) = @_;
	my $offset = -s $node->logfile;
	# Planned and run once first, so that the read that sticks is one of
	# t's pages, not a catalog page other sessions need too.
	my $stuck = $node->background_psql('postgres');
	my $stuck_pid = $stuck->query_safe('SELECT pg_backend_pid()');
	$stuck->query_safe(
		'PREPARE q AS SELECT count(*) FROM t WHERE v = bpext_expected_v(id, ver)');
	$stuck->query_safe('EXECUTE q');
	bpext_evict_shared_buffers($node);
	my $worker = bpext_worker_pid($node);
	ok($worker, "$name: the bpext worker runs");

	bpext_stop_worker($node) if $stop_worker;
	bpext_fault($node, 'read_sleep', 1, 10000);
	$stuck->query_until(qr/reading/, "\\echo reading\nEXECUTE q;\n");
	ok(bpext_wait_for_fault_pid($node, 'read_sleep', $stuck_pid),
		"$name: a session is stuck in a tier read");
	usleep(1_500_000);    # past bpext.io_timeout
	ok(bpext_wait_for_state($node, 'error', 5),
		"$name: the tier is switched off") unless $stop_worker;

	# Another session's query, with a statement_timeout shorter than the
	# stuck read: it must not wait on the device.
	# (Its first tier read may be the one that finds the stuck read and
	# gets the WARNING.)
	my $other = $node->background_psql('postgres');
	my $other_pid = $other->query('SELECT pg_backend_pid()');
	my $out = $other->query(q{
		SET statement_timeout = '5s';
		SELECT count(*) FILTER (WHERE v IS DISTINCT FROM bpext_expected_v(id, ver))
		       || ',' || count(*) FROM t_other;
	});
	is($out, "0,$other_rows",
		"$name: another session's query completes, reading right");
	unlike($other->{stderr}, qr/ERROR/, "$name: ... without an error");
	ok(!grep({ $_ == $other_pid } bpext_fault_pids($node, 'read_sleep')),
		"$name: ... without touching the hung device");
	ok( $node->poll_query_until('postgres',
			"SELECT wait_event_type IS DISTINCT FROM 'Extension' FROM pg_stat_activity WHERE pid = $stuck_pid"),
		"$name: ... and the held session no longer waits on the tier")
	  or diag($node->safe_psql('postgres',
			"SELECT state, wait_event_type, wait_event, now() - query_start FROM pg_stat_activity WHERE pid = $stuck_pid"),
		slurp_file($node->{bpext_fault_ctl} . '/injected.log'));
	$other->quit;

	kill('CONT', $worker) if $stop_worker;
	bpext_fault($node, 'read_sleep', 0);
	check_failed($name,
		qr/a tier read in process $stuck_pid has not returned after \d+ ms \(bpext.io_timeout is 1000 ms\)/,
		$offset);

	my $still_stuck = $node->safe_psql('postgres',
		"SELECT wait_event_type FROM pg_stat_activity WHERE pid = $stuck_pid") eq 'Extension';
	note("$name: the stuck read is " . ($still_stuck ? 'still' : 'no longer')
		  . ' under way when the tier is enabled again');
	reenable($name);
	is(bpext_config($node)->{state}, 5,
		"$name: a read stuck on the old file does not switch the new tier off");

	# (It may have been the one to switch the tier off, with the WARNING.)
	$out = $stuck->query("SELECT 'done'");
	like($out, qr/^$nrows\n.*done$/s,
		"$name: the stuck session finishes, reading right");
	$stuck->quit;
	return;
}

bpext_load_table($node, 'postgres', 't_other', $other_rows);
$node->safe_psql('postgres', "ALTER SYSTEM SET bpext.io_timeout = '1s'");
$node->reload;
hung_read('hung read, worker running', 0);
hung_read('hung read, worker stopped', 1);
$node->safe_psql('postgres', 'ALTER SYSTEM RESET bpext.io_timeout');
$node->reload;
$node->safe_psql('postgres', 'DROP TABLE t_other');

# --- a full file system: dual writes from a checkpoint ------------------------
{
	my $name = 'write ENOSPC';
	my $offset = -s $node->logfile;
	my $io_before = bpext_stat($node, 'io_errors');
	bpext_fault($node, 'write_enospc', 1);
	$node->safe_psql('postgres', q{
		UPDATE t SET ver = 1, v = bpext_expected_v(id, 1) WHERE id % 3 = 0;
		CHECKPOINT;
	});
	$ver = 'CASE WHEN id % 3 = 0 THEN 1 ELSE 0 END';
	cmp_ok(bpext_faults_injected($node, 'write_enospc'), '>', 0,
		"$name: the fault was hit");
	# Whichever write meets the full disk first fails the tier: a dual
	# write's, or the worker's write of the slot directory.
	check_failed($name,
		qr/could not write (?:to the tier file|the slot directory): No space left on device/,
		$offset, 'io_errors', $io_before);
	bpext_reads_still_right($node, "$name, after", $nrows, $ver);
	bpext_fault($node, 'write_enospc', 0);
	reenable($name);
}

# --- a full file system: short writes ----------------------------------------
{
	my $name = 'short write';
	my $offset = -s $node->logfile;
	my $io_before = bpext_stat($node, 'io_errors');
	$node->safe_psql('postgres', 'SELECT bpext_disable()');
	$node->safe_psql('postgres', "SELECT bpext_enable(size => '${tier_mb}MB')");
	bpext_fault($node, 'write_short', 1);
	$node->safe_psql('postgres', "SELECT bpext_prewarm('t')");
	cmp_ok(bpext_faults_injected($node, 'write_short'), '>', 0,
		"$name: the fault was hit");
	check_failed($name,
		qr/could not write (?:to the tier file|the slot directory): No space left on device/,
		$offset, 'io_errors', $io_before);
	bpext_reads_still_right($node, "$name, after", $nrows, $ver);
	bpext_fault($node, 'write_short', 0);
	reenable($name);
}

# --- a full file system when the tier is created -------------------------------
{
	my $name = 'no space to create';
	is($node->safe_psql('postgres', 'SELECT bpext_disable()'),
		'BUFFER POOL EXTENSION DISABLED', "$name: bpext_disable()");
	ok(!-e $path, "$name: tier file removed");
	my $offset = -s $node->logfile;
	bpext_fault($node, 'fallocate_enospc', 1);
	my ($ret, $out, $err) = $node->psql('postgres',
		"SELECT bpext_enable('$path', '${tier_mb}MB')");
	isnt($ret, 0, "$name: bpext_enable() fails");
	like($err,
		qr/DETAIL:  Last error: could not allocate \d+ bytes for "\Q$path\E": No space left on device/,
		"$name: bpext_enable() says why");
	cmp_ok(bpext_faults_injected($node, 'fallocate_enospc'), '>', 0,
		"$name: the fault was hit");
	check_failed($name, qr/could not allocate \d+ bytes .*No space left on device/,
		$offset, undef, undef, $enable_re);
	cmp_ok(bpext_file_size($path) // 0, '<=', 8192,
		"$name: the space is given back (file cut to its header)");
	bpext_reads_still_right($node, "$name, after", $nrows, $ver);
	bpext_fault($node, 'fallocate_enospc', 0);
	reenable($name);
}

# --- a full file system when the header is written --------------------------------
{
	my $name = 'short header write';
	$node->safe_psql('postgres', 'SELECT bpext_disable()');
	my $offset = -s $node->logfile;
	bpext_fault($node, 'write_short', 1);
	my ($ret, $out, $err) = $node->psql('postgres',
		"SELECT bpext_enable('$path', '${tier_mb}MB')");
	bpext_fault($node, 'write_short', 0);
	isnt($ret, 0, "$name: bpext_enable() fails");
	like($err, qr/DETAIL:  Last error: could not write the tier file header/,
		"$name: bpext_enable() says why");
	check_failed($name, qr/could not write the tier file header/, $offset,
		undef, undef, $enable_re);
	like(bpext_config($node)->{last_error},
		qr/could not write the tier file header: (short write.*|No space left on device)$/,
		"$name: the reason is a short write, not an unrelated error");
	note('last_error: ' . bpext_config($node)->{last_error});
	bpext_reads_still_right($node, "$name, after", $nrows, $ver);
	reenable($name);
}

# --- a full file system when the tier grows ------------------------------------
{
	my $name = 'no space to grow';
	my $offset = -s $node->logfile;
	bpext_fault($node, 'fallocate_enospc', 1);
	my ($ret, $out, $err) = $node->psql('postgres', "SELECT bpext_resize('96MB')");
	my $cfg = bpext_config($node);
	is($cfg->{state}, 5, "$name: the tier stays enabled at its old size");
	is($cfg->{current_size_in_kb}, $tier_mb * 1024, "$name: size unchanged");
	is(bpext_file_size($path), bpext_tier_file_bytes($tier_mb), "$name: file size unchanged");
	like($cfg->{last_error}, qr/could not grow the tier file .*No space left on device/,
		"$name: last_error says why");
	is(bpext_count_in_log($node, qr/WARNING:  bpext could not resize the tier: could not grow the tier file to \d+ bytes: No space left on device/, $offset),
		1, "$name: one WARNING with the reason");
	isnt($ret, 0, "$name: bpext_resize() fails");
	like($err, qr/could not grow the tier file/, "$name: bpext_resize() says why");
	note("bpext_resize('96MB') with a full disk returned: ret=$ret out=$out err=$err");
	bpext_fill_and_read($node, "$name, at the old size", $nrows, $ver);
	bpext_fault($node, 'fallocate_enospc', 0);
	is($node->safe_psql('postgres', "SELECT bpext_resize('96MB')"),
		'BUFFER POOL EXTENSION ENABLED', "$name: bpext_resize() once there is space");
	is(bpext_config($node)->{current_size_in_kb}, 96 * 1024, "$name: new size");
	is(bpext_file_size($path), bpext_tier_file_bytes(96), "$name: new file size");
	is($node->safe_psql('postgres', "SELECT bpext_resize('${tier_mb}MB')"),
		'BUFFER POOL EXTENSION ENABLED', "$name: back to ${tier_mb}MB");
	bpext_fill_and_read($node, "$name, resized back", $nrows, $ver);
}

# --- read errors while bpext_buffer_descriptors(true) reads the tier -----------------
{
	my $name = 'read EIO in bpext_buffer_descriptors(true)';
	$node->safe_psql('postgres', "SELECT bpext_prewarm('t')");
	my $query = q{SELECT count(*) || ',' || count(page_type)
	                FROM bpext_buffer_descriptors(true) WHERE is_in_bpool_extension};
	# A session whose caches are warm, so that only the view reads the tier.
	my $session = $node->background_psql('postgres', on_error_stop => 0);
	my ($n, $typed) = split /,/, $session->query($query);
	cmp_ok($typed, '>', 1000, "$name: without the fault, $typed of $n tier pages are described");
	my $io_before = bpext_stat($node, 'io_errors');
	my $injected = bpext_faults_injected($node, 'read_eio');
	bpext_fault($node, 'read_eio', 1);
	my $out = $session->query($query);
	my $err = $session->{stderr};
	bpext_fault($node, 'read_eio', 0);
	$session->quit;
	unlike($err, qr/ERROR/, "$name: the view does not fail");
	($n, $typed) = split /,/, $out;
	note("with the fault: $typed of $n tier pages described; $err");
	like($err, qr/WARNING:  bpext tier disabled after an error: could not read from the tier file/,
		"$name: the view's read error switches the tier off, with a warning");
	my $hit = bpext_faults_injected($node, 'read_eio') - $injected;
	cmp_ok($hit, '>', 0, "$name: the fault was hit ($hit reads)");
	cmp_ok(bpext_stat($node, 'io_errors'), '>', $io_before,
		"$name: io_errors counted");
	is(bpext_config($node)->{state}, 7, "$name: state 7");
	bpext_reads_still_right($node, "$name, after", $nrows, $ver);
	$node->safe_psql('postgres', 'SELECT bpext_enable()');
	bpext_fill_and_read($node, "$name, tier usable", $nrows, $ver);
}

# --- an unreadable tier file -----------------------------------------------------
{
	my $name = 'unreadable file';
	my $offset = -s $node->logfile;
	chmod 0000, $path or die "chmod: $!";

	# New sessions cannot open the file; they must do without the tier.
	my $before = bpext_stat($node, 'extension_page_reads');
	bpext_evict_shared_buffers($node);
	bpext_check_table($node, 'postgres', 't', rows => $nrows, ver => $ver,
		scan => 'index', name => "$name, new session");
	is(bpext_stat($node, 'extension_page_reads') - $before, 0,
		"$name: a session that cannot open the file reads nothing from it");
	# The worker's once-a-second check notices that the file can no longer
	# be opened (a worker started afresh would fail to open it).
	check_failed($name,
		qr/(?:can no longer be opened|could not open "\Q$path\E"): Permission denied/,
		$offset);
	bpext_reads_still_right($node, "$name, after", $nrows, $ver);
	is(bpext_file_mode($path), 0, "$name: mode left alone");

	chmod 0600, $path or die "chmod: $!";
	reenable($name);
}

# --- truncated under concurrent readers ----------------------------------------
# Background sessions check random rows in a loop and raise an error on the
# first wrong one; the file is cut while they read from it.
bpext_create_hammer($node, $nrows, 'CASE WHEN r.id % 3 = 0 THEN 1 ELSE 0 END', 20000);

sub start_hammers
{
	my ($secs) = @_;
	my @h;
	for my $i (1 .. 2)
	{
		my ($out, $err) = ('', '');
		my $h = IPC::Run::start(
			[ 'psql', '-XAtq', '-d', $node->connstr('postgres'),
			  '-c', "SELECT hammer($secs)" ],
			'>', \$out, '2>', \$err);
		push @h, [ $h, \$out, \$err ];
	}
	return @h;
}

sub finish_hammers
{
	my ($name, @h) = @_;
	my $i = 0;
	for my $x (@h)
	{
		$i++;
		my ($h, $out, $err) = @$x;
		$h->finish;
		chomp(my $n = $$out);
		like($n, qr/^\d+$/, "$name: reader $i finished ($n rows checked)");
		# The reader that hit the fault gets the WARNING; nothing else.
		my $msgs = $$err =~ s/^(WARNING|DETAIL|HINT):  .*\n//mgr;
		is($msgs, '', "$name: reader $i had no error");
		unlike($$err, qr/ERROR/, "$name: reader $i: no ERROR");
	}
	return;
}

{
	my $name = 'truncated under readers';
	bpext_evict_shared_buffers($node);
	my $offset = -s $node->logfile;
	my $io_before = bpext_stat($node, 'io_errors');
	my $reads_before = bpext_stat($node, 'extension_page_reads');
	my @h = start_hammers(6);
	ok( $node->poll_query_until('postgres',
			"SELECT count(*) = 2 FROM pg_stat_activity WHERE query LIKE 'SELECT hammer%' AND state = 'active'"),
		"$name: readers running");
	ok( $node->poll_query_until('postgres',
			"SELECT extension_page_reads > $reads_before + 500 FROM bpext_stats"),
		"$name: readers are reading from the tier");
	IPC::Run::run([ 'truncate', '-s', '1M', $path ]) or die "truncate failed";
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT hammer%' AND state = 'active'"),
		'2', "$name: the readers were still reading when the file was cut");
	finish_hammers($name, @h);
	# Either the worker noticed the size, or a reader got a short read first.
	check_failed($name, qr/has been truncated|could not read from the tier file/, $offset);
	bpext_reads_still_right($node, "$name, after", $nrows, $ver);
	reenable($name);
}

# --- replaced by an older copy of itself -----------------------------------------
# A stale copy has the right header (this cluster's), so only the per-page
# checksums can tell.  The worker is stopped so that sessions reach the
# copy before it notices the replacement.
{
	my $name = 'replaced by a stale copy';
	my $session = $node->background_psql('postgres');
	in_session($session, 'SELECT 1');    # opens the tier file... on first use
	my $stale = "$ssd/stale.copy";
	File::Copy::copy($path, $stale) or die "copy: $!";

	my $worker = bpext_worker_pid($node);
	ok($worker, "$name: the bpext worker runs");
	my $offset = -s $node->logfile;
	my $crc_before = bpext_stat($node, 'crc_failures');
	bpext_stop_worker($node);
	my $ok = eval {
		# Change every page of t; the checkpoint dual-writes the new images
		# into slots of the real file, whose stale copy holds older pages.
		in_session($session, q{
			UPDATE t SET ver = 2, v = bpext_expected_v(id, 2) WHERE id % 3 = 1;
			CHECKPOINT;
		});
		rename($stale, $path) or die "rename: $!";
		bpext_evict_shared_buffers($node);
		$ver = 'CASE WHEN id % 3 = 0 THEN 1 WHEN id % 3 = 1 THEN 2 ELSE 0 END';
		# New sessions open the copy.
		bpext_check_table($node, 'postgres', 't', rows => $nrows, ver => $ver,
			scan => 'index', name => "$name, reading the stale copy");
		bpext_check_lookups($node, 'postgres', 't', rows => $nrows, ver => $ver,
			lookups => 3000, seed => 9, name => "$name, reading the stale copy");
		1;
	};
	my $err = $@;
	kill('CONT', $worker);
	ok($ok, "$name: sessions ran while the file was replaced") or diag($err);
	$session->quit;
	check_failed($name, qr/checksum mismatch in a tier page|has been replaced/,
		$offset);
	# Either a session read a stale page and its checksum did not match,
	# or the session noticed the file was not the worker's before reading.
	my $crc = bpext_stat($node, 'crc_failures') - $crc_before;
	my $why = bpext_config($node)->{last_error};
	ok(($why =~ /checksum mismatch/ && $crc > 0) || $why =~ /has been replaced/,
		"$name: caught by the page checksums ($crc crc_failures) or the file identity ($why)");
	bpext_reads_still_right($node, "$name, after", $nrows, $ver);
	# The copy is a tier file of this cluster: bpext_enable() takes it over.
	reenable($name);
}

# --- a creation held in its header write ---------------------------------------
# The helper that creates a tier file is held in its header write past
# bpext.io_timeout and killed, as on a device that hangs.  No file is left
# at the path: the file is made unnamed and linked there only once it has
# its header.  (A file made by name and left without one, empty, was
# refused by every later bpext_enable() as not bpext's, so the tier stayed
# off until someone removed it.)  The next bpext_enable() creates it.
# Where the file system has no O_TMPFILE bpext creates the file by name, and
# the case does not apply.  (Perl's Fcntl has no O_TMPFILE: it is
# __O_TMPFILE, 020000000 on x86-64 and arm64, with O_DIRECTORY.)
my $has_tmpfile = sysopen(my $probe, $ssd, 020000000 | O_DIRECTORY | O_RDWR, 0600);
close($probe) if $has_tmpfile;
SKIP:
{
	skip "the file system of $ssd has no O_TMPFILE: the file is created by name", 6
	  unless $has_tmpfile;
	my $name = 'held header write';
	my $new = "$ssd/held.tier";
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET bpext.io_timeout = '2s'; SELECT pg_reload_conf();");
	bpext_fault($node, 'write_sleep', 1, 600000);
	my ($ret, $out, $err) = $node->psql('postgres',
		"SELECT bpext_enable('$new', '${tier_mb}MB')");
	bpext_fault($node, 'write_sleep', 0);
	isnt($ret, 0, "$name: bpext_enable() fails");
	like(slurp_file($node->{bpext_fault_ctl} . '/injected.log'),
		qr/^\d+ write_sleep .* title .*bpext file helper/m,
		"$name: the file helper's header write was held");
	ok(!-e $new, "$name: no file is left at the path");
	is( $node->safe_psql('postgres',
			"SELECT bpext_enable('$new', '${tier_mb}MB')"),
		'BUFFER POOL EXTENSION ENABLED',
		"$name: the next bpext_enable() creates the file");
	is(bpext_file_size($new), bpext_tier_file_bytes($tier_mb),
		"$name: the whole file");
	bpext_check_table($node, 'postgres', 't', rows => $nrows, ver => $ver,
		scan => 'index', name => "$name, after");
}

my $s = bpext_stats($node);
note(sprintf('io_errors %d, crc_failures %d', $s->{io_errors}, $s->{crc_failures}));
ok(!$node->log_contains(qr/PANIC|TRAP:|server process .* was terminated/),
	'no crash along the way');

$node->stop;
done_testing();

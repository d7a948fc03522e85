
# Copyright (c) 2026, bpext developers

# Warm restart: after a clean shutdown the tier starts with what it held,
# and serves it at once; after every other kind of start it starts cold,
# and nothing saved is ever served where the data files changed while the
# server was down.  Each cold case below is built so that trusting the
# saved map would serve pages the data files no longer hold: the rows
# checked afterwards would come out wrong.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use File::Copy;
use File::Path qw(rmtree);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $nrows = 30000;

my $node = bpext_init_node('main', tier_size => '64MB', max_size => '64MB',
	checksums => 1, init => { allows_streaming => 1 },
	conf => "wal_keep_size = '512MB'\n");    # pg_rewind reads back to a checkpoint
my $path = bpext_tier_path($node);
$node->start;
bpext_setup($node);
bpext_load_table($node, 'postgres', 't', $nrows);
my $relpages = $node->safe_psql('postgres',
	"SELECT (pg_relation_size('t') + pg_relation_size('t_pkey')) / 8192");

my $ver = 0;

sub set_ver
{
	my ($n, $v) = @_;
	$n->safe_psql('postgres',
		"UPDATE t SET ver = $v, v = bpext_expected_v(id, $v); CHECKPOINT;");
	return;
}

# Put the whole table into the tier.
sub fill_tier
{
	my ($n, $name) = @_;
	$n->safe_psql('postgres', q{
		CHECKPOINT;
		SELECT bpext_prewarm('t'), bpext_prewarm('t_pkey');
	});
	cmp_ok(bpext_config($n)->{allocated_pages}, '>=', $relpages,
		"$name: the tier holds the whole table");
	return;
}

# Start or stop a node with bpext not loaded at all.
sub without_bpext
{
	my ($n) = @_;
	$n->adjust_conf('postgresql.conf', 'shared_preload_libraries', "''");
	$n->start;
	return;
}

sub with_bpext_again
{
	my ($n) = @_;
	$n->adjust_conf('postgresql.conf', 'shared_preload_libraries', "'bpext'");
	return;
}

# After a start: the tier enabled, and the saved map's load (if any) over.
sub wait_started
{
	my ($n, $offset) = @_;
	ok(bpext_wait_for_state($n, 'enabled'), 'tier enabled');
	ok( $n->wait_for_log(
			qr/bpext: (cold start|warm start: \d+ of \d+ saved tier pages reused)/,
			$offset),
		'the start is decided and logged');
	return;
}

# The start was warm: the saved pages are back and serve the first read.
sub check_warm
{
	my ($n, $name, $offset, %args) = @_;
	wait_started($n, $offset);
	my $c = bpext_config($n);
	is($c->{start_mode}, 'warm', "$name: warm start");
	is($c->{cold_start_reason}, undef, "$name: no cold-start reason");
	cmp_ok($c->{pages_reused}, '>=', $args{min_reused} // $relpages,
		"$name: saved pages reused ($c->{pages_reused})");
	is(bpext_count_in_log($n, qr/LOG:  bpext: warm start: reusing/, $offset),
		1, "$name: one warm-start line in the log");
	my $before = bpext_stat($n, 'extension_page_reads');
	bpext_check_table($n, 'postgres', 't', rows => $nrows, ver => $ver,
		scan => 'index', name => "$name, first read");
	my $reads = bpext_stat($n, 'extension_page_reads') - $before;
	cmp_ok($reads, '>=', $args{min_reads} // $relpages / 2,
		"$name: the first read came from the tier ($reads pages)");
	is(bpext_stat($n, 'crc_failures'), 0, "$name: no checksum failure");
	return;
}

# The start was cold, for the reason given, and every row reads right.
sub check_cold
{
	my ($n, $name, $offset, $reason) = @_;
	wait_started($n, $offset);
	my $c = bpext_config($n);
	is($c->{start_mode}, 'cold', "$name: cold start");
	like($c->{cold_start_reason} // '', $reason, "$name: reason");
	is($c->{pages_reused}, 0, "$name: nothing reused");
	is(bpext_count_in_log($n, qr/LOG:  bpext: cold start: /, $offset),
		1, "$name: one cold-start line in the log");
	bpext_check_table($n, 'postgres', 't', rows => $nrows, ver => $ver,
		scan => 'index', name => "$name, index scan");
	bpext_check_table($n, 'postgres', 't', rows => $nrows, ver => $ver,
		scan => 'seq', name => "$name, seq scan");
	is(bpext_stat($n, 'crc_failures'), 0, "$name: no checksum failure");
	is($c->{last_error}, undef, "$name: no tier error");
	return;
}

sub log_offset
{
	my ($n) = @_;
	return -s $n->logfile;
}

# --- clean restart: warm -----------------------------------------------------
fill_tier($node, 'clean restart');
my $offset = log_offset($node);
$node->stop;
like(slurp_file($node->logfile, $offset),
	qr/bpext: saved the tier map at shutdown: \d+ pages/,
	'the map is saved at a clean shutdown');
ok(-f $node->data_dir . '/bpext_warm_token', 'the token is in the data directory');
$offset = log_offset($node);
$node->start;
check_warm($node, 'clean restart', $offset);
ok(!-e $node->data_dir . '/bpext_warm_token', 'the token is consumed at start');

# A warm start again, straight after the first.
fill_tier($node, 'second restart');
$offset = log_offset($node);
$node->restart;
check_warm($node, 'second restart', $offset);

# Changes made after the worker wrote the slot directory: the shutdown
# writes what they changed, so the next start loads the new rows' pages,
# not the old ones the directory named before.
fill_tier($node, 'changes after the directory was written');
sleep(3);    # the worker writes the directory once a second
$ver = 10;
set_ver($node, $ver);
$offset = log_offset($node);
$node->restart;
like(slurp_file($node->logfile, $offset),
	qr/saved the tier map at shutdown: \d+ pages of \d+ relation forks in \d+ ms\n.*DETAIL:  \d+ slot directory chunks? of \d+ (was|were) written at shutdown/,
	'the shutdown writes the directory chunks still to be written');
check_warm($node, 'changes after the directory was written', $offset,
	min_reused => 0, min_reads => 0);

# Switched off and on again, the tier starts empty: its start is no longer
# the warm one the view reported.
my ($tier_path, $tier_size) = split /\|/,
  $node->safe_psql('postgres',
	"SELECT current_setting('bpext.path'), current_setting('bpext.size')");
$node->safe_psql('postgres', 'SELECT bpext_disable()');
$node->safe_psql('postgres',
	"SELECT bpext_enable('$tier_path', '$tier_size')");
my $reenabled = bpext_config($node);
is($reenabled->{start_mode}, 'cold', 'off and on again: start_mode cold');
like(
	$reenabled->{cold_start_reason} // '',
	qr/switched off after a warm start/,
	'off and on again: reason');
is($reenabled->{pages_reused}, 0, 'off and on again: nothing reused');
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET bpext.path; ALTER SYSTEM RESET bpext.size; SELECT pg_reload_conf()");

# --- bpext.warm_restart = off --------------------------------------------------
$node->safe_psql('postgres',
	"ALTER SYSTEM SET bpext.warm_restart = off; SELECT pg_reload_conf();");
fill_tier($node, 'warm_restart off');
$offset = log_offset($node);
$node->restart;
like(slurp_file($node->logfile, $offset),
	qr/the tier map was not saved at shutdown: bpext.warm_restart is off/,
	'warm_restart off: not saved');
check_cold($node, 'warm_restart off', $offset, qr/bpext.warm_restart is off/);
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET bpext.warm_restart; SELECT pg_reload_conf();");

# --- immediate shutdown --------------------------------------------------------
fill_tier($node, 'immediate');
$node->stop('immediate');
$offset = log_offset($node);
$node->start;
check_cold($node, 'immediate shutdown', $offset,
	qr/did not shut down cleanly \(database cluster state "in production"\)/);

# --- a crash of a server run without bpext ---------------------------------------
# The rows change and reach the data files (checkpoint) while bpext is not
# loaded; then the server crashes.
fill_tier($node, 'crash without bpext');
$node->stop;
without_bpext($node);
$ver = 1;
set_ver($node, $ver);
$node->stop('immediate');
with_bpext_again($node);
$offset = log_offset($node);
$node->start;
check_cold($node, 'crash of a server without bpext', $offset,
	qr/did not shut down cleanly/);

# --- a clean run without bpext -----------------------------------------------------
fill_tier($node, 'run without bpext');
$node->stop;
without_bpext($node);
$ver = 2;
set_ver($node, $ver);
$node->stop;
with_bpext_again($node);
$offset = log_offset($node);
$node->start;
check_cold($node, 'clean run without bpext', $offset,
	qr/checkpoint .* is not the one the tier map was saved at/);

# --- pg_resetwal ------------------------------------------------------------------
fill_tier($node, 'pg_resetwal');
$node->stop;
command_ok([ 'pg_resetwal', '-f', $node->data_dir ], 'pg_resetwal');
$offset = log_offset($node);
$node->start;
check_cold($node, 'pg_resetwal', $offset,
	qr/checkpoint .* is not the one the tier map was saved at/);

# --- pg_checksums --disable: pg_control changes, the checkpoint does not -----------
fill_tier($node, 'pg_checksums');
$node->stop;
command_ok([ 'pg_checksums', '--disable', '-D', $node->data_dir ],
	'pg_checksums --disable');
$offset = log_offset($node);
$node->start;
check_cold($node, 'pg_checksums', $offset,
	qr/pg_control was changed after the tier map was saved/);
$node->stop;
command_ok([ 'pg_checksums', '--enable', '-D', $node->data_dir ],
	'pg_checksums --enable');
$node->start;

# --- a base backup restored beside the tier file -------------------------------------
$node->backup('restore');
my $backup_ver = $ver;
$ver = 3;
set_ver($node, $ver);
fill_tier($node, 'restored backup');
$node->stop;
rmtree($node->data_dir);
PostgreSQL::Test::RecursiveCopy::copypath($node->backup_dir . '/restore',
	$node->data_dir);
chmod(0700, $node->data_dir);
$ver = $backup_ver;
$offset = log_offset($node);
$node->start;
check_cold($node, 'restored base backup', $offset,
	qr/did not shut down cleanly/);

# --- a copy of the stopped data directory, same tier file ---------------------------
# The copy is taken while the map is saved; the original then runs on and
# saves a newer map; the copy must not take it, nor the original the
# copy's.
fill_tier($node, 'copy');
$node->stop;
$node->backup_fs_cold('copy');
my $copy = PostgreSQL::Test::Cluster->new('copy');
$copy->init_from_backup($node, 'copy');
my $copy_ver = $ver;

$offset = log_offset($node);
$node->start;
check_warm($node, 'original after the copy was taken', $offset);
$ver = 4;
set_ver($node, $ver);
fill_tier($node, 'original, newer');
$node->stop;

my $original_ver = $ver;
$ver = $copy_ver;
$offset = log_offset($copy);
$copy->start;
check_cold($copy, 'older copy on the newer tier', $offset,
	qr/checkpoint .* is not the one the tier map was saved at/);
fill_tier($copy, 'copy');
$copy->stop;

$ver = $original_ver;
$offset = log_offset($node);
$node->start;
check_cold($node, 'original after the copy saved its map', $offset,
	qr/checkpoint .* is not the one the tier map was saved at/);

# The copy started first takes the map, but loads none of it: its data
# files have the original's contents, but are other files (inodes), which
# the map cannot tell from files rewritten while the server was down.  The
# original then finds the map used.
fill_tier($node, 'copy first');
$node->stop;
$node->backup_fs_cold('copy2');
my $copy2 = PostgreSQL::Test::Cluster->new('copy2');
$copy2->init_from_backup($node, 'copy2');
$offset = log_offset($copy2);
$copy2->start;
check_cold($copy2, 'copy started first', $offset,
	qr/the files of every saved relation fork changed while the server was down \(first "[^"]*": it is another file \(inode\)\)/);
$copy2->stop('immediate');
$offset = log_offset($node);
$node->start;
check_cold($node, 'original after the copy used the map', $offset,
	qr/no tier map was saved at the last shutdown/);

# --- a tier file from elsewhere -----------------------------------------------------
# A copy with its own tier file runs on to newer rows and saves its map;
# that file is then put in place of the original's.
$node->stop;
$node->backup_fs_cold('copy3');
my $copy3 = PostgreSQL::Test::Cluster->new('copy3');
$copy3->init_from_backup($node, 'copy3');
my $copy3_path = $copy3->basedir . '/other.tier';
$copy3->append_conf('postgresql.conf', "bpext.path = '$copy3_path'\n");
$copy3->start;
bpext_wait_for_state($copy3, 'enabled');
set_ver($copy3, 5);
fill_tier($copy3, 'other tier');
$copy3->stop;
copy($copy3_path, $path) or die "copy: $!";
$offset = log_offset($node);
$node->start;
check_cold($node, 'tier file from elsewhere', $offset,
	qr/checkpoint .* is not the one the tier map was saved at/);

# --- a damaged map ------------------------------------------------------------------
# The slots end where the slot directory starts: 64 MB of tier file, less
# the header.  Its chunks are 8 kB: a 16-byte header (directory id, chunk
# number, CRC), then 511 entries of 16 bytes (relation entry, block,
# generation, CRC).
my $map_start = 64 * 1024 * 1024;
my $chunks = int((64 * 1024 * 1024 / 8192 - 1 + 510) / 511);

sub damage
{
	my ($offset_in_file, $bytes) = @_;
	open(my $fh, '+<', $path) or die "open $path: $!";
	binmode $fh;
	seek($fh, $offset_in_file, 0) or die;
	print $fh $bytes;
	close($fh) or die;
	return;
}

# Every saved entry names the next block instead of its own: a load that
# trusted a chunk whose CRC no longer matches would map slots to the
# wrong pages.
sub shift_every_block
{
	my $shifted = 0;
	open(my $fh, '+<', $path) or die "open $path: $!";
	binmode $fh;
	for my $chunk (0 .. $chunks - 1)
	{
		my $at = $map_start + $chunk * 8192;
		my $buf;
		seek($fh, $at, 0) or die;
		read($fh, $buf, 8192) == 8192 or die "short read";
		for my $i (0 .. 510)
		{
			my $e = 16 + 16 * $i;
			my ($rel, $block) = unpack('L2', substr($buf, $e, 8));
			next if $rel == 0xFFFFFFFF;
			substr($buf, $e + 4, 4) = pack('L', $block + 1);
			$shifted++;
		}
		seek($fh, $at, 0) or die;
		print $fh $buf;
	}
	close($fh) or die;
	return $shifted;
}

fill_tier($node, 'damaged directory');
$node->stop;
cmp_ok(shift_every_block(), '>=', $relpages,
	'damaged directory: the saved entries changed');
$offset = log_offset($node);
$node->start;
wait_started($node, $offset);
my $damaged = bpext_config($node);
is($damaged->{start_mode}, 'warm', 'damaged directory: the start is warm');
is($damaged->{pages_reused}, 0,
	'damaged directory: no page of a damaged chunk is loaded');
bpext_check_table($node, 'postgres', 't', rows => $nrows, ver => $ver,
	scan => 'index', name => 'damaged directory, index scan');
is(bpext_stat($node, 'crc_failures'), 0,
	'damaged directory: no checksum failure');

fill_tier($node, 'truncated map');
$node->stop;
truncate($path, $map_start + 100) or die "truncate: $!";
$offset = log_offset($node);
$node->start;
check_cold($node, 'truncated map', $offset,
	qr/the saved tier map is incomplete/);

fill_tier($node, 'torn header');
$node->stop;
damage(512 + 40, 'torn');
$offset = log_offset($node);
$node->start;
check_cold($node, 'torn map header', $offset,
	qr/no tier map was saved at the last shutdown/);

# --- data files changed offline, pg_control left alone --------------------------------
# pg_rewind writes pg_control last: interrupted after it copied blocks, it
# leaves pg_control at the clean shutdown the map was saved at, and the
# token in place.  Simulated: one relation's data file is put back, in
# place (same file, same size), to an older state of the cluster.  The
# start must serve what that file now holds, not the pages the map saved;
# the other relations still start warm.
sub data_file
{
	my ($n, $rel) = @_;
	return $n->data_dir . '/'
	  . $n->safe_psql('postgres', "SELECT pg_relation_filepath('$rel')");
}

# Rows updated in place: fillfactor 30 leaves room for HOT updates, so the
# file keeps its size.
bpext_load_table($node, 'postgres', 'r', 5000, 1, 'WITH (fillfactor = 30)');
$node->safe_psql('postgres', 'CHECKPOINT');
my $r_file = data_file($node, 'r');
$node->stop;
my $r_state1 = $node->basedir . '/r.state1';
copy($r_file, $r_state1) or die "copy: $!";
$offset = log_offset($node);
$node->start;
wait_started($node, $offset);
$node->safe_psql('postgres', q{
	UPDATE r SET ver = 2, v = bpext_expected_v(id, 2);
	VACUUM r;
	CHECKPOINT;
});
is(-s $r_file, -s $r_state1, 'interrupted rewind: both states of r have the same size');
fill_tier($node, 'interrupted rewind');
cmp_ok($node->safe_psql('postgres', "SELECT bpext_prewarm('r')"), '>', 0,
	'interrupted rewind: r is in the tier');
$node->stop;
my $r_ino = (stat $r_file)[1];
copy($r_state1, $r_file) or die "copy: $!";
is((stat $r_file)[1], $r_ino, 'interrupted rewind: r overwritten in place');
is(-s $r_file, -s $r_state1, 'interrupted rewind: r has the same size');
$offset = log_offset($node);
$node->start;
check_warm($node, 'interrupted rewind, other relations', $offset);
like(slurp_file($node->logfile, $offset),
	qr/warm start: reusing .*\n.*DETAIL:  1 saved relation fork is not loaded because its files changed while the server was down \("[^"]*": its modification time changed\)/,
	'interrupted rewind: the changed fork is named in the log');
bpext_check_table($node, 'postgres', 'r', rows => 5000, ver => 1,
	scan => 'seq', name => 'interrupted rewind');
is(bpext_stat($node, 'crc_failures'), 0, 'interrupted rewind: no checksum failure');
$node->safe_psql('postgres', 'DROP TABLE r');

# --- data files hard-linked with a cluster that has run ---------------------------
# pg_upgrade --link gives the new cluster the old one's data files (the same
# inodes); if the new cluster runs and pg_control.old is then put back, the
# old cluster starts at its own clean shutdown while its files hold the
# new cluster's writes.  Simulated with a copy of the stopped cluster whose
# files of h are hard links to the original's: the copy runs without
# bpext, rewrites every row of h and freezes them (so that the original,
# which never had those transactions, can read them).
bpext_load_table($node, 'postgres', 'h', 5000, 0);
$node->safe_psql('postgres', 'CHECKPOINT');
my %h_file = map { $_ => data_file($node, $_) } ('h', 'h_pkey');
fill_tier($node, 'hard links');
cmp_ok($node->safe_psql('postgres', "SELECT bpext_prewarm('h') + bpext_prewarm('h_pkey')"),
	'>', 0, 'hard links: h is in the tier');
$node->stop;
$node->backup_fs_cold('linked');
my $linked = PostgreSQL::Test::Cluster->new('linked');
$linked->init_from_backup($node, 'linked');
for my $rel (keys %h_file)
{
	(my $in_copy = $h_file{$rel}) =~ s/^\Q@{[$node->data_dir]}\E/$linked->data_dir/e;
	unlink($in_copy) or die "unlink $in_copy: $!";
	link($h_file{$rel}, $in_copy) or die "link: $!";
}
without_bpext($linked);
$linked->safe_psql('postgres', q{
	UPDATE h SET ver = 9, v = bpext_expected_v(id, 9);
	VACUUM (FREEZE) h;
	CHECKPOINT;
});
$linked->stop;
$offset = log_offset($node);
$node->start;
check_warm($node, 'hard links, other relations', $offset);
like(slurp_file($node->logfile, $offset),
	qr/warm start: reusing .*\n.*DETAIL:  2 saved relation forks are not loaded because their files changed while the server was down/,
	'hard links: the changed forks are counted in the log');
bpext_check_table($node, 'postgres', 'h', rows => 5000, ver => 9,
	scan => 'index', name => 'hard links');
bpext_check_table($node, 'postgres', 'h', rows => 5000, ver => 9,
	scan => 'seq', name => 'hard links');
is(bpext_stat($node, 'crc_failures'), 0, 'hard links: no checksum failure');
$node->safe_psql('postgres', 'DROP TABLE h');

# --- after pg_upgrade: the old cluster's tier file at the same bpext.path ---------------
# A tier file of another cluster (another system identifier) that no server
# holds is taken over, empty, with a LOG line; 003_bad_config checks that
# one another cluster is using is still refused.
my $former = bpext_init_node('former', tier_size => '64MB', max_size => '64MB');
$former->start;
$former->safe_psql('postgres', 'CREATE EXTENSION bpext');
ok(bpext_wait_for_state($former, 'enabled'), 'the former cluster has its tier');
$former->stop;
$node->stop;
copy(bpext_tier_path($former), $path) or die "copy: $!";
$offset = log_offset($node);
$node->start;
check_cold($node, "another cluster's tier file", $offset,
	qr/is the tier file of another cluster/);
ok($node->log_contains(
		qr/LOG:  bpext: took over "\Q$path\E", the tier file of another cluster \(system identifier \d+\), and started it empty/,
		$offset),
	"another cluster's tier file: taken over with a LOG line");
fill_tier($node, "another cluster's tier file, taken over");
$offset = log_offset($node);
$node->restart;
check_warm($node, "another cluster's tier file, taken over, restarted", $offset);

# --- pg_rewind: an old primary that went its own way -----------------------------------
$node->backup('standby');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'standby', has_streaming => 1);
my $standby_path = $standby->basedir . '/standby.tier';
$standby->append_conf('postgresql.conf', "bpext.path = '$standby_path'\n");
$standby->start;
bpext_wait_for_state($standby, 'enabled');
$node->wait_for_catchup($standby);
$standby->promote;

my $rewound_ver = $ver;
set_ver($node, 6);    # on the old primary only: lost by the rewind
$ver = 6;
fill_tier($node, 'before rewind');
$node->stop;
# pg_rewind copies the source's configuration files too: keep the node's.
my %conf;
$conf{$_} = slurp_file($node->data_dir . "/$_")
  for ('postgresql.conf', 'postgresql.auto.conf');
command_ok(
	[
		'pg_rewind', '--target-pgdata', $node->data_dir,
		'--source-server', $standby->connstr('postgres')
	],
	'pg_rewind');
for my $file (keys %conf)
{
	open(my $fh, '>', $node->data_dir . "/$file") or die "$file: $!";
	print $fh $conf{$file};
	close($fh) or die;
}
$node->enable_streaming($standby);
$ver = $rewound_ver;
$offset = log_offset($node);
$node->start;
$standby->wait_for_catchup($node);
check_cold($node, 'rewound old primary', $offset,
	qr/did not shut down cleanly \(database cluster state "in archive recovery"\)/);

# --- a standby restarted cleanly: warm, and replays what it missed ---------------------
fill_tier($node, 'standby');
$offset = log_offset($node);
$node->stop;
like(slurp_file($node->logfile, $offset),
	qr/bpext: saved the tier map at shutdown/,
	'a standby saves its map at a clean shutdown');
$standby->safe_psql('postgres',
	'CREATE TABLE w AS SELECT i FROM generate_series(1, 10000) i');
$offset = log_offset($node);
$node->start;
$standby->wait_for_catchup($node);
check_warm($node, 'standby restart', $offset);
is($node->safe_psql('postgres', 'SELECT count(*) FROM w'),
	'10000', 'the standby replayed what it missed');

$node->stop;
# --- unlogged relations: reset by recovery behind the tier ------------------------------
# Their pages are not saved: a start through recovery (here archive recovery
# that ends at once, on the primary the standby became) rebuilds them from
# their init forks.
$standby->safe_psql('postgres', q{
	CREATE UNLOGGED TABLE u (id int PRIMARY KEY, pad text);
	INSERT INTO u SELECT i, repeat('u', 100) FROM generate_series(1, 20000) i;
	CHECKPOINT;
	SELECT bpext_prewarm('u'), bpext_prewarm('u_pkey');
});
fill_tier($standby, 'unlogged');
$standby->stop;
$standby->append_conf('recovery.signal', '');
$standby->append_conf('postgresql.conf', "restore_command = 'false'\n");
$offset = log_offset($standby);
$standby->start;
check_warm($standby, 'start through recovery', $offset);
is( $standby->safe_psql('postgres', q{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM u WHERE id > 0}),
	'0', 'the unlogged table is empty after recovery (index scan)');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM u'),
	'0', 'the unlogged table is empty after recovery (seq scan)');
$standby->safe_psql('postgres', 'DROP TABLE u');

# --- a standby whose replay rewrites saved pages before the load ------------------------
# With hot_standby off, the bpext worker starts only at promotion, so the
# whole replay (every row of t updated, w truncated and refilled) runs
# between the postmaster's decision and the load of the saved map: the
# load must publish none of the pages replay wrote, and every page of
# table keep, which nothing touched after the standby's last restartpoint.
$standby->safe_psql('postgres', q{
	CREATE TABLE keep AS SELECT i, repeat('k', 200) AS pad FROM generate_series(1, 20000) i;
	CHECKPOINT;
});
$offset = log_offset($node);
$node->start;
wait_started($node, $offset);
$standby->wait_for_catchup($node);
# A restartpoint first: replay will not write keep again, and its pages
# are in its data file for bpext_prewarm to read.
$node->safe_psql('postgres', 'CHECKPOINT');
my $keep_pages = $node->safe_psql('postgres', "SELECT bpext_prewarm('keep')");
cmp_ok($keep_pages, '>', 100, "replay before the load: keep prewarmed ($keep_pages pages)");
$node->stop;
$node->append_conf('postgresql.conf', "hot_standby = off\n");
$standby->safe_psql('postgres',
	'TRUNCATE w; INSERT INTO w SELECT i FROM generate_series(1, 5000) i');
$ver = 7;
set_ver($standby, $ver);
$offset = log_offset($node);
$node->start;
# By name: from 19 on, given the node, wait_for_catchup runs WAIT FOR LSN
# on it, which a standby without hot_standby refuses to connect for; by
# name it polls pg_stat_replication here, as it always did.
$standby->wait_for_catchup($node->name);
$node->promote;
# Nearly all of keep: the write counters are hashed (65536 of them), so
# replay's writes to t and w also stop a few unrelated pages.
check_warm($node, 'replay before the load', $offset,
	min_reused => int($keep_pages * 0.9), min_reads => 0);
my $reused = bpext_config($node)->{pages_reused};
my ($saved) = slurp_file($node->logfile, $offset) =~
  /warm start: reusing .* \((\d+) pages of \d+ relation forks\)/;
cmp_ok($reused, '<', $saved // 0,
	"replay before the load: the pages replay wrote were not reused ($reused of "
	  . ($saved // '?') . ')');
is($node->safe_psql('postgres', 'SELECT count(*), min(i), max(i) FROM w'),
	'5000|1|5000', 'replay before the load: w reads as refilled');
$node->stop;
$node->adjust_conf('postgresql.conf', 'hot_standby', 'on');

# --- the update from 1.0 to the latest --------------------------------------------------------
$standby->safe_psql('postgres', q{
	CREATE DATABASE upd;
});
$standby->safe_psql('upd', q{CREATE EXTENSION bpext VERSION '1.0'});
is( $standby->safe_psql('upd',
		"SELECT count(*) FROM pg_attribute WHERE attrelid = 'bpext_configuration'::regclass AND attnum > 0"),
	'10', '1.0: bpext_configuration has 10 columns');
$standby->safe_psql('upd', 'ALTER EXTENSION bpext UPDATE');
is($standby->safe_psql('upd',
		"SELECT extversion FROM pg_extension WHERE extname = 'bpext'"),
	'1.5', 'updated to 1.5');
is( $standby->safe_psql('upd',
		'SELECT start_mode IS NOT NULL AND pages_reused >= 0 FROM bpext_configuration'),
	't', '1.1: start_mode and pages_reused');
is( $standby->safe_psql('upd',
		"SELECT has_table_privilege('pg_monitor', 'bpext_configuration', 'SELECT') AND has_function_privilege('pg_monitor', 'bpext_configuration_1_1()', 'EXECUTE')"),
	't', '1.1: pg_monitor may read the configuration');

$standby->stop;
done_testing();

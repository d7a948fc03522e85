
# Copyright (c) 2026, bpext developers

# bpext under a real HA manager: a 3-node Patroni cluster on loopback,
# with the Patroni and etcd of the Debian release the major runs on (3.0
# and 3.4 on 15, 4.0 and 3.5 on 17, 4.1 and 3.5 on 18 and 19), bpext with a
# tier of its own on every node, pgbench TPC-B through the leader and
# select-only on the replicas.  Then a planned switchover, a failover by SIGKILL of the
# leader's Patroni and postmaster, the old leader rejoining through
# pg_rewind, a restart of a replica, and a restore of a base backup into a
# data directory whose tier file (with a map saved at its last clean
# shutdown) is still beside it.
#
# After each step: TPC-B's invariants, amcheck and equal table hashes on
# every node, the same hashes read with the tier off, tier reads served on
# the replicas, and the warm/cold decision each restarted node made.  The
# restore is built so that a tier trusted without its checks would serve
# pages older than the restored data files.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextPatroni;
use BpextTest;
use File::Path ();
use File::Spec;
use IPC::Run ();
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

bpext_needs_contrib('pg_prewarm', 'amcheck');

my $why = BpextPatroni::unavailable();
plan skip_all => $why if $why;
note('with ' . BpextPatroni::versions());

my $scale = 3;
my $tier_size = '128MB';
my $load_seconds = 8;
my @tables = qw(pgbench_accounts pgbench_branches pgbench_tellers pgbench_history);

my $basedir = File::Spec->rel2abs(PostgreSQL::Test::Utils::tempdir('patroni'));
my $sockets = PostgreSQL::Test::Utils::tempdir_short();
my $bindir = `pg_config --bindir`;
chomp $bindir;

my $etcd = BpextPatroni::Etcd->start($basedir);
my %tier_path;
my @nodes = map {
	my $name = "node$_";
	$tier_path{$name} = "$basedir/$name.tier";
	BpextPatroni::Node->new(
		name => $name,
		basedir => $basedir,
		etcd => $etcd,
		bindir => $bindir,
		dcs_parameters => {
			wal_keep_size => '512MB',
			max_wal_senders => 10,
			max_replication_slots => 10,
		},
		parameters => {
			unix_socket_directories => $sockets,
			shared_preload_libraries => 'bpext',
			'bpext.path' => $tier_path{$name},
			'bpext.size' => $tier_size,
			'bpext.max_size' => $tier_size,
			'bpext.min_free_space' => '0',
			shared_buffers => '16MB',
		})
} 1 .. 3;
my %node = map { $_->name => $_ } @nodes;

# An interrupted run still stops what it started.
$SIG{$_} = sub { die "killed by SIG$_[0]\n" } for qw(INT TERM HUP);
END
{
	# Stopping children sets $?, which would become the test's exit code.
	local $?;
	$_->cleanup for @nodes;
	$etcd->stop if $etcd;
}

# --- helpers -----------------------------------------------------------------

sub replicas_of
{
	my ($leader, @among) = @_;
	return grep { $_ != $leader } (@among ? @among : @nodes);
}

# pgbench against one node, in the background.
sub pgbench_start
{
	my ($n, @args) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[
			'pgbench', '-n', '-h', '127.0.0.1', '-p', $n->port, '-U',
			'postgres', @args, 'postgres'
		],
		'<', \undef, '>', \$out, '2>', \$err);
	return { h => $h, out => \$out, err => \$err, node => $n->name };
}

sub pgbench_finish
{
	my ($run) = @_;
	my $ok = $run->{h}->finish;
	return ($ok ? 0 : $run->{h}->result, ${ $run->{out} } . ${ $run->{err} });
}

# TPC-B on the leader and select-only on every replica, side by side; the
# replicas' reads must be served partly by their tiers.
sub run_load
{
	my ($step, $leader, @replicas) = @_;
	my %before = map { $_->name => bpext_stat($_, 'extension_page_reads') } @replicas;
	my @runs = (pgbench_start($leader, '-c', 2, '-T', $load_seconds));
	push @runs, pgbench_start($_, '-S', '-c', 1, '-T', $load_seconds) for @replicas;
	for my $run (@runs)
	{
		my ($ret, $out) = pgbench_finish($run);
		is($ret, 0, "$step: pgbench on $run->{node} ran")
		  or diag($out);
	}
	for my $r (@replicas)
	{
		my $reads = bpext_stat($r, 'extension_page_reads') - $before{ $r->name };
		cmp_ok($reads, '>', 0,
			"$step: " . $r->name . " served $reads pages from its tier under load");
	}
	return;
}

sub wait_caught_up
{
	my ($leader, @replicas) = @_;
	my $lsn = $leader->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
	for my $r (@replicas)
	{
		# Generous: a replica that Patroni has just rewound or restarted
		# replays slowly on a busy machine; one that stays behind is
		# described below.
		my $deadline = time() + 240;
		my $done = 0;
		while (time() < $deadline)
		{
			last if $done = $r->psql_ok(
				"SELECT pg_last_wal_replay_lsn() >= '$lsn'::pg_lsn");
			usleep(100_000);
		}
		next if ok($done, $r->name . " replayed up to the leader's $lsn");
		my (undef, $state) = $r->psql('postgres',
			"SELECT 'replayed up to ' || pg_last_wal_replay_lsn() || ', WAL receiver: '"
			  . " || coalesce((SELECT status || ' from ' || sender_host || ', flushed up to '"
			  . " || flushed_lsn FROM pg_stat_wal_receiver), 'none')");
		diag($r->name . ': ' . ($state || 'does not answer'));
		my @log = split /\n/, slurp_file($r->logfile);
		diag($r->name . "'s log ends:\n" . join("\n", @log[ -(@log < 30 ? @log : 30) .. -1 ]));
	}
	return;
}

my $reference_turn = 0;

# Everything that must hold on every running node after a step.
sub check_cluster
{
	my ($step, $leader, @replicas) = @_;
	my @running = ($leader, @replicas);
	wait_caught_up($leader, @replicas);

	my $tpcb = bpext_tpcb_check($leader, 'postgres');
	my ($a, $t, $b, $h) = split /\|/, $tpcb;
	ok($a == $t && $t == $b && $b == $h,
		"$step: TPC-B invariants on the leader ($tpcb)");
	my $hashes = bpext_table_hashes($leader, 'postgres', \@tables);
	for my $n (@replicas)
	{
		is(bpext_tpcb_check($n, 'postgres'), $tpcb,
			"$step: TPC-B sums on " . $n->name);
		is_deeply(bpext_table_hashes($n, 'postgres', \@tables), $hashes,
			"$step: table hashes on " . $n->name . ' equal the leader\'s');
	}
	for my $n (@running)
	{
		is(bpext_amcheck($n, 'postgres'), '', "$step: amcheck on " . $n->name);
		my $s = bpext_stats($n);
		my $c = bpext_config($n);
		is($c->{state_description}, 'BUFFER POOL EXTENSION ENABLED',
			"$step: tier enabled on " . $n->name);
		is($s->{crc_failures} + $s->{io_errors}, 0,
			"$step: no tier checksum failure or I/O error on " . $n->name);
	}

	# The same rows read with the tier off, on one replica in turn: its
	# tier is switched off, its shared buffers emptied, and the tables read
	# from the data files alone.
	my $ref = $replicas[ $reference_turn++ % @replicas ];
	is($ref->safe_psql('postgres', 'SELECT bpext_disable()'),
		'BUFFER POOL EXTENSION DISABLED', "$step: tier off on " . $ref->name);
	bpext_evict_shared_buffers($ref);
	is_deeply(bpext_table_hashes($ref, 'postgres', \@tables), $hashes,
		"$step: the tables read the same with the tier off (" . $ref->name . ')');
	# bpext_disable() wrote bpext.size into postgresql.auto.conf, which
	# pg_rewind and pg_basebackup would copy to other nodes: take it out
	# again, which brings back the node's own setting.
	$ref->safe_psql('postgres',
		'ALTER SYSTEM RESET bpext.size; SELECT pg_reload_conf()');
	ok(bpext_wait_for_state($ref, 'enabled'), "$step: tier on again on " . $ref->name);
	return;
}

# The start a node's bpext decided since offset: 'warm' or 'cold: reason'.
sub start_decision
{
	my ($n, $offset) = @_;
	my $deadline = time() + 60;
	while (time() < $deadline)
	{
		my $log = slurp_file($n->logfile, $offset);
		return 'warm' if $log =~ /LOG:  bpext: warm start: reusing/;
		return "cold: $1" if $log =~ /LOG:  bpext: cold start: (.*)/;
		usleep(200_000);
	}
	return 'none logged';
}

# A warm start: decided, the saved map loaded, shown in
# bpext_configuration, at least min_reused pages reused.
sub check_warm
{
	my ($step, $n, $offset, $min_reused) = @_;
	is(start_decision($n, $offset), 'warm', "$step: " . $n->name . ' started warm');
	my $deadline = time() + 60;
	my $loaded;
	while (time() < $deadline)
	{
		($loaded) = slurp_file($n->logfile, $offset) =~
		  /LOG:  bpext: warm start: (\d+) of \d+ saved tier pages reused/;
		last if defined $loaded;
		usleep(200_000);
	}
	ok(defined $loaded, "$step: the saved map of " . $n->name . ' is loaded');
	ok(bpext_wait_for_state($n, 'enabled'), "$step: tier enabled on " . $n->name);
	my $c = bpext_config($n);
	is($c->{start_mode}, 'warm', "$step: start_mode warm on " . $n->name);
	cmp_ok($c->{pages_reused}, '>=', $min_reused // 1,
		"$step: " . $n->name . " reused $c->{pages_reused} saved pages");
	return;
}

sub check_cold
{
	my ($step, $n, $offset, $reason) = @_;
	like(start_decision($n, $offset), qr/^cold: .*$reason/,
		"$step: " . $n->name . ' started cold');
	ok(bpext_wait_for_state($n, 'enabled'), "$step: tier enabled on " . $n->name);
	my $c = bpext_config($n);
	is($c->{start_mode}, 'cold', "$step: start_mode cold on " . $n->name);
	like($c->{cold_start_reason} // '', $reason,
		"$step: cold_start_reason on " . $n->name);
	is($c->{pages_reused}, 0, "$step: nothing reused on " . $n->name);
	return;
}

# --- bootstrap -----------------------------------------------------------------

$node{node1}->start;
my $leader = BpextPatroni::wait_for_leader([ $node{node1} ]);
is($leader->name, 'node1', 'node1 bootstraps the cluster');
bpext_setup($leader);
$leader->safe_psql('postgres', 'CREATE EXTENSION amcheck');
my ($out, $err) = ('', '');
IPC::Run::run(
	[
		'pgbench', '-i', '-q', '-s', $scale, '-h', '127.0.0.1', '-p',
		$leader->port, '-U', 'postgres', 'postgres'
	],
	'>', \$out, '2>', \$err) or die "pgbench -i failed: $err";

$node{$_}->start for qw(node2 node3);
ok($node{$_}->wait_replica, "$_ joins as a replica") for qw(node2 node3);
for my $n (@nodes)
{
	is(start_decision($n, 0), 'cold: there is no tier file "' . $tier_path{ $n->name } . '" yet',
		$n->name . ': first start is cold, no tier file yet');
}
run_load('bootstrap', $leader, replicas_of($leader));
check_cluster('bootstrap', $leader, replicas_of($leader));

# --- planned switchover --------------------------------------------------------
# node1 is demoted: Patroni shuts it down cleanly and starts it as a
# standby of node2.  Nothing changed its files while it was down, so its
# tier comes back warm.
my $offset = $node{node1}->log_offset;
$node{node1}->patronictl('switchover', '--leader', 'node1',
	'--candidate', 'node2', '--force');
$leader = BpextPatroni::wait_for_leader(\@nodes);
is($leader->name, 'node2', 'switchover: node2 leads');
ok($node{node1}->wait_replica, 'switchover: node1 follows as a replica');
like(slurp_file($node{node1}->logfile, $offset),
	qr/bpext: saved the tier map at shutdown: \d+ pages/,
	'switchover: node1 saved its tier map when Patroni stopped it');
check_warm('switchover', $node{node1}, $offset);
run_load('switchover', $leader, replicas_of($leader));
check_cluster('switchover', $leader, replicas_of($leader));

# --- failover: the leader's machine dies -----------------------------------------
# node2's Patroni and postmaster get SIGKILL in the middle of TPC-B; its
# leader key expires and node1 or node3 takes over.
my $doomed = pgbench_start($leader, '-c', 2, '-T', 30);
sleep 3;
my $dead = $leader;
$dead->kill9;
pgbench_finish($doomed);    # it fails with its server; that is the point
$leader = BpextPatroni::wait_for_leader([ replicas_of($dead) ], 180);
isnt($leader->name, $dead->name, 'failover: ' . $leader->name . ' leads');
my @survivors = replicas_of($leader, replicas_of($dead));
ok($survivors[0]->wait_replica, 'failover: ' . $survivors[0]->name . ' follows the new leader');
run_load('failover', $leader, @survivors);
check_cluster('failover', $leader, @survivors);

# --- the old leader rejoins through pg_rewind ----------------------------------------
# Patroni runs crash recovery in single-user mode, then pg_rewind; both
# change the data files while no postmaster runs, so the tier starts cold.
$offset = $dead->log_offset;
my $patroni_offset = -s "$basedir/" . $dead->name . '/patroni.log';
$dead->start;
ok($dead->wait_replica(240), 'rejoin: ' . $dead->name . ' follows as a replica');
like(slurp_file("$basedir/" . $dead->name . '/patroni.log', $patroni_offset),
	qr/running pg_rewind from/, 'rejoin: Patroni ran pg_rewind');
check_cold('rejoin', $dead, $offset,
	qr/did not shut down cleanly|no tier map was saved|not the one the tier map was saved/);
run_load('rejoin', $leader, replicas_of($leader));
check_cluster('rejoin', $leader, replicas_of($leader));

# Put the whole of pgbench_accounts into a replica's tier; returns how many
# of its pages (and its index's) the tier holds then.  bpext_prewarm counts
# only the pages it stored, and a replica's tier already holds those its
# replay and its readers read through it.
sub prewarm_tier
{
	my ($step, $n) = @_;
	$n->safe_psql('postgres',
		"SELECT bpext_prewarm('pgbench_accounts') + bpext_prewarm('pgbench_accounts_pkey')");
	my $pages = $n->safe_psql('postgres', q{
		SELECT coalesce(sum(ssd_pages), 0) FROM bpext_buffer_summary
		 WHERE database_id = (SELECT oid FROM pg_database
							   WHERE datname = current_database())
		   AND relforknumber = 0
		   AND relfilenode IN (pg_relation_filenode('pgbench_accounts'),
							   pg_relation_filenode('pgbench_accounts_pkey'))});
	cmp_ok($pages, '>', 1000, "$step: " . $n->name . "'s tier holds $pages pages of pgbench_accounts");
	return $pages;
}

# --- a replica restarts -------------------------------------------------------------
# A clean shutdown in recovery and a start: the tier comes back warm and
# serves the first reads.  A standby's start replays the WAL from its last
# restartpoint, and replay writes every page that has a full-page image
# there again, which takes the page out of the saved map; a checkpoint on
# the leader and a restartpoint on the replica before the restart (what
# doc/warm-restart.md recommends for a planned restart) leave nothing to
# replay.
my ($restarted) = replicas_of($leader);
my $prewarmed = prewarm_tier('replica restart', $restarted);
$leader->safe_psql('postgres', 'CHECKPOINT');
wait_caught_up($leader, $restarted);
$restarted->safe_psql('postgres', 'CHECKPOINT');
$offset = $restarted->log_offset;
$restarted->patronictl('restart', 'bpext', $restarted->name, '--force');
ok($restarted->wait_replica, 'replica restart: ' . $restarted->name . ' runs again');
# They come back, but for the pages the replica wrote since (the replay
# that caught up, the restartpoint's writes of pages whose hint bits its
# readers set): 5,573 of 5,827 in one CI run.  Half is the line, as below.
check_warm('replica restart', $restarted, $offset, int($prewarmed / 2));
my $before = bpext_stat($restarted, 'extension_page_reads');
my $tpcb = bpext_tpcb_check($restarted, 'postgres');
cmp_ok(bpext_stat($restarted, 'extension_page_reads') - $before,
	'>', 0, 'replica restart: the first reads after the restart hit the tier');
run_load('replica restart', $leader, replicas_of($leader));
check_cluster('replica restart', $leader, replicas_of($leader));

# --- a base backup restored beside an old tier file ------------------------------------
# The replica stops cleanly (its map is saved, its token written), the
# leader goes on changing pages that map holds, and a base backup taken
# after that replaces the replica's data directory.  The tier file with the
# saved map is still there; it must not be trusted.  As with pgBackRest's
# --type=standby restore, the restored directory first runs as a standby
# by itself until it is consistent (Patroni would otherwise run crash
# recovery in single-user mode on a directory whose pg_control says "in
# production", which forks its WAL from the leader's), then Patroni takes
# it over.
my ($restored) = grep { $_ != $restarted } replicas_of($leader);
prewarm_tier('restore', $restored);
$offset = $restored->log_offset;
$restored->stop;
like(slurp_file($restored->logfile, $offset),
	qr/bpext: saved the tier map at shutdown: \d+ pages/,
	'restore: ' . $restored->name . ' saved its tier map at shutdown');
my $writes = pgbench_start($leader, '-c', 2, '-T', 5);
my ($wret, $wout) = pgbench_finish($writes);
is($wret, 0, 'restore: TPC-B on the leader while the replica is down') or diag($wout);
my $backup = "$basedir/backup";
IPC::Run::run(
	[
		'pg_basebackup', '-h', '127.0.0.1', '-p', $leader->port, '-U',
		'postgres', '-D', $backup, '-X', 'stream', '-c', 'fast', '-R'
	],
	'>', \$out, '2>', \$err) or die "pg_basebackup failed: $err";
File::Path::rmtree($restored->data_dir);
rename($backup, $restored->data_dir) or die "rename: $!";
chmod 0700, $restored->data_dir;
ok(-f $tier_path{ $restored->name }, 'restore: the old tier file is still there');

# The restored directory's configuration is the leader's: its own port,
# tier file and log on the command line.  The leader's postgresql.conf may
# still name the slot Patroni gave it when it was a replica (its own name),
# which no node holds now, so the standby would never stream: it streams
# without a slot (the leader keeps wal_keep_size of WAL).
$offset = $restored->log_offset;
IPC::Run::run(
	[
		'pg_ctl', '-D', $restored->data_dir, '-w', '-l', "$basedir/restore-start.log",
		'-o', join(' ',
			'-c listen_addresses=127.0.0.1', '-c port=' . $restored->port,
			'-c primary_slot_name=',
			"-c bpext.path=$tier_path{ $restored->name }",
			'-c log_directory=' . $restored->log_dir,
			'-c log_filename=postgresql.log'),
		'start'
	],
	'>', \$out, '2>', \$err) or die "pg_ctl start failed: $out$err";
check_cold('restore', $restored, $offset,
	qr/did not shut down cleanly|not the one the tier map was saved|not the one the tier map was saved with/);
wait_caught_up($leader, $restored);
my $hashes = bpext_table_hashes($leader, 'postgres', \@tables);
is_deeply(bpext_table_hashes($restored, 'postgres', \@tables), $hashes,
	'restore: the restored standby reads the leader\'s rows through its tier');
my $standby_prewarmed = prewarm_tier('restore, standby run', $restored);
# A restartpoint at a checkpoint the leader takes now, as for the replica
# restart above: without it the start under Patroni replays everything since
# the base backup's checkpoint again, and every page with a full-page image
# there (the leader's autovacuum after the TPC-B run, hint bits under data
# checksums) leaves the saved map: 1,197 of 5,812 pages were left in one CI
# run on 19.
$leader->safe_psql('postgres', 'CHECKPOINT');
wait_caught_up($leader, $restored);
$restored->safe_psql('postgres', 'CHECKPOINT');
IPC::Run::run([ 'pg_ctl', '-D', $restored->data_dir, '-w', '-m', 'fast', 'stop' ],
	'>', \$out, '2>', \$err) or die "pg_ctl stop failed: $out$err";

# Patroni takes over the standby, which shut down cleanly in recovery.
$offset = $restored->log_offset;
$restored->start;
ok($restored->wait_replica, 'restore: ' . $restored->name . ' runs as a replica under Patroni');
check_warm('restore, under Patroni', $restored, $offset, int($standby_prewarmed / 2));
run_load('restore', $leader, replicas_of($leader));
check_cluster('restore', $leader, replicas_of($leader));

$_->stop for @nodes;
done_testing();

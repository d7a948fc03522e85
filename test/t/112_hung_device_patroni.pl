
# Copyright (c) 2026, bpext developers

# A Patroni switchover away from a node whose tier device stops answering
# (test/hung_device.sh: every process doing I/O that reaches the device
# sleeps in the kernel in state D).  To switch over, Patroni stops the
# leader's PostgreSQL (a fast shutdown), which waits for every process of
# the server: one held by the device would hold the switchover.
#
# Two nodes under Patroni (as in 110_patroni.pl), the leader's tier on the
# device, the replica's on an ordinary disk, bpext.io_timeout = 1s.  Under
# TPC-B on the leader, the device stops answering; io_timeout + 2 s later
# a switchover to the replica is asked for.  The old leader's postmaster is
# gone within 20 s (io_timeout + 5 s for the shutdown, the rest for
# Patroni's own steps) and the replica leads within 40 s, while the device
# still hangs; no process of either node but bpext's helpers is held in D
# state by it.  Then the device answers again: the old leader follows as a
# replica with its tier enabled, and both nodes hold the same rows, with
# TPC-B's invariants.  Every wait is bounded; the device is released on
# every way out (END).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextPatroni;
use BpextTest;
use File::Path ();
use File::Spec;
use IO::Handle;
use IPC::Run ();
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

bpext_needs_contrib('pg_prewarm', 'amcheck');
my $dev = bpext_hung_device();
my $why = BpextPatroni::unavailable();
plan skip_all => $why if $why;
note('with ' . BpextPatroni::versions());

my $io_timeout = 1;
my $hold = 2;
my @tables = qw(pgbench_accounts pgbench_branches pgbench_tellers pgbench_history);

my $basedir = File::Spec->rel2abs(PostgreSQL::Test::Utils::tempdir('patroni'));
my $sockets = PostgreSQL::Test::Utils::tempdir_short();
my $bindir = `pg_config --bindir`;
chomp $bindir;

my $dir = "$dev/ssd/112";
File::Path::rmtree($dir);
mkdir $dir or die "could not create $dir: $!";

my $etcd = BpextPatroni::Etcd->start($basedir);
my %tier_path = (node1 => "$dir/node1.tier", node2 => "$basedir/node2.tier");
my @nodes = map {
	my $name = $_;
	BpextPatroni::Node->new(
		name => $name,
		basedir => $basedir,
		etcd => $etcd,
		bindir => $bindir,
		dcs_parameters => {
			wal_keep_size => '256MB',
			max_wal_senders => 10,
			max_replication_slots => 10,
		},
		parameters => {
			unix_socket_directories => $sockets,
			shared_preload_libraries => 'bpext',
			'bpext.path' => $tier_path{$name},
			'bpext.size' => '128MB',
			'bpext.max_size' => '128MB',
			'bpext.min_free_space' => '0',
			'bpext.io_timeout' => "${io_timeout}s",
			'bpext.write_policy' => 'dual_write',
			'bpext.recovery_interval' => '1s',
			shared_buffers => '16MB',
		})
} qw(node1 node2);
my %node = map { $_->name => $_ } @nodes;

$SIG{$_} = sub { die "killed by SIG$_[0]\n" } for qw(INT TERM HUP);
END
{
	local $?;
	unlink "$dev/ctl/hang" if defined $dev;
	$_->cleanup for @nodes;
	$etcd->stop if $etcd;
}

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
	return { h => $h, out => \$out, err => \$err };
}

# --- the cluster ------------------------------------------------------------------
$node{node1}->start;
my $leader = BpextPatroni::wait_for_leader([ $node{node1} ]);
is($leader->name, 'node1', 'node1 bootstraps the cluster');
bpext_setup($leader);
my ($out, $err) = ('', '');
IPC::Run::run(
	[
		'pgbench', '-i', '-q', '-s', 3, '-h', '127.0.0.1', '-p',
		$leader->port, '-U', 'postgres', 'postgres'
	],
	'>', \$out, '2>', \$err) or die "pgbench -i failed: $err";
$node{node2}->start;
ok($node{node2}->wait_replica, 'node2 joins as a replica');
$leader->safe_psql('postgres', q{
	CHECKPOINT;
	SELECT bpext_prewarm('pgbench_accounts'), bpext_prewarm('pgbench_accounts_pkey');
});
ok(bpext_wait_for_state($leader, 'enabled'), "node1's tier is enabled");

# node1's tier file written back and its cache dropped, so that its reads
# go to the device (as in 027).
if (open(my $fh, '<', $tier_path{node1}))
{
	$fh->sync;
	close $fh;
}
system('dd', "if=$tier_path{node1}", 'iflag=nocache', 'count=0', 'status=none');

# --- a switchover away from node1 while its device hangs ---------------------------
my $load = pgbench_start($leader, '-c', 4, '-j', 2, '-T', 120);
sleep 2;
my $old_pm = $node{node1}->postmaster_pid;
my $watch = bpext_watch_d_state(@nodes);
bpext_device_hang($dev);
sleep($io_timeout + 2);

my ($sw_out, $sw_err) = ('', '');
my $t0 = time();
my $switchover = IPC::Run::start(
	[
		$BpextPatroni::PYTHON, "$BpextPatroni::DIR/usr/bin/patronictl",
		'-c', $node{node1}->{config}, 'switchover', '--leader', 'node1',
		'--candidate', 'node2', '--force'
	],
	'<', \undef, '>', \$sw_out, '2>', \$sw_err,
	init => sub { $ENV{PYTHONPATH} = "$BpextPatroni::DIR/usr/lib/python3/dist-packages" });

my ($stopped_after, $leads_after);
while (time() < $t0 + 40)
{
	$stopped_after //= time() - $t0 unless $old_pm && kill(0, $old_pm);
	if (!defined $leads_after && $node{node2}->is_running_leader)
	{
		$leads_after = time() - $t0;
	}
	last if defined $stopped_after && defined $leads_after;
	eval { $switchover->pump_nb } if $switchover->pumpable;
	usleep(200_000);
}
ok(defined $stopped_after && $stopped_after <= 20,
	sprintf("switchover: node1's PostgreSQL stops within 20 s of the request (%s)",
		defined $stopped_after ? sprintf('%.1f s', $stopped_after) : 'not in 40 s'));
ok(defined $leads_after,
	sprintf('switchover: node2 leads within 40 s, the device still hung (%s)',
		defined $leads_after ? sprintf('%.1f s', $leads_after) : 'not yet'));
usleep($hold * 1e6);
my $released = bpext_device_release($dev);
usleep(300_000);
my $w = bpext_watch_d_state_end($watch, $released);
cmp_ok($w->{samples}, '>=', 10, "switchover: the nodes' processes were watched ($w->{samples} samples)");
is_deeply($w->{held}, [],
	'switchover: no process of either node but helpers is held in D state by the hung device');
note("switchover: helper held: $_") for @{ $w->{helpers} };
note("switchover: long wait elsewhere: $_") for @{ $w->{other} };

# patronictl and pgbench end (pgbench with an error: its server stopped).
my $deadline = time() + 60;
while ($switchover->pumpable && time() < $deadline)
{
	eval { $switchover->pump_nb };
	usleep(200_000);
}
$switchover->pumpable ? $switchover->kill_kill : $switchover->finish;
note("patronictl switchover: $sw_out$sw_err");
$load->{h}->kill_kill;

# --- once the device answers ------------------------------------------------------------
$leader = BpextPatroni::wait_for_leader(\@nodes);
is($leader->name, 'node2', 'after: node2 leads');
ok($node{node1}->wait_replica(180), 'after: node1 follows as a replica');
ok(bpext_wait_for_state($node{node1}, 'enabled', 60), "after: node1's tier is enabled");

my $lsn = $leader->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
my $caught_up = 0;
$deadline = time() + 120;
while (time() < $deadline)
{
	last if $caught_up = $node{node1}->psql_ok("SELECT pg_last_wal_replay_lsn() >= '$lsn'::pg_lsn");
	usleep(200_000);
}
ok($caught_up, "after: node1 replayed up to node2's $lsn");
my $tpcb = bpext_tpcb_check($leader, 'postgres');
my ($a, $t, $b, $h) = split /\|/, $tpcb;
ok($a == $t && $t == $b && $b == $h, "after: TPC-B invariants on node2 ($tpcb)");
is(bpext_tpcb_check($node{node1}, 'postgres'), $tpcb, 'after: the same sums on node1');
is_deeply(bpext_table_hashes($node{node1}, 'postgres', \@tables),
	bpext_table_hashes($leader, 'postgres', \@tables),
	'after: node1 holds the same rows as node2');

$_->stop for @nodes;
done_testing();


# Copyright (c) 2026, bpext developers

# The bpext worker rests while the clock hand stands still (worker.c,
# Resting): an idle server wakes it about once a second, not once per
# bpext.push_interval, and a shared-buffer miss wakes it at once, back to
# its usual rounds.  Its wake-ups are counted as its voluntary context
# switches (/proc/PID/status): each round ends in one WaitLatch.
#
#  1. Idle for 4 s, after the hand has stood still for more than a
#     second: at most 40 switches (about 8: a rest, and the file check's
#     call to a helper, each second), where rounds every push_interval
#     (10 ms) make about 400.
#  2. A query that misses in shared buffers, on the resting worker: from
#     just before it to half a second after it, at least 10 switches
#     (woken by the miss, the worker makes 10 ms rounds for a second); a
#     worker that slept through the miss makes one or two, since the
#     table fits in the buffers its drop freed and the hand stays still.
#  3. Idle again: it rests again.
#
# These count what the code guarantees whatever the machine's load: the
# rounds' timeouts are 10 ms whether or not the worker gets the CPU then.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = bpext_init_node('main', tier_size => '64MB', max_size => '64MB');
$node->append_conf('postgresql.conf', "bpext.push_interval = '10ms'\n");
$node->start;
bpext_setup($node);
bpext_load_table($node, 'postgres', 't', 20000);

my $worker = bpext_worker_pid($node);
ok($worker, "the bpext worker runs (pid $worker)");

sub worker_switches
{
	open(my $fh, '<', "/proc/$worker/status") or die "/proc/$worker/status: $!";
	my ($n) = map { /^voluntary_ctxt_switches:\s+(\d+)/ ? $1 : () } <$fh>;
	close $fh;
	return $n;
}

# Switches over $seconds of an idle server, once the hand has stood still
# long enough for the worker to rest.
sub idle_switches
{
	my ($seconds) = @_;
	sleep 2;
	my $before = worker_switches();
	usleep($seconds * 1_000_000);
	return worker_switches() - $before;
}

# Empty shared buffers of t, so that the next read of it misses.
$node->safe_psql('postgres', 'CHECKPOINT; SELECT bpext_drop_clean_buffers()');

my $idle = idle_switches(4);
cmp_ok($idle, '<=', 40, "idle: the worker woke $idle times in 4 s");

my $started = time;
my $before = worker_switches();
$node->safe_psql('postgres', 'SELECT count(*) FROM t');
usleep(500_000);
my $woken = worker_switches() - $before;
cmp_ok($woken, '>=', 10,
	sprintf('a miss woke the resting worker: %d wake-ups in %.2f s', $woken, time - $started));

$idle = idle_switches(4);
cmp_ok($idle, '<=', 40, "idle again: the worker woke $idle times in 4 s");

is(bpext_config($node)->{state}, 5, 'the tier stayed enabled');

$node->stop;
done_testing();


# Copyright (c) 2026, bpext developers

# A signal the postmaster sends to the bpext worker's process group must
# not reach a helper the worker has just forked (src/worker_children.c).
# The postmaster sends a fast shutdown's SIGTERM to the worker's whole
# process group.  A helper used to leave that group only after it had set
# every signal back to its default action, so a shutdown that came in
# between killed it, and the worker, waiting for its answer, switched the
# tier off with a WARNING (in CI, PostgreSQL's own 017_shm.pl, whose
# restart follows its start at once: "bpext tier disabled after an error:
# could not check the tier file ...: Input/output error").  Now a helper
# is in a session of its own before any signal can reach it.
#
# The test-hook build holds the first writer helper as it starts, just
# after it has set its signals back to their defaults, and the test asks
# for a fast shutdown meanwhile; then it lets the helper go.  The helper
# answers, the worker's call succeeds, the server stops with no WARNING,
# and the tier is enabled again at the next start.
# Needs a test-hook build (bpext.test_holds); skipped otherwise.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

# The worker waits for the held helper well past the test's waits.
my $node = bpext_init_node('main', tier_size => '16MB', max_size => '16MB',
	conf => "bpext.io_timeout = '10min'\n");
$node->start;
bpext_setup($node);
my ($ret, $out, $err) = $node->psql('postgres',
	slurp_file("$FindBin::RealBin/../sql/bpext_test.sql"));
if ($ret != 0)
{
	$node->stop;
	plan skip_all => 'bpext is not a BPEXT_TEST_HOOKS=1 build';
}
$node->stop;

my $data = $node->data_dir;
my $reached = "$data/bpext_test_reached.writer_start";
my $held = "$data/bpext_test_held.writer_start";

# Hold the first writer helper of the next start (any relation number
# turns a hold on; a helper has no relation).
$node->append_conf('postgresql.conf', "bpext.test_holds = on\n");
open(my $fh, '>', "$data/bpext_test_hold.writer_start") or die $!;
print $fh "1 0\n";
close($fh) or die $!;

my $offset = -s $node->logfile;
$node->start;
ok(bpext_wait_until(sub { -e $reached }),
	'the worker has forked a writer helper, held as it starts');
my $postmaster = $node->{_pid};

# The postmaster sends SIGTERM to the worker's process group.  Give it
# time to land before the helper goes on.
PostgreSQL::Test::Utils::system_or_bail('pg_ctl', '--pgdata', $data,
	'--mode', 'fast', '--no-wait', 'stop');
ok( bpext_wait_until(
		sub {
			slurp_file($node->logfile, $offset) =~
			  /received fast shutdown request/;
		}),
	'the postmaster received the fast shutdown request');
sleep(1);
unlink($held) or die "nothing was held at writer_start: $!";

ok(bpext_wait_until(sub { !kill(0, $postmaster) }), 'the server stopped');
$node->_update_pid(0);

my $log = slurp_file($node->logfile, $offset);
unlike($log, qr/bpext tier disabled after an error/,
	'no tier error: the held helper answered the worker');
unlike($log, qr/TRAP|was terminated by signal/,
	'no process crashed');

unlink("$data/bpext_test_hold.writer_start");
$node->start;
ok(bpext_wait_for_state($node, 'enabled'),
	'the tier is enabled at the next start');
$node->stop;
done_testing();

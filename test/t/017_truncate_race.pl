
# Copyright (c) 2026, bpext developers

# No tier page outlives a truncation or an unlink that raced with a copy.
# bpext_prewarm's workers can still be at work after the leader was
# cancelled and let go of its lock; a copy whose ticket is taken after the
# truncation (VACUUM) or unlink (TRUNCATE's old file, at commit) has
# invalidated but before md has shrunk the file reads the block while it
# still exists.  It must not be published, or must be removed once md is
# done: afterwards no page of the tier may lie at or past the end of its
# fork, or belong to a file that is gone.
#
# The TRUNCATE rounds check the same invariant for the unlink of the old
# file at commit.  Two things keep such a copy out, each enough on its own
# here: a task whose leader was cancelled does not flush its last unit
# (scan_pool.c), and truncate and unlink invalidate again after md
# (smgr_wrap.c).  The rounds fail on a build with neither.
#
# The window is microseconds wide, so the fault injector widens it: the
# scan worker hands its pages to the bpext worker through a store queue
# made small (24 pages), whose writer helper's tier writes sleep (0.3 s
# each), so that at the start of its task's last unit it waits for room
# for seconds, having passed its check for cancellation (the leader times
# out and lets go of its lock meanwhile), and md's ftruncate sleeps (15 s),
# so that the scan worker takes its tickets and reads while the file is
# still long.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $so = bpext_build_fault_injector();
plan skip_all => 'the fault injector could not be built' unless $so;
my $ctl = PostgreSQL::Test::Utils::tempdir();

# One scan worker; tasks of five prewarm runs (16 blocks each), so that the
# batch of 64 pages is handed over at the start of the last unit, to a
# queue of 24 pages; no dual writes, so that the queue holds prewarm's
# pages only.
my $node = bpext_init_node('main', shared_buffers => '16MB', conf => qq{
bpext.scan_workers = 1
bpext.scan_task_buffers = 80
bpext.store_queue_pages = 24
bpext.write_policy = 'invalidate'
});
bpext_start_with_faults($node, $so, bpext_tier_path($node) . ':base/', $ctl);
bpext_setup($node);

my $worker = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'bpext scan worker'");
like($worker, qr/^\d+$/, 'one scan worker');

# Pages of the tier at or past the end of their fork, or of no relation.
my $stale_query = q{
	SELECT count(*) FROM bpext_relation_buffers rb
	  JOIN bpext_buffer_descriptors d USING (reltablespace, relfilenode, relforknumber)
	 WHERE d.is_in_bpool_extension
	   AND rb.database_id = (SELECT oid FROM pg_database WHERE datname = current_database())
	   AND d.reldatabase = rb.database_id
	   AND (rb.relation IS NULL OR
	        d.relblocknumber >= pg_relation_size(rb.relation,
	            (ARRAY['main', 'fsm', 'vm', 'init'])[d.relforknumber + 1]) / 8192)};

# The bpext worker's writer helper (its child titled so), which makes
# every tier write.
sub writer_helper
{
	my $tier_worker = $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'bpext tier worker'");
	for (1 .. 200)
	{
		opendir(my $dh, '/proc') or die "could not read /proc: $!";
		for my $pid (grep { /^\d+$/ } readdir $dh)
		{
			open(my $st, '<', "/proc/$pid/stat") or next;
			my $stat = <$st> // '';
			close $st;
			next unless $stat =~ /^\d+ \(.*\) \S (\d+)/ && $1 == $tier_worker;
			open(my $cl, '<', "/proc/$pid/cmdline") or next;
			my $cmd = <$cl> // '';
			close $cl;
			return $pid if $cmd =~ /writer helper/;
		}
		closedir $dh;
		usleep(50_000);
	}
	die 'the bpext worker has no writer helper';
}

sub wait_for_fault
{
	my ($name, $before) = @_;
	for (1 .. 200)
	{
		return 1 if bpext_faults_injected($node, $name) > $before;
		usleep(25_000);
	}
	return 0;
}

my %hits;
sub race
{
	my ($kind, $round) = @_;
	my $t = "r_${kind}_$round";
	my $rows = 7 * 3200;    # 7 rows a page: 3200 pages, 40 tasks

	# No column that may be toasted, so no TOAST table: TRUNCATE unlinks
	# the old files of the TOAST table and its index before the table's
	# (PostgreSQL unlinks in the reverse order of scheduling), so the one
	# sleeping ftruncate would be the TOAST table's, the table's own unlink
	# would come after the prewarm worker's copies, and the round could
	# not fail.  char(400) rows of 432 bytes, fillfactor 40: 7 a page.
	$node->safe_psql('postgres', qq{
		CREATE TABLE $t (id int, pad char(400))
		  WITH (autovacuum_enabled = off, fillfactor = 40);
		INSERT INTO $t SELECT i, 'x' FROM generate_series(1, $rows) i;
	});
	is($node->safe_psql('postgres', qq{
			SELECT reltoastrelid = 0 AND pg_relation_size('$t') / 8192 = 3200
			  FROM pg_class WHERE relname = '$t'}),
		't', "$kind round $round: $t has 3200 pages and no TOAST table");
	if ($kind eq 'vacuum')
	{
		$node->safe_psql('postgres', qq{
			DELETE FROM $t WHERE id > 7;
			VACUUM (TRUNCATE false) $t;
		});
	}
	my $old_filenode = $node->safe_psql('postgres',
		"SELECT pg_relation_filenode('$t')");
	$node->safe_psql('postgres', 'CHECKPOINT; SELECT bpext_drop_clean_buffers()');

	my $writes = bpext_faults_injected($node, 'write_sleep');
	my $truncs = bpext_faults_injected($node, 'truncate_sleep');
	bpext_fault($node, 'write_sleep', 1, '300 0 ' . writer_helper());
	bpext_fault($node, 'truncate_sleep', 1, '15000');

	my ($pw_out, $pw_err, $dd_out, $dd_err) = ('', '', '', '');
	my $prewarm = IPC::Run::start(
		[ 'psql', '-X', '-At', '-d', $node->connstr('postgres'),
		  '-c', "SET statement_timeout = '500ms'; SELECT bpext_prewarm('$t')" ],
		'>', \$pw_out, '2>', \$pw_err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	usleep(100_000);
	my $ddl = $kind eq 'vacuum' ? "VACUUM $t" : "TRUNCATE $t";
	my $shrink = IPC::Run::start(
		[ 'psql', '-X', '-At', '-d', $node->connstr('postgres'), '-c', $ddl ],
		'>', \$dd_out, '2>', \$dd_err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));

	# One sleeping ftruncate is enough (the main fork's, the first).
	my $truncated = wait_for_fault('truncate_sleep', $truncs);
	bpext_fault($node, 'truncate_sleep', 0);
	$prewarm->finish;
	$shrink->finish;
	bpext_fault($node, 'write_sleep', 0);
	# Let the worker's sleeping writes, if any, end and publish.
	sleep 3;

	is($dd_err, '', "$kind round $round: $ddl succeeded");
	my $hit = $truncated && $pw_err =~ /statement timeout/ &&
	  bpext_faults_injected($node, 'write_sleep') > $writes;
	$hits{$kind}++ if $hit;
	note("$kind round $round: " . ($hit ? 'the race was set up' : 'missed the window')
		  . " ($pw_err)");

	is($node->safe_psql('postgres', qq{
		SELECT count(*) FROM bpext_buffer_descriptors
		 WHERE is_in_bpool_extension AND relfilenode = $old_filenode
		   AND relforknumber = 0
		   AND relblocknumber >= pg_relation_size('$t') / 8192
		   AND reldatabase = (SELECT oid FROM pg_database WHERE datname = 'postgres')}),
		0, "$kind round $round: no tier page of $t past its end or of its old file");
	is($node->safe_psql('postgres', $stale_query), 0,
		"$kind round $round: no tier page past the end of any fork");
	$node->safe_psql('postgres', "DROP TABLE $t");
	return;
}

for my $round (1 .. 3)
{
	race('vacuum', $round);
	race('truncate', $round);
}
cmp_ok($hits{vacuum} // 0, '>=', 1, 'the VACUUM race was set up at least once');
cmp_ok($hits{truncate} // 0, '>=', 1, 'the TRUNCATE race was set up at least once');
is(bpext_config($node)->{state}, 5, 'tier still enabled');

$node->stop;
done_testing();

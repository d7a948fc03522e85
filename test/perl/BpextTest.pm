
# Copyright (c) 2026, bpext developers

=pod

=head1 NAME

BpextTest - helpers shared by bpext's TAP tests

=head1 SYNOPSIS

  use BpextTest;

  my $node = bpext_init_node('main', tier_size => '256MB');
  $node->start;
  bpext_setup($node);

  bpext_load_table($node, 'postgres', 't', 100000);
  bpext_evict_shared_buffers($node);
  bpext_check_table($node, 'postgres', 't', rows => 100000, ver => '0',
                    name => 'after eviction');

=head1 DESCRIPTION

Every test table has the same shape:

  (id int PRIMARY KEY, ver int NOT NULL, v text NOT NULL)

with v = bpext_expected_v(id, ver), a 192-byte string derived from both.  A
test knows which ver each row should have (an SQL expression over id), so a
page served from the tier that is older than the data file shows up as rows
whose ver is not the expected one, as missing or duplicated rows, or as v
not matching its own row.

Shared buffers are emptied by reading a table twice the size of
shared_buffers with pg_prewarm (default buffer strategy, unlike a
sequential scan's ring): the clock hand goes round often enough that even
pages with the highest usage count leave.

=cut

package BpextTest;

use strict;
use warnings;

use Carp;
use Exporter 'import';
use FindBin;
use IPC::Run ();
use File::stat ();
use JSON::PP ();
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

our @EXPORT = qw(
  bpext_needs_contrib
  bpext_wait_until
  bpext_init_node
  bpext_init_standby
  bpext_setup
  bpext_tier_path
  bpext_stats
  bpext_stat
  bpext_config
  bpext_wait_for_state
  bpext_create_helpers
  bpext_load_table
  bpext_check_table
  bpext_check_lookups
  bpext_evict_shared_buffers
  bpext_admit_by_reading
  bpext_count_in_log
  bpext_worker_pid
  bpext_stop_worker
  bpext_worker_written
  bpext_wait_for_quiet_worker
  bpext_file_md5
  bpext_file_size
  bpext_tier_file_bytes
  bpext_file_mode
  bpext_child_pids
  bpext_kill_all
  bpext_wait_crash_restart
  bpext_amcheck
  bpext_table_hashes
  bpext_create_hammer
  bpext_fill_and_read
  bpext_reads_still_right
  bpext_tpcb_check
  bpext_build_fault_injector
  bpext_start_with_faults
  bpext_fault
  bpext_faults_injected
  bpext_fault_pids
  bpext_wait_for_fault_pid
  bpext_hung_device
  bpext_device_hang
  bpext_device_release
  bpext_device_status
  bpext_node_processes
  bpext_watch_d_state
  bpext_watch_d_state_end
  bpext_timed_psql
  bpext_timed_stop
);

# State numbers of bpext_configuration.state.
our %STATE = (
	disabled  => 0,
	disabling => 1,
	enabling  => 3,
	enabled   => 5,
	error     => 7);

=pod

=over

=item bpext_needs_contrib(module, ...)

Skip the whole test unless the PostgreSQL installation under test (the
pg_config first in PATH) has these contrib modules: pgserver's 16.2 has
none (test/pg_major.sh).  Call it before the test reports anything.

=cut

sub bpext_needs_contrib
{
	my @missing = grep { !_has_extension($_) } @_;
	plan skip_all => 'needs the contrib module' . (@missing > 1 ? 's ' : ' ')
	  . join(', ', @missing)
	  . ', which this PostgreSQL installation does not have'
	  if @missing;
	return;
}

# Whether the installation has the extension's control file.
sub _has_extension
{
	my ($name) = @_;
	my $sharedir = `pg_config --sharedir`;
	chomp $sharedir;
	return -f "$sharedir/extension/$name.control";
}

=pod

=item bpext_init_node(name, %opts)

Create (not start) a node that preloads bpext.  Options:
tier_size (default '256MB', 0 leaves the tier off), max_size (default
'256MB'), shared_buffers (default '16MB'), tier_path (default
basedir/bpext.tier), checksums (initdb --data-checksums), conf (more
postgresql.conf lines), preload (default 1), init (a hash reference of
more options for PostgreSQL::Test::Cluster's init, such as
allows_streaming => 1), install_path (the installation of another major
to run the node with, e.g. /usr/lib/postgresql/18).

=cut

sub bpext_init_node
{
	my ($name, %opts) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name,
		defined $opts{install_path} ? (install_path => $opts{install_path}) : ());

	$node->init(
		%{ $opts{init} // {} },
		$opts{checksums} ? (extra => ['--data-checksums']) : ());

	my $path = $opts{tier_path} // $node->basedir . '/bpext.tier';
	my $size = $opts{tier_size} // '256MB';
	my $max = $opts{max_size} // '256MB';
	my $sb = $opts{shared_buffers} // '16MB';
	my $preload = $opts{preload} // 1;

	my $conf = "shared_buffers = '$sb'\n";
	# Tests read the log for bpext's messages; keep autovacuum from
	# writing pages at unpredictable times.
	$conf .= "autovacuum = off\n";
	if ($preload)
	{
		$conf .= "shared_preload_libraries = 'bpext'\n";
		$conf .= "bpext.path = '$path'\n";
		$conf .= "bpext.size = '$size'\n";
		$conf .= "bpext.max_size = '$max'\n";

		# The tests' tiers are small: a nearly full disk on the test
		# machine must not refuse them (013 tests the reserve itself).
		$conf .= "bpext.min_free_space = 0\n";

		# A tier a test put in state 7 stays there until the test acts:
		# the tests of the way back set bpext.recovery_interval themselves.
		$conf .= "bpext.recovery_interval = 0\n";

		# The tests' data files are in the page cache, where adaptive
		# admission would pause pushes, read admission and dual writes
		# after seconds of tier hits; the tests of those need them
		# (033 tests the pause itself).
		$conf .= "bpext.adaptive_admission = off\n";
	}
	$conf .= $opts{conf} if defined $opts{conf};
	$node->append_conf('postgresql.conf', $conf);
	$node->{bpext_tier_path} = $path;
	return $node;
}

=pod

=item bpext_tier_path(node)

The tier file bpext_init_node configured.

=cut

sub bpext_tier_path
{
	my ($node) = @_;
	return $node->{bpext_tier_path};
}

=pod

=item bpext_init_standby(primary, name, tier_path)

A streaming standby made from a new base backup of the primary (which
must allow streaming), not started, with its tier at tier_path (default:
bpext.tier in its base directory) instead of the primary's.

=cut

sub bpext_init_standby
{
	my ($primary, $name, $tier_path) = @_;
	$primary->backup("base_$name");
	my $standby = PostgreSQL::Test::Cluster->new($name);
	$standby->init_from_backup($primary, "base_$name", has_streaming => 1);
	$tier_path //= $standby->basedir . '/bpext.tier';
	$standby->append_conf('postgresql.conf', "bpext.path = '$tier_path'\n");
	$standby->{bpext_tier_path} = $tier_path;
	return $standby;
}

=pod

=item bpext_setup(node, %opts)

On a started node: CREATE EXTENSION bpext and pg_prewarm (where the
installation has it: tests that use it say so with bpext_needs_contrib) in
postgres, the helper functions, the eviction table, and (unless wait => 0)
wait for the tier to be enabled.

=cut

sub bpext_setup
{
	my ($node, %opts) = @_;

	$node->safe_psql('postgres', 'CREATE EXTENSION bpext;'
		  . (_has_extension('pg_prewarm') ? ' CREATE EXTENSION pg_prewarm;' : ''));
	bpext_create_helpers($node, 'postgres');

	# Twice the default shared_buffers; see bpext_evict_shared_buffers.
	my $evict_mb = $opts{evict_mb} // 32;
	my $rows = int($evict_mb * 1024 * 1024 / 8192) * 7;
	$node->safe_psql('postgres', qq{
		CREATE TABLE bpext_evictor (id int, pad text);
		INSERT INTO bpext_evictor
		  SELECT i, repeat('e', 1000) FROM generate_series(1, $rows) i;
		VACUUM bpext_evictor;
	});
	bpext_wait_for_state($node, 'enabled') unless defined $opts{wait} && !$opts{wait};
	return;
}

=pod

=item bpext_create_helpers(node, db)

Create bpext_expected_v(id, ver) in db (template copies inherit it).

=cut

sub bpext_create_helpers
{
	my ($node, $db) = @_;
	$node->safe_psql($db, q{
		CREATE FUNCTION bpext_expected_v(id int, ver int) RETURNS text
		  LANGUAGE sql IMMUTABLE PARALLEL SAFE
		  AS $$ SELECT repeat(md5(id::text || ':' || ver::text), 6) $$;
	});
	return;
}

sub _json_row
{
	my ($node, $db, $query) = @_;
	my $json = $node->safe_psql($db, "SELECT row_to_json(x) FROM ($query) x");
	return JSON::PP::decode_json($json);
}

=pod

=item bpext_stats(node [, db])

bpext_stats as a hash reference.

=cut

sub bpext_stats
{
	my ($node, $db) = @_;
	return _json_row($node, $db // 'postgres', 'SELECT * FROM bpext_stats');
}

=pod

=item bpext_stat(node, column [, db])

One counter of bpext_stats.

=cut

sub bpext_stat
{
	my ($node, $column, $db) = @_;
	return bpext_stats($node, $db)->{$column};
}

=pod

=item bpext_config(node [, db])

bpext_configuration as a hash reference.

=cut

sub bpext_config
{
	my ($node, $db) = @_;
	return _json_row($node, $db // 'postgres',
		'SELECT * FROM bpext_configuration');
}

=pod

=item bpext_wait_for_state(node, state [, timeout_s])

Wait until bpext_configuration.state is the named state ('enabled', ...);
returns true if it got there, false after the timeout (default 30 s).
Reports no test result of its own.

=cut

sub bpext_wait_for_state
{
	my ($node, $state, $timeout) = @_;
	my $want = $STATE{$state} // croak "unknown state $state";
	my $deadline = time() + ($timeout // 30);

	while (time() < $deadline)
	{
		my ($ret, $out, $err) = $node->psql('postgres',
			'SELECT state FROM bpext_configuration');
		return 1 if $ret == 0 && $out eq "$want";
		usleep(50_000);
	}
	diag("bpext state did not become $state: "
		  . $node->safe_psql('postgres',
			  'SELECT state_description, last_error FROM bpext_configuration'));
	return 0;
}

=pod

=item bpext_load_table(node, db, table, nrows [, ver [, with]])

Create a test table with rows 1..nrows at version ver (default 0) and its
primary key index.  with is an optional storage clause such as
"WITH (fillfactor = 50)".

=cut

sub bpext_load_table
{
	my ($node, $db, $table, $nrows, $ver, $with) = @_;
	$ver //= 0;
	$with //= '';
	$node->safe_psql($db, qq{
		CREATE TABLE $table (id int PRIMARY KEY, ver int NOT NULL, v text NOT NULL) $with;
		INSERT INTO $table
		  SELECT i, $ver, bpext_expected_v(i, $ver) FROM generate_series(1, $nrows) i;
		VACUUM (ANALYZE) $table;
	});
	return;
}

# Rewrite an SQL expression over "id" to one over alias.id.
sub _over
{
	my ($expr, $alias) = @_;
	(my $e = $expr) =~ s/\bid\b/$alias.id/g;
	return $e;
}

# "count,wrong,sum(id)" over rows r of a test table: wrong rows are rows
# that should not be there, whose ver is not the expected one, or whose v
# does not match their id and ver.
sub _got_select
{
	my ($present, $ver) = @_;
	my $p = _over($present, 'r');
	my $e = _over($ver, 'r');
	return qq{count(*) || ',' || count(*) FILTER (WHERE NOT ($p) OR r.ver IS DISTINCT FROM ($e) OR r.v IS DISTINCT FROM bpext_expected_v(r.id, r.ver)) || ',' || coalesce(sum(r.id), 0)};
}

=pod

=item bpext_check_table(node, db, table, %args)

Check every row of a test table against what it should hold.  Arguments:
rows (n for ids 1..n, or [from, to]), present (SQL predicate over id: which
ids of that range exist, default all), ver (SQL expression over id: the
version each row must have, default 0), scan ('seq', the default, or
'index'), name.  Reports one test.

=cut

sub bpext_check_table
{
	my ($node, $db, $table, %args) = @_;
	my ($from, $to) = ref $args{rows} ? @{ $args{rows} } : (1, $args{rows});
	my $present = $args{present} // 'true';
	my $ver = $args{ver} // '0';
	my $scan = $args{scan} // 'seq';
	my $name = $args{name} // '';

	my $settings =
	  $scan eq 'index'
	  ? 'SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;'
	  : 'SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;';
	my $where = $scan eq 'index' ? "WHERE r.id >= $from - 1000000" : '';
	my $got_select = _got_select($present, $ver);
	my $want_pred = _over($present, 'x');
	my ($got, $want) = split /\|/, $node->safe_psql($db, qq{
		$settings
		SELECT (SELECT $got_select FROM $table r $where),
		       (SELECT count(*) || ',0,' || coalesce(sum(x.id), 0)
		          FROM generate_series($from, $to) AS x(id) WHERE $want_pred);
	});
	is($got, $want, "$name: $table contents ($scan scan)");
	return $got eq $want;
}

=pod

=item bpext_check_lookups(node, db, table, %args)

Random point lookups by primary key (a nested loop of index scans),
checked as bpext_check_table checks.  Arguments as bpext_check_table's
(rows must be a count here), plus lookups (number of probes, default
10000) and seed.  Reports one test.

=cut

sub bpext_check_lookups
{
	my ($node, $db, $table, %args) = @_;
	my $nrows = $args{rows};
	my $present = $args{present} // 'true';
	my $ver = $args{ver} // '0';
	my $nlookups = $args{lookups} // 10000;
	my $seed = $args{seed} // 0;
	my $name = $args{name} // '';

	# Keys from a multiplicative sequence mod nrows: a pseudo-random order
	# that visits heap pages all over the table.
	my $mult = 7919;
	my $key = "((g::bigint * $mult + $seed) % $nrows) + 1";
	my $got_select = _got_select($present, $ver);
	my $want_pred = _over($present, 'x');
	my ($got, $want) = split /\|/, $node->safe_psql($db, qq{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SET enable_hashjoin = off; SET enable_mergejoin = off;
		SET enable_indexonlyscan = off; SET enable_material = off;
		SELECT (SELECT $got_select
		          FROM generate_series(0, $nlookups - 1) g
		          JOIN $table r ON r.id = $key),
		       (SELECT count(*) || ',0,' || coalesce(sum(x.id), 0)
		          FROM (SELECT $key AS id FROM generate_series(0, $nlookups - 1) g) x
		         WHERE $want_pred);
	});
	is($got, $want, "$name: $table point lookups");
	return $got eq $want;
}

=pod

=item bpext_evict_shared_buffers(node)

Push everything else out of shared buffers by reading bpext_evictor
(created by bpext_setup, 32 MB by default) through pg_prewarm: one pass
sweeps the clock hand around often enough to evict even pages at the
highest usage count.

=cut

sub bpext_evict_shared_buffers
{
	my ($node) = @_;
	$node->safe_psql('postgres', "SELECT pg_prewarm('bpext_evictor')");
	return;
}

=pod

=item bpext_admit_by_reading(node, table, blocks)

Put the given blocks of table's main fork in the tier by read admission
(bpext.admission must already be 'read', and pg_buffercache installed):
read each of them alone by TID, evict the table from shared buffers, and
wait for the worker to store what the reads queued.  Read admission does
not promise to store a page: when the store queue is full, or a write
overtook the page's ticket, the page is not stored and admission_skips or
publish_races counts it.  So each round waits until every block read is
either in the tier or counted as not stored, and the next round reads
again the blocks still missing, five rounds at most.  Returns the blocks
still missing (none, normally); dies if a round's reads are neither
stored nor counted within the poll timeout, which would be a lost page.

=cut

sub bpext_admit_by_reading
{
	my ($node, $table, @blocks) = @_;
	my $in_tier = qq{
		SELECT coalesce(string_agg(relblocknumber::text, ','), '')
		  FROM bpext_buffer_descriptors(false)
		 WHERE is_in_bpool_extension AND relforknumber = 0
		   AND relfilenode = pg_relation_filenode('$table')};
	my @missing = @blocks;

	return () unless @blocks;
	for my $round (1 .. 5)
	{
		my $before = bpext_stats($node);
		my $tids = join(',', map { "'($_,1)'" } @missing);
		$node->safe_psql('postgres', qq{
			SET enable_seqscan = off; SET enable_bitmapscan = off;
			SELECT count(*) FROM $table WHERE ctid = ANY (ARRAY[$tids]::tid[])});
		$node->safe_psql('postgres', qq{
			SELECT count(pg_buffercache_evict(bufferid)) FROM pg_buffercache
			 WHERE relfilenode = pg_relation_filenode('$table')});

		my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
		my ($stored, $not_stored);
		while (1)
		{
			my %have = map { $_ => 1 }
			  split(/,/, $node->safe_psql('postgres', $in_tier));
			my $after = bpext_stats($node);
			$stored = grep { $have{$_} } @missing;
			$not_stored = $after->{admission_skips} - $before->{admission_skips}
			  + $after->{publish_races} - $before->{publish_races};
			if ($stored + $not_stored >= scalar(@missing))
			{
				@missing = grep { !$have{$_} } @blocks;
				last;
			}
			die "read admission neither stored nor counted "
			  . (scalar(@missing) - $stored - $not_stored)
			  . " of the " . scalar(@missing) . " blocks of $table read"
			  if time() > $deadline;
			usleep(100_000);
		}
		return () unless @missing;
		note("read admission round $round: $stored of the blocks of $table "
			  . "stored, $not_stored pages not stored (store queue full or "
			  . "overtaken), " . scalar(@missing) . " to read again");
	}
	return @missing;
}

=pod

=item bpext_create_hammer(node, nrows, ver [, evict_every])

Create hammer(secs float8) in postgres: for secs seconds it checks random
rows of table t (nrows rows made by bpext_load_table, version given by the
SQL expression ver over r.id) by index, 500 at a time, and raises an error
on the first wrong or missing row; returns how many it checked.  With
evict_every, it also reads bpext_evictor every that many rows, so that its
reads keep missing shared buffers.

=cut

sub bpext_create_hammer
{
	my ($node, $nrows, $ver, $evict_every) = @_;
	my $evict = $evict_every
	  ? "PERFORM pg_prewarm('bpext_evictor') WHERE n % $evict_every = 0;"
	  : '';
	$node->safe_psql('postgres', qq{
CREATE FUNCTION hammer(secs float8) RETURNS bigint LANGUAGE plpgsql AS \$\$
DECLARE
	stop timestamptz := clock_timestamp() + secs * interval '1 second';
	n bigint := 0;
	bad bigint;
	found bigint;
BEGIN
	SET LOCAL enable_seqscan = off;
	SET LOCAL enable_bitmapscan = off;
	SET LOCAL enable_hashjoin = off;
	SET LOCAL enable_mergejoin = off;
	WHILE clock_timestamp() < stop LOOP
		SELECT count(*) FILTER (WHERE r.ver <> ($ver)
		                           OR r.v <> bpext_expected_v(r.id, r.ver)),
		       count(*)
		  INTO bad, found
		  FROM generate_series(1, 500) g
		  JOIN t r ON r.id = ((g + n) * 7919 % $nrows) + 1;
		IF bad <> 0 OR found <> 500 THEN
			RAISE EXCEPTION 'hammer: % wrong rows, % of 500 found', bad, found;
		END IF;
		n := n + 500;
		$evict
	END LOOP;
	RETURN n;
END \$\$;
});
	return;
}

=pod

=item bpext_fill_and_read(node, name, nrows [, ver])

Load table t and its primary key into the tier (bpext_prewarm after a
CHECKPOINT), evict shared buffers, read t back by index (bpext_check_table)
and check that more than 1000 pages were served by the tier.

=cut

sub bpext_fill_and_read
{
	my ($node, $name, $nrows, $ver) = @_;
	$node->safe_psql('postgres', q{
		CHECKPOINT;
		SELECT bpext_prewarm('t'), bpext_prewarm('t_pkey');
	});
	bpext_evict_shared_buffers($node);
	my $before = bpext_stat($node, 'extension_page_reads');
	bpext_check_table($node, 'postgres', 't', rows => $nrows,
		ver => $ver // '0', scan => 'index', name => $name);
	my $reads = bpext_stat($node, 'extension_page_reads') - $before;
	cmp_ok($reads, '>', 1000, "$name: served by the tier ($reads pages)");
	return;
}

=pod

=item bpext_reads_still_right(node, name, nrows [, ver])

With the tier out of service: table t reads back right by index, by point
lookups and sequentially, and the tier served none of it.

=cut

sub bpext_reads_still_right
{
	my ($node, $name, $nrows, $ver) = @_;
	$ver //= '0';
	my $before = bpext_stat($node, 'extension_page_reads');
	bpext_evict_shared_buffers($node);
	bpext_check_table($node, 'postgres', 't', rows => $nrows, ver => $ver,
		scan => 'index', name => $name);
	bpext_check_lookups($node, 'postgres', 't', rows => $nrows, ver => $ver,
		lookups => 3000, seed => 5, name => $name);
	bpext_check_table($node, 'postgres', 't', rows => $nrows, ver => $ver,
		scan => 'seq', name => $name);
	is(bpext_stat($node, 'extension_page_reads') - $before,
		0, "$name: nothing more served by the tier");
	return;
}

=pod

=item bpext_count_in_log(node, regex [, offset])

Number of lines of the node's log after offset that match regex.

=cut

sub bpext_count_in_log
{
	my ($node, $regex, $offset) = @_;
	my $log = slurp_file($node->logfile, $offset // 0);
	my $n = () = $log =~ m/$regex/gm;
	return $n;
}

=pod

=item bpext_worker_pid(node)

The pid of the node's bpext worker (a child of its postmaster whose
process title names it), or undef.

=cut

sub bpext_worker_pid
{
	my ($node) = @_;
	my $postmaster = $node->{_pid} // return undef;
	opendir(my $dh, '/proc') or return undef;
	for my $pid (grep { /^\d+$/ } readdir $dh)
	{
		open(my $fh, '<', "/proc/$pid/stat") or next;
		my $stat = <$fh> // '';
		close $fh;
		# pid (comm) state ppid ...
		next unless $stat =~ /^\d+ \(.*\) \S (\d+)/ && $1 == $postmaster;
		open($fh, '<', "/proc/$pid/cmdline") or next;
		my $cmdline = <$fh> // '';
		close $fh;
		if ($cmdline =~ /bpext tier worker/)
		{
			closedir $dh;
			return $pid;
		}
	}
	closedir $dh;
	return undef;
}

=pod

=item bpext_stop_worker(node)

Stop the node's bpext worker (SIGSTOP) where it holds nothing sessions
need, and return its pid (SIGCONT it when done).  A process stopped at an
arbitrary instruction may hold a tier-map partition lock, a buffer pin or
a content lock, and every session wanting it then waits, on an LWLock
that no statement_timeout interrupts.  No hung device does that: the
worker holds no lock across its waits, which is what the tests that stop
it mean to leave it in.  So the worker is stopped, and its wait event in
pg_stat_activity says where: in the latch wait of its main loop
(BpextWorkerMain from PostgreSQL 17 on; on 15 and 16 every bpext wait
shows as Extension, and the worker's others, for a helper or a scan
worker, hold no lock either), it stays stopped; anywhere else it is
continued and stopped again 10 ms later.  Dies if that never finds it
waiting within the default timeout.

=cut

sub bpext_stop_worker
{
	my ($node) = @_;
	my $worker = bpext_worker_pid($node) or croak 'the bpext worker is not running';
	my $resting = $node->pg_version >= 17 ? 'Extension|BpextWorkerMain' : 'Extension|Extension';
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		kill('STOP', $worker) or croak "could not stop the bpext worker: $!";
		# The stop is asynchronous: wait until the worker is stopped ("T").
		my $stopped = 0;
		for (1 .. 500)
		{
			$stopped = (slurp_file("/proc/$worker/stat") =~ /^\d+ \(.*\) T /);
			last if $stopped;
			usleep(1_000);
		}
		# The wait event is set for the whole of PostgreSQL's latch wait
		# (WaitEventSetWait), which the worker enters holding nothing.
		my ($ret, $wait) = $node->psql('postgres',
			"SELECT wait_event_type || '|' || wait_event FROM pg_stat_activity WHERE pid = $worker");
		return $worker if $stopped && $ret == 0 && $wait eq $resting;
		kill('CONT', $worker);
		usleep(10_000);
	}
	croak 'the bpext worker was never found waiting on its latch';
}

=pod

=item bpext_wait_until(cond)

Poll cond() every 20 ms until it is true (returns 1), or the default
timeout passes (returns 0).

=cut

sub bpext_wait_until
{
	my ($cond) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		return 1 if $cond->();
		Time::HiRes::usleep(20_000);
	}
	return 0;
}

=pod

=item bpext_worker_written(node)

Bytes the node's bpext worker and its helpers (its children) have
written, in write calls of any kind (/proc/PID/io wchar).

=cut

sub bpext_worker_written
{
	my ($node) = @_;
	my $worker = bpext_worker_pid($node) // die 'no bpext worker';
	my $total = 0;
	opendir(my $dh, '/proc') or die "could not read /proc: $!";
	for my $pid (grep { /^\d+$/ } readdir $dh)
	{
		open(my $fh, '<', "/proc/$pid/stat") or next;
		my $stat = <$fh> // '';
		close $fh;
		next
		  unless $pid == $worker
		  || ($stat =~ /^\d+ \(.*\) \S (\d+)/ && $1 == $worker);
		my $io = eval { slurp_file("/proc/$pid/io") } // next;
		$total += $1 if $io =~ /^wchar: (\d+)/m;
	}
	closedir $dh;
	return $total;
}

=pod

=item bpext_wait_for_quiet_worker(node)

Wait until the bpext worker has written no more than its messages to its
helpers (a few hundred bytes a round, against 16 kB for each slot
directory chunk: 8 kB through the pipe to the writer helper, 8 kB in its
pwrite) for two of its directory rounds (one a second), and at
least 6 s: on a busy machine its first round after a change may come
late.  Returns bpext_worker_written then; dies after 180 s.

=cut

sub bpext_wait_for_quiet_worker
{
	my ($node) = @_;
	my $last = bpext_worker_written($node);
	my $quiet = 0;
	for (1 .. 90)
	{
		sleep 2;
		my $now = bpext_worker_written($node);
		$quiet = $now - $last < 2048 ? $quiet + 1 : 0;
		$last = $now;
		return $now if $quiet >= 3;
	}
	die 'the bpext worker kept writing';
}

=pod

=item bpext_tier_file_bytes(mb)

The size on disk of the tier file of a tier of mb MB: the header and the
slots (mb MB), then the slot directory, one 8 kB chunk per 511 slots
(src/tier_file.h).

=cut

sub bpext_tier_file_bytes
{
	my ($mb) = @_;
	my $slots = $mb * 1024 * 1024 / 8192 - 1;
	my $chunks = int(($slots + 510) / 511);
	return $mb * 1024 * 1024 + $chunks * 8192;
}

=pod

=item bpext_file_md5(path), bpext_file_size(path), bpext_file_mode(path)

About a file on disk; undef if it does not exist.

=cut

sub bpext_file_md5
{
	my ($path) = @_;
	return undef unless -e $path;
	require Digest::MD5;
	open my $fh, '<', $path or croak "could not open $path: $!";
	binmode $fh;
	my $md5 = Digest::MD5->new->addfile($fh)->hexdigest;
	close $fh;
	return $md5;
}

sub bpext_file_size
{
	my ($path) = @_;
	my $st = File::stat::lstat($path) or return undef;
	return $st->size;
}

sub bpext_file_mode
{
	my ($path) = @_;
	my $st = File::stat::lstat($path) or return undef;
	return $st->mode & 07777;
}

=pod

=back

=head2 Crashes, consistency checks and fault injection

Added for the reliability suites (test/t/1NN_*.pl).

=over

=item bpext_child_pids(node)

The pids of the node's postmaster's children (backends, auxiliary
processes, the bpext worker).

=cut

sub bpext_child_pids
{
	my ($node) = @_;
	my $postmaster = $node->{_pid} // return ();
	my @pids;
	opendir(my $dh, '/proc') or return ();
	for my $pid (grep { /^\d+$/ } readdir $dh)
	{
		open(my $fh, '<', "/proc/$pid/stat") or next;
		my $stat = <$fh> // '';
		close $fh;
		push @pids, $pid if $stat =~ /^\d+ \(.*\) \S (\d+)/ && $1 == $postmaster;
	}
	closedir $dh;
	return @pids;
}

=pod

=item bpext_kill_all(node)

SIGKILL the postmaster and every child it had, at once, as a power
failure would stop them (minus the lost kernel page cache), and wait until
all are gone.  The node is then known as stopped; start it again with
$node->start.

=cut

sub bpext_kill_all
{
	my ($node) = @_;
	my $postmaster = $node->{_pid} // croak 'node is not running';

	# Freeze them all first (the postmaster first, so that it forks no
	# more), so that none of them sees the others die and reacts.
	kill('STOP', $postmaster);
	my @children = bpext_child_pids($node);
	kill('STOP', @children) if @children;
	kill('KILL', $postmaster, @children);
	$node->{_pid} = undef;

	# Wait until they are reaped: a zombie postmaster still answers
	# kill(pid, 0), and a new postmaster would take it for a live one.
	for my $pid ($postmaster, @children)
	{
		for (1 .. 600)
		{
			last unless -e "/proc/$pid";
			usleep(50_000);
		}
	}
	unlink $node->data_dir . '/postmaster.pid';
	return;
}

=pod

=item bpext_wait_crash_restart(node, offset)

Wait until the postmaster has reinitialized after a child's crash logged
after offset and accepts connections again.

=cut

sub bpext_wait_crash_restart
{
	my ($node, $offset) = @_;
	# One pattern: wait_for_log returns the end of what it read, which may
	# already hold the second line.
	$node->wait_for_log(
		qr/all server processes terminated; reinitializing[\s\S]*database system is ready to accept connections/,
		$offset);
	return;
}

=pod

=item bpext_amcheck(node, db)

Check every table of db with amcheck's verify_heapam and every valid
B-tree index with bt_index_check(index, heapallindexed => true), catalogs
included.  amcheck must be installed in db.  Returns a description of the
problems found, '' if none.

=cut

sub bpext_amcheck
{
	my ($node, $db) = @_;
	my ($ret, $out, $err) = $node->psql($db, q{
		SELECT c.oid::regclass || ': ' || count(*) || ' heap problems: '
		       || min(v.msg)
		  FROM pg_class c, verify_heapam(c.oid) v
		 WHERE c.relkind IN ('r', 'm', 't') AND c.relpersistence <> 't'
		 GROUP BY c.oid;
		SELECT count(bt_index_check(c.oid, true))
		  FROM pg_index i
		  JOIN pg_class c ON c.oid = i.indexrelid
		  JOIN pg_am a ON a.oid = c.relam
		 WHERE a.amname = 'btree' AND i.indisvalid AND i.indisready
		   AND c.relpersistence <> 't';
	});
	my @problems;
	push @problems, grep { !/^\d+$/ } split /\n/, $out;
	push @problems, "psql exit code $ret" if $ret != 0;
	push @problems, $err if $err ne '';
	return join("\n", @problems);
}

=pod

=item bpext_table_hashes(node, db, tables)

For each table (an array reference of names), "rows:md5" over its rows
as text, in text order.  Returns a hash reference.

=cut

sub bpext_table_hashes
{
	my ($node, $db, $tables) = @_;
	my $sql = join(",\n", map {
		"(SELECT count(*) || ':' || coalesce(md5(string_agg(x::text, E'\\n' ORDER BY x::text)), '') FROM $_ x)"
	} @$tables);
	my @h = split /\|/, $node->safe_psql($db, "SELECT $sql");
	my %h;
	@h{@$tables} = @h;
	return \%h;
}

=pod

=item bpext_tpcb_check(node, db)

pgbench's TPC-B invariants: every balance change is in one account, one
teller, one branch and one history row, so the four sums are equal.
Returns "accounts|tellers|branches|history" sums.

=cut

sub bpext_tpcb_check
{
	my ($node, $db) = @_;
	return $node->safe_psql($db, q{
		SELECT (SELECT sum(abalance) FROM pgbench_accounts) || '|' ||
		       (SELECT sum(tbalance) FROM pgbench_tellers) || '|' ||
		       (SELECT sum(bbalance) FROM pgbench_branches) || '|' ||
		       (SELECT coalesce(sum(delta), 0) FROM pgbench_history)
	});
}

=pod

=item bpext_build_fault_injector()

Compile test/fault_inject/bpext_fault_inject.c (an LD_PRELOAD library that
fails the tier file's I/O on demand; see its header) into the test's
temporary directory.  Returns the library's path, or undef (with a
diagnostic) if no C compiler could build it.

=cut

sub bpext_build_fault_injector
{
	my $src = "$FindBin::RealBin/../fault_inject/bpext_fault_inject.c";
	my $so = PostgreSQL::Test::Utils::tempdir() . '/bpext_fault_inject.so';
	my $cc = $ENV{CC} // 'cc';
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ $cc, '-O2', '-Wall', '-shared', '-fPIC',
			'-o', $so, $src, '-ldl' ], '>', \$out, '2>', \$err);
	if (!$ok)
	{
		diag("could not build the fault injector: $out$err");
		return undef;
	}
	return $so;
}

=pod

=item bpext_start_with_faults(node, so, prefix, ctl_dir [, start params])

Start the node with the fault injector preloaded: I/O on files opened
under path prefix fails while control files exist in ctl_dir (see
bpext_fault).  Further arguments go to the node's start (e.g. fail_ok).

=cut

sub bpext_start_with_faults
{
	my ($node, $so, $prefix, $ctl, %params) = @_;
	local $ENV{LD_PRELOAD} = $so;
	local $ENV{BPEXT_FAULT_PREFIX} = $prefix;
	local $ENV{BPEXT_FAULT_CTL} = $ctl;
	$node->{bpext_fault_ctl} = $ctl;
	return $node->start(%params);
}

=pod

=item bpext_fault(node, name, on [, content])

Switch the fault name (read_eio, write_eio, write_enospc, write_short,
fallocate_enospc, read_sleep, write_sleep, truncate_sleep) on or off.  content goes into
the control file: the milliseconds to block for the *_sleep faults.

=cut

sub bpext_fault
{
	my ($node, $name, $on, $content) = @_;
	my $file = $node->{bpext_fault_ctl} . "/$name";
	if ($on)
	{
		open(my $fh, '>', $file) or croak "could not create $file: $!";
		print $fh $content if defined $content;
		close $fh;
	}
	else
	{
		unlink $file;
	}
	return;
}

=pod

=item bpext_faults_injected(node, name)

How many times the fault name has failed a call so far.

=cut

sub bpext_faults_injected
{
	my ($node, $name) = @_;
	my $log = $node->{bpext_fault_ctl} . '/injected.log';
	return 0 unless -e $log;
	my $n = () = slurp_file($log) =~ /^\d+ \Q$name\E /gm;
	return $n;
}

=pod

=item bpext_fault_pids(node, name)

The process IDs that have hit the fault name so far (each once).

=cut

sub bpext_fault_pids
{
	my ($node, $name) = @_;
	my $log = $node->{bpext_fault_ctl} . '/injected.log';
	return () unless -e $log;
	my $text = slurp_file($log);
	my %seen;
	$seen{$1} = 1 while $text =~ /^(\d+) \Q$name\E /gm;
	return sort { $a <=> $b } keys %seen;
}

=pod

=item bpext_wait_for_fault_pid(node, name, pid)

Wait up to 10 s for process pid to hit the fault name (a read held up by
read_sleep, say); true if it did.

=cut

sub bpext_wait_for_fault_pid
{
	my ($node, $name, $pid) = @_;
	for (1 .. 400)
	{
		return 1 if grep { $_ == $pid } bpext_fault_pids($node, $name);
		usleep(25_000);
	}
	return 0;
}

=pod

=back

=head2 A device that really hangs

test/hung_device.sh (run by test/run-tests.sh as root) makes a file
system, DIR/ssd, on a device that stops answering while DIR/ctl/hang
exists: every process whose I/O must reach the device then sleeps in the
kernel in state D, where no signal reaches it, until the file is removed.
These helpers find that device, hang and release it, and watch a node's
processes for D state.  The rule the tests assert: while the device hangs,
no process of the node is held in D state but bpext's helper processes,
whose titles contain the word "helper".

=over

=item bpext_hung_device()

The directory test/run-tests.sh set the device up in ($BPEXT_HUNG_DEVICE);
skips the whole test, saying why, when there is none or it is not usable.

=cut

sub bpext_hung_device
{
	my $dir = $ENV{BPEXT_HUNG_DEVICE} // '';
	my $why;
	if ($dir eq '')
	{
		$why = 'no hung device: '
		  . ($ENV{BPEXT_HUNG_DEVICE_SKIP}
			  // 'BPEXT_HUNG_DEVICE is not set (test/run-tests.sh sets one up when run as root; doc/testing.md)');
	}
	elsif (!-d "$dir/ssd" || !-w "$dir/ssd" || !-w "$dir/ctl")
	{
		$why = "no hung device: $dir/ssd or $dir/ctl is not writable by this user";
	}
	elsif (bpext_device_status($dir) !~ /^answering/)
	{
		$why = "no hung device: $dir does not answer ("
		  . bpext_device_status($dir) . ')';
	}
	plan skip_all => $why if defined $why;
	return $dir;
}

=pod

=item bpext_device_status(dir)

The first line of the device's status: "answering", "hung held=N" (N
requests waiting in the device), or "no status".

=cut

sub bpext_device_status
{
	my ($dir) = @_;
	open(my $fh, '<', "$dir/ctl/status") or return 'no status';
	my $line = <$fh> // 'no status';
	close $fh;
	chomp $line;
	return $line;
}

sub _device_wait_status
{
	my ($dir, $want) = @_;
	for (1 .. 500)
	{
		return 1 if bpext_device_status($dir) =~ /^$want/;
		usleep(10_000);
	}
	return 0;
}

=pod

=item bpext_device_hang(dir), bpext_device_release(dir)

Hang the device, or let it answer again; each returns once the device has
taken the change (it polls its control directory every 10 ms), and dies
if it has not within 5 s.  Returns the time the change was asked for
(Time::HiRes): a hang is in effect from some time after it, and a process
held by the device is held at least until it.

=cut

sub bpext_device_hang
{
	my ($dir) = @_;
	my $asked = time();
	open(my $fh, '>', "$dir/ctl/hang") or croak "could not create $dir/ctl/hang: $!";
	close $fh;
	_device_wait_status($dir, 'hung')
	  or croak 'the device did not hang: ' . bpext_device_status($dir);
	return $asked;
}

sub bpext_device_release
{
	my ($dir) = @_;
	my $asked = time();
	unlink "$dir/ctl/hang";
	_device_wait_status($dir, 'answering')
	  or croak 'the device did not answer again: ' . bpext_device_status($dir);
	return $asked;
}

# /proc/PID/stat as (comm, state, ppid), or () if it is gone.
sub _proc_stat
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/stat") or return ();
	my $stat = <$fh> // '';
	close $fh;
	return $stat =~ /^\d+ \((.*)\) (\S) (\d+)/ ? ($1, $2, $3) : ();
}

sub _proc_file
{
	my ($pid, $file) = @_;
	open(my $fh, '<', "/proc/$pid/$file") or return '';
	local $/;
	my $text = <$fh> // '';
	close $fh;
	return $text;
}

=pod

=item bpext_node_processes(nodes)

The processes of the given nodes (PostgreSQL::Test::Cluster or
BpextPatroni::Node objects) that exist now, as a hash reference pid =>
process title.  A process belongs to a node if its postmaster (the pid in
postmaster.pid) is an ancestor, if it is a postgres process whose title
starts with "postgres: NAME: " (NAME the node's cluster_name: $node->{bpext_title},
or its name), or if its arguments name the node's data directory (the
postmaster, and the helpers it forks, which keep its title), the last two
only if it has this process's root directory (several chroots may run the
same tests at once, and see each other's processes).  Helpers whose
parent died go to init, so the titles matter.

=cut

sub bpext_node_processes
{
	my (@nodes) = @_;
	my @titles = map { $_->{bpext_title} // $_->name } @nodes;
	my @datadirs = map { $_->data_dir } @nodes;
	my $title_re = '^postgres: (?:' . join('|', map { quotemeta } @titles) . '): ';
	my @root = stat('/');
	my (%comm, %state, %children);

	opendir(my $dh, '/proc') or return {};
	for my $pid (grep { /^\d+$/ } readdir $dh)
	{
		my ($comm, $state, $ppid) = _proc_stat($pid) or next;
		$comm{$pid} = $comm;
		push @{ $children{$ppid} }, $pid;
	}
	closedir $dh;

	my %node;
	my @todo;
	for my $dd (@datadirs)
	{
		open(my $fh, '<', "$dd/postmaster.pid") or next;
		my $pm = <$fh> // '';
		close $fh;
		chomp $pm;
		push @todo, $pm if $pm =~ /^\d+$/ && ($comm{$pm} // '') eq 'postgres';
	}
	while (defined(my $pid = shift @todo))
	{
		next if $node{$pid}++;
		push @todo, @{ $children{$pid} // [] };
	}
	my %result;
	for my $pid (keys %comm)
	{
		next unless $comm{$pid} eq 'postgres';
		my $cmdline = _proc_file($pid, 'cmdline');
		if (!$node{$pid})
		{
			my @args = split /\0/, $cmdline;
			my $ours = $cmdline =~ /$title_re/
			  || grep { my $a = $_; grep { $a eq $_ } @datadirs } @args;
			next unless $ours;
			my @r = stat("/proc/$pid/root/");
			next unless @r && $r[0] == $root[0] && $r[1] == $root[1];
		}
		$cmdline =~ s/\0+$//;
		$cmdline =~ s/\0/ /g;
		$result{$pid} = $cmdline;
	}
	return \%result;
}

=pod

=item bpext_watch_d_state(nodes)

Start watching the processes of the given nodes (bpext_node_processes) in
a process of its own, every 100 ms, until bpext_watch_d_state_end.
Returns the watch.

=cut

sub bpext_watch_d_state
{
	my (@nodes) = @_;
	my $log = PostgreSQL::Test::Utils::tempdir() . '/d_state.log';
	my $parent = $$;
	my $pid = fork();
	croak "could not fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		# The child: no END block of the test's may run here, and it
		# keeps no pipe of the test's open (a psql session's input, say).
		$SIG{TERM} = sub { POSIX::_exit(0) };
		if (opendir(my $fds, '/proc/self/fd'))
		{
			my @fds = grep { /^\d+$/ && $_ > 2 } readdir $fds;
			closedir $fds;
			POSIX::close($_) for @fds;
		}
		open(my $out, '>', $log) or POSIX::_exit(1);
		$out->autoflush(1);
		my $n = 0;
		my (%was_d, %title);
		while (getppid() == $parent)
		{
			$n++;
			my $t = time();
			my $procs = bpext_node_processes(@nodes);
			my %d;
			for my $p (keys %$procs)
			{
				# A process that exits has no title left to read.
				$title{$p} = $procs->{$p} if $procs->{$p} ne '';
				$procs->{$p} = $title{$p} // '';
				my (undef, $state) = _proc_stat($p) or next;
				next unless $state eq 'D';
				my $status = _proc_file($p, 'status');
				my $switches = 0;
				$switches += $1 while $status =~ /ctxt_switches:\s+(\d+)/g;
				my $wchan = _proc_file($p, 'wchan') || '?';
				print $out "D $n $t $p $switches $wchan $procs->{$p}\n";
				$d{$p} = 1;
			}
			for my $p (keys %was_d)
			{
				print $out "X $n $t $p\n" unless -e "/proc/$p" || $d{$p};
			}
			%was_d = %d;
			print $out "S $n $t " . scalar(keys %$procs) . "\n";
			usleep(100_000);
		}
		POSIX::_exit(0);
	}
	return { pid => $pid, log => $log, started => time() };
}

=pod

=item bpext_watch_d_state_end(watch, released_at [, min_held])

Stop the watch, after the device was released at released_at
(bpext_device_release's return value).  A process was held by the hung
device if it was in D state in consecutive samples, without running in
between, for at least min_held seconds (default 1) up to the last sample
before the release, or until it died: a wait on a device that does not
answer ends only when the device does.  Shorter waits, and waits that
ended while the device still hung, are I/O on other devices.  Returns a
hash reference: samples (how many were taken), held (descriptions of the
processes held that are not helpers: their title does not contain
"helper"), helpers (those that are), other (long waits that ended while
the device hung).

=cut

sub bpext_watch_d_state_end
{
	my ($w, $released_at, $min_held) = @_;
	$min_held //= 1;
	kill('TERM', $w->{pid});
	for (1 .. 50)
	{
		last if waitpid($w->{pid}, POSIX::WNOHANG()) != 0;
		usleep(100_000);
	}
	kill('KILL', $w->{pid});
	waitpid($w->{pid}, POSIX::WNOHANG());

	my (%time, %runs, %exited);
	my $last_before = 0;    # the last sample taken before the release
	my $samples = 0;
	open(my $fh, '<', $w->{log}) or croak "could not read $w->{log}: $!";
	while (my $line = <$fh>)
	{
		chomp $line;
		if ($line =~ /^S (\d+) (\S+)/)
		{
			$samples++;
			$time{$1} = $2;
			$last_before = $1 if $2 < $released_at;
		}
		elsif ($line =~ /^X (\d+) \S+ (\d+)/)
		{
			$exited{$2} = $1;
		}
		elsif ($line =~ /^D (\d+) (\S+) (\d+) (\d+) (\S+) (.*)$/)
		{
			my ($n, $t, $pid, $switches, $wchan, $title) = ($1, $2, $3, $4, $5, $6);
			my $list = $runs{$pid} //= [];
			my $run = $list->[-1];
			if ($run && $run->{last} == $n - 1 && $run->{switches} == $switches)
			{
				$run->{last} = $n;
				$run->{to} = $t;
			}
			else
			{
				push @$list, { first => $n, last => $n, from => $t, to => $t,
					switches => $switches, wchan => $wchan, title => $title };
			}
		}
	}
	close $fh;
	unlink $w->{log};

	my (@held, @helpers, @other);
	for my $pid (sort { $a <=> $b } keys %runs)
	{
		for my $run (@{ $runs{$pid} })
		{
			my $secs = $run->{to} - $run->{from};
			my $died = defined $exited{$pid} && $exited{$pid} == $run->{last} + 1;
			my $until_release = $run->{first} <= $last_before && $run->{last} >= $last_before;
			$secs = $time{$last_before} - $run->{from} if $until_release;
			next if $secs < $min_held;
			my $what = sprintf('%d "%s" in D state for %.1f s (wchan %s)%s',
				$pid, $run->{title}, $secs, $run->{wchan},
				$died ? ', until it died' : '');
			if (!$until_release && !$died)
			{
				push @other, $what;
			}
			elsif ($run->{title} =~ /helper/)
			{
				push @helpers, $what;
			}
			else
			{
				push @held, $what;
			}
		}
	}
	return { samples => $samples, held => \@held, helpers => \@helpers,
		other => \@other };
}

=pod

=item bpext_timed_psql(node, db, sql, limit)

Run sql, giving up after limit seconds (psql is then killed; the query may
still run in its backend).  Returns a hash reference: done (it returned
in time), ret (psql's exit code), out, err, secs (how long it took).

=cut

sub bpext_timed_psql
{
	my ($node, $db, $sql, $limit) = @_;
	my ($out, $err) = ('', '');
	my $timer = IPC::Run::timeout($limit);
	my $start = time();
	my $ok = eval {
		IPC::Run::run(
			[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr($db),
			  '-c', $sql ],
			'<', \undef, '>', \$out, '2>', \$err, $timer);
		1;
	};
	my $secs = time() - $start;
	die $@ if !$ok && !$timer->is_expired;
	chomp $out;
	return { done => $ok ? 1 : 0, ret => $ok ? $? >> 8 : undef,
		out => $out, err => $err, secs => $secs };
}

=pod

=item bpext_timed_stop(node, mode, limit)

pg_ctl stop -m mode, waiting at most limit seconds (PGCTLTIMEOUT).
Returns (stopped, seconds taken).

=cut

sub bpext_timed_stop
{
	my ($node, $mode, $limit) = @_;
	local $ENV{PGCTLTIMEOUT} = POSIX::ceil($limit);
	my $start = time();
	my $ok = $node->stop($mode, fail_ok => 1);
	return ($ok, time() - $start);
}

=pod

=back

=cut

1;


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
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

our @EXPORT = qw(
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

		# The tests' data files are in the page cache, where adaptive
		# admission would pause pushes, read admission and dual writes
		# after seconds of tier hits; the tests of those need them
		# (028 tests the pause itself).
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

On a started node: CREATE EXTENSION bpext and pg_prewarm in postgres, the
helper functions, the eviction table, and (unless wait => 0) wait for the
tier to be enabled.

=cut

sub bpext_setup
{
	my ($node, %opts) = @_;

	$node->safe_psql('postgres',
		'CREATE EXTENSION bpext; CREATE EXTENSION pg_prewarm;');
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
process title names it), or undef.  The worker has no database
connection, so pg_stat_activity does not list it.

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

=cut

1;


# Copyright (c) 2026, bpext developers

# pg_upgrade to this major from each older major whose server and bpext
# are installed here (in the harness, 15 and 18 beside 19; test/pg_major.sh
# says why not 17): the extension and its settings carry over, and the
# tier starts cold, saying why in one LOG line.  The old cluster's tier
# holds a whole table and a map saved at its shutdown, at the bpext.path
# the new cluster uses too (pg_upgradecluster copies the configuration,
# bpext.path with it); pg_upgrade keeps the relfilenodes (from 15 on), so
# that map names the new cluster's files too, and only the identity the
# tier file and its map carry keeps the new cluster from loading pages it
# never checked.  While the old cluster runs again and holds the tier
# file, the new one leaves it alone; once it is stopped, the new one takes
# the file over, empty, and its own map makes its next restart warm.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use Cwd;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my ($major) = `pg_config --version` =~ /PostgreSQL (\d+)/
  or die "pg_config --version: no major version";

# The older majors with a server and bpext installed.
my (@from, @without);
for my $dir (glob('/usr/lib/postgresql/*'))
{
	my ($m) = $dir =~ m{/(\d+)$} or next;
	next if $m >= $major || !-x "$dir/bin/postgres";
	if (-f "$dir/lib/bpext.so")
	{
		push @from, $m;
	}
	else
	{
		push @without, $m;
	}
}
@from = sort { $a <=> $b } @from;
# BPEXT_UPGRADE_FROM=17, say, tests that one alone.
@from = grep { $_ == $ENV{BPEXT_UPGRADE_FROM} } @from
  if $ENV{BPEXT_UPGRADE_FROM};
# test/run-tests.sh says which majors it built bpext for to upgrade from
# (bpext_upgrade_from_majors): another major's installation here may be
# another run's, which changes it meanwhile (15's, on Debian 12, for 16).
if (defined $ENV{BPEXT_UPGRADE_FROM_MAJORS})
{
	my %named = map { $_ => 1 } split ' ', $ENV{BPEXT_UPGRADE_FROM_MAJORS};
	@from = grep { $named{$_} } @from;
}
if (!@from)
{
	plan skip_all => "no older PostgreSQL major than $major with bpext is installed here"
	  . (@without ? ' (' . join(', ', @without) . ' without bpext)' : '')
	  . (defined $ENV{BPEXT_UPGRADE_FROM_MAJORS}
		? " for the harness to upgrade from (it names '$ENV{BPEXT_UPGRADE_FROM_MAJORS}')" : '')
	  . '; the harness installs 15 and 18 with bpext beside 19';
}
note 'installed without bpext, not tested: ' . join(', ', @without) if @without;

my $nrows = 20000;

# The bpext settings the old major has (a newer one may have more), as
# pg_settings shows them on node.
sub bpext_settings
{
	my ($node, $names) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT string_agg(name || '=' || setting, ', ' ORDER BY name)
		  FROM pg_settings
		 WHERE name = ANY ('{$names}')
	});
}

for my $from (@from)
{
	my $name = "$from to $major";

	# --- the old cluster: bpext, a full tier, a map saved at shutdown -------
	my $old = bpext_init_node("old_$from",
		install_path => "/usr/lib/postgresql/$from",
		tier_size => '32MB', max_size => '64MB', checksums => 1,
		conf => "bpext.io_timeout = '20s'\n");
	my $path = bpext_tier_path($old);
	$old->start;
	$old->safe_psql('postgres', 'CREATE EXTENSION bpext');
	bpext_create_helpers($old, 'postgres');
	bpext_load_table($old, 'postgres', 't', $nrows, 3);
	ok(bpext_wait_for_state($old, 'enabled', 60), "$name: the old cluster's tier is enabled");
	$old->safe_psql('postgres', q{
		CHECKPOINT;
		SELECT bpext_prewarm('t'), bpext_prewarm('t_pkey');
	});
	my $relpages = $old->safe_psql('postgres',
		"SELECT (pg_relation_size('t') + pg_relation_size('t_pkey')) / 8192");
	cmp_ok(bpext_config($old, 'postgres')->{allocated_pages}, '>=', $relpages,
		"$name: the old cluster's tier holds the whole table");
	my $old_version = $old->safe_psql('postgres',
		"SELECT extversion FROM pg_extension WHERE extname = 'bpext'");
	my $names = $old->safe_psql('postgres', q{
		SELECT string_agg(name, ',') FROM pg_settings
		 WHERE name LIKE 'bpext.%' OR name = 'shared_preload_libraries'
	});
	my $old_settings = bpext_settings($old, $names);
	like($old_settings, qr/bpext\.io_timeout=20000\b/,
		"$name: the old cluster has the bpext settings given");
	my $old_sysid = $old->safe_psql('postgres',
		'SELECT system_identifier FROM pg_control_system()');
	my $offset = -s $old->logfile;
	$old->stop;
	like(slurp_file($old->logfile, $offset),
		qr/LOG:  bpext: saved the tier map at shutdown: [1-9]\d* pages/,
		"$name: the old cluster saved its tier map at shutdown");

	# --- the new cluster, with the old one's bpext settings -----------------
	# pg_upgrade does not copy postgresql.conf; pg_upgradecluster does, and
	# pg_upgrade needs bpext preloaded in the new cluster before it runs
	# (it loads every library the old cluster's functions name).  So copy
	# shared_preload_libraries and the bpext.* lines, as they are.
	my $new = bpext_init_node("new_$from", preload => 0, checksums => 1);
	my @copied = grep { /^\s*(shared_preload_libraries|bpext\.)/ }
	  split /\n/, slurp_file($old->data_dir . '/postgresql.conf');
	$new->append_conf('postgresql.conf', join("\n", @copied) . "\n");

	my $cwd = getcwd();
	chdir $new->basedir or die "chdir: $!";
	my $upgraded = run_log(
		[
			'pg_upgrade', '--no-sync',
			'--old-datadir' => $old->data_dir,
			'--new-datadir' => $new->data_dir,
			'--old-bindir' => "/usr/lib/postgresql/$from/bin",
			'--new-bindir' => $new->config_data('--bindir'),
			'--socketdir' => $new->host,
			'--old-port' => $old->port,
			'--new-port' => $new->port,
		]);
	ok($upgraded, "$name: pg_upgrade");
	chdir $cwd or die "chdir: $!";
	if (!$upgraded)
	{
		# pg_upgrade keeps its logs only when it fails: show them.
		for my $log (glob($new->data_dir . '/pg_upgrade_output.d/*/log/*'))
		{
			diag("=== $log\n" . slurp_file($log));
		}
		next;
	}

	# --- the old cluster runs again and holds the tier file -----------------
	# pg_upgrade copied the data files, so the old cluster may still run;
	# while it holds the tier file the new one must not touch it.
	$old->start;
	ok(bpext_wait_for_state($old, 'enabled', 60),
		"$name: the old cluster, started again, has its tier");
	$offset = -s $new->logfile // 0;
	$new->start;
	ok(bpext_wait_for_state($new, 'error', 60),
		"$name: the new cluster leaves the tier file the old one holds");
	ok( $new->wait_for_log(
			qr/LOG:  bpext: cold start: the tier file is in use by another server/,
			$offset),
		"$name: cold start while the old cluster holds the tier file, with a LOG line");
	like(bpext_config($new, 'postgres')->{last_error} // '',
		qr/"\Q$path\E" is the tier file of another cluster \(system identifier $old_sysid\), which is using it/,
		"$name: last_error says the old cluster is using the tier file");
	is(bpext_config($old, 'postgres')->{state}, 5,
		"$name: the old cluster's tier is still enabled");
	bpext_check_table($old, 'postgres', 't', rows => $nrows, ver => 3,
		scan => 'index', name => "$name, old cluster beside the new one");
	$new->stop;
	$old->stop;

	# --- the new cluster on its own: cold, and says why ---------------------
	$offset = -s $new->logfile;
	$new->start;
	ok(bpext_wait_for_state($new, 'enabled', 60), "$name: the new cluster's tier is enabled");
	ok( $new->wait_for_log(qr/LOG:  bpext: (cold|warm) start: /, $offset),
		"$name: the start is decided and logged");
	my $new_sysid = $new->safe_psql('postgres',
		'SELECT system_identifier FROM pg_control_system()');
	isnt($new_sysid, $old_sysid, "$name: the new cluster has its own system identifier");

	is( $new->safe_psql('postgres',
			"SELECT extversion FROM pg_extension WHERE extname = 'bpext'"),
		$old_version,
		"$name: the extension is there at version $old_version");
	is(bpext_settings($new, $names), $old_settings, "$name: the bpext settings carried over");

	my $c = bpext_config($new, 'postgres');
	is($c->{start_mode}, 'cold', "$name: the tier starts cold");
	is($c->{pages_reused}, 0, "$name: no page of the old cluster's map is reused");
	like($c->{cold_start_reason} // '',
		qr/^"\Q$path\E" is the tier file of another cluster \(system identifier $old_sysid, this cluster's is $new_sysid\)$/,
		"$name: cold_start_reason names both clusters");
	my $log = slurp_file($new->logfile, $offset);
	is( scalar(() = $log =~ m/LOG:  bpext: cold start: /g), 1,
		"$name: one cold-start line in the log");
	like($log,
		qr/LOG:  bpext: cold start: "\Q$path\E" is the tier file of another cluster \(system identifier $old_sysid, this cluster's is $new_sysid\)\n/,
		"$name: the cold-start line says the tier file is the old cluster's");
	like($log,
		qr/LOG:  bpext: took over "\Q$path\E", the tier file of another cluster \(system identifier $old_sysid\), and started it empty/,
		"$name: the takeover is logged");
	unlike($log, qr/warm start: reusing/, "$name: no warm start");

	# The views and functions work, the rows read right through the tier.
	bpext_check_table($new, 'postgres', 't', rows => $nrows, ver => 3,
		scan => 'index', name => "$name, after the upgrade");
	$new->safe_psql('postgres', q{
		CHECKPOINT;
		SELECT bpext_prewarm('t'), bpext_prewarm('t_pkey');
	});
	cmp_ok(bpext_config($new, 'postgres')->{allocated_pages}, '>=', $relpages,
		"$name: the new cluster's tier takes the table");
	is(bpext_stat($new, 'crc_failures', 'postgres'), 0, "$name: no checksum failure");
	cmp_ok(
		$new->safe_psql('postgres', q{
			SELECT coalesce(sum(ssd_pages), 0) FROM bpext_relation_buffers
			 WHERE relation IN ('t'::regclass, 't_pkey'::regclass)
		}),
		'>=', $relpages,
		"$name: bpext_relation_buffers shows the table's pages in the tier");

	# The new cluster's own map: a clean restart is warm.
	$offset = -s $new->logfile;
	$new->restart;
	ok(bpext_wait_for_state($new, 'enabled', 60), "$name: enabled after a restart");
	ok( $new->wait_for_log(qr/LOG:  bpext: warm start: reusing /, $offset),
		"$name: the new cluster's own saved map makes a restart warm");
	bpext_check_table($new, 'postgres', 't', rows => $nrows, ver => 3,
		scan => 'index', name => "$name, warm after the upgrade");
	$new->stop;
}

done_testing();


# Copyright (c) 2026, bpext developers

# ALTER DATABASE SET TABLESPACE is caught whatever the order of the hooks.
# Another extension, loaded after bpext, installs a ProcessUtility_hook that
# calls standard_ProcessUtility directly (test/modules/bad_chain), so
# bpext's ProcessUtility_hook never sees the command.  The move must still
# invalidate the database in the tier (through the object-access hook):
# moving it A->B->A, with its pages in the tier, must leave no tier slot
# for the files of the tablespace it left, and reads after moving back
# (when copydir has rewritten the files under their old identities) must
# return the current rows.  RENAME and OWNER TO, which fire the same hook
# but move nothing, must leave the tier alone.

use strict;
use warnings;

use File::Copy;
use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

bpext_needs_contrib('pg_prewarm');

my $nrows = 12000;

# Build the test module into the temporary directory, against the server
# under test; it is never installed.
my $moddir = PostgreSQL::Test::Utils::tempdir();
for my $f ('bad_chain.c', 'Makefile')
{
	copy("$FindBin::RealBin/../modules/bad_chain/$f", "$moddir/$f")
	  or die "copy $f: $!";
}
my $probe = PostgreSQL::Test::Cluster->new('probe');
my $pg_config = $probe->config_data('--bindir') . '/pg_config';
$pg_config = 'pg_config' unless -x $pg_config;
my ($out, $err) = ('', '');
my $built = IPC::Run::run([ 'make', '-s', '-C', $moddir, "PG_CONFIG=$pg_config" ],
	'>', \$out, '2>', \$err);
ok($built && -f "$moddir/bad_chain.so", 'the bad_chain test module builds')
  or diag("$out$err");

my $node = bpext_init_node('main', tier_size => '256MB', shared_buffers => '8MB',
	conf => "shared_preload_libraries = 'bpext, $moddir/bad_chain'\n");
$node->start;
bpext_setup($node, evict_mb => 16);
like($node->safe_psql('postgres', 'SHOW shared_preload_libraries'),
	qr/bpext, .*bad_chain/, 'bad_chain is loaded after bpext');

my $tsdir = $node->basedir . '/ts_b';
mkdir $tsdir or die "mkdir $tsdir: $!";
$node->safe_psql('postgres', "CREATE TABLESPACE ts_b LOCATION '$tsdir'");
$node->safe_psql('postgres', 'CREATE DATABASE m');
$node->safe_psql('m', 'CREATE EXTENSION bpext');
bpext_create_helpers($node, 'm');
bpext_load_table($node, 'm', 'dt', $nrows);

my $m_oid = $node->safe_psql('postgres',
	"SELECT oid FROM pg_database WHERE datname = 'm'");
my %spc = map { split /\|/ } split /\n/, $node->safe_psql('postgres',
	"SELECT spcname, oid FROM pg_tablespace WHERE spcname IN ('pg_default', 'ts_b')");

# Current tier pages of database m in the tablespace named.
sub tier_pages_in
{
	my ($spcname) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT count(*) FROM bpext_buffer_descriptors
		 WHERE is_in_bpool_extension AND reldatabase = $m_oid
		   AND reltablespace = $spc{$spcname}});
}

sub seed
{
	$node->safe_psql('m', q{
		CHECKPOINT;
		SELECT bpext_prewarm('dt'), bpext_prewarm('dt_pkey');
	});
	return;
}

# Move m to tablespace where, after an update that makes its files differ
# from what the tier saw before.
my $ver = '0';
my $step = 0;
sub move_to
{
	my ($where, $left) = @_;
	$step++;
	seed();
	cmp_ok(tier_pages_in($left), '>', 100,
		"move $step: the tier holds pages of m in $left");
	$node->safe_psql('m', qq{
		UPDATE dt SET ver = ver + $step, v = bpext_expected_v(id, ver + $step)
		 WHERE id % ($step + 1) = 0;
		CHECKPOINT;
	});
	$ver = "($ver) + CASE WHEN id % ($step + 1) = 0 THEN $step ELSE 0 END";
	$node->safe_psql('postgres', "ALTER DATABASE m SET TABLESPACE $where");
	is($node->safe_psql('m',
		'SELECT spcname FROM pg_database d JOIN pg_tablespace t ON t.oid = d.dattablespace WHERE datname = current_database()'),
		$where, "move $step: m is in $where");
	is(tier_pages_in($left), 0,
		"move $step: no tier slot left for m's files in $left");
	bpext_evict_shared_buffers($node);
	bpext_check_table($node, 'm', 'dt', rows => $nrows, ver => $ver,
		scan => 'index', name => "move $step, evicted");
	bpext_check_table($node, 'm', 'dt', rows => $nrows, ver => $ver,
		scan => 'seq', name => "move $step, evicted");
	return;
}

move_to('ts_b', 'pg_default');
move_to('pg_default', 'ts_b');
# Back in ts_b, then pg_default once more: both directions have now
# rewritten files whose identities the tier had seen.
move_to('ts_b', 'pg_default');
move_to('pg_default', 'ts_b');

# RENAME and OWNER TO fire the same object-access hook: no invalidation.
seed();
my $kept = tier_pages_in('pg_default');
cmp_ok($kept, '>', 100, "the tier holds $kept pages of m");
$node->safe_psql('postgres', q{
	CREATE ROLE other_owner;
	ALTER DATABASE m RENAME TO m2;
	ALTER DATABASE m2 OWNER TO other_owner;
	ALTER DATABASE m2 RENAME TO m;
	ALTER DATABASE m CONNECTION LIMIT 50;
});
is(tier_pages_in('pg_default'), $kept,
	'RENAME, OWNER TO and CONNECTION LIMIT leave the tier alone');

my $before = bpext_stat($node, 'extension_page_reads');
bpext_evict_shared_buffers($node);
bpext_check_table($node, 'm', 'dt', rows => $nrows, ver => $ver,
	scan => 'index', name => 'after rename, from the tier');
cmp_ok(bpext_stat($node, 'extension_page_reads') - $before, '>', 50,
	'reads were served by the tier after the renames');

is(bpext_config($node)->{state}, 5, 'tier still enabled');
is(bpext_stat($node, 'crc_failures'), 0, 'no checksum failures');

$node->stop;
done_testing();

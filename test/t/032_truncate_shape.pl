
# Copyright (c) 2026, bpext developers

# Truncation in the storage manager's own shape.  smgr_truncate gained an
# old_blocks argument in 15.11, 16.7 and 17.3; on 16 one bpext build
# serves both sides of that change, installing the wrapper of the server's
# shape at start (src/compat.h, src/interpose.c).  Every major: VACUUM's
# truncation (main, free space map and visibility map forks) and a
# TRUNCATE in the transaction that created the table (which truncates the
# file in place) of a table whose every page is in the tier leave the
# table at its new length, its rows right, and no tier page at or past the
# end of any fork; regrown, the table reads back right from the tier after
# a restart.  A wrapper of the wrong shape invalidates from the wrong block
# (or truncates to a wrong length), which these checks see.  On 16.0 to
# 16.6: a server that exports smgrtruncate2 although its version is older
# than 16.7 makes bpext refuse to start, with a message that says why.
# Needs no contrib module, so that it runs on pgserver's 16.2 too.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $nrows = 30000;

my $node = bpext_init_node('main', tier_size => '64MB', max_size => '64MB',
	conf => "bpext.write_policy = 'invalidate'\n");
$node->start;
bpext_setup($node);
my $version_num = $node->safe_psql('postgres', 'SHOW server_version_num');

# Tier pages at or past the end of their fork, of any relation of the
# database (as test/t/017_truncate_race.pl counts them).
my $past_end = q{
	SELECT count(*) FROM bpext_relation_buffers rb
	  JOIN bpext_buffer_descriptors d USING (reltablespace, relfilenode, relforknumber)
	 WHERE d.is_in_bpool_extension
	   AND rb.database_id = (SELECT oid FROM pg_database WHERE datname = current_database())
	   AND d.reldatabase = rb.database_id
	   AND (rb.relation IS NULL OR
	        d.relblocknumber >= pg_relation_size(rb.relation,
	            (ARRAY['main', 'fsm', 'vm', 'init'])[d.relforknumber + 1]) / 8192)};

# Pages of a relation's fork in the tier.
sub tier_pages
{
	my ($rel, $fork) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT count(*) FROM bpext_buffer_descriptors
		 WHERE is_in_bpool_extension
		   AND relfilenode = pg_relation_filenode('$rel')
		   AND relforknumber = $fork
		   AND reldatabase = (SELECT oid FROM pg_database WHERE datname = 'postgres')});
}

# Every fork of t into the tier, from the files (shared buffers emptied).
sub fill_tier
{
	$node->safe_psql('postgres', q{
		CHECKPOINT;
		SELECT bpext_drop_clean_buffers();
		SELECT bpext_prewarm('t', 'main'), bpext_prewarm('t', 'fsm'),
		       bpext_prewarm('t', 'vm'), bpext_prewarm('t_pkey');
	});
	return;
}

# --- VACUUM truncates main, fsm and vm ---------------------------------------
bpext_load_table($node, 'postgres', 't', $nrows);
$node->safe_psql('postgres', 'VACUUM (FREEZE) t');    # a visibility map
fill_tier();
my $old_pages = $node->safe_psql('postgres', "SELECT pg_relation_size('t') / 8192");
is(tier_pages('t', 0), $old_pages, "every page of t ($old_pages) in the tier");
cmp_ok(tier_pages('t', 2), '>', 0, "t's visibility map in the tier");

$node->safe_psql('postgres', qq{
	DELETE FROM t WHERE id > $nrows / 4;
	VACUUM t;
});
my ($new_pages, $last_used) = split /\|/, $node->safe_psql('postgres', q{
	SELECT pg_relation_size('t') / 8192,
	       (SELECT max((ctid::text::point)[0])::int + 1 FROM t)});
cmp_ok($new_pages, '<', $old_pages / 2, "VACUUM truncated t ($old_pages to $new_pages pages)");
is($new_pages, $last_used, 't ends at the last page that holds a row');
is($node->safe_psql('postgres', $past_end), 0,
	'after VACUUM: no tier page past the end of any fork');
cmp_ok(tier_pages('t', 0), '>', 0, "t's pages below its new end still in the tier");
bpext_check_table($node, 'postgres', 't', rows => $nrows,
	present => "id <= $nrows / 4", name => 'after VACUUM');

# Regrown with other rows where the truncated pages were: after a restart
# (the tier's map is saved at shutdown) the first pages come from the tier
# and every row is right.
$node->safe_psql('postgres', qq{
	INSERT INTO t SELECT i, 1, bpext_expected_v(i, 1)
	  FROM generate_series($nrows / 4 + 1, $nrows) i;
	CHECKPOINT;
});
$node->restart;
bpext_wait_for_state($node, 'enabled');
my $reads = bpext_stat($node, 'extension_page_reads');
bpext_check_table($node, 'postgres', 't', rows => $nrows,
	ver => "CASE WHEN id > $nrows / 4 THEN 1 ELSE 0 END",
	name => 'regrown, after a restart');
cmp_ok(bpext_stat($node, 'extension_page_reads') - $reads, '>', 0,
	'the tier served pages of t after the restart');

# --- TRUNCATE of a table created in the same transaction ---------------------
# Such a table's file is truncated in place (smgrtruncate), not replaced.
my ($before, $filenode, $after, $filenode_after) = split /\n/,
  $node->safe_psql('postgres', q{
	BEGIN;
	CREATE TABLE tn (id int, pad text);
	INSERT INTO tn SELECT i, repeat('p', 200) FROM generate_series(1, 20000) i;
	CHECKPOINT;
	SELECT bpext_prewarm('tn');
	SELECT pg_relation_filenode('tn');
	TRUNCATE tn;
	SELECT count(*) FROM bpext_buffer_descriptors
	 WHERE is_in_bpool_extension AND relfilenode = pg_relation_filenode('tn');
	SELECT pg_relation_filenode('tn');
	INSERT INTO tn SELECT i, 'n' FROM generate_series(1, 100) i;
	COMMIT;
});
cmp_ok($before, '>', 500, "the new table's pages in the tier ($before)");
is($filenode_after, $filenode, 'TRUNCATE kept its file');
is($after, 0, 'after TRUNCATE: none of its pages left in the tier');
is($node->safe_psql('postgres', 'SELECT count(*), min(pad) FROM tn'), '100|n',
	'it holds only the rows inserted after the TRUNCATE');
is($node->safe_psql('postgres', $past_end), 0,
	'no tier page past the end of any fork');

is(bpext_config($node)->{state}, 5, 'tier still enabled');
is(bpext_count_in_log($node, qr/PANIC|server process .* was terminated/), 0,
	'no server process crashed');
$node->stop;

# --- 16 before 16.7: a server whose version and smgrtruncate2 disagree ------
SKIP:
{
	skip 'the version and smgrtruncate2 can be made to disagree only on 16.0 to 16.6 (a library can add a function to a server, not take one away)', 3
	  unless $version_num >= 160000 && $version_num < 160007;

	my $src = "$FindBin::RealBin/../fault_inject/smgrtruncate2_stub.c";
	my $so = PostgreSQL::Test::Utils::tempdir() . '/smgrtruncate2_stub.so';
	my ($out, $err) = ('', '');
	ok(IPC::Run::run([ $ENV{CC} // 'cc', '-shared', '-fPIC', '-o', $so, $src ],
			'>', \$out, '2>', \$err),
		"built an smgrtruncate2 stub $out$err");
	my $offset = -s $node->logfile;
	{
		local $ENV{LD_PRELOAD} = $so;
		ok(!$node->start(fail_ok => 1),
			'a 16 server older than 16.7 that exports smgrtruncate2 does not start');
	}
	my $log = slurp_file($node->logfile, $offset);
	like($log,
		qr/FATAL:  bpext cannot tell which storage manager truncate signature this server has\n.*DETAIL:  The signature changed in 16\.7, which added the function smgrtruncate2; this server is version 16\.\d but exports smgrtruncate2\./,
		'and says why');
}

done_testing();

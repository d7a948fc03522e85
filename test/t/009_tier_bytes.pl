
# Copyright (c) 2026, bpext developers

# What a tier page holds, byte for byte, read straight from the tier file
# and compared with the data file's block.
#
# On a primary, a tier page is the block exactly, pd_checksum included.
#
# On a hot standby with data checksums (or wal_log_hints), PostgreSQL sets
# hint bits while it reads during recovery without dirtying the buffer (it
# may not write WAL for them), so the evict push stores pages whose tuples
# carry hint bits the standby's data file lacks, with pd_checksum
# recomputed to match.  doc/how-it-works.md states that exception; this
# checks that it is the only one: the differing bits are all heap-tuple
# hint bits of t_infomask or in pd_checksum, and PostgreSQL reads those
# pages back through the tier with their checksums verified.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

bpext_needs_contrib('pg_prewarm');

my $nrows = 8000;    # 164 pages: a sequential scan reads it in shared buffers

my $primary = bpext_init_node('primary', checksums => 1,
	tier_size => '64MB', max_size => '64MB',
	init => { allows_streaming => 1 });
$primary->start;
bpext_setup($primary);
my $standby = bpext_init_standby($primary, 'standby');
$standby->start;

# Rows nobody has read on the primary, so no hint bit reaches the WAL; the
# standby's restartpoint writes its replayed blocks, hint-free.
$primary->safe_psql('postgres', qq{
	CREATE TABLE h (id int, v text);
	INSERT INTO h SELECT i, repeat(md5(i::text), 4) FROM generate_series(1, $nrows) i;
	CHECKPOINT;
});
$primary->wait_for_catchup($standby);
$standby->safe_psql('postgres', 'CHECKPOINT');

# The 8 kB block blkno of a data file (one segment is enough here).
sub file_block
{
	my ($node, $relpath, $blkno) = @_;
	my $file = $node->data_dir . "/$relpath";
	open(my $fh, '<:raw', $file) or die "could not open $file: $!";
	seek($fh, $blkno * 8192, 0) or die "seek: $!";
	my $n = read($fh, my $page, 8192);
	close $fh;
	die "short read of block $blkno of $file" unless defined $n && $n == 8192;
	return $page;
}

# Slot slot of a tier file (the first 8 kB are its header).
sub tier_slot
{
	my ($tier, $slot) = @_;
	open(my $fh, '<:raw', $tier) or die "could not open $tier: $!";
	seek($fh, ($slot + 1) * 8192, 0) or die "seek: $!";
	my $n = read($fh, my $page, 8192);
	close $fh;
	die "short read of slot $slot of $tier" unless defined $n && $n == 8192;
	return $page;
}

# '' if the two heap pages differ only in pd_checksum and in the hint bits
# of t_infomask (HEAP_XMIN_COMMITTED, HEAP_XMIN_INVALID, HEAP_XMAX_COMMITTED,
# HEAP_XMAX_INVALID: 0x0F00, the high byte of the little-endian field at
# offset 20 of each tuple); else what else differs.
sub beyond_hints
{
	my ($tier, $file) = @_;
	my %allowed = (8 => 0xff, 9 => 0xff);
	my $lower = unpack('v', substr($file, 12, 2));
	for (my $off = 24; $off < $lower; $off += 4)
	{
		my $lp = unpack('V', substr($file, $off, 4));
		my ($lp_off, $lp_flags) = ($lp & 0x7fff, ($lp >> 15) & 3);
		$allowed{ $lp_off + 21 } = 0x0f if $lp_flags == 1;    # LP_NORMAL
	}
	for my $i (0 .. 8191)
	{
		my $x = ord(substr($tier, $i, 1)) ^ ord(substr($file, $i, 1));
		next unless $x;
		return sprintf('byte %d differs (xor 0x%02x)', $i, $x)
		  unless exists $allowed{$i} && ($x & ~$allowed{$i}) == 0;
	}
	return '';
}

# h's pages in the node's tier, compared with its data file: returns the
# number of pages, how many are identical, and the first problem found.
sub compare_tier_pages
{
	my ($node) = @_;
	my $relpath = $node->safe_psql('postgres', "SELECT pg_relation_filepath('h')");
	my @pages = map { [ split /\|/ ] } split /\n/, $node->safe_psql('postgres', q{
		SELECT bufferid, relblocknumber FROM bpext_buffer_descriptors
		 WHERE is_in_bpool_extension AND relforknumber = 0
		   AND relfilenode = pg_relation_filenode('h')
		 ORDER BY relblocknumber});
	my ($same, $problem) = (0, '');
	for my $p (@pages)
	{
		my ($slot, $blkno) = @$p;
		my $tier = tier_slot(bpext_tier_path($node), $slot);
		my $file = file_block($node, $relpath, $blkno);
		if ($tier eq $file)
		{
			$same++;
			next;
		}
		my $why = beyond_hints($tier, $file);
		$problem ||= "block $blkno (slot $slot): $why" if $why;
	}
	return (scalar(@pages), $same, $problem);
}

# Push h's buffers out of shared buffers slowly enough for the worker's
# evict push to copy them on their way out: bpext_evictor read 64 blocks at
# a time, with a pause in between, three times over (h's buffers were used
# twice, and each pass of the clock hand takes one off their usage count).
sub evict_slowly
{
	my ($node) = @_;
	$node->safe_psql('postgres', q{
		DO $$
		DECLARE
			nblocks bigint := pg_relation_size('bpext_evictor') / 8192;
			b bigint;
		BEGIN
			FOR pass IN 1 .. 3 LOOP
				b := 0;
				WHILE b < nblocks LOOP
					PERFORM pg_prewarm('bpext_evictor', 'buffer', 'main', b,
									   least(b + 63, nblocks - 1));
					PERFORM pg_sleep(0.01);
					b := b + 64;
				END LOOP;
			END LOOP;
		END $$;
	});
	return;
}

# How many of h's pages the tier holds.
sub tier_pages_of_h
{
	my ($node) = @_;
	return $node->safe_psql('postgres', q{
		SELECT count(*) FROM bpext_buffer_descriptors
		 WHERE is_in_bpool_extension AND relfilenode = pg_relation_filenode('h')});
}

# Read h into shared buffers and scan it (setting hint bits), then push it
# into the tier; on the primary a checkpoint first writes the hint bits
# the scan set (the push takes clean buffers only).  The push is best
# effort (a victim is pushed only if the worker sees it, clean and
# unpinned, before the clock hand gets there; missed_pushes counts the
# others, and a busy machine makes many), so up to five times, until the
# tier holds 150 pages of it.  How many it got is the machine's doing:
# what is checked below is every page it did get, and that there is at
# least one.
sub read_and_push
{
	my ($node, $checkpoint) = @_;
	for (1 .. 5)
	{
		$node->safe_psql('postgres', q{
			SELECT pg_prewarm('h');
			SELECT count(*) FROM h WHERE v <> '';
		} . ($checkpoint ? 'CHECKPOINT;' : ''));
		evict_slowly($node);
		my $n = tier_pages_of_h($node);
		last if $n >= 150;
		note("$n pages of h pushed so far ("
			  . bpext_stat($node, 'missed_pushes') . ' pushes missed)');
	}
	return;
}

# --- the standby ------------------------------------------------------------------
read_and_push($standby, 0);
my ($n, $same, $problem) = compare_tier_pages($standby);
cmp_ok($n, '>', 0, "standby: h is in the tier ($n pages)");
is($problem, '', 'standby: tier pages differ from the data file only in hint bits and pd_checksum');
cmp_ok($same, '<', $n,
	"standby: the exception is real ($same of $n pages identical, the others carry hint bits the file lacks)");

# Every page of h in the tier and not in shared buffers is read from the
# tier by the scan (the 64 MB tier is far from full, so none is evicted
# meanwhile, and nothing writes h).
my $offset = -s $standby->logfile;
my $servable = $standby->safe_psql('postgres', q{
	SELECT count(*) FROM bpext_buffer_descriptors t
	 WHERE t.is_in_bpool_extension AND t.relforknumber = 0
	   AND t.relfilenode = pg_relation_filenode('h')
	   AND NOT EXISTS (SELECT 1 FROM bpext_buffer_descriptors b
			WHERE NOT b.is_in_bpool_extension AND b.relforknumber = 0
			  AND b.relfilenode = t.relfilenode
			  AND b.relblocknumber = t.relblocknumber)});
cmp_ok($servable, '>', 0, "standby: $servable of those pages are not in shared buffers");
my $before = bpext_stat($standby, 'extension_page_reads');
is($standby->safe_psql('postgres', 'SELECT count(*), sum(id) FROM h'),
	"$nrows|" . ($nrows * ($nrows + 1) / 2),
	'standby: h reads back right through the tier');
cmp_ok(bpext_stat($standby, 'extension_page_reads') - $before, '>=', $servable,
	'standby: ... served by the tier');
ok(!$standby->log_contains(qr/page verification failed|invalid page/, $offset),
	'standby: ... with their checksums verified, no failure');

# --- the primary ------------------------------------------------------------------
# Hint bits set here dirty the buffer (and are WAL-logged); the push takes
# clean buffers only, so the tier holds what the file holds.
read_and_push($primary, 1);
($n, $same, $problem) = compare_tier_pages($primary);
cmp_ok($n, '>', 0, "primary: h is in the tier ($n pages)");
is($same, $n, 'primary: every tier page is its data-file block, byte for byte');

$standby->stop;
$primary->stop;
done_testing();

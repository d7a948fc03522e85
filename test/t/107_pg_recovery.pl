
# Copyright (c) 2026, bpext developers

# PostgreSQL's own recovery TAP suite with bpext: runs
# test/pg_recovery_with_bpext.sh (see its header), which runs
# src/test/recovery of the server's major with bpext preloaded and a tier of
# its own on every node (from 18 on, under each io_method in turn), and
# runs the tests that fail again without bpext.
# Skipped when BPEXT_PG_RECOVERY=0, or when no source tree of the server's
# major is available (test/install-deps.sh fetches one when run as root).

use strict;
use warnings;

use FindBin;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

plan skip_all => 'BPEXT_PG_RECOVERY=0'
  if defined $ENV{BPEXT_PG_RECOVERY} && $ENV{BPEXT_PG_RECOVERY} eq '0';

my $script = "$FindBin::RealBin/../pg_recovery_with_bpext.sh";
my $work = PostgreSQL::Test::Utils::tempdir('pg_recovery');
my ($out, $err) = ('', '');
my $major = `pg_config --version` =~ /PostgreSQL (\d+)/ ? $1 : 15;
local $ENV{BPEXT_RECOVERY_WORK} = $work;
local $ENV{PG_MAJOR} = $major;
IPC::Run::run([ 'bash', $script ], '>', \$out, '2>', \$err);
my $rc = $? >> 8;
note($out);
note($err) if $err ne '';

plan skip_all => 'no PostgreSQL source for the recovery suite'
  . ($out =~ /^pg_recovery_with_bpext: (no source of PostgreSQL \d+ can be had here: [^;\n]*)/m ? " ($1)" : '')
  if $rc == 77;

like($out, qr/^pg_recovery_with_bpext: with bpext: (\d{2,}) test files/m,
	'the recovery suite ran with bpext on every node');
like($out,
	qr/^pg_recovery_with_bpext: no test fails with bpext that passes without it$/m,
	'no test fails with bpext that passes without it');
like($out,
	qr/^pg_recovery_with_bpext: tiers: enabled on \d+ nodes, \d{4,} pages read from them, 0 tier errors$/m,
	'the tiers were enabled and served reads without errors');
if ($major >= 18)
{
	for my $io_method (qw(worker sync))
	{
		like($out, qr/^pg_recovery_with_bpext: io_method $io_method: [1-9]\d* nodes$/m,
			"nodes with bpext ran under io_method $io_method");
	}
	note("$out$err" =~ /(io_method io_uring is not available here: .*)/
		? $1 : 'io_uring: ' . ($out =~ /^(pg_recovery_with_bpext: io_method io_uring: .*)$/m ? $1 : 'not run'));
}
is($rc, 0, 'pg_recovery_with_bpext.sh passed');

done_testing();

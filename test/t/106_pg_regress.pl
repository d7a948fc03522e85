
# Copyright (c) 2026, bpext developers

# PostgreSQL's own regression suite with bpext: runs
# test/pg_regress_with_bpext.sh (see its header), which runs the core
# regression schedule against a throwaway instance without bpext and one
# with bpext preloaded, its tier on and shared_buffers at 1MB, and compares.
# About two minutes on two cores.  Skipped when BPEXT_PG_REGRESS=0, or when
# no source tree of the server's major is available (test/install-deps.sh fetches
# one when run as root, as test/run-tests.sh does).

use strict;
use warnings;

use FindBin;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

plan skip_all => 'BPEXT_PG_REGRESS=0'
  if defined $ENV{BPEXT_PG_REGRESS} && $ENV{BPEXT_PG_REGRESS} eq '0';

my $script = "$FindBin::RealBin/../pg_regress_with_bpext.sh";
my $work = PostgreSQL::Test::Utils::tempdir('pg_regress');
my ($out, $err) = ('', '');
local $ENV{BPEXT_PG_REGRESS_WORK} = $work;
IPC::Run::run([ 'bash', $script ], '>', \$out, '2>', \$err);
my $rc = $? >> 8;
note($out);
note($err) if $err ne '';

plan skip_all => 'no PostgreSQL source for the regression suite'
  if $rc == 77;

like($out, qr/^pg_regress_with_bpext: with bpext: (\d{3,}) tests/m,
	'the core regression suite ran with bpext');
like($out, qr/^pg_regress_with_bpext: without bpext: (\d{3,}) tests/m,
	'the core regression suite ran without bpext');
like($out, qr/^pg_regress_with_bpext: no test fails with bpext that passes without it$/m,
	'no test fails with bpext that passes without it');
like($out,
	qr/^pg_regress_with_bpext: tier: state 5, \d{4,} pages read from it, \d+ written, 0 checksum failures, 0 I\/O errors$/m,
	'the tier was enabled and served reads without errors');
unlike($out, qr/the log of the run with bpext shows a tier error or a crash/,
	'no tier error or crash in the log');
is($rc, 0, 'pg_regress_with_bpext.sh passed');

done_testing();

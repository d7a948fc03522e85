
# Copyright (c) 2026, bpext developers

# PostgreSQL's own regression suite with bpext: runs
# test/pg_regress_with_bpext.sh (see its header), which runs the core
# regression schedule against a throwaway instance without bpext and one
# with bpext preloaded, its tier on and shared_buffers at 1MB (from 18 on,
# once per io_method: worker and sync, and io_uring where the kernel allows
# it), and compares.  About a minute per run on two cores.  Skipped when
# BPEXT_PG_REGRESS=0, or when no source tree of the server's major is
# available (test/install-deps.sh fetches one when run as root, as
# test/run-tests.sh does).

use strict;
use warnings;

use FindBin;
use IPC::Run;
use PostgreSQL::Test::Cluster;
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
  . ($out =~ /^pg_regress_with_bpext: (no source of PostgreSQL \d+ can be had here: [^;\n]*)/m ? " ($1)" : '')
  if $rc == 77;

like($out, qr/^pg_regress_with_bpext: without bpext: (\d{3,}) tests/m,
	'the core regression suite ran without bpext');

# One run with bpext, or from 18 on one per io_method.
my @runs = $out =~ /^pg_regress_with_bpext: with bpext( \(io_method \w+\))?: \d{3,} tests/mg;
my @methods = map { defined $_ ? $_ =~ s/^ \(io_method (\w+)\)$/$1/r : 'default' } @runs;
cmp_ok(scalar(@runs), '>=', 1, 'the core regression suite ran with bpext');
if (PostgreSQL::Test::Cluster->new('probe')->pg_version >= 18)
{
	for my $method (qw(worker sync))
	{
		ok((grep { $_ eq $method } @methods),
			"the core regression suite ran with bpext under io_method $method");
	}
	note("$out$err" =~ /(io_method io_uring is not available here: .*)/
		? $1 : 'io_uring: ' . ((grep { $_ eq 'io_uring' } @methods) ? 'ran' : 'did not run'));
}
for my $method (@methods)
{
	my $label = $method eq 'default' ? 'with bpext' : "with bpext \\(io_method $method\\)";
	like($out, qr/^pg_regress_with_bpext: no test fails $label that passes without it$/m,
		"$method: no test fails with bpext that passes without it");
	like($out,
		qr/^pg_regress_with_bpext: tier \($label\): state 5, \d{4,} pages read from it, \d+ written, 0 checksum failures, 0 I\/O errors$/m,
		"$method: the tier was enabled and served reads without errors");
}
unlike($out, qr/shows a tier error or a crash/,
	'no tier error or crash in the log');
is($rc, 0, 'pg_regress_with_bpext.sh passed');

done_testing();


# Copyright (c) 2026, bpext developers

# The documents (README.md and doc/*.md) say what the code does, and this
# test keeps them saying it: an example that stops working, a setting,
# column, function or wait event added or renamed without its row, a link
# to a heading that moved, a script option that went away, each fails here.
#
# Without a server:
# - README.md starts with the two set-up commands (test/demo.sh and
#   test/run-tests.sh);
# - every doc-test marker is attached to a table or a fenced block;
# - every relative link and image points to a file that exists, and a link
#   with #anchor to a heading of that file (GitHub's anchors); every
#   document in doc/ is reached by links from README.md;
# - every tree path in code (test/..., src/*.c, monitoring/..., debian/...,
#   doc/...) exists, and every suite named like `101_crash` is a file of
#   test/t/;
# - every command in a shell block or in inline code that runs a script of
#   the tree names options the script has: each --option is listed by the
#   script's --help where the script has one, and appears in the script
#   otherwise; `make TARGET` names a target of the Makefile (or of PGXS);
#   every NAME=value on such a command line is a variable the tree's
#   scripts, Makefile or tests use.
#
# Against a server with bpext preloaded:
# - the settings table (marker "settings") has one row per bpext.* setting
#   with the default a server without bpext.* lines shows and the context
#   (reload, restart, superuser) it has; every bpext.* name the documents
#   mention is a setting;
# - each "columns of VIEW" table names exactly the view's columns, and
#   every view of the extension has such a table;
# - the "functions" table names every function of the extension (but the
#   versioned ones behind the views) with its argument names and types;
# - the "wait events" table names the wait events of src/wait_events.c,
#   and every Bpext... wait event named in code is one of them;
# - the "states" table gives each state's number and description as
#   src/tier_control.h and src/tier_control.c define them;
# - every ```sql block runs without error, in the order of the documents
#   (README.md first), as a superuser in database postgres with the tier
#   enabled before each block; the documents' example tier
#   '/mnt/nvme/pg.bpe' is the test's tier file, and a size 'NGB' in an
#   example is run as 'NMB' (the test's tier is at most 256MB).  A block
#   marked "skip: REASON" is not run.  A text block right after an sql
#   block that looks like psql's aligned output (a header and a ---+---
#   line) is that block's output: the last statement's columns must be the
#   ones it shows, and with the marker "exact output" its rows too.

use strict;
use warnings;

use Cwd qw(abs_path);
use FindBin;
use lib "$FindBin::RealBin/../perl";

use BpextDocs;
use BpextTest;
use IPC::Run ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Text::ParseWords qw(shellwords);

my $top = abs_path("$FindBin::RealBin/../..");
my @files = ('README.md', map { s{^\Q$top\E/}{}r } sort glob("$top/doc/*.md"));
my %docs = map { $_ => bpext_doc_read($top, $_) } @files;

sub slurp_tree
{
	my ($path) = @_;
	return -f "$top/$path" ? slurp_file("$top/$path") : '';
}

# One check of a list of problems, each shown if there are any.
sub no_problems
{
	my ($problems, $name) = @_;
	ok(!@$problems, $name) or diag(join("\n", @$problems));
	return;
}

# Where a failure is: "file:line".
sub at { my ($doc, $line) = @_; return "$doc->{file}:$line"; }

# --- README.md begins with the two commands ---------------------------------

{
	my $readme = $docs{'README.md'};
	my $first = $readme->{blocks}[0];
	ok( $first
		  && $first->{line} <= 4
		  && $first->{body} =~ m{^test/demo\.sh\s}m
		  && $first->{body} =~ m{^test/run-tests\.sh\s}m,
		'README.md: the set-up commands test/demo.sh and test/run-tests.sh come first');
}

# --- markers, links and anchors ---------------------------------------------

for my $file (@files)
{
	my $doc = $docs{$file};
	no_problems([ map { at($doc, $_->{line}) . ": $_->{text}" } @{ $doc->{stray_markers} } ],
		"$file: every doc-test marker is followed by a table or a fenced block");

	my @bad;
	for my $link (@{ $doc->{links} })
	{
		my $target = $link->{target};
		next if $target =~ m{^[a-z][a-z0-9+.-]*:}i;    # https:, mailto:
		my ($path, $anchor) = $target =~ /^([^#]*)(?:#(.*))?$/;
		my $dir = $file =~ m{/} ? $file =~ s{/[^/]*$}{}r : '.';
		my $resolved = $path eq '' ? $file : "$dir/$path";
		$resolved =~ s{^\./}{};
		1 while $resolved =~ s{(^|/)(?!\.\./)[^/]+/\.\./}{$1};
		if (!-e "$top/$resolved")
		{
			push @bad, at($doc, $link->{line}) . ": $target: no file $resolved";
			next;
		}
		next unless defined $anchor;
		my $target_doc = $docs{$resolved}
		  // ($resolved =~ /\.md$/ ? bpext_doc_read($top, $resolved) : undef);
		push @bad, at($doc, $link->{line}) . ": $target: no heading #$anchor in $resolved"
		  unless $target_doc && $target_doc->{anchors}{$anchor};
	}
	no_problems(\@bad, "$file: every relative link resolves, anchors included");
}

# Every document can be found from the README, following links.
{
	my %reached = ('README.md' => 1);
	my @todo = ('README.md');
	while (my $file = shift @todo)
	{
		my $dir = $file =~ m{/} ? $file =~ s{/[^/]*$}{}r : '.';
		for my $link (@{ $docs{$file}{links} })
		{
			my ($path) = $link->{target} =~ /^([^#:]+\.md)(?:#.*)?$/ or next;
			my $resolved = "$dir/$path";
			$resolved =~ s{^\./}{};
			1 while $resolved =~ s{(^|/)(?!\.\./)[^/]+/\.\./}{$1};
			next if $reached{$resolved} || !$docs{$resolved};
			$reached{$resolved} = 1;
			push @todo, $resolved;
		}
	}
	no_problems([ map { "$_: no link leads to it from README.md" } grep { !$reached{$_} } @files ],
		'every document is reached by links from README.md');
}

# --- paths, suites, scripts, options, make targets, variables ---------------

my $makefile = slurp_tree('Makefile');
my %pgxs_targets = map { $_ => 1 } qw(all install installcheck check clean installdirs uninstall);
my $tree_text = join("\n",
	map { slurp_file($_) } grep { -f $_ } map { glob("$top/$_") }
	  qw(Makefile debian/rules test/*.sh test/bench/*.sh test/t/*.pl test/perl/*.pm));

my %help_cache;

# What a script says its options are: its --help output if it handles
# --help (run, never more than 60 s), its own text otherwise.
sub script_options_text
{
	my ($script) = @_;
	return $help_cache{$script} if exists $help_cache{$script};
	my $source = slurp_tree($script);
	my $text = $source;
	if ($source =~ /(?:-h\|--help|--help\|-h)\)/)
	{
		my ($out, $err) = ('', '');
		my $ok = eval {
			IPC::Run::run([ "$top/$script", '--help' ], '<', \undef, '>', \$out,
				'2>', \$err, IPC::Run::timeout(60));
		};
		$text = $ok ? "$out$err" : undef;
	}
	return $help_cache{$script} = $text;
}

# Check one command line; returns the problems found.
sub check_command
{
	my ($where, $line) = @_;
	my @bad;
	$line =~ s/(^|\s)#.*$//;
	for my $cmd (split /\s*(?:&&|\|\||;|\|)\s*/, $line)
	{
		my @words = shellwords($cmd);
		@words = split ' ', $cmd unless @words;
		my @vars;
		shift @words while @words && $words[0] eq 'sudo';
		push @vars, shift @words while @words && $words[0] =~ /^[A-Z][A-Z0-9_]*=/;
		next unless @words;
		my $prog = shift @words;
		push @vars, grep { /^[A-Z][A-Z0-9_]*=/ } @words;
		if ($prog eq 'make')
		{
			for my $target (grep { !/^-/ && !/=/ } @words)
			{
				push @bad, "$where: make $target: no such target in the Makefile"
				  unless $pgxs_targets{$target} || $makefile =~ /^\Q$target\E\s*:/m;
			}
		}
		elsif ($prog =~ m{^(?:test|monitoring)/})
		{
			if (!-x "$top/$prog")
			{
				push @bad, "$where: $prog: no such executable in the tree";
				next;
			}
			my $known = script_options_text($prog);
			if (!defined $known)
			{
				push @bad, "$where: $prog --help failed";
				next;
			}
			for my $word (@words)
			{
				next unless $word =~ /^\[?(--[a-z][a-z0-9-]*)/;
				my $opt = $1;
				push @bad, "$where: $prog does not know $opt"
				  unless $known =~ /(?<![\w-])\Q$opt\E(?![\w-])/;
			}
		}
		else
		{
			next;    # not ours to check (psql, perf, apt-get, ...)
		}
		for my $var (@vars)
		{
			my ($name) = $var =~ /^([A-Z][A-Z0-9_]*)=/;
			push @bad, "$where: $name is used by no script, test or Makefile of the tree"
			  unless $tree_text =~ /\b\Q$name\E\b/;
		}
	}
	return @bad;
}

for my $file (@files)
{
	my $doc = $docs{$file};
	my (@paths, @commands);

	for my $span (@{ $doc->{code_spans} })
	{
		push @paths, [ $span->{line}, $span->{text} ];
		push @commands, [ $span->{line}, $span->{text} ]
		  if $span->{text} =~ m{^(?:sudo\s+)?(?:[A-Z][A-Z0-9_]*=\S*\s+)*(?:make\b|(?:test|monitoring)/\S+\.sh\b)};
	}
	for my $block (grep { $_->{info} =~ /^(?:sh|bash|shell|console)$/ } @{ $doc->{blocks} })
	{
		my $n = 0;
		for my $line (split /\n/, $block->{body})
		{
			push @paths, [ $block->{line} + ++$n, $line ];
			push @commands, [ $block->{line} + $n, $line ];
		}
	}

	my @bad;
	for my $p (@paths)
	{
		my ($line, $text) = @$p;
		while ($text =~ m{(?<![\w/.~-])((?:test|monitoring|debian|doc)/[\w./-]*[\w]|src/[\w/-]+\.[ch])(?![\w*<])}g)
		{
			my $path = $1;
			next if $path =~ m{^test/bench/results\b};    # the bench's output
			push @bad, at($doc, $line) . ": $path does not exist" unless -e "$top/$path";
		}
		if ($text =~ /^(\d{3}_[a-z0-9_]+)$/)
		{
			push @bad, at($doc, $line) . ": no test test/t/$1.pl" unless -f "$top/test/t/$1.pl";
		}
	}
	no_problems(\@bad, "$file: every tree path and test named exists");

	@bad = map { check_command(at($doc, $_->[0]), $_->[1]) } @commands;
	no_problems(\@bad,
		"$file: the commands name existing scripts, options, make targets and variables");
}

# --- a server -----------------------------------------------------------------

# First without any bpext.* line, for the settings' defaults.
my $node = bpext_init_node('docs', preload => 0);
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'bpext'\n");
$node->start;

my %setting;    # name -> [ default as SHOW gives it, context ]
for my $row (split /\n/, $node->safe_psql('postgres', q{
	SELECT name || '|' || current_setting(name) || '|' || context
	  FROM pg_settings WHERE name LIKE 'bpext.%'}))
{
	my ($name, $value, $context) = split /\|/, $row, 3;
	$setting{$name} = [ $value, $context ];
}
# Settings of test-hook builds only (src/test_hooks.c) are documented there.
my %hook_setting = map { $_ => 1 } slurp_tree('src/test_hooks.c') =~ /"(bpext\.\w+)"/g;
delete @setting{ keys %hook_setting };

my %context_word = (sighup => 'reload', postmaster => 'restart', superuser => 'superuser', user => 'user');
{
	my @tables = map { my $d = $_; map { [ $d, $_ ] } grep { ($_->{marker} // '') eq 'settings' } @{ $d->{tables} } }
	  map { $docs{$_} } @files;
	ok(@tables >= 1, 'a settings table exists');
	for my $t (@tables)
	{
		my ($doc, $table) = @$t;
		my (%documented, @bad);
		for my $row (@{ $table->{rows} })
		{
			my ($name) = $row->[0] =~ /^`([^`]+)`$/;
			(my $default = $row->[1]) =~ s/^`(.*)`$/$1/;
			$default =~ s/^'(.*)'$/$1/;
			my $context = $row->[2];
			if (!defined $name || !$setting{$name})
			{
				push @bad, "$row->[0]: no such setting";
				next;
			}
			$documented{$name} = 1;
			push @bad, "$name: default $default, the server's is $setting{$name}[0]"
			  unless $default eq $setting{$name}[0];
			my $want = $context_word{ $setting{$name}[1] } // $setting{$name}[1];
			push @bad, "$name: context $context, the server's is $want" unless $context eq $want;
		}
		push @bad, map { "$_: no row" } grep { !$documented{$_} } sort keys %setting;
		no_problems(\@bad, at($doc, $table->{line}) . ': the settings table is every setting, its default and context');
	}
}
for my $file (@files)
{
	my $doc = $docs{$file};
	my @bad;
	for my $span (@{ $doc->{code_spans} })
	{
		while ($span->{text} =~ /(?<![\w\/.-])(bpext\.[a-z_]+)(?![\w.])/g)
		{
			my $name = $1;
			next if $name =~ /^bpext\.(?:control|so|h|c|o|bc|sql|tier|index)$/;    # files
			push @bad, at($doc, $span->{line}) . ": $name is not a setting"
			  unless $setting{$name} || $hook_setting{$name};
		}
	}
	for my $block (grep { $_->{info} eq 'ini' } @{ $doc->{blocks} })
	{
		while ($block->{body} =~ /^\s*(bpext\.[a-z_]+)\s*=/mg)
		{
			push @bad, at($doc, $block->{line}) . ": $1 is not a setting" unless $setting{$1};
		}
	}
	no_problems(\@bad, "$file: every bpext.* setting named exists");
}

# Now with a tier, for the views and the examples.
$node->stop;
my $tier = bpext_tier_path($node);
$node->append_conf('postgresql.conf', qq{
bpext.path = '$tier'
bpext.size = '64MB'
bpext.max_size = '256MB'
bpext.min_free_space = 0
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION bpext');
ok(bpext_wait_for_state($node, 'enabled'), 'the tier is enabled');

sub extension_objects
{
	my ($sql) = @_;
	return split /\n/, $node->safe_psql('postgres', $sql);
}

my %view_columns;
for my $view (extension_objects(q{
	SELECT c.relname FROM pg_class c
	  JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid
	   AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
	  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'bpext'
	 WHERE c.relkind = 'v'}))
{
	$view_columns{$view} = [ extension_objects(qq{
		SELECT attname FROM pg_attribute
		 WHERE attrelid = '$view'::regclass AND attnum > 0 AND NOT attisdropped
		 ORDER BY attnum}) ];
}

my %function_args;
for my $row (extension_objects(q{
	SELECT p.proname || '|' || pg_get_function_identity_arguments(p.oid) FROM pg_proc p
	  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
	   AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
	  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'bpext'
	 WHERE p.proname !~ '_[0-9]+_[0-9]+$'}))
{
	my ($name, $args) = split /\|/, $row, 2;
	$args = join ', ', grep { !/^OUT / } split /, /, $args;    # the input arguments
	$function_args{$name} = $args;
}

my %wait_event = map { $_ => 1 } slurp_tree('src/wait_events.c') =~ /"(Bpext\w+)"/g;
my %state_number = slurp_tree('src/tier_control.h') =~ /\bBPEXT_STATE_(\w+)\s*=\s*(\d+)/g;
my %state_text = slurp_tree('src/tier_control.c') =~ /case\s+BPEXT_STATE_(\w+):\s*return\s+"([^"]+)"/g;
my %state_description = map { $state_number{$_} => $state_text{$_} } keys %state_number;
ok(keys %wait_event >= 1 && keys %state_description >= 1,
	'the wait events and states are found in the sources');

my (%views_documented, %functions_documented, $waits_tables, $states_tables);
for my $file (@files)
{
	my $doc = $docs{$file};
	for my $table (@{ $doc->{tables} })
	{
		my $marker = $table->{marker} // next;
		my $where = at($doc, $table->{line});
		if ($marker =~ /^columns of (\w+)$/)
		{
			my $view = $1;
			$views_documented{$view} = 1;
			if (!$view_columns{$view})
			{
				fail("$where: $view is a view of the extension");
				next;
			}
			my %named = map { $_ => 1 } map { $_->[0] =~ /`([a-z_][a-z0-9_]*)`/g } @{ $table->{rows} };
			my %real = map { $_ => 1 } @{ $view_columns{$view} };
			no_problems(
				[
					(map { "$_: a column of $view with no row" } grep { !$named{$_} } @{ $view_columns{$view} }),
					(map { "$_: not a column of $view" } grep { !$real{$_} } sort keys %named) ],
				"$where: the table of $view names its columns");
		}
		elsif ($marker eq 'functions')
		{
			my @bad;
			for my $row (@{ $table->{rows} })
			{
				my ($name, $args) = $row->[0] =~ /^`(\w+)\((.*)\)`$/;
				if (!defined $name || !exists $function_args{$name})
				{
					push @bad, "$row->[0]: no such function";
					next;
				}
				$functions_documented{$name} = 1;
				$args =~ s/\s+DEFAULT\s+(?:[^,()']|'[^']*'|\([^)]*\))*//g;
				push @bad, "$name($args): the function takes ($function_args{$name})"
				  unless $args eq $function_args{$name};
			}
			push @bad, map { "$_: no row" } grep { !$functions_documented{$_} } sort keys %function_args;
			no_problems(\@bad, "$where: the functions table is every function and its arguments");
		}
		elsif ($marker eq 'wait events')
		{
			$waits_tables++;
			my %named = map { $_->[0] =~ /^`(\w+)`$/ ? ($1 => 1) : () } @{ $table->{rows} };
			no_problems(
				[
					(map { "$_: a wait event with no row" } grep { !$named{$_} } sort keys %wait_event),
					(map { "$_: not a wait event" } grep { !$wait_event{$_} } sort keys %named) ],
				"$where: the wait events table is src/wait_events.c's");
		}
		elsif ($marker eq 'states')
		{
			$states_tables++;
			my %named = map { $_->[0] => ($_->[1] =~ s/^`(.*)`$/$1/r) } @{ $table->{rows} };
			is_deeply(\%named, \%state_description,
				"$where: the states table is src/tier_control.h's and .c's");
		}
	}
	my @bad;
	for my $span (@{ $doc->{code_spans} })
	{
		push @bad, at($doc, $span->{line}) . ": $span->{text} is not a wait event"
		  if $span->{text} =~ /^Bpext[A-Z]\w*$/ && !$wait_event{ $span->{text} };
	}
	no_problems(\@bad, "$file: every wait event named exists");
}
no_problems([ grep { !$views_documented{$_} } sort keys %view_columns ],
	'every view of the extension has a table of its columns');
ok($waits_tables && $states_tables, 'the wait events and states have their tables');
is($node->safe_psql('postgres', 'SELECT state_description FROM bpext_configuration'),
	$state_description{ $state_number{ENABLED} },
	'the description of the enabled state is the one the code gives');

# --- the SQL examples ---------------------------------------------------------

# psql's aligned output as the documents show it: [ header cells ], [ rows ].
sub parse_aligned
{
	my ($text) = @_;
	my @lines = grep { /\S/ } split /\n/, $text;
	return unless @lines >= 2 && $lines[1] =~ /^-+(?:\+-+)*$/;
	my @rows;
	for my $line (@lines[ 2 .. $#lines ])
	{
		last if $line =~ /^\(\d+ rows?\)$/;
		push @rows, [ map { s/^\s+|\s+$//gr } split /\|/, $line, -1 ];
	}
	return ([ map { s/^\s+|\s+$//gr } split /\|/, $lines[0], -1 ], \@rows);
}

my $quoted_tier = $tier =~ s/'/''/gr;
for my $file (@files)
{
	my $doc = $docs{$file};
	for my $block (@{ $doc->{blocks} })
	{
		my $where = at($doc, $block->{line});
		if ($block->{info} eq 'sql')
		{
			if (($block->{marker} // '') =~ /^skip:\s*\S/)
			{
				note("$where: not run ($block->{marker})");
				next;
			}
			my $sql = $block->{body};
			$sql =~ s{'/mnt/nvme/pg\.bpe'}{'$quoted_tier'}g;
			$sql =~ s/'(\d+)GB'/'$1MB'/g;

			# A known state before each block: the tier enabled, and the
			# extension there, but for a block that creates it.
			$node->safe_psql('postgres', 'CREATE EXTENSION IF NOT EXISTS bpext');
			$node->safe_psql('postgres', "SELECT bpext_enable('$quoted_tier', '64MB')");
			$node->safe_psql('postgres', 'DROP EXTENSION bpext')
			  if $sql =~ /^\s*CREATE EXTENSION bpext\b/mi;

			my ($ret, $out, $err) = $node->psql('postgres', $sql, on_error_stop => 1);
			is($ret, 0, "$where: the sql example runs") or diag($err);
			$node->safe_psql('postgres', 'CREATE EXTENSION IF NOT EXISTS bpext');
		}
		elsif ($block->{after_sql} && $block->{info} =~ /^(?:|text)$/)
		{
			my ($header, $rows) = parse_aligned($block->{body});
			next unless $header;
			my @statements = grep { /\S/ } split /;\s*(?:--[^\n]*)?(?:\n|$)/, $block->{after_sql}{body};
			my $last = $statements[-1];
			$last =~ s{'/mnt/nvme/pg\.bpe'}{'$quoted_tier'}g;
			$last =~ s/'(\d+)GB'/'$1MB'/g;
			my ($ret, $out, $err) = $node->psql('postgres', $last,
				extra_params => [ '-P', 'tuples_only=off', '-P', 'footer=off' ]);
			my @lines = split /\n/, $out;
			my @got_header = split /\|/, (shift(@lines) // ''), -1;
			is_deeply(\@got_header, $header, "$where: the output shown has the query's columns")
			  or diag($err);
			if (($block->{marker} // '') eq 'exact output')
			{
				is_deeply([ map { [ split /\|/, $_, -1 ] } @lines ], $rows,
					"$where: the output shown is the query's");
			}
		}
	}
}

$node->stop;
done_testing();


# Copyright (c) 2026, bpext developers

=pod

=head1 NAME

BpextDocs - read bpext's Markdown documents for the test that keeps them true

=head1 SYNOPSIS

  use BpextDocs;

  my $doc = bpext_doc_read($top, 'doc/monitoring.md');
  for my $block (@{ $doc->{blocks} }) { ... }     # fenced code blocks
  for my $table (@{ $doc->{tables} }) { ... }     # tables
  my $ok = $doc->{anchors}{'states-of-the-tier'};

=head1 DESCRIPTION

A small reader of the Markdown the documents use, not a general one:
fenced code blocks, pipe tables, ATX headings, inline links and images,
and inline code spans.  A marker, an HTML comment of its own line

  <!-- doc-test: WHAT -->

belongs to the table or fenced block right after it (blank lines
between are allowed); a marker followed by anything else is recorded in
stray_markers, so that a marker cannot silently stop applying.

Heading anchors are GitHub's: the heading's text in lower case, without
Markdown, every character that is not a letter, digit, underscore, hyphen
or space removed, spaces made hyphens; a repeated anchor gets -1, -2, ...

=cut

package BpextDocs;

use strict;
use warnings;

use Exporter 'import';

our @EXPORT = qw(bpext_doc_read bpext_doc_slug bpext_doc_cells);

=pod

=over

=item bpext_doc_slug(heading text)

The anchor GitHub gives a heading.

=cut

sub bpext_doc_slug
{
	my ($text) = @_;
	$text = lc $text;
	$text =~ s/!?\[([^\]]*)\]\([^)]*\)/$1/g;
	$text =~ s/<[^>]*>//g;
	$text =~ s/[^\w\- ]//g;
	$text =~ s/ /-/g;
	return $text;
}

=pod

=item bpext_doc_cells(table row)

The cells of a pipe-table row, trimmed.  A pipe inside a code span does not
split cells.

=cut

sub bpext_doc_cells
{
	my ($row) = @_;
	$row =~ s/^\s*\|//;
	$row =~ s/\|\s*$//;
	my @cells;
	my $cell = '';
	my $in_code = 0;
	for my $ch (split //, $row)
	{
		$in_code = !$in_code if $ch eq '`';
		if ($ch eq '|' && !$in_code)
		{
			push @cells, $cell;
			$cell = '';
			next;
		}
		$cell .= $ch;
	}
	push @cells, $cell;
	s/^\s+|\s+$//g for @cells;
	return \@cells;
}

=pod

=item bpext_doc_read(top, file)

Read top/file and return a hash reference:

  file           the file, relative to top
  headings       [ { text, anchor, line } ]
  anchors        { anchor => line }
  blocks         [ { info, body, line, marker, after_sql } ]: fenced code
                 blocks; marker is the doc-test marker's text or undef;
                 after_sql is the sql block this one follows directly
                 (nothing but blank lines and a marker between), if any
  tables         [ { marker, line, header, rows } ]: header and rows are
                 array references of cells; the separator row is left out
  links          [ { target, line, image } ]: inline links and images
                 outside code
  code_spans     [ { text, line } ]: inline code outside fenced blocks
  stray_markers  [ { text, line } ]: markers followed by neither a table
                 nor a fenced block

=cut

sub bpext_doc_read
{
	my ($top, $file) = @_;
	open my $fh, '<:encoding(UTF-8)', "$top/$file" or die "$top/$file: $!";
	my @lines = <$fh>;
	close $fh;
	chomp @lines;

	my %doc = (
		file => $file,
		headings => [],
		anchors => {},
		blocks => [],
		tables => [],
		links => [],
		code_spans => [],
		stray_markers => []);
	my %slug_seen;
	my ($fence, $block, $marker, $prev_block);
	my @prose;    # [ line number, text ] outside fenced blocks

	for (my $i = 0; $i < @lines; $i++)
	{
		my $line = $lines[$i];
		my $ln = $i + 1;

		if (defined $fence)
		{
			if ($line =~ /^\s*\Q$fence\E[`~]*\s*$/)
			{
				$block->{body} = join("\n", @{ $block->{lines} });
				delete $block->{lines};
				push @{ $doc{blocks} }, $block;
				$prev_block = $block;
				undef $fence;
				next;
			}
			push @{ $block->{lines} }, $line;
			next;
		}
		if ($line =~ /^\s*(```+|~~~+)\s*([\w+-]*)/)
		{
			$fence = $1;
			$block = {
				info => lc $2,
				line => $ln,
				marker => $marker ? $marker->{text} : undef,
				after_sql =>
				  ($prev_block && $prev_block->{info} eq 'sql') ? $prev_block : undef,
				lines => [] };
			undef $marker;
			next;
		}
		if ($line =~ /^<!--\s*doc-test:\s*(.*?)\s*-->\s*$/)
		{
			push @{ $doc{stray_markers} }, $marker if $marker;
			$marker = { text => $1, line => $ln };
			next;
		}
		next if $line =~ /^\s*$/;
		undef $prev_block;

		if ($line =~ /^\s*\|/)
		{
			my @rows;
			my $start = $ln;
			while ($i < @lines && $lines[$i] =~ /^\s*\|/)
			{
				push @prose, [ $i + 1, $lines[$i] ];
				push @rows, bpext_doc_cells($lines[$i])
				  unless $lines[$i] =~ /^\s*\|[\s:|-]+\|\s*$/;
				$i++;
			}
			$i--;
			push @{ $doc{tables} }, {
				marker => $marker ? $marker->{text} : undef,
				line => $start,
				header => shift @rows,
				rows => \@rows };
			undef $marker;
			next;
		}
		if ($marker)
		{
			push @{ $doc{stray_markers} }, $marker;
			undef $marker;
		}
		if ($line =~ /^(#{1,6})\s+(.+?)\s*#*\s*$/)
		{
			my $anchor = bpext_doc_slug($2);
			my $n = $slug_seen{$anchor}++;
			$anchor .= "-$n" if $n;
			push @{ $doc{headings} }, { text => $2, anchor => $anchor, line => $ln };
			$doc{anchors}{$anchor} = $ln;
		}
		push @prose, [ $ln, $line ];
	}
	push @{ $doc{stray_markers} }, $marker if $marker;
	die "$file: fenced block from line $block->{line} is not closed\n"
	  if defined $fence;

	# Links and code spans, over the prose joined (a link's text may run
	# over lines).  Code spans are blanked out before links are looked for.
	my $text = '';
	my @line_at;    # offset in $text -> line number, per line start
	for my $p (@prose)
	{
		push @line_at, [ length $text, $p->[0] ];
		$text .= $p->[1] . "\n";
	}
	my $line_of = sub {
		my ($pos) = @_;
		my $ln = 1;
		for my $l (@line_at)
		{
			last if $l->[0] > $pos;
			$ln = $l->[1];
		}
		return $ln;
	};
	while ($text =~ /(`+)(.+?)\1/gs)
	{
		my ($span, $start) = ($2, $-[0]);
		$span =~ s/^ (.*) $/$1/s;
		$span =~ s/\s*\n\s*/ /g;
		push @{ $doc{code_spans} }, { text => $span, line => $line_of->($start) };
	}
	(my $nocode = $text) =~ s/(`+)(.+?)\1/' ' x length($&)/gse;
	while ($nocode =~ /(!?)\[([^\]]*)\]\(([^)\s]+)(?:\s+"[^"]*")?\)/gs)
	{
		push @{ $doc{links} },
		  { image => $1 ? 1 : 0, target => $3, line => $line_of->($-[0]) };
	}
	return \%doc;
}

=pod

=back

=cut

1;


# Copyright (c) 2026, bpext developers

=pod

=head1 NAME

BpextEveryNode - give every PostgreSQL::Test::Cluster node a tier of its own

=head1 SYNOPSIS

  TEMP_CONFIG=bpext.conf prove --exec 'perl -I src/test/perl -I test/perl -MBpextEveryNode' t/...

=head1 DESCRIPTION

PostgreSQL's own TAP suites (src/test/recovery) create their nodes with
PostgreSQL::Test::Cluster, which appends $TEMP_CONFIG to every node's
postgresql.conf: that is how test/pg_recovery_with_bpext.sh preloads bpext
everywhere.  bpext.path must differ per node (a tier file is locked by the
server using it), and a standby made from a backup inherits its primary's
postgresql.conf, so this module wraps init and init_from_backup to append
a bpext.path inside the node's own base directory.

When $BPEXT_IO_METHODS lists io_methods (PostgreSQL 18 and later), each
node also gets one of them in turn, starting at a place that depends on the
test file's number, so that across the suite every io_method runs primaries
and standbys, alone and mixed.  Each choice is appended to
$BPEXT_IO_METHODS_LOG ("test node io_method") if that is set.

It changes nothing else of the suites.

=cut

package BpextEveryNode;

use strict;
use warnings;

use File::Basename;
use PostgreSQL::Test::Cluster;

my @io_methods = split(' ', $ENV{BPEXT_IO_METHODS} // '');
my $nodes_made = (basename($0) =~ /^(\d+)/ ? $1 : 0);

# The io_method of the next node, noted in $BPEXT_IO_METHODS_LOG.
sub next_io_method
{
	my ($node) = @_;
	my $io_method = $io_methods[ $nodes_made++ % @io_methods ];
	if (my $log = $ENV{BPEXT_IO_METHODS_LOG})
	{
		open(my $fh, '>>', $log) or die "could not open $log: $!";
		print $fh basename($0) . ' ' . $node->name . " $io_method\n";
		close $fh;
	}
	return $io_method;
}

for my $method (qw(init init_from_backup))
{
	no strict 'refs';
	no warnings 'redefine';
	my $original = \&{"PostgreSQL::Test::Cluster::$method"};
	*{"PostgreSQL::Test::Cluster::$method"} = sub {
		my $self = shift;
		my @result = $original->($self, @_);
		$self->append_conf('postgresql.conf',
			"bpext.path = '" . $self->basedir . "/bpext.tier'\n");
		$self->append_conf('postgresql.conf',
			'io_method = ' . next_io_method($self) . "\n")
		  if @io_methods;
		return wantarray ? @result : $result[0];
	};
}

1;

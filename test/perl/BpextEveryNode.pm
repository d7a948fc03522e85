
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
a bpext.path inside the node's own base directory.  It changes nothing
else of the suites.

=cut

package BpextEveryNode;

use strict;
use warnings;

use PostgreSQL::Test::Cluster;

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
		return wantarray ? @result : $result[0];
	};
}

1;


# Copyright (c) 2026, bpext developers

=pod

=head1 NAME

BpextPatroni - a Patroni cluster on loopback for bpext's HA suite

=head1 SYNOPSIS

  use BpextPatroni;

  my $why = BpextPatroni::unavailable();
  plan skip_all => $why if $why;

  my $etcd = BpextPatroni::Etcd->start($basedir);
  my @nodes = map { BpextPatroni::Node->new(name => "node$_", ...) } 1 .. 3;
  $_->start for @nodes;
  my $leader = BpextPatroni::wait_for_leader(\@nodes);
  $leader->safe_psql('postgres', 'SELECT 1');

=head1 DESCRIPTION

Runs Debian's own etcd and Patroni of the release the major runs on
(Debian 12: etcd 3.4 and Patroni 3.0; trixie: 3.5 and 4.0; sid: 3.5 and
4.1), which test/install-deps.sh unpacks under /var/tmp/bpext-patroni
instead of installing them, so that no etcd or Patroni service is started
on the machine.  One configuration serves every version: Patroni talks to
etcd through its v3 API (the etcd3 section; etcd 3.5 no longer serves the
v2 API by default), and the configuration uses no key Patroni 4 removed.  Everything listens on 127.0.0.1, on ports
PostgreSQL::Test::Cluster hands out, and everything lives under the test's
own directory.

A Node has psql and safe_psql with PostgreSQL::Test::Cluster's calling
conventions, so the helpers of BpextTest that take a node (bpext_config,
bpext_stats, bpext_amcheck, bpext_table_hashes, ...) work on it.

=cut

package BpextPatroni;

use strict;
use warnings;

use Carp;
use File::Path qw(make_path);
use HTTP::Tiny;
use IPC::Run ();
use JSON::PP ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More ();
use Time::HiRes qw(usleep time);

our $DIR = $ENV{BPEXT_PATRONI_DIR} // '/var/tmp/bpext-patroni';
our $PYTHON = '/usr/bin/python3';

# The logs of the etcd and Patroni processes started, shown when a wait
# for the cluster gives up.
my @logs;

# Why the suite cannot run here, or undef.
sub unavailable
{
	return "etcd and Patroni are not unpacked in $DIR (test/install-deps.sh does that)"
	  unless -x "$DIR/usr/bin/etcd" && -f "$DIR/usr/bin/patroni";
	return;
}

# The versions of Patroni and etcd, as "patroni 4.0.7, etcd 3.5.16"; dies
# if Patroni cannot run or cannot load its etcd v3 client (sid's patroni
# package no longer depends on python3-etcd, which that client needs).
sub versions
{
	my ($out, $err, $etcd_out);
	IPC::Run::run([ $PYTHON, "$DIR/usr/bin/patroni", '--version' ],
		'>', \$out, '2>', \$err, init => \&_python_env)
	  or croak "Patroni does not run: $err";
	chomp $out;
	IPC::Run::run([ $PYTHON, '-c', 'import patroni.dcs.etcd3' ],
		'2>', \$err, init => \&_python_env)
	  or croak "Patroni cannot load its etcd v3 client: $err";
	IPC::Run::run([ "$DIR/usr/bin/etcd", '--version' ],
		'>', \$etcd_out, '2>', \$err)
	  or croak "etcd does not run: $err";
	my ($etcd) = $etcd_out =~ /^etcd Version: (\S+)/m;
	return "$out, etcd " . ($etcd // 'unknown');
}

sub _python_env
{
	$ENV{PYTHONPATH} = "$DIR/usr/lib/python3/dist-packages";
	return;
}

sub _http_json
{
	my ($url) = @_;
	my $r = HTTP::Tiny->new(timeout => 5)->get($url);
	# Patroni answers 503 on /patroni while PostgreSQL is not running, with
	# the same JSON body.
	return unless $r->{content} && $r->{content} =~ /^\s*\{/;
	return eval { JSON::PP::decode_json($r->{content}) };
}

# SIGTERM to the child an object started ($obj->{handle}), SIGKILL if it
# is still there after grace seconds.
sub _stop_child
{
	my ($obj, $grace) = @_;
	return unless $obj->{handle};
	$obj->{handle}->kill_kill(grace => $grace);
	delete $obj->{handle};
	return;
}

# Wait until exactly one node says it is the running leader; return it.
sub wait_for_leader
{
	my ($nodes, $timeout) = @_;
	my $deadline = time() + ($timeout // 120);
	while (time() < $deadline)
	{
		my @leaders = grep { $_->is_running_leader } @$nodes;
		return $leaders[0] if @leaders == 1;
		usleep(250_000);
	}
	show_logs();
	croak "no single running leader after the timeout";
}

# The last lines of every etcd and Patroni log, as test diagnostics.
sub show_logs
{
	for my $log (@logs)
	{
		next unless -f $log;
		my @lines = split /\n/, slurp_file($log);
		splice(@lines, 0, @lines - 40) if @lines > 40;
		Test::More::diag(join("\n", "--- $log", @lines));
	}
	return;
}

=pod

=head2 BpextPatroni::Etcd

One etcd member: start($basedir), url, stop.

=cut

package BpextPatroni::Etcd;

use Carp;
use Time::HiRes qw(usleep time);

sub start
{
	my ($class, $basedir) = @_;
	my $self = bless {
		client_port => PostgreSQL::Test::Cluster::get_free_port(),
		peer_port => PostgreSQL::Test::Cluster::get_free_port(),
		dir => "$basedir/etcd",
		log => "$basedir/etcd.log",
	}, $class;
	push @logs, $self->{log};
	my $client = "http://127.0.0.1:$self->{client_port}";
	my $peer = "http://127.0.0.1:$self->{peer_port}";
	$self->{handle} = IPC::Run::start(
		[
			"$BpextPatroni::DIR/usr/bin/etcd",
			'--name' => 'bpext',
			'--data-dir' => $self->{dir},
			'--listen-client-urls' => $client,
			'--advertise-client-urls' => $client,
			'--listen-peer-urls' => $peer,
			'--initial-advertise-peer-urls' => $peer,
			'--initial-cluster' => "bpext=$peer",
			'--initial-cluster-state' => 'new',
		],
		'<', \undef, '>', $self->{log}, '2>&1');
	my $deadline = time() + 30;
	while (time() < $deadline)
	{
		my $h = BpextPatroni::_http_json("$client/health");
		return $self if $h && ($h->{health} // '') eq 'true';
		usleep(100_000);
	}
	BpextPatroni::show_logs();
	croak "etcd did not become healthy; see $self->{log}";
}

sub host { my ($self) = @_; return "127.0.0.1:$self->{client_port}"; }

sub stop
{
	my ($self) = @_;
	BpextPatroni::_stop_child($self, 30);
	return;
}

=pod

=head2 BpextPatroni::Node

One Patroni member with its PostgreSQL.  new(name =>, basedir =>, etcd =>,
bindir =>, parameters => { ... }, dcs_parameters => { ... }) writes its
configuration; start, stop (Patroni stops PostgreSQL cleanly), kill9
(Patroni and the postmaster, SIGKILL), role, is_running_leader,
postmaster_pid, data_dir, log_dir, logfile, log_offset, psql, safe_psql, patronictl,
and cleanup (stop, and an immediate stop of a PostgreSQL Patroni left
behind).

=cut

package BpextPatroni::Node;

use Carp;
use JSON::PP ();
use Time::HiRes qw(usleep time);

sub new
{
	my ($class, %a) = @_;
	my $base = "$a{basedir}/$a{name}";
	File::Path::make_path("$base/log");
	chmod 0700, $base;
	my $self = bless {
		name => $a{name},
		base => $base,
		port => PostgreSQL::Test::Cluster::get_free_port(),
		api_port => PostgreSQL::Test::Cluster::get_free_port(),
		config => "$base/patroni.yml",
		patroni_log => "$base/patroni.log",
	}, $class;
	$self->{data_dir} = "$base/data";
	push @logs, $self->{patroni_log};

	my %parameters = (
		unix_socket_directories => $base,
		logging_collector => 'on',
		log_directory => "$base/log",
		log_filename => 'postgresql.log',
		log_rotation_age => 0,
		log_rotation_size => 0,
		%{ $a{parameters} // {} });
	my $config = {
		scope => 'bpext',
		namespace => '/bpext-test/',
		name => $a{name},
		log => { level => 'INFO' },
		restapi => {
			listen => "127.0.0.1:$self->{api_port}",
			connect_address => "127.0.0.1:$self->{api_port}",
		},
		etcd3 => { host => $a{etcd}->host },
		bootstrap => {
			dcs => {
				# Fast enough for a test, within Patroni's rule that
				# loop_wait + 2 * retry_timeout <= ttl.
				ttl => 20,
				loop_wait => 2,
				retry_timeout => 5,
				maximum_lag_on_failover => 1024 * 1024 * 1024,
				postgresql => {
					use_pg_rewind => JSON::PP::true,
					use_slots => JSON::PP::true,
					parameters => $a{dcs_parameters} // {},
				},
			},
			initdb => [ 'data-checksums', { encoding => 'UTF8' }, { locale => 'C' } ],
			pg_hba => [
				'local all all trust',
				'host all all 127.0.0.1/32 trust',
				'host replication all 127.0.0.1/32 trust',
			],
		},
		postgresql => {
			listen => "127.0.0.1:$self->{port}",
			connect_address => "127.0.0.1:$self->{port}",
			data_dir => $self->{data_dir},
			bin_dir => $a{bindir},
			# Replicas are cloned without waiting for a spread checkpoint.
			basebackup => [ { checkpoint => 'fast' } ],
			pgpass => "$base/pgpass",
			authentication => {
				superuser => { username => 'postgres', password => 'unused' },
				replication => { username => 'replicator', password => 'unused' },
				rewind => { username => 'postgres', password => 'unused' },
			},
			parameters => \%parameters,
		},
	};
	# JSON is YAML.
	open(my $fh, '>', $self->{config}) or croak "$self->{config}: $!";
	print $fh JSON::PP->new->pretty->canonical->encode($config);
	close $fh;
	return $self;
}

sub name { my ($self) = @_; return $self->{name}; }
sub data_dir { my ($self) = @_; return $self->{data_dir}; }
sub port { my ($self) = @_; return $self->{port}; }
sub log_dir { my ($self) = @_; return "$self->{base}/log"; }
sub logfile { my ($self) = @_; return "$self->{base}/log/postgresql.log"; }

sub log_offset
{
	my ($self) = @_;
	return -s $self->logfile // 0;
}

sub start
{
	my ($self) = @_;
	croak "$self->{name} already started" if $self->{handle};
	open(my $log, '>>', $self->{patroni_log}) or croak "$self->{patroni_log}: $!";
	$self->{handle} = IPC::Run::start(
		[ $BpextPatroni::PYTHON, "$BpextPatroni::DIR/usr/bin/patroni", $self->{config} ],
		'<', \undef, '>', $log, '2>&1',
		init => \&BpextPatroni::_python_env);
	close $log;
	return;
}

# Patroni stops PostgreSQL (fast shutdown) when it gets SIGTERM.
sub stop
{
	my ($self) = @_;
	BpextPatroni::_stop_child($self, 90);
	return;
}

# Whatever the test did, leave no server behind.
sub cleanup
{
	my ($self) = @_;
	$self->stop;
	system('pg_ctl', '-D', $self->{data_dir}, '-m', 'immediate', 'stop')
	  if $self->postmaster_pid && kill(0, $self->postmaster_pid);
	return;
}

# A machine that dies: Patroni and the postmaster, SIGKILL.  The
# postmaster's children notice its death and exit.
sub kill9
{
	my ($self) = @_;
	my $pm = $self->postmaster_pid;
	$self->{handle}->signal('KILL');
	$self->{handle}->finish;
	delete $self->{handle};
	kill 'KILL', $pm if $pm;
	return $pm;
}

sub postmaster_pid
{
	my ($self) = @_;
	open(my $fh, '<', "$self->{data_dir}/postmaster.pid") or return;
	my $pid = <$fh>;
	close $fh;
	chomp $pid if defined $pid;
	return $pid;
}

sub api
{
	my ($self) = @_;
	return BpextPatroni::_http_json("http://127.0.0.1:$self->{api_port}/patroni") // {};
}

sub role
{
	my ($self) = @_;
	return $self->api->{role} // 'unknown';
}

sub is_running_leader
{
	my ($self) = @_;
	my $api = $self->api;
	return ($api->{state} // '') eq 'running'
	  && ($api->{role} // '') =~ /^(master|primary)$/
	  && $self->psql_ok('SELECT NOT pg_is_in_recovery()');
}

sub is_running_replica
{
	my ($self) = @_;
	my $api = $self->api;
	return ($api->{state} // '') eq 'running'
	  && ($api->{role} // '') eq 'replica'
	  && $self->psql_ok('SELECT pg_is_in_recovery()');
}

sub psql_ok
{
	my ($self, $sql) = @_;
	my ($ret, $out) = $self->psql('postgres', $sql);
	return $ret == 0 && $out eq 't';
}

# Wait until the node runs as a streaming replica.
sub wait_replica
{
	my ($self, $timeout) = @_;
	my $deadline = time() + ($timeout // 120);
	while (time() < $deadline)
	{
		return 1 if $self->is_running_replica;
		usleep(250_000);
	}
	return 0;
}

sub psql
{
	my ($self, $db, $sql) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run(
		[
			'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-h', '127.0.0.1',
			'-p', $self->{port}, '-U', 'postgres', '-d', $db, '-f', '-'
		],
		'<', \$sql, '>', \$out, '2>', \$err);
	my $ret = $? >> 8;
	chomp $out;
	chomp $err;
	return wantarray ? ($ret, $out, $err) : $ret;
}

sub safe_psql
{
	my ($self, $db, $sql) = @_;
	my ($ret, $out, $err) = $self->psql($db, $sql);
	croak "psql on $self->{name} failed ($ret): $err\nquery: $sql" if $ret != 0;
	return $out;
}

sub patronictl
{
	my ($self, @args) = @_;
	my ($out, $err);
	my $ok = IPC::Run::run(
		[ $BpextPatroni::PYTHON, "$BpextPatroni::DIR/usr/bin/patronictl",
		  '-c', $self->{config}, @args ],
		'<', \undef, '>', \$out, '2>', \$err,
		init => \&BpextPatroni::_python_env);
	croak "patronictl @args failed: $out$err" unless $ok;
	return $out;
}

1;

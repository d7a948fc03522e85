#!/usr/bin/env bash
# The bpext demo: first the gain, pgbench select-only on an emulated slow
# data disk without and with the tier (the bench harness, test/bench/run.sh,
# at a small size); then a throwaway cluster with tiny shared buffers and
# the tier on, pgbench against it, what the tier did, and a consistency
# check.  Ends with both throughputs and their ratio.  Run as root on
# Debian 12.  Everything it creates is removed at the end.  Where the slow
# disk cannot be emulated (no root, no loop device or cgroup controller),
# it says why and runs the rest.
#
#   test/demo.sh [scale] [seconds]    (of the second part; default 20 and 10)
#
# PG_MAJOR picks the PostgreSQL major (default 17);
# one Debian 12 does not ship runs in a chroot of the Debian release that
# does (test/pg_chroot.sh; its first use takes a few minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
. test/pg_major.sh
bpext_usage_if_asked "$0" "$@"

major=${PG_MAJOR:-17}
bpext_check_majors "$major"
if [ "$major" = 16 ]; then
    echo "demo: PostgreSQL 16 comes from the package registries for the tests only (test/pg_major.sh); the demo runs 15, 17, 18 or 19" >&2
    exit 2
fi
if ! bpext_major_is_native "$major"; then
    exec test/pg_chroot.sh "$major" /bpext/test/demo.sh "$@"
fi

scale=${1:-20}
seconds=${2:-10}
port=5491
bin=/usr/lib/postgresql/$major/bin

PG_MAJOR=$major test/install-deps.sh
work=$(mktemp -d /tmp/bpext-demo.XXXXXX)
chmod 755 "$work"
as_pg() { runuser -u postgres -- "$@"; }
cleanup() {
    as_pg $bin/pg_ctl -D "$work/run/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

# Build in a private copy: the tree is shared with other majors' builds.
cp -r . "$work/build"
make -C "$work/build" -s PG_CONFIG=$bin/pg_config clean
make -C "$work/build" -s PG_CONFIG=$bin/pg_config
make -C "$work/build" -s PG_CONFIG=$bin/pg_config install

echo "== the gain: select-only on an emulated 1000-IOPS data disk, 256 MB of RAM, without and with the tier"
set +o pipefail
test/bench/run.sh --no-build --configs A,B --ab-rounds 1 --workloads select --scale 30 \
    --duration 15 --cold-seconds 0 --ram 256MB --shared-buffers 32MB \
    --progress-every 5 --results "$work/bench" 2>&1 |
    grep --line-buffered -E "== [AB]:|progress:|^bench:|select \(main\):" |
    sed -u 's/^/   /'
bench_status=${PIPESTATUS[0]}
set -o pipefail
gain=""
if [ "$bench_status" -eq 0 ] && [ -f "$work/bench/results.md" ]; then
    gain=$(grep -m1 "B/A select-only" "$work/bench/results.md" |
        sed -E 's/.*: ([0-9.]+)x speed-up \(([0-9,]+) -> ([0-9,]+) TPS\).*/no tier: \2 TPS    tier: \3 TPS    ratio: \1x/')
fi

run=$work/run
mkdir "$run"
chown postgres "$run"

echo "== creating a throwaway PostgreSQL $major cluster in $run"
as_pg $bin/initdb -D "$run/data" -A trust >/dev/null
cat >> "$run/data/postgresql.conf" <<CONF
port = $port
unix_socket_directories = '$run'
listen_addresses = ''
shared_preload_libraries = 'bpext'
shared_buffers = 16MB
bpext.path = '$run/tier.bpe'
bpext.size = 1GB
CONF
as_pg $bin/pg_ctl -D "$run/data" -l "$run/server.log" -w start >/dev/null
psql() { as_pg $bin/psql -h "$run" -p $port -X -v ON_ERROR_STOP=1 -d postgres "$@"; }

psql -qc "CREATE EXTENSION bpext"
echo "== loading pgbench scale $scale ($((scale * 15)) MB) with shared_buffers = 16MB"
as_pg $bin/pgbench -h "$run" -p $port -i -q -s "$scale" postgres 2>&1 | tail -n 1
psql -qc "CHECKPOINT"

echo "== pgbench select-only, 2 clients, $seconds s"
as_pg $bin/pgbench -h "$run" -p $port -S -c 2 -j 2 -T "$seconds" -P 10 postgres \
    2>&1 | grep -E "^progress|^tps|^latency average"

echo "== pgbench TPC-B (updates), 2 clients, $seconds s"
as_pg $bin/pgbench -h "$run" -p $port -c 2 -j 2 -T "$seconds" -P 10 postgres \
    2>&1 | grep -E "^progress|^tps|^latency average"

echo "== tier configuration"
psql -x -c "SELECT path, state, state_description, current_size_in_kb,
                   allocated_pages, map_bytes_per_page FROM bpext_configuration"
echo "== tier counters"
psql -x -c "SELECT extension_page_reads, extension_page_writes,
                   extension_page_evictions, extension_allocated_pages,
                   hits, misses,
                   round(100.0 * hits / nullif(lookups, 0), 1) AS hit_percent,
                   crc_failures, io_errors FROM bpext_stats"
echo "== consistency: pgbench's balances, read through the tier"
psql -c "SELECT (SELECT sum(abalance) FROM pgbench_accounts) AS accounts,
                (SELECT sum(tbalance) FROM pgbench_tellers) AS tellers,
                (SELECT sum(bbalance) FROM pgbench_branches) AS branches,
                (SELECT sum(delta) FROM pgbench_history) AS history"
consistent=$(psql -Atc "SELECT (SELECT sum(abalance) FROM pgbench_accounts)
                             = (SELECT sum(delta) FROM pgbench_history)
                         AND (SELECT sum(tbalance) FROM pgbench_tellers)
                             = (SELECT sum(delta) FROM pgbench_history)")
if [ "$consistent" != "t" ]; then
    echo "demo: balances do not match the history" >&2
    exit 1
fi
reads=$(psql -Atc "SELECT extension_page_reads FROM bpext_stats")
if [ "$reads" -gt 0 ]; then
    echo "demo: the tier served $reads page reads that shared buffers missed"
else
    echo "demo: the tier served no reads" >&2
    exit 1
fi

echo "== the gain (pgbench select-only, scale 30, 15 s each, 1000-IOPS data disk, 256 MB of RAM)"
if [ -n "$gain" ]; then
    echo "$gain"
elif [ "$bench_status" -eq 2 ]; then
    echo "not measured: this machine cannot emulate the slow disk (see the bench's message above)"
else
    echo "demo: the slow-disk comparison failed (exit $bench_status)" >&2
    exit 1
fi

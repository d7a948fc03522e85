#!/usr/bin/env bash
# Instructions per transaction: what bpext costs a backend, counted rather
# than timed (timings drift on a shared machine; instruction counts do not).
#
#   test/bench/instructions.sh [--scale 5] [--transactions "500 2500"]
#                              [--workloads select,tpcb]
#
# One throwaway cluster, everything in shared buffers, run under
# valgrind's callgrind (every server process is counted separately; this
# machine's virtual CPU has no hardware counters for perf).  For each
# configuration (no bpext; bpext loaded, tier off; tier on) and workload,
# pgbench runs one client for each transaction count in --transactions;
# the client's backend's instruction count at the smaller count is
# subtracted from the one at the larger, which cancels connection start
# and exit, and divided by the difference in transactions.
#
# Runs as root (the server runs as postgres) against an installed bpext.
# Results go to test/bench/results/instructions-<time>/ (results.md,
# results.csv, the callgrind files).
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
. "$TOP/test/pg_major.sh"
MAJOR=${PG_MAJOR:-$(bpext_native_major || true)}
[ -n "$MAJOR" ] || { echo "instructions: set PG_MAJOR" >&2; exit 2; }
bpext_check_majors "$MAJOR" || exit 2
PGBIN=${PGBIN:-/usr/lib/postgresql/$MAJOR/bin}

SCALE=5
TRANSACTIONS="500 2500"
WORKLOADS=select,tpcb
PORT=5496
RESULTS=""

usage() {
    cat <<EOF
Usage: $0 [options]
  --scale N              pgbench scale; the database must fit in 256MB of shared buffers (default $SCALE)
  --transactions "A B"   the two transaction counts whose difference is measured (default "$TRANSACTIONS")
  --workloads LIST       of select,tpcb (default $WORKLOADS)
  --port N               server port (default $PORT)
  --results DIR          where results go (default test/bench/results/instructions-<time>)
EOF
}

while [ $# -gt 0 ]; do
    case "$1" in
        --scale) SCALE=$2; shift 2 ;;
        --transactions) TRANSACTIONS=$2; shift 2 ;;
        --workloads) WORKLOADS=$2; shift 2 ;;
        --port) PORT=$2; shift 2 ;;
        --results) RESULTS=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
done
read -r N1 N2 <<< "$TRANSACTIONS"
[[ $N1 =~ ^[0-9]+$ && $N2 =~ ^[0-9]+$ && $N2 -gt $N1 ]] ||
    { echo "instructions: --transactions needs two counts, the second larger" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "instructions: run as root" >&2; exit 2; }
command -v valgrind >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
[ -f "$("$PGBIN/pg_config" --pkglibdir)/bpext.so" ] ||
    { echo "instructions: bpext is not installed for PostgreSQL $MAJOR (make install)" >&2; exit 2; }

RESULTS=${RESULTS:-$HERE/results/instructions-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$RESULTS"
WORK=$(mktemp -d /var/tmp/bpext-instructions.XXXXXX)
chown postgres "$WORK"
DATA=$WORK/data
SERVER_PID=""

as_pg() { runuser -u postgres -- "$@"; }
psql_at() { as_pg "$PGBIN/psql" -X -h "$WORK" -p "$PORT" -Atq -v ON_ERROR_STOP=1 "$@" postgres; }

stop_server() {
    [ -f "$DATA/postmaster.pid" ] || return 0
    as_pg "$PGBIN/pg_ctl" -D "$DATA" -m fast -w -t 120 stop >/dev/null 2>&1 ||
        as_pg "$PGBIN/pg_ctl" -D "$DATA" -m immediate -w stop >/dev/null 2>&1 || true
    [ -z "$SERVER_PID" ] || wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
}
cleanup() {
    stop_server
    rm -rf "$WORK"
}
trap cleanup EXIT

PRISTINE=$WORK/pristine
as_pg "$PGBIN/initdb" -D "$DATA" -A trust >/dev/null
cat >> "$DATA/postgresql.conf" <<EOF
port = $PORT
listen_addresses = ''
unix_socket_directories = '$WORK'
shared_buffers = 256MB
autovacuum = off
max_wal_size = 4GB
checkpoint_timeout = 1h
jit = off
include_if_exists = 'bench.conf'
EOF
as_pg "$PGBIN/pg_ctl" -D "$DATA" -l "$WORK/init.log" -w start >/dev/null
as_pg "$PGBIN/pgbench" -h "$WORK" -p "$PORT" -i -q -s "$SCALE" postgres >/dev/null 2>&1
psql_at -c "VACUUM" -c "CHECKPOINT" >/dev/null
stop_server
mv "$DATA" "$PRISTINE"

# A configuration's server under callgrind, on its own copy of the
# dataset (no configuration prunes what another one's TPC-B left), every
# process counted in its own file from the start of PostgresMain (a
# forked process would otherwise carry the postmaster's counts); shared
# buffers filled before measuring.
start_config() {   # name
    local name=$1 i
    rm -rf "$DATA"
    cp -a "$PRISTINE" "$DATA"
    case $name in
        none) : > "$DATA/bench.conf" ;;
        off) printf '%s\n' "shared_preload_libraries = 'bpext'" "bpext.max_size = 512MB" \
                 "bpext.size = 0" > "$DATA/bench.conf" ;;
        on) rm -f "$WORK/tier"
            printf '%s\n' "shared_preload_libraries = 'bpext'" "bpext.max_size = 512MB" \
                 "bpext.size = 512MB" "bpext.path = '$WORK/tier'" \
                 "bpext.warm_restart = off" > "$DATA/bench.conf" ;;
    esac
    chown postgres "$DATA/bench.conf"
    CG=$RESULTS/callgrind-$name
    mkdir -p "$CG"
    chown postgres "$CG"
    as_pg valgrind --tool=callgrind --trace-children=yes --zero-before=PostgresMain \
        --callgrind-out-file="$CG/cg.%p" "$PGBIN/postgres" -D "$DATA" \
        > "$RESULTS/server-$name.log" 2>&1 &
    SERVER_PID=$!
    for i in $(seq 1 300); do
        psql_at -c "SELECT 1" >/dev/null 2>&1 && break
        sleep 1
    done
    psql_at -c "CREATE EXTENSION IF NOT EXISTS pg_prewarm" >/dev/null
    psql_at -c "SELECT sum(pg_prewarm(c.oid)) FROM pg_class c
                 WHERE c.relname LIKE 'pgbench_%' AND c.relkind IN ('r', 'i')" >/dev/null
    if [ "$name" = on ]; then
        psql_at -c "CREATE EXTENSION IF NOT EXISTS bpext" >/dev/null
        for i in $(seq 1 120); do
            [ "$(psql_at -c "SELECT state FROM bpext_configuration")" = 5 ] && break
            sleep 1
        done
    fi
}

# Instructions of the backend that served one pgbench run of n
# transactions: the new callgrind file with the most instructions (pgbench
# also opens a short connection of its own to read the scale).
backend_instructions() {   # workload n
    local wl=$1 n=$2 before after f max=0 v args=()
    [ "$wl" = select ] && args=(-S)
    before=$(ls "$CG")
    as_pg "$PGBIN/pgbench" -h "$WORK" -p "$PORT" -n -c 1 -t "$n" -M prepared \
        "${args[@]}" postgres > "$RESULTS/pgbench-$CUR-$wl-$n.log" 2>&1
    sleep 2    # the backends write their counts as they exit
    after=$(ls "$CG")
    for f in $(comm -13 <(echo "$before") <(echo "$after")); do
        v=$(awk '/^totals:/ { print $2 }' "$CG/$f")
        [ -n "$v" ] && [ "$v" -gt "$max" ] && max=$v
    done
    echo "$max"
}

echo "workload,config,instructions_per_transaction" > "$RESULTS/results.csv"
declare -A PER_TXN
for CUR in none off on; do
    echo "== $CUR"
    start_config "$CUR"
    for wl in ${WORKLOADS//,/ }; do
        a=$(backend_instructions "$wl" "$N1")
        b=$(backend_instructions "$wl" "$N2")
        per=$(( (b - a) / (N2 - N1) ))
        PER_TXN[$CUR,$wl]=$per
        echo "$wl,$CUR,$per" >> "$RESULTS/results.csv"
        echo "   $wl: $per instructions per transaction ($a at $N1, $b at $N2)"
    done
    stop_server
done

{
    echo "# Instructions per transaction (callgrind, one pgbench client, everything in shared buffers)"
    echo
    echo "PostgreSQL $("$PGBIN/postgres" --version | awk '{ print $3 }'), bpext $(git -C "$TOP" describe --always --dirty 2>/dev/null || echo unknown), pgbench scale $SCALE, -M prepared, the difference between $N2 and $N1 transactions."
    echo
    echo "| workload | no bpext | bpext loaded, tier off | tier on | off / none | on / none |"
    echo "|---|---|---|---|---|---|"
    for wl in ${WORKLOADS//,/ }; do
        awk -v w="$wl" -v a="${PER_TXN[none,$wl]}" -v b="${PER_TXN[off,$wl]}" -v c="${PER_TXN[on,$wl]}" \
            'BEGIN { printf "| %s | %d | %d | %d | %+.2f%% | %+.2f%% |\n", w, a, b, c, (b / a - 1) * 100, (c / a - 1) * 100 }'
    done
} > "$RESULTS/results.md"
cat "$RESULTS/results.md"
echo "results: $RESULTS"

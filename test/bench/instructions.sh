#!/usr/bin/env bash
# Instructions per transaction: what bpext costs a backend, counted rather
# than timed (timings drift on a shared machine; instruction counts do not).
#
#   test/bench/instructions.sh [--scale 5] [--transactions "500 2500"]
#                              [--workloads select,tpcb] [--read-path]
#                              [--whole-server]
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
# --read-path measures shared-buffer misses instead: 16 MB of shared
# buffers, a dataset several times larger whose data files are in the
# page cache, select-only, and four configurations: no bpext; the tier
# off; a 1 MB tier (pushes keep it full of recently evicted pages, so
# nearly every miss is a tier miss); a tier holding the whole dataset
# (bpext_prewarm, so every miss is a tier hit).  pg_stat_database.blks_read
# and bpext_stats (lookups, hits, data_file_reads) are read around every
# pgbench run, and the instructions per tier hit and per tier miss are
# solved from the two tier configurations' excess over no bpext, twice:
# from instructions per transaction, and from the instructions per call of
# PostgreSQL's smgr read function (inclusive: bpext's wrapper, or md),
# which other work in the backend blurs less (between identical runs the
# per-transaction totals move by up to 0.5%, time-dependent work such as
# statistics flushes; the per-read figures by about 0.5% with the tier
# on, whose I/O watch looks at every process's stamp once per 100 ms of
# wall time, which callgrind stretches).
#
# --whole-server counts every process of the server instead of one
# backend, for data that fits in RAM but not in shared buffers: 16 MB of
# shared buffers, scale 10 (about 150 MB) with its data files in the page
# cache, pgbench -S with --clients clients (4), and three configurations:
# no bpext; a tier of two thirds of the data (pages keep passing through
# it: pushes, tier evictions); a tier holding all of it (bpext_prewarm).
# Each configuration runs twice, each time a server of its own: --warmup
# transactions, then pgbench -S for --duration seconds at each of the two
# --rates (-R), then a fast shutdown, after which every process of that
# server has written its count (from PostgresMain, bpext_worker_main or a
# helper's start, so nothing is counted twice across a fork).  The counts
# are summed per kind of process (the measured connections' backends, the
# bpext worker, its writer helper, the other background processes,
# short-lived processes), the slower run's subtracted from the faster
# one's, and divided by the difference in transactions: the two runs last
# as long, so what a process does per second whatever the load cancels
# out, as do the start, the warm-up and the shutdown.  Not counted: the
# reader helpers (killed when the worker exits, they write no file; with
# the data in the page cache they read nothing), and the kernel's work
# (each pread and pwrite, the writer helper's pipe).  The warm-up's own
# connections are left out; its work in the bpext worker is not, and
# varies from run to run with how far the warm-up pushed: with a long
# --warmup (so that adaptive admission pauses first), the worker's
# figure is that noise.
#
# The backend is identified by its pid: the server logs each connection
# (log_connections, %p), and only the callgrind files of pgbench's
# connections in that run are candidates; the chosen file's header pid is
# recorded.  (Picking "the largest new file" also picks up processes
# that exit during the run without ever reaching PostgresMain, whose
# counts include the postmaster's.)  Callgrind counts user-space
# instructions only: the kernel's work in pread() is not in the figures.
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
READ_PATH=0
WHOLE_SERVER=0
CLIENTS=4
RATES="50 250"
DURATION=60
WARMUP=2000
UNTIL_PAUSED=0
SHARED_BUFFERS=256MB
CONFIGS="none off on"
SEED=7

usage() {
    cat <<EOF
Usage: $0 [options]
  --scale N              pgbench scale; the database must fit in 256MB of shared buffers (default $SCALE)
  --transactions "A B"   the two transaction counts whose difference is measured (default "$TRANSACTIONS")
  --workloads LIST       of select,tpcb (default $WORKLOADS)
  --port N               server port (default $PORT)
  --results DIR          where results go (default test/bench/results/instructions-<time>)
  --read-path            shared-buffer misses: 16MB of shared buffers, select-only,
                         no bpext / tier off / 1MB tier (misses) / whole-dataset tier (hits)
  --whole-server         every server process, data in RAM but not in shared buffers:
                         16MB of shared buffers, scale 10, pgbench -S with --clients clients,
                         no bpext / tier of 2/3 of the data (small) / tier holding it (large)
  --clients N            pgbench clients of --whole-server (default $CLIENTS)
  --rates "A B"          --whole-server: the two rates, transactions per second (default "$RATES")
  --duration S           --whole-server: seconds of each run (default $DURATION)
  --warmup N             --whole-server: transactions of pgbench -S before each run (default $WARMUP)
  --until-paused N       --whole-server: after the warm-up, up to N more warm-ups of as many
                         transactions until adaptive admission has paused (default $UNTIL_PAUSED)
  --configs LIST         the configurations to run, of none, off, off-nosizing (tier off,
                         bpext.sizing = off), on, miss, hit, small, large (default: all of the mode's)
  --bpext-conf "LINES"   extra postgresql.conf lines for the configurations with bpext
EOF
}

while [ $# -gt 0 ]; do
    case "$1" in
        --scale) SCALE=$2; SCALE_ARG=1; shift 2 ;;
        --transactions) TRANSACTIONS=$2; TRANSACTIONS_ARG=1; shift 2 ;;
        --workloads) WORKLOADS=$2; shift 2 ;;
        --port) PORT=$2; shift 2 ;;
        --results) RESULTS=$2; shift 2 ;;
        --read-path) READ_PATH=1; shift ;;
        --whole-server) WHOLE_SERVER=1; shift ;;
        --clients) CLIENTS=$2; shift 2 ;;
        --rates) RATES=$2; shift 2 ;;
        --duration) DURATION=$2; shift 2 ;;
        --warmup) WARMUP=$2; shift 2 ;;
        --until-paused) UNTIL_PAUSED=$2; shift 2 ;;
        --bpext-conf) BPEXT_CONF=$2; shift 2 ;;
        --configs) CONFIGS_ARG=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
done
if [ "$READ_PATH" = 1 ]; then
    SHARED_BUFFERS=16MB
    CONFIGS="none off miss hit"
    WORKLOADS=select
fi
if [ "$WHOLE_SERVER" = 1 ]; then
    SHARED_BUFFERS=16MB
    CONFIGS="none small large"
    WORKLOADS=select
    [ -n "${SCALE_ARG:-}" ] || SCALE=10
fi
CONFIGS=${CONFIGS_ARG:-$CONFIGS}
has_config() { [[ " $CONFIGS " == *" $1 "* ]]; }
[ "$READ_PATH" != 1 ] || has_config none ||
    { echo "instructions: --read-path counts the excess over no bpext: --configs must include none" >&2; exit 2; }
read -r N1 N2 <<< "$TRANSACTIONS"
read -r RATE1 RATE2 <<< "$RATES"
[[ $N1 =~ ^[0-9]+$ && $N2 =~ ^[0-9]+$ && $N2 -gt $N1 ]] ||
    { echo "instructions: --transactions needs two counts, the second larger" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "instructions: run as root" >&2; exit 2; }
command -v valgrind >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
[ -f "$("$PGBIN/pg_config" --pkglibdir)/bpext.so" ] ||
    { echo "instructions: bpext is not installed for PostgreSQL $MAJOR (make install)" >&2; exit 2; }

RESULTS=${RESULTS:-$HERE/results/instructions-$([ "$READ_PATH" = 1 ] && echo read-)$([ "$WHOLE_SERVER" = 1 ] && echo server-)$(date +%Y%m%d-%H%M%S)}
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
trap 'exit 130' INT TERM

PRISTINE=$WORK/pristine
as_pg "$PGBIN/initdb" -D "$DATA" -A trust >/dev/null
cat >> "$DATA/postgresql.conf" <<EOF
port = $PORT
listen_addresses = ''
unix_socket_directories = '$WORK'
shared_buffers = $SHARED_BUFFERS
autovacuum = off
log_connections = on
log_line_prefix = '[%p] '
max_wal_size = 4GB
checkpoint_timeout = 1h
jit = off
include_if_exists = 'bench.conf'
EOF
as_pg "$PGBIN/pg_ctl" -D "$DATA" -l "$WORK/init.log" -w start >/dev/null
as_pg "$PGBIN/pgbench" -h "$WORK" -p "$PORT" -i -q -s "$SCALE" postgres >/dev/null 2>&1
psql_at -c "VACUUM" -c "CHECKPOINT" >/dev/null
# --whole-server: the tiers' sizes, from the size of the data.
DATA_MB=$(psql_at -c "SELECT pg_database_size('postgres') / 1048576")
SMALL_TIER_MB=$(( DATA_MB * 2 / 3 ))
LARGE_TIER_MB=$(( DATA_MB * 2 + 64 ))
stop_server
mv "$DATA" "$PRISTINE"

# A configuration's server under callgrind, on its own copy of the
# dataset (no configuration prunes what another one's TPC-B left), every
# process counted in its own file from the start of PostgresMain (a
# forked process would otherwise carry the postmaster's counts; background
# workers never reach PostgresMain and do carry them); shared buffers
# filled before measuring, and with --read-path the data files read into
# the page cache and, for "hit", the whole dataset loaded into the tier.
start_config() {   # name
    local name=$1 i
    rm -rf "$DATA"
    cp -a "$PRISTINE" "$DATA"
    case $name in
        none) : > "$DATA/bench.conf" ;;
        off) printf '%s\n' "shared_preload_libraries = 'bpext'" "bpext.max_size = 512MB" \
                 "bpext.size = 0" > "$DATA/bench.conf" ;;
        off-nosizing) printf '%s\n' "shared_preload_libraries = 'bpext'" "bpext.max_size = 512MB" \
                 "bpext.size = 0" "bpext.sizing = off" > "$DATA/bench.conf" ;;
        on|hit|miss|small|large)
            rm -f "$WORK/tier"
            case $name in
                miss) size=1 ;;
                small) size=$SMALL_TIER_MB ;;
                large) size=$LARGE_TIER_MB ;;
                *) size=512 ;;
            esac
            printf '%s\n' "shared_preload_libraries = 'bpext'" \
                 "bpext.max_size = $(( size > 512 ? size : 512 ))MB" \
                 "bpext.size = ${size}MB" \
                 "bpext.path = '$WORK/tier'" \
                 "bpext.warm_restart = off" > "$DATA/bench.conf" ;;
    esac
    [ "$name" = none ] || [ -z "${BPEXT_CONF:-}" ] || printf '%s\n' "$BPEXT_CONF" >> "$DATA/bench.conf"
    chown postgres "$DATA/bench.conf"
    CG=$RESULTS/callgrind-$name
    LOG=$RESULTS/server-$name.log
    mkdir -p "$CG"
    chown postgres "$CG"
    as_pg valgrind --tool=callgrind --trace-children=yes --zero-before=PostgresMain \
        --zero-before=bpext_worker_main --zero-before=bpext_helper_leave_server \
        --callgrind-out-file="$CG/cg.%p" "$PGBIN/postgres" -D "$DATA" \
        > "$LOG" 2>&1 &
    SERVER_PID=$!
    for i in $(seq 1 300); do
        psql_at -c "SELECT 1" >/dev/null 2>&1 && break
        sleep 1
    done
    psql_at -c "CREATE EXTENSION IF NOT EXISTS pg_prewarm" >/dev/null
    if [ "$name" != none ]; then
        psql_at -c "CREATE EXTENSION IF NOT EXISTS bpext" >/dev/null
    fi
    if [ "$name" = on ] || [ "$name" = hit ] || [ "$name" = miss ] ||
       [ "$name" = small ] || [ "$name" = large ]; then
        for i in $(seq 1 120); do
            [ "$(psql_at -c "SELECT state FROM bpext_configuration")" = 5 ] && break
            sleep 1
        done
    fi
    if [ "$name" = hit ] || [ "$name" = large ]; then
        psql_at -c "SELECT sum(bpext_prewarm(c.oid)) FROM pg_class c
                     WHERE c.relname LIKE 'pgbench_%' AND c.relkind IN ('r', 'i')" >/dev/null
    fi
    if [ "$READ_PATH" = 1 ] || [ "$WHOLE_SERVER" = 1 ]; then
        cat "$DATA"/base/*/* > /dev/null
        [ ! -f "$WORK/tier" ] || cat "$WORK/tier" > /dev/null
    fi
    psql_at -c "SELECT sum(pg_prewarm(c.oid)) FROM pg_class c
                 WHERE c.relname LIKE 'pgbench_%' AND c.relkind IN ('r', 'i')" >/dev/null
}

# Counters around a run: pg_stat_database.blks_read of the database, and
# bpext_stats' lookups, hits, data_file_reads (0 without bpext).
read_counters() {
    local bpext="0,0,0"
    [ "$CUR" = none ] ||
        bpext=$(psql_at -F, -c "SELECT lookups, hits, data_file_reads FROM bpext_stats")
    echo "$(psql_at -c "SELECT blks_read FROM pg_stat_database WHERE datname = 'postgres'"),$bpext"
}

# One pgbench run of n transactions; sets RUN_INSTR (instructions of the
# backend that served it) and RUN_COUNTERS (the counters' increase,
# "blks_read,lookups,hits,data_file_reads").  The backend is the pgbench
# connection (logged by log_connections with its pid) whose callgrind
# file has the most instructions: pgbench also opens a short connection
# of its own to read the scale.  The largest of all new files is
# recorded too (in files-<config>.csv), as a check.
run_pgbench() {   # workload n
    local wl=$1 n=$2 before after f v pid max=0 maxany=0 anyfile="" logpos c0 c1 args=()
    [ "$wl" = select ] && args=(-S)
    before=$(ls "$CG")
    logpos=$(wc -l < "$LOG")
    c0=$(read_counters)
    as_pg "$PGBIN/pgbench" -h "$WORK" -p "$PORT" -n -c 1 -t "$n" -M prepared \
        --random-seed="$SEED" "${args[@]}" postgres > "$RESULTS/pgbench-$CUR-$wl-$n.log" 2>&1
    sleep 2    # the backends write their counts as they exit
    c1=$(read_counters)
    RUN_COUNTERS=$(awk -F, -v a="$c0" -v b="$c1" 'BEGIN {
        split(a, x, ","); split(b, y, ",");
        printf "%d,%d,%d,%d", y[1] - x[1], y[2] - x[2], y[3] - x[3], y[4] - x[4] }')
    after=$(ls "$CG")
    local pgbench_pids
    pgbench_pids=$(tail -n +"$((logpos + 1))" "$LOG" |
        sed -n 's/^\[\([0-9]*\)\] LOG:  connection authorized: .*application_name=pgbench.*/\1/p')
    RUN_FILE=""
    for f in $(comm -13 <(echo "$before") <(echo "$after")); do
        v=$(awk '/^totals:/ { print $2 }' "$CG/$f")
        [ -n "$v" ] || continue
        pid=$(awk '/^pid:/ { print $2; exit }' "$CG/$f")
        echo "$wl,$n,$f,$pid,$v,$(grep -qx "$pid" <<< "$pgbench_pids" && echo pgbench || echo other)" \
            >> "$RESULTS/files-$CUR.csv"
        [ "$v" -gt "$maxany" ] && { maxany=$v; anyfile=$f; }
        if grep -qx "$pid" <<< "$pgbench_pids" && [ "$v" -gt "$max" ]; then
            max=$v
            RUN_FILE=$f
        fi
    done
    [ -n "$RUN_FILE" ] || { echo "instructions: no callgrind file of a pgbench backend in $CG" >&2; exit 1; }
    [ "$anyfile" = "$RUN_FILE" ] ||
        echo "   note: the largest new file, $anyfile ($maxany), is not a pgbench backend's" >&2
    RUN_INSTR=$max
}

# Calls of the smgr read function in a callgrind file and the
# instructions they cost, inclusive: "calls instructions".
if [ "$MAJOR" -le 16 ]; then READ_FN=smgrread
elif [ "$MAJOR" -eq 17 ]; then READ_FN=smgrreadv
else READ_FN=smgrstartreadv
fi
read_call_cost() {   # file
    callgrind_annotate --inclusive=yes --tree=caller --threshold=100 "$1" 2>/dev/null |
        perl -ne 'BEGIN { $fn = shift @ARGV; $c = 0 }
            if (/^\s*$/) { $c = 0; next }
            if (/ < .*\(([\d,]+)x\)/) { ($n = $1) =~ tr/,//d; $c += $n; next }
            if (/ \*  \S*:\Q$fn\E /) { ($v = (split)[0]) =~ tr/,//d; print "$c $v\n"; exit }' "$READ_FN"
}

per_txn() {   # a b -> (b - a) / (N2 - N1), two decimals
    awk -v a="$1" -v b="$2" -v d=$((N2 - N1)) 'BEGIN { printf "%.2f", (b - a) / d }'
}

# --whole-server: the server's processes (the postmaster and its
# descendants), as "pid role" lines.  Under valgrind, ps shows valgrind's
# command line, not PostgreSQL's process titles: the roles come from
# pg_stat_activity, and the bpext worker's children (its writer and
# reader helpers, which have no PGPROC) are told apart later by the
# functions their callgrind files ran.
server_processes() {
    local pm worker
    pm=$(head -n 1 "$DATA/postmaster.pid")
    worker=$(psql_at -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'bpext tier worker'")
    psql_at -F'|' -c "SELECT pid, backend_type FROM pg_stat_activity" > "$WORK/activity"
    ps -e -o pid=,ppid= | awk -v pm="$pm" -v worker="${worker:-0}" -v act="$WORK/activity" '
        BEGIN {
            while ((getline line < act) > 0) { split(line, f, "|"); type[f[1]] = f[2] }
        }
        { pid[NR] = $1; ppid[NR] = $2 }
        END {
            keep[pm] = 1
            for (round = 0; round < 3; round++)
                for (i = 1; i <= NR; i++)
                    if (ppid[i] in keep) keep[pid[i]] = 1
            for (i = 1; i <= NR; i++) {
                p = pid[i]
                if (!(p in keep)) continue
                if (p == pm) r = "postmaster"
                else if (ppid[i] == worker) r = "bpext helper"
                else if (type[p] == "bpext tier worker") r = "bpext worker"
                else if (type[p] ~ /^bpext/) r = "bpext other workers"
                else if (type[p] == "client backend" || type[p] == "") r = "backends"
                else r = "other background processes"
                print p, r
            }
        }'
}

# One whole-server run at rate tx/s: a server of its own (every process
# counted until it exits), warmed up, pgbench -S for --duration seconds at
# that rate (-R), a fast shutdown; then every callgrind file of that
# server is summed per kind of process.  Two runs of the same length at
# two rates differ in transactions and not in time, so what a process
# does per second whatever the load (the bpext worker's rounds while the
# clock hand stands still, the I/O watch), which callgrind's slowdown
# would otherwise charge to far fewer transactions than a native run has,
# cancels out.  (callgrind_control's zero and dump would spare the
# restarts, but a PostgreSQL process that carries either out exits with
# code 1 here.)  Sets RUN_TX, RUN_ROLES ("role|instructions" lines) and
# RUN_COUNTERS as run_pgbench does.
run_server_pgbench() {   # rate
    local rate=$1 f v pid role procs="" c0 c1 logpos bench_pids warmup_pids
    start_config "$CUR"
    # Warm-up: the pushes fill the small tier and keep it turning over;
    # given enough transactions (--warmup), adaptive admission pauses.  A
    # count, not a time: both runs must do the same work before measuring.
    local more=0 paused=""
    while :; do
        as_pg env PGAPPNAME=warmup "$PGBIN/pgbench" -h "$WORK" -p "$PORT" -n -S \
            -c "$CLIENTS" -j 2 -t $(( WARMUP / CLIENTS )) -M prepared postgres > /dev/null 2>&1
        [ "$CUR" != none ] || break
        paused=$(psql_at -c "SELECT admission_paused FROM bpext_stats")
        # --until-paused: the paused state's own cost, however long the
        # windows take under callgrind to pause.
        [ "$paused" = f ] && [ "$more" -lt "$UNTIL_PAUSED" ] || break
        more=$((more + 1))
    done
    if [ "$CUR" != none ]; then
        echo "   $rate tx/s: admission_paused after $((more + 1)) warm-up(s): $paused"
        PAUSED[$CUR]="${PAUSED[$CUR]:-}${PAUSED[$CUR]:+, }$paused"
    fi
    c0=$(read_counters)
    logpos=$(wc -l < "$LOG")
    as_pg env PGAPPNAME=measured "$PGBIN/pgbench" -h "$WORK" -p "$PORT" -n -S \
        -c "$CLIENTS" -j 2 -T "$DURATION" -R "$rate" -M prepared \
        --random-seed="$SEED" postgres > "$RESULTS/pgbench-$CUR-$rate.log" 2>&1 &
    sleep 5
    procs=$(server_processes)
    wait $!
    RUN_TX=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' \
        "$RESULTS/pgbench-$CUR-$rate.log")
    c1=$(read_counters)
    RUN_COUNTERS=$(awk -F, -v a="$c0" -v b="$c1" 'BEGIN {
        split(a, x, ","); split(b, y, ",");
        printf "%d,%d,%d,%d", y[1] - x[1], y[2] - x[2], y[3] - x[3], y[4] - x[4] }')
    [ "$CUR" = none ] || psql_at -F, -c "SELECT pages_pushed, extension_page_evictions, pages_read_admitted, pages_dual_written FROM bpext_stats" \
        > "$RESULTS/stats-$CUR-$rate.csv"
    bench_pids=$(tail -n +"$((logpos + 1))" "$LOG" |
        sed -n 's/^\[\([0-9]*\)\] LOG:  connection authorized: .*application_name=measured.*/\1/p')
    warmup_pids=$(sed -n 's/^\[\([0-9]*\)\] LOG:  connection authorized: .*application_name=warmup.*/\1/p' "$LOG")
    stop_server
    sleep 2
    RUN_ROLES=$(for f in "$CG"/*; do
        v=$(awk '/^totals:/ { print $2 }' "$f")
        [ -n "$v" ] || continue
        pid=$(awk '/^pid:/ { print $2; exit }' "$f")
        if grep -qx "$pid" <<< "$bench_pids"; then
            role="backends (measured pgbench)"
        elif grep -qx "$pid" <<< "$warmup_pids"; then
            # Their work comes before the measured run, like the start-up's.
            echo "$rate,${f##*/},$pid,warm-up backends (not counted),$v" >> "$RESULTS/files-$CUR.csv"
            continue
        else
            role=$(awk -v p="$pid" '$1 == p { $1 = ""; print substr($0, 2); exit }' <<< "$procs")
            [ "$role" != backends ] || role=""
        fi
        if [ "$role" = "bpext helper" ]; then
            # Counted from its start (bpext_helper_leave_server): a reader helper
            # runs tier_readers.c, the writer helper does not.  (Reader
            # helpers are killed when the worker exits and leave no file.)
            if grep -q "^fl=.*tier_readers.c" "$f"; then
                role="bpext reader helpers"
            else
                role="bpext writer helper"
            fi
        fi
        # Processes that came and went: psql's connections, pgbench's
        # own, the start-up process.
        echo "$rate,${f##*/},$pid,${role:-other short-lived processes},$v" >> "$RESULTS/files-$CUR.csv"
        echo "${role:-other short-lived processes}|$v"
    done | awk -F'|' '{ s[$1] += $2 } END { for (r in s) print r "|" s[r] }')
    mv "$CG" "$CG-$rate"
}

if [ "$WHOLE_SERVER" = 1 ]; then
    echo "config,role,instructions_per_transaction" > "$RESULTS/results.csv"
    declare -A ROLE_TXN CNT_TXN PAUSED
    ROLES=""
    for CUR in $CONFIGS; do
        echo "== $CUR"
        echo "rate,file,pid,role,instructions" > "$RESULTS/files-$CUR.csv"
        run_server_pgbench "$RATE1"
        ra=$RUN_ROLES ca=$RUN_COUNTERS ta=$RUN_TX
        run_server_pgbench "$RATE2"
        rb=$RUN_ROLES cb=$RUN_COUNTERS tb=$RUN_TX
        echo "   $ta and $tb transactions in $DURATION s"
        while IFS='|' read -r role v; do
            a=$(awk -F'|' -v r="$role" '$1 == r { print $2 }' <<< "$ra")
            per=$(awk -v a="${a:-0}" -v b="$v" -v d=$((tb - ta)) 'BEGIN { printf "%.2f", (b - a) / d }')
            ROLE_TXN[$CUR,$role]=$per
            grep -qxF "$role" <<< "$ROLES" || ROLES+="$role"$'\n'
            echo "$CUR,$role,$per" >> "$RESULTS/results.csv"
            echo "   $role: $per instructions per transaction"
        done <<< "$rb"
        IFS=, read -r r1 l1 h1 d1 <<< "$ca"
        IFS=, read -r r2 l2 h2 d2 <<< "$cb"
        CNT_TXN[$CUR]=$(awk -v a="$ca" -v b="$cb" -v ta="$ta" -v tb="$tb" 'BEGIN {
            split(a, x, ","); split(b, y, ",");
            for (i = 1; i <= 4; i++) printf "%s%.2f", (i > 1 ? " " : ""), (y[i] - x[i]) / (tb - ta) }')
        echo "   per transaction: blks_read, lookups, hits, data_file_reads: ${CNT_TXN[$CUR]}"
    done
    {
        echo "# Instructions per transaction of the whole server (callgrind, pgbench -S, $CLIENTS clients, $SHARED_BUFFERS of shared buffers, data files in the page cache)"
        echo
        echo "PostgreSQL $("$PGBIN/postgres" --version | awk '{ print $3 }'), bpext $(git -C "$TOP" describe --always --dirty 2>/dev/null || echo unknown), pgbench scale $SCALE (${DATA_MB} MB), -M prepared, $DURATION s at $RATE1 and at $RATE2 transactions per second (-R), the difference; small tier ${SMALL_TIER_MB} MB, large tier ${LARGE_TIER_MB} MB (loaded with bpext_prewarm)${BPEXT_CONF:+; with bpext: $(tr '\n' ';' <<< "$BPEXT_CONF")}."
        echo
        header="| process |"; rule="|---|"
        for c in $CONFIGS; do header+=" $c |"; rule+="---|"; done
        echo "$header"; echo "$rule"
        while read -r role; do
            [ -n "$role" ] || continue
            row="| $role |"
            for c in $CONFIGS; do row+=" ${ROLE_TXN[$c,$role]:-0} |"; done
            echo "$row"
        done <<< "$ROLES"
        row="| **total** |"
        for c in $CONFIGS; do
            row+=" $(for r in "${!ROLE_TXN[@]}"; do [[ $r == "$c,"* ]] && echo "${ROLE_TXN[$r]}"; done |
                awk '{ s += $1 } END { printf "**%.0f**", s }') |"
        done
        echo "$row"
        row="| blks_read, lookups, hits, data-file reads per transaction |"
        for c in $CONFIGS; do row+=" ${CNT_TXN[$c]// / \/ } |"; done
        echo "$row"
        row="| admission paused when each run began |"
        for c in $CONFIGS; do row+=" ${PAUSED[$c]:-} |"; done
        echo "$row"
        echo
        echo "Callgrind counts user-space instructions only: the kernel's work (each pread and pwrite, the pipe to the writer helper) is not included."
    } > "$RESULTS/results.md"
    cat "$RESULTS/results.md"
    echo "results: $RESULTS"
    exit 0
fi

echo "workload,config,instructions_per_transaction,blks_read_per_transaction,lookups_per_transaction,hits_per_transaction,data_file_reads_per_transaction,instructions_per_read_call,backend_file_$N1,backend_file_$N2" \
    > "$RESULTS/results.csv"
declare -A PER_TXN CNT PER_READ HIT_FRACTION
for CUR in $CONFIGS; do
    echo "== $CUR"
    echo "workload,transactions,file,pid,instructions,process" > "$RESULTS/files-$CUR.csv"
    start_config "$CUR"
    for wl in ${WORKLOADS//,/ }; do
        run_pgbench "$wl" "$N1"
        a=$RUN_INSTR fa=$RUN_FILE ca=$RUN_COUNTERS
        run_pgbench "$wl" "$N2"
        b=$RUN_INSTR fb=$RUN_FILE cb=$RUN_COUNTERS
        per=$(( (b - a) / (N2 - N1) ))
        PER_TXN[$CUR,$wl]=$per
        IFS=, read -r r1 l1 h1 d1 <<< "$ca"
        IFS=, read -r r2 l2 h2 d2 <<< "$cb"
        CNT[$CUR,$wl]="$(per_txn "$r1" "$r2") $(per_txn "$l1" "$l2") $(per_txn "$h1" "$h2") $(per_txn "$d1" "$d2")"
        read -r pr pl ph pd <<< "${CNT[$CUR,$wl]}"
        # Tier hits per lookup, within the longer run alone (the two runs'
        # difference also carries the reads of connection starts).
        HIT_FRACTION[$CUR,$wl]=$(awk -v l="$l2" -v h="$h2" 'BEGIN { f = l > 0 ? h / l : 0; printf "%.4f", (f > 1 ? 1 : f) }')
        read -r ka ia <<< "$(read_call_cost "$CG/$fa")"
        read -r kb ib <<< "$(read_call_cost "$CG/$fb")"
        PER_READ[$CUR,$wl]=$(awk -v a="${ia:-0}" -v b="${ib:-0}" -v n=$(( ${kb:-0} - ${ka:-0} )) \
            'BEGIN { printf "%.1f", (n > 0 ? (b - a) / n : 0) }')
        echo "$wl,$CUR,$per,$pr,$pl,$ph,$pd,${PER_READ[$CUR,$wl]},$fa,$fb" >> "$RESULTS/results.csv"
        echo "   $wl: $per instructions per transaction ($a at $N1 in $fa, $b at $N2 in $fb);" \
             "per transaction: blks_read $pr, lookups $pl, hits $ph, data_file_reads $pd" \
             "$([ "$READ_PATH" = 0 ] || echo "; $READ_FN: ${PER_READ[$CUR,$wl]} instructions per call")"
    done
    stop_server
done

version="PostgreSQL $("$PGBIN/postgres" --version | awk '{ print $3 }'), bpext $(git -C "$TOP" describe --always --dirty 2>/dev/null || echo unknown), pgbench scale $SCALE, -M prepared, --random-seed $SEED, the difference between $N2 and $N1 transactions."
if [ "$READ_PATH" = 0 ]; then
{
    echo "# Instructions per transaction (callgrind, one pgbench client, everything in shared buffers)"
    echo
    echo "$version"
    echo
    # A column per configuration run, each also as a change from the first.
    set -- $CONFIGS
    first=$1
    header="| workload |"; rule="|---|"
    for c in "$@"; do header+=" $c |"; rule+="---|"; done
    for c in "${@:2}"; do header+=" $c / $first |"; rule+="---|"; done
    echo "$header"
    echo "$rule"
    for wl in ${WORKLOADS//,/ }; do
        row="| $wl |"
        for c in "$@"; do row+=" ${PER_TXN[$c,$wl]} |"; done
        for c in "${@:2}"; do
            row+=$(awk -v a="${PER_TXN[$first,$wl]}" -v b="${PER_TXN[$c,$wl]}" \
                'BEGIN { printf " %+.2f%% |", (b / a - 1) * 100 }')
        done
        echo "$row"
    done
    echo
    echo "Configurations: none (no bpext), off (bpext loaded, tier off), off-nosizing (the same, bpext.sizing = off), on (tier on)."
} > "$RESULTS/results.md"
else
{
    echo "# Instructions per shared-buffer miss (callgrind, one pgbench -S client, $SHARED_BUFFERS of shared buffers, data files in the page cache)"
    echo
    echo "$version"
    echo
    echo "| configuration | instructions/tx | blks_read/tx | lookups/tx | tier hits/tx | data_file_reads/tx | excess over no bpext | instructions per $READ_FN call | excess over no bpext |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for c in $CONFIGS; do
        read -r pr pl ph pd <<< "${CNT[$c,select]}"
        awk -v c="$c" -v i="${PER_TXN[$c,select]}" -v n="${PER_TXN[none,select]}" \
            -v r="${PER_READ[$c,select]}" -v rn="${PER_READ[none,select]}" \
            -v pr="$pr" -v pl="$pl" -v ph="$ph" -v pd="$pd" \
            'BEGIN { printf "| %s | %d | %s | %s | %s | %s | %+d | %.1f | %+.1f |\n", c, i, pr, pl, ph, pd, i - n, r, r - rn }'
    done
    echo
    if ! { has_config off && has_config miss && has_config hit; }; then
        echo "(The instructions per tier hit and per tier miss are solved from the configurations off, miss and hit, which --configs left out.)"
    else
    # excess = hits * H + (lookups - hits) * M, for miss and hit: two
    # equations, two unknowns.
    read -r _ l1 h1 _ <<< "${CNT[miss,select]}"
    read -r _ l2 h2 _ <<< "${CNT[hit,select]}"
    awk -v e1=$((${PER_TXN[miss,select]} - ${PER_TXN[none,select]})) \
        -v e2=$((${PER_TXN[hit,select]} - ${PER_TXN[none,select]})) \
        -v eo=$((${PER_TXN[off,select]} - ${PER_TXN[none,select]})) \
        -v l1="$l1" -v h1="$h1" -v l2="$l2" -v h2="$h2" -v fn="$READ_FN" \
        -v fh1="${HIT_FRACTION[miss,select]}" -v fh2="${HIT_FRACTION[hit,select]}" \
        -v r1="$(awk -v a="${PER_READ[miss,select]}" -v b="${PER_READ[none,select]}" 'BEGIN { print a - b }')" \
        -v r2="$(awk -v a="${PER_READ[hit,select]}" -v b="${PER_READ[none,select]}" 'BEGIN { print a - b }')" \
        -v ro="$(awk -v a="${PER_READ[off,select]}" -v b="${PER_READ[none,select]}" 'BEGIN { print a - b }')" 'BEGIN {
        m1 = l1 - h1; m2 = l2 - h2; det = h1 * m2 - h2 * m1;
        if (det == 0) { print "(no solution: the two tier configurations have the same hit ratio)"; exit }
        H = (e1 * m2 - e2 * m1) / det; M = (h1 * e2 - h2 * e1) / det;
        printf "Solved from miss and hit (excess = hits x H + misses x M), per transaction: %.0f instructions per tier hit, %.0f per tier miss, relative to no bpext (tier off: %+d per transaction).\n", H, M, eo;
        # The same per read call: the hit and miss fractions of the reads.
        f1 = fh1; f2 = fh2;
        det = f1 * (1 - f2) - f2 * (1 - f1);
        H = (r1 * (1 - f2) - r2 * (1 - f1)) / det; M = (f1 * r2 - f2 * r1) / det;
        printf "\nPer read call (" fn "): **%.0f instructions per tier hit, %.0f per tier miss**, relative to no bpext (tier off: %+.0f per read).\n", H, M, ro;
        printf "\nCallgrind counts user-space instructions only: the kernel'\''s work in each pread (data file or tier file, both in the page cache) is not included.\n" }'
    fi
} > "$RESULTS/results.md"
fi
cat "$RESULTS/results.md"
echo "results: $RESULTS"

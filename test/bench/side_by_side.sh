#!/usr/bin/env bash
# Data in RAM, with and without bpext, measured side by side: two servers
# at once on the same machine, from copies of one pgbench dataset whose
# files are in the page cache (the frame of run.sh's --configs M, where
# the tier cannot help), one without bpext and one with a tier, each
# driven by a pgbench of its own with the same clients, started together.
#
# Why at once: on a shared machine the host moves a server's throughput by
# more than the 3% this frame is about, from one minute to the next, and
# it moves the CPU time a transaction is charged with it (run.sh --configs
# M shows both).  Two servers that run in the same seconds share whatever
# the host does; each gets about half of the CPUs, so the ratio of their
# TPS is the ratio of what a transaction costs each, with bpext and
# without, as far as the scheduler splits the CPUs evenly between the two;
# the ratio of the CPU time each server's cgroup was charged per
# transaction in the same seconds does not depend on that split, and is
# the figure to read.  Every round starts both from fresh copies of the
# dataset; which pgbench starts first alternates.
#
# Needs root (cgroups for the CPU time, drop_caches, the postgres user).
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
. "$TOP/test/pg_major.sh"
MAJOR=${PG_MAJOR:-$(bpext_native_major || true)}
[ -n "$MAJOR" ] || { echo "side_by_side: this system ships no supported PostgreSQL major; set PG_MAJOR" >&2; exit 2; }
bpext_major_is_native "$MAJOR" ||
    { echo "side_by_side: PostgreSQL $MAJOR is not a package of this system" >&2; exit 2; }
PGBIN=/usr/lib/postgresql/$MAJOR/bin

SCALE=100
CLIENTS=8
ROUNDS=3
DURATION=25
WARMUP=60
SHARED_BUFFERS=128      # MB
TIER=small              # small: 2/3 of the database; large: 1.25 x; or MB
WORKDIR_PARENT=/var/tmp
RESULTS=/tmp/bpext-side-by-side-$(date +%Y%m%d-%H%M%S)
PORT=5496
BUILD=1
PROFILE=0               # >0: perf samples for this many seconds of each measured window

usage() {
    cat <<EOF
Usage: sudo test/bench/side_by_side.sh [options]
  --tier small|large|MB  the tier of the bpext server: small is 2/3 of the
                         database, large 1.25 times it and 64 MB (default $TIER)
  --rounds N             rounds, each from fresh copies (default $ROUNDS)
  --duration S           seconds measured per round (default $DURATION)
  --warmup S             select-only before measuring, both servers at once (default $WARMUP)
  --scale N              pgbench scale (default $SCALE)
  --clients N            clients of each pgbench (default $CLIENTS)
  --shared-buffers MB    of each server (default $SHARED_BUFFERS)
  --workdir-parent DIR   data directories and the tier file (default $WORKDIR_PARENT)
  --results DIR          (default /tmp/bpext-side-by-side-<time>)
  --port N               the first server's port; the second uses N + 1 (default $PORT)
  --profile S            sample every CPU with perf (cpu-clock) for S seconds of each
                         measured window, from its 3rd second, and write each
                         server's samples per transaction by library and by symbol
                         (runs/r<N>-profile.md; needs perf, Debian's linux-perf)
  --no-build             use the bpext already installed
Environment: PG_MAJOR (default this system's).
EOF
}

int_arg() { [[ $2 =~ ^[0-9]+$ ]] || { echo "side_by_side: $1 needs a number" >&2; exit 2; }; echo "$2"; }
while [ $# -gt 0 ]; do
    case $1 in
        --no-build|-h|--help) ;;
        *) [ $# -ge 2 ] || { echo "side_by_side: $1 needs a value" >&2; exit 2; } ;;
    esac
    case $1 in
        --tier) TIER=$2; shift ;;
        --rounds) ROUNDS=$(int_arg "$1" "$2"); shift ;;
        --duration) DURATION=$(int_arg "$1" "$2"); shift ;;
        --warmup) WARMUP=$(int_arg "$1" "$2"); shift ;;
        --scale) SCALE=$(int_arg "$1" "$2"); shift ;;
        --clients) CLIENTS=$(int_arg "$1" "$2"); shift ;;
        --shared-buffers) SHARED_BUFFERS=$(int_arg "$1" "$2"); shift ;;
        --workdir-parent) WORKDIR_PARENT=$2; shift ;;
        --results) RESULTS=$2; shift ;;
        --port) PORT=$(int_arg "$1" "$2"); shift ;;
        --profile) PROFILE=$(int_arg "$1" "$2"); shift ;;
        --no-build) BUILD=0 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "side_by_side: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
[[ $TIER =~ ^(small|large|[1-9][0-9]*)$ ]] || { echo "side_by_side: --tier small, large or a size in MB" >&2; exit 2; }
[ "$ROUNDS" -ge 1 ] && [ "$DURATION" -ge 1 ] && [ "$CLIENTS" -ge 1 ] && [ "$SCALE" -ge 1 ] &&
    [ "$SHARED_BUFFERS" -ge 1 ] ||
    { echo "side_by_side: rounds, duration, clients, scale and shared buffers must be positive" >&2; exit 2; }
[ "$CLIENTS" -le 32 ] || { echo "side_by_side: at most 32 clients (max_connections is 40)" >&2; exit 2; }
[ "$PORT" -ge 1024 ] && [ "$PORT" -le 65534 ] || { echo "side_by_side: --port from 1024 to 65534" >&2; exit 2; }
[ "$PROFILE" = 0 ] || [ "$PROFILE" -le $((DURATION - 5)) ] ||
    { echo "side_by_side: --profile must end at least 3 s before the window does (at most --duration less 5)" >&2; exit 2; }
[ "$PROFILE" = 0 ] || command -v perf >/dev/null ||
    { echo "side_by_side: --profile needs perf (apt-get install linux-perf)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "side_by_side: run as root (cgroups, drop_caches, the postgres user)" >&2; exit 2; }

if [ -f /sys/fs/cgroup/cpuacct/cpuacct.usage ]; then
    CG_ROOT=/sys/fs/cgroup/cpuacct
elif [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    CG_ROOT=/sys/fs/cgroup
else
    echo "side_by_side: neither cgroup v1's cpuacct nor cgroup v2 is mounted" >&2; exit 2
fi

mkdir -p "$RESULTS/runs"
chmod 755 "$RESULTS"
WORK=$(mktemp -d "$WORKDIR_PARENT/bpext-side.XXXXXX")
exec > >(tee -a "$RESULTS/run.log") 2>&1

as_pg() { runuser -u postgres -- "$@"; }
say() { echo "$(date +%H:%M:%S) $*"; }
psql_at() {   # port sql
    as_pg "$PGBIN/psql" -X -h "$WORK" -p "$1" -d postgres -Atq -v ON_ERROR_STOP=1 -c "$2"
}
# The two servers: "off" (no bpext) on PORT, "on" (a tier) on PORT + 1.
port_of() { if [ "$1" = off ]; then echo "$PORT"; else echo $((PORT + 1)); fi; }
cg_of() { echo "$CG_ROOT/bpext-side-$$-$1"; }
cpu_ns() {   # side
    local cg
    cg=$(cg_of "$1")
    if [ -f "$cg/cpuacct.usage" ]; then
        cat "$cg/cpuacct.usage"
    else
        awk '$1 == "usage_usec" { printf "%.0f\n", $2 * 1000 }' "$cg/cpu.stat"
    fi
}

stop_side() {   # side
    local data=$WORK/$1
    [ -f "$data/postmaster.pid" ] || return 0
    as_pg "$PGBIN/pg_ctl" -D "$data" -m immediate -w -t 60 stop >/dev/null 2>&1 || true
}
remove_cgroup() {   # side
    local cg p i
    cg=$(cg_of "$1")
    [ -d "$cg" ] || return 0
    for i in 1 2 3 4 5 6 7 8 9 10; do
        for p in $(cat "$cg/cgroup.procs" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
        rmdir "$cg" 2>/dev/null && return 0
        sleep 0.5
    done
    say "could not remove the cgroup $cg"
}
cleanup() {
    local rc=$?
    set +e
    jobs -p | xargs -r kill 2>/dev/null
    for side in pristine off on; do stop_side "$side"; remove_cgroup "$side"; done
    cp -f "$WORK"/*.log "$RESULTS/" 2>/dev/null
    rm -rf "$WORK"
    say "left behind: $(ls -d "$WORK" "$CG_ROOT"/bpext-side-$$-* 2>/dev/null | wc -l) work directories and cgroups; results in $RESULTS"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- build
if [ "$BUILD" = 1 ]; then
    say "installing dependencies, building and installing bpext for PostgreSQL $MAJOR"
    PG_MAJOR=$MAJOR "$TOP/test/install-deps.sh" >/dev/null
    mkdir "$WORK/build"
    tar -C "$TOP" --exclude=./.git --exclude=./test/bench/results \
        --exclude='./test/bench/.venv*' -cf - . | tar -C "$WORK/build" -xf -
    make -C "$WORK/build" -s PG_CONFIG="$PGBIN/pg_config" clean
    make -C "$WORK/build" -s PG_CONFIG="$PGBIN/pg_config"
    make -C "$WORK/build" -s PG_CONFIG="$PGBIN/pg_config" install
    rm -rf "$WORK/build"
fi
chown postgres "$WORK"
[ -f "$("$PGBIN/pg_config" --pkglibdir)/bpext.so" ] ||
    { echo "side_by_side: bpext is not installed (drop --no-build)" >&2; exit 2; }

# ---------------------------------------------------------------- dataset
PRISTINE=$WORK/pristine
as_pg "$PGBIN/initdb" -D "$PRISTINE" -A trust >/dev/null
cat >> "$PRISTINE/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '$WORK'
max_connections = 40
shared_buffers = ${SHARED_BUFFERS}MB
huge_pages = off
autovacuum = off
jit = off
max_wal_size = 8GB
checkpoint_timeout = 1h
include_if_exists = 'side.conf'
EOF
echo "port = $PORT" > "$PRISTINE/side.conf"
chown postgres "$PRISTINE/side.conf"
as_pg "$PGBIN/pg_ctl" -D "$PRISTINE" -l "$WORK/pristine.log" -w -s start
as_pg "$PGBIN/pgbench" -h "$WORK" -p "$PORT" -i -q -s "$SCALE" postgres 2>&1 | tail -n 1
psql_at "$PORT" "CHECKPOINT"
DB_MB=$(( $(psql_at "$PORT" "SELECT pg_database_size('postgres')") / 1048576 ))
as_pg "$PGBIN/pg_ctl" -D "$PRISTINE" -m fast -w -s stop
case $TIER in
    small) TIER_MB=$(( (DB_MB * 2 / 3 + 63) / 64 * 64 )) ;;
    large) TIER_MB=$(( (DB_MB * 125 / 100 + 64 + 63) / 64 * 64 )) ;;
    *) TIER_MB=$TIER ;;
esac
say "database ${DB_MB} MB; the bpext server's tier ${TIER_MB} MB; shared_buffers ${SHARED_BUFFERS} MB; $CLIENTS clients each"
{
    echo "PostgreSQL $("$PGBIN/postgres" --version | awk '{ print $3 }'), bpext ${BPEXT_COMMIT:-$(git -C "$TOP" describe --always --dirty 2>/dev/null || echo unknown)}"
    echo "$(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start, $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "scale $SCALE (${DB_MB} MB), shared_buffers ${SHARED_BUFFERS} MB, tier ${TIER_MB} MB, $CLIENTS clients each, ${WARMUP} s warm-up, ${DURATION} s measured, $ROUNDS rounds"
} > "$RESULTS/params.txt"

start_side() {   # side
    local side=$1 data=$WORK/$1 cg
    rm -rf "$data" "$WORK/tier.bpe"
    cp -a "$PRISTINE" "$data"
    {
        echo "port = $(port_of "$side")"
        if [ "$side" = on ]; then
            echo "shared_preload_libraries = 'bpext'"
            echo "bpext.path = '$WORK/tier.bpe'"
            echo "bpext.size = ${TIER_MB}MB"
            echo "bpext.max_size = ${TIER_MB}MB"
            echo "bpext.warm_restart = off"
        fi
    } > "$data/side.conf"
    cg=$(cg_of "$side")
    mkdir -p "$cg"
    ( echo "$BASHPID" > "$cg/cgroup.procs"
      exec runuser -u postgres -- "$PGBIN/pg_ctl" -D "$data" -l "$WORK/server-$side.log" -w -s start )
    psql_at "$(port_of "$side")" "CREATE EXTENSION pg_prewarm" >/dev/null
    if [ "$side" = on ]; then
        psql_at "$(port_of "$side")" "CREATE EXTENSION bpext" >/dev/null
        local i state=""
        for i in $(seq 1 120); do
            state=$(psql_at "$(port_of on)" "SELECT state FROM bpext_configuration")
            [ "$state" = 5 ] && break
            sleep 0.5
        done
        [ "$state" = 5 ] || { say "error: the tier did not come up: $(psql_at "$(port_of on)" \
            "SELECT state_description || ' ' || coalesce(last_error, '') FROM bpext_configuration")"; exit 1; }
    fi
    # Data in RAM: every data-file page in the page cache.
    psql_at "$(port_of "$side")" "SELECT sum(pg_prewarm(c.oid, 'read')) FROM pg_class c
                                   WHERE c.relname IN ('pgbench_accounts', 'pgbench_accounts_pkey')" >/dev/null
}

# Both pgbench runs at once: seconds tag first-side -> prints nothing;
# their logs are runs/<tag>-<side>.log.
pgbench_both() {
    local secs=$1 tag=$2 first=$3 second pids=() side threads=$(( CLIENTS < 2 ? CLIENTS : 2 ))
    if [ "$first" = off ]; then second=on; else second=off; fi
    for side in "$first" "$second"; do
        as_pg "$PGBIN/pgbench" -h "$WORK" -p "$(port_of "$side")" -n -M prepared -S \
            -c "$CLIENTS" -j "$threads" -T "$secs" postgres > "$RESULTS/runs/$tag-$side.log" 2>&1 &
        pids+=($!)
    done
    for side in 0 1; do
        wait "${pids[$side]}" || true
    done
    for side in off on; do
        grep -q "^tps = " "$RESULTS/runs/$tag-$side.log" || {
            say "error: the pgbench of the $side server failed:"
            tail -n 5 "$RESULTS/runs/$tag-$side.log"
            exit 1
        }
    done
}
median_of() {   # rounds.csv column, label
    tail -n +2 "$RESULTS/rounds.csv" | cut -d, -f"$1" | sort -n |
        awk -v label="$2" '{ v[NR] = $1 }
            END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
                  printf "%s: median %.3f of %d rounds (%.3f to %.3f)\n", label, m, NR, v[1], v[NR] }'
}
# The samples of each server's processes (those of its cgroup as the
# sampling started or ended), per transaction of its measured window: by
# library and by symbol, each server's column beside the other's.  Each
# library's and symbol's own samples (self time).
profile_report() {   # perf-data off-txns on-txns out
    local data=$1 out=$4 rows=$WORK/profile.rows
    { perf report -i "$data" --sort pid,dso,sym -n --stdio -q --percent-limit 0 2>/dev/null || true; } |
        awk -v offx="$2" -v onx="$3" '
            FILENAME != "-" { side[$1] = (FILENAME ~ /off[.]pids$/) ? "off" : "on"; next }
            { split($3, p, ":"); s = side[p[1]]; if (s == "") next
              n = $2; dso = $4; sym = $0; sub(/^.*\] /, "", sym); gsub(/ +$/, "", sym)
              lib[dso, s] += n; libs[dso] = 1; fn[sym " (" dso ")", s] += n; fns[sym " (" dso ")"] = 1
              total[s] += n }
            function row(kind, label, o, b) {
                printf "%s\t%+.3f\t| %s | %.2f | %.2f | %+.2f |\n", kind, 1000 * (b / onx - o / offx),
                       label, 1000 * o / offx, 1000 * b / onx, 1000 * (b / onx - o / offx)
            }
            END {
                row("A", "all", total["off"], total["on"])
                for (d in libs) row("L", d, lib[d, "off"], lib[d, "on"])
                for (f in fns) row("S", f, fn[f, "off"], fn[f, "on"])
            }' "$WORK/profile.off.pids" "$WORK/profile.on.pids" - > "$rows"
    {
        echo "Samples of each server's processes (999 a second on each CPU), per 1,000 transactions of its window; each library's and symbol's own samples."
        echo
        echo "| library | no bpext | with bpext | difference |"
        echo "|---|---|---|---|"
        grep "^A" "$rows" | cut -f3
        grep "^L" "$rows" | sort -t$'\t' -k2,2gr | cut -f3
        echo
        echo "The 25 symbols whose samples per transaction differ most:"
        echo
        echo "| symbol (library) | no bpext | with bpext | difference |"
        echo "|---|---|---|---|"
        # Not head: its early exit would fail the pipeline (pipefail).
        grep "^S" "$rows" | awk -F'\t' '{ d = $2 < 0 ? -$2 : $2; print d "\t" $3 }' |
            sort -t$'\t' -k1,1gr | awk -F'\t' 'NR <= 25 { print $2 }'
    } > "$out"
    rm -f "$rows"
}
txns() { awk '/^number of transactions actually processed/ { print $NF }' "$1"; }
tps_of() { awk '/^tps = / { printf "%.0f", $3 }' "$1"; }

echo "round,first,off_tps,on_tps,on_over_off,off_cpu_us_per_txn,on_cpu_us_per_txn,off_cpu_over_on_cpu,admission" > "$RESULTS/rounds.csv"
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then first=off; else first=on; fi
    say "round $r of $ROUNDS: fresh copies, both servers warm ${WARMUP} s, then ${DURATION} s measured"
    sync; echo 3 > /proc/sys/vm/drop_caches
    start_side off
    start_side on
    [ "$WARMUP" -gt 0 ] && pgbench_both "$WARMUP" "r$r-warmup" "$first"
    off0=$(cpu_ns off); on0=$(cpu_ns on)
    profiler=""
    if [ "$PROFILE" -gt 0 ]; then
        # Each server's processes as the sampling starts (pgbench's
        # sessions are open by then) and as it ends.
        ( sleep 2
          cat "$(cg_of off)/cgroup.procs" > "$WORK/profile.off.pids"
          cat "$(cg_of on)/cgroup.procs" > "$WORK/profile.on.pids"
          perf record -q -a -e cpu-clock -F 999 -o "$WORK/profile.data" -- sleep "$PROFILE"
          cat "$(cg_of off)/cgroup.procs" >> "$WORK/profile.off.pids"
          cat "$(cg_of on)/cgroup.procs" >> "$WORK/profile.on.pids" ) > "$WORK/perf.log" 2>&1 &
        profiler=$!
    fi
    pgbench_both "$DURATION" "r$r" "$first"
    off1=$(cpu_ns off); on1=$(cpu_ns on)
    if [ -n "$profiler" ]; then
        wait "$profiler" || say "warning: perf failed: $(tail -n 1 "$WORK/perf.log")"
        # Transactions in the sampled seconds, taken as the run's share.
        profile_report "$WORK/profile.data" \
            "$(awk -v n="$(txns "$RESULTS/runs/r$r-off.log")" -v s="$PROFILE" -v d="$DURATION" 'BEGIN { print n * s / d }')" \
            "$(awk -v n="$(txns "$RESULTS/runs/r$r-on.log")" -v s="$PROFILE" -v d="$DURATION" 'BEGIN { print n * s / d }')" \
            "$RESULTS/runs/r$r-profile.md"
        rm -f "$WORK/profile.data" "$WORK"/profile.*.pids
    fi
    admission=$(psql_at "$(port_of on)" "SELECT CASE WHEN admission_paused THEN 'paused' ELSE 'admitting' END
                                          || ' (' || admission_pauses || ' pauses)' FROM bpext_stats")
    off_log=$RESULTS/runs/r$r-off.log; on_log=$RESULTS/runs/r$r-on.log
    line=$(awk -v r="$r" -v f="$first" -v ot="$(tps_of "$off_log")" -v nt="$(tps_of "$on_log")" \
               -v ox="$(txns "$off_log")" -v nx="$(txns "$on_log")" \
               -v oc=$((off1 - off0)) -v nc=$((on1 - on0)) -v a="$admission" \
               'BEGIN { printf "%d,%s,%d,%d,%.3f,%.2f,%.2f,%.3f,%s", r, f, ot, nt, nt / ot,
                        oc / 1000 / ox, nc / 1000 / nx, (oc / ox) / (nc / nx), a }')
    echo "$line" >> "$RESULTS/rounds.csv"
    say "round $r: $(echo "$line" | awk -F, '{ printf "no bpext %s TPS, bpext %s TPS: %s; server CPU per transaction %s us and %s us: %s; admission %s", $3, $4, $5, $6, $7, $8, $9 }')"
    for side in off on; do stop_side "$side"; remove_cgroup "$side"; done
done

{
    cat "$RESULTS/params.txt"
    echo
    echo "| round | started first | no bpext TPS | bpext TPS | TPS, bpext / no bpext | server CPU per transaction, no bpext (us) | with bpext (us) | CPU per transaction, no bpext / bpext | admission at the end |"
    echo "|---|---|---|---|---|---|---|---|---|"
    tail -n +2 "$RESULTS/rounds.csv" | awk -F, '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9 }'
    echo
    echo "Below 1, bpext's server did less: fewer transactions, or more CPU for each."
    echo
    median_of 5 "TPS, bpext / no bpext"
    median_of 8 "CPU per transaction, no bpext / bpext"
} > "$RESULTS/results.md"
cat "$RESULTS/results.md"

#!/usr/bin/env bash
# bpext scale bench: what each operation costs as the tier grows (issue 24).
# See test/bench/README.md, "Scale (make bench-scale)".
#
#   sudo test/bench/scale.sh [options]      (or: sudo make bench-scale BENCH_ARGS="...")
#   sudo PG_CONFIG=/opt/pgpriv/NAME/usr/lib/postgresql/15/bin/pg_config test/bench/scale.sh
#
# It builds bpext with BPEXT_TEST_HOOKS=1 (test-only functions: a sparse
# tier file, a synthetic fill of the map) into the PostgreSQL that
# PG_CONFIG (or PG_MAJOR, default this system's) names, and installs a
# release build there again at exit.  For each real size (a pgbench
# dataset loaded into the tier with bpext_prewarm) and each synthetic size
# (the map filled with bpext_test_fill over a sparse file), it times
# start, enable, resize, stop, warm load, the views, prewarm, flush, drop
# and the DROP DATABASE sweep, and separately the lookup cost per hit and
# per miss (ns with huge_pages off and on, beside the latency of one line
# of the index read after another, the floor a lookup cannot beat;
# instructions under callgrind).
# Every server, hugepage reservation and file it makes is removed at exit.
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
. "$TOP/test/pg_major.sh"
if [ -z "${PG_CONFIG:-}" ] && [ -z "${PG_BINDIR:-}" ]; then
    NATIVE_MAJOR=$(bpext_native_major || true)
    MAJOR=${PG_MAJOR:-$NATIVE_MAJOR}
    [ -n "$MAJOR" ] || { echo "scale: this system ships no supported PostgreSQL major; set PG_MAJOR" >&2; exit 2; }
    bpext_check_majors "$MAJOR" || exit 2
    if ! bpext_major_is_native "$MAJOR"; then
        [ "$(id -u)" -eq 0 ] || { echo "scale: must run as root" >&2; exit 2; }
        BPEXT_COMMIT=$(git -C "$TOP" describe --always --dirty 2>/dev/null || echo unknown)
        export BPEXT_COMMIT
        exec "$TOP/test/pg_chroot.sh" "$MAJOR" /bpext/test/bench/scale.sh "$@"
    fi
    PG_BINDIR=/usr/lib/postgresql/$MAJOR/bin
fi
PG_BINDIR=${PG_BINDIR:-$("$PG_CONFIG" --bindir)}
PG_CONFIG=${PG_CONFIG:-$PG_BINDIR/pg_config}
PGBIN=$PG_BINDIR

# ---------------------------------------------------------------- defaults
REAL_SIZES=1,8          # GB, filled for real (pgbench data + bpext_prewarm); 64 takes hours
SYNTH_SIZES=1024        # GB, filled with bpext_test_fill over a sparse file
LOOKUP_SIZES=auto       # GB, lookup cost on a synthetic map (auto: all of the above)
CALLGRIND_SIZES=1,8     # GB, instructions per lookup under callgrind (the fill runs uninstrumented)
LOOKUPS=2000000         # lookups per timing
CG_LOOKUPS=20000        # lookups under callgrind
HUGE=1                  # also time lookups with huge_pages = on
SHARED_BUFFERS=128MB
PGBENCH_SECONDS=15      # pgbench -S for the worker's CPU
SWEEP_MB=64             # the database made and dropped for the DROP DATABASE sweep
WORKDIR_PARENT=/var/tmp
RESULTS=/tmp/bpext-scale-$(date +%Y%m%d-%H%M%S)
PORT=5498
BUILD=1
KEEP=0
OPS=all                 # operations timed at each measured size

usage() {
    cat <<EOF
Usage: sudo $0 [options]
  --real-sizes LIST       GB filled for real, comma-separated (default $REAL_SIZES; "" for none)
  --synthetic-sizes LIST  GB filled synthetically (default $SYNTH_SIZES; "" for none)
  --lookup-sizes LIST     GB at which to time lookups (default: every size above)
  --callgrind-sizes LIST  GB at which to count instructions per lookup (default $CALLGRIND_SIZES)
  --lookups N             lookups per timing (default $LOOKUPS)
  --no-huge               skip the huge_pages = on timings
  --shared-buffers SIZE   (default $SHARED_BUFFERS)
  --workdir-parent DIR    data directories and tier files (default $WORKDIR_PARENT)
  --results DIR           (default /tmp/bpext-scale-<time>)
  --no-build              use the bpext already installed (it must be a BPEXT_TEST_HOOKS=1 build)
  --keep                  keep the work directory
  --ops LIST              at each measured size only these, after the fill:
                          resize, drop (default all: every operation)
Environment: PG_CONFIG or PG_BINDIR (a PostgreSQL to use, e.g. a private
install), else PG_MAJOR (default: this system's).
EOF
}

while [ $# -gt 0 ]; do
    case $1 in
        --real-sizes) REAL_SIZES=$2; shift ;;
        --synthetic-sizes) SYNTH_SIZES=$2; shift ;;
        --lookup-sizes) LOOKUP_SIZES=$2; shift ;;
        --callgrind-sizes) CALLGRIND_SIZES=$2; shift ;;
        --lookups) LOOKUPS=$2; shift ;;
        --no-huge) HUGE=0 ;;
        --shared-buffers) SHARED_BUFFERS=$2; shift ;;
        --workdir-parent) WORKDIR_PARENT=$2; shift ;;
        --results) RESULTS=$2; shift ;;
        --no-build) BUILD=0 ;;
        --keep) KEEP=1 ;;
        --ops) OPS=$2; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "scale: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
[ "$LOOKUP_SIZES" != auto ] || LOOKUP_SIZES=$(echo "$REAL_SIZES,$SYNTH_SIZES" | tr , '\n' | grep . | sort -nu | paste -sd,)
[ "$(id -u)" -eq 0 ] || { echo "scale: run as root (hugepages, drop_caches, the postgres user)" >&2; exit 2; }
[ -x "$PGBIN/postgres" ] || { echo "scale: no PostgreSQL server in $PGBIN" >&2; exit 2; }
MAJOR=$("$PGBIN/postgres" --version | sed -E 's/.* ([0-9]+)[.].*/\1/')

mkdir -p "$RESULTS"
WORK=$(mktemp -d "$WORKDIR_PARENT/bpext-scale.XXXXXX")
chown postgres "$WORK"
chmod 755 "$RESULTS"
DATA=$WORK/data
LOG=$WORK/server.log
CSV=$RESULTS/results.csv
OLD_HUGEPAGES=$(cat /proc/sys/vm/nr_hugepages)
BUILT=0
exec > >(tee -a "$RESULTS/run.log") 2>&1

has() { [[ ",$1," == *",$2,"* ]]; }
as_pg() { runuser -u postgres -- "$@"; }
psql_at() { as_pg "$PGBIN/psql" -X -h "$WORK" -p "$PORT" -Atq -v ON_ERROR_STOP=1 "$@"; }
q() { psql_at -d postgres -c "$1"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
say() { echo "$(date +%H:%M:%S) $*"; }
# One figure: size label, tier pages, metric, value.
record() { echo "$CUR,$CUR_PAGES,$1,$2" >> "$CSV"; say "   $CUR $1 = $2"; }

stop_server() {
    [ -f "$DATA/postmaster.pid" ] || return 0
    as_pg "$PGBIN/pg_ctl" -D "$DATA" -m fast -w -t 600 stop >/dev/null 2>&1 ||
        as_pg "$PGBIN/pg_ctl" -D "$DATA" -m immediate -w stop >/dev/null 2>&1 || true
}
release_hugepages() { echo "$OLD_HUGEPAGES" > /proc/sys/vm/nr_hugepages; }
cleanup() {
    local rc=$?
    set +e
    ! declare -F pkill_loop >/dev/null || pkill_loop
    stop_server
    release_hugepages
    if [ "$BUILT" = 1 ]; then
        say "installing a release build of bpext again into $($PG_CONFIG --pkglibdir)"
        make -s -C "$WORK/build" clean >/dev/null
        make -s -C "$WORK/build" -j2 PG_CONFIG="$PG_CONFIG" >/dev/null &&
            make -s -C "$WORK/build" PG_CONFIG="$PG_CONFIG" install >/dev/null
    fi
    [ "$KEEP" = 1 ] && say "kept $WORK" || rm -rf "$WORK"
    say "left behind: $(ls -d "$WORK" 2>/dev/null | wc -l) work directory, nr_hugepages $(cat /proc/sys/vm/nr_hugepages) (was $OLD_HUGEPAGES), results in $RESULTS"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- build
if [ "$BUILD" = 1 ]; then
    say "building bpext with BPEXT_TEST_HOOKS=1 for PostgreSQL $MAJOR ($PG_CONFIG)"
    mkdir -p "$WORK/build"
    (cd "$TOP" && tar --exclude=.git --exclude='test/bench/results' -cf - .) | tar -C "$WORK/build" -xf -
    make -s -C "$WORK/build" clean >/dev/null
    make -s -C "$WORK/build" -j2 PG_CONFIG="$PG_CONFIG" BPEXT_TEST_HOOKS=1 >/dev/null
    BUILT=1
    make -s -C "$WORK/build" PG_CONFIG="$PG_CONFIG" BPEXT_TEST_HOOKS=1 install >/dev/null
fi
nm -D "$($PG_CONFIG --pkglibdir)/bpext.so" | grep -c bpext_test_fill >/dev/null ||
    { echo "scale: the installed bpext is not a BPEXT_TEST_HOOKS=1 build" >&2; exit 2; }
# Debian's python3 (python3-matplotlib), not one earlier in PATH.
PY=python3; [ ! -x /usr/bin/python3 ] || PY=/usr/bin/python3
$PY -c 'import matplotlib' 2>/dev/null ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-matplotlib >/dev/null 2>&1 ||
    say "no matplotlib: the table is written, the plot is not"

echo "size,tier_pages,metric,value" > "$CSV"
{
    echo "PostgreSQL $("$PGBIN/postgres" --version | awk '{ print $3 }'), bpext ${BPEXT_COMMIT:-$(git -C "$TOP" describe --always --dirty 2>/dev/null || echo unknown)}"
    echo "$(nproc) CPUs, $(awk '/MemTotal/ { printf "%.0f GB", $2 / 1048576 }' /proc/meminfo) RAM, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start, $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "shared_buffers $SHARED_BUFFERS; real sizes: $REAL_SIZES GB; synthetic: $SYNTH_SIZES GB; $LOOKUPS lookups per timing"
} > "$RESULTS/params.txt"

# ---------------------------------------------------------------- servers
PRISTINE=$WORK/pristine
as_pg "$PGBIN/initdb" -D "$PRISTINE" -A trust >/dev/null
cat >> "$PRISTINE/postgresql.conf" <<EOF
port = $PORT
listen_addresses = ''
unix_socket_directories = '$WORK'
shared_buffers = $SHARED_BUFFERS
max_connections = 50
autovacuum = off
jit = off
max_wal_size = 8GB
checkpoint_timeout = 1h
huge_pages = off
log_line_prefix = '%m [%p] '
include_if_exists = 'bpext_bench.conf'
EOF

# bpext's settings for the next start; "" means not loaded.
set_bpext() {   # max_size_gb [extra lines...]
    local f=$DATA/bpext_bench.conf
    if [ -z "$1" ]; then : > "$f"; else
        printf '%s\n' "shared_preload_libraries = 'bpext'" "bpext.max_size = '${1}GB'" \
            "bpext.path = '$WORK/tier'" "${@:2}" > "$f"
    fi
    chown postgres "$f"
}

# Start and time it until a connection is accepted (pg_isready, every 10 ms).
START_SECONDS=0
start_server() {
    local t0 i
    sync; echo 3 > /proc/sys/vm/drop_caches
    t0=$(now)
    as_pg "$PGBIN/pg_ctl" -D "$DATA" -l "$LOG" -t 600 start >/dev/null
    for i in $(seq 1 60000); do
        as_pg "$PGBIN/pg_isready" -q -h "$WORK" -p "$PORT" && break
        sleep 0.01
    done
    START_SECONDS=$(since "$t0")
    psql_at -d postgres -c "SELECT 1" >/dev/null
}
STOP_SECONDS=0
stop_timed() {
    local t0
    t0=$(now)
    as_pg "$PGBIN/pg_ctl" -D "$DATA" -m fast -w -t 3600 stop >/dev/null
    STOP_SECONDS=$(since "$t0")
}
wait_enabled() {
    local i
    for i in $(seq 1 6000); do
        [ "$(q "SELECT state FROM bpext_configuration")" = 5 ] && return 0
        sleep 0.1
    done
    echo "scale: the tier did not become enabled" >&2; return 1
}
# Seconds after the log position until the warm load's line, and its figure.
wait_warm_load() {   # logpos t0
    local i line
    for i in $(seq 1 36000); do
        line=$(tail -n +"$(($1 + 1))" "$LOG" | grep -E 'warm start: [0-9]+ of [0-9]+ saved tier pages reused|cold start:' | head -1 || true)
        [ -n "$line" ] && break
        sleep 0.1
    done
    record warm_load_wall_s "$(since "$2")"
    record warm_load_logged_s "$(sed -nE 's/.*loaded in ([0-9.]+) s.*/\1/p' <<< "$line")"
    grep -q 'cold start' <<< "$line" && say "   NOTE: $line" || true
}

# pgbench -S in 2-second runs, in the background, until pkill_loop.
LOOP_PID=""
pgbench_loop() {   # tag
    local tag=$1
    mkdir -p "$WORK/pgb-$tag"; chown postgres "$WORK/pgb-$tag"
    touch "$WORK/loop.on"
    (
        i=0
        while [ -f "$WORK/loop.on" ]; do
            i=$((i + 1))
            as_pg "$PGBIN/pgbench" -h "$WORK" -p "$PORT" -n -S -M prepared -c 2 -j 1 -T 2 \
                -l --log-prefix="$WORK/pgb-$tag/r$i" postgres >/dev/null 2>&1 || true
        done
    ) &
    LOOP_PID=$!
    sleep 3
}
pkill_loop() {
    rm -f "$WORK/loop.on"
    [ -z "$LOOP_PID" ] || wait "$LOOP_PID" 2>/dev/null || true
    LOOP_PID=""
}
# The longest transaction that overlapped [t0, t1], in ms, and the longest
# before t0 for comparison.
stall_ms() {   # tag t0 t1
    cat "$WORK/pgb-$1"/r* 2>/dev/null | awk -v a="$2" -v b="$3" '
        { end = $5 + $6 / 1e6; start = end - $3 / 1e6;
          if (end >= a && start <= b) { if ($3 > m) m = $3 }
          else if (end < a && $3 > base) base = $3 }
        END { printf "%.1f %.1f", m / 1000, base / 1000 }'
}
# What the pgbench -S backends wait on: a session samples pg_stat_activity
# every 10 ms while the row in bench_sampling is there.
WAITS_PID=""
waits_start() {
    q "SET client_min_messages = warning;
       CREATE UNLOGGED TABLE IF NOT EXISTS bench_waits (t timestamptz, ev text);
       CREATE UNLOGGED TABLE IF NOT EXISTS bench_sampling ();
       TRUNCATE bench_waits, bench_sampling; INSERT INTO bench_sampling DEFAULT VALUES" >/dev/null
    psql_at -d postgres -c "DO \$\$ BEGIN
        WHILE EXISTS (SELECT FROM bench_sampling) LOOP
            PERFORM pg_stat_clear_snapshot();
            INSERT INTO bench_waits
                SELECT clock_timestamp(), coalesce(wait_event_type || ':' || wait_event, 'CPU')
                FROM pg_stat_activity WHERE application_name = 'pgbench' AND state = 'active';
            PERFORM pg_sleep(0.01);
        END LOOP; END \$\$" >/dev/null &
    WAITS_PID=$!
}
# Writes the samples' counts during [t0, t1] and before t0 to waits-<tag>.txt.
waits_stop() {   # tag t0 t1
    q "DELETE FROM bench_sampling" >/dev/null
    wait "$WAITS_PID" || true
    WAITS_PID=""
    {
        echo "during:"
        q "SELECT ev, count(*) FROM bench_waits WHERE t BETWEEN to_timestamp($2) AND to_timestamp($3) GROUP BY ev ORDER BY 2 DESC"
        echo "before:"
        q "SELECT ev, count(*) FROM bench_waits WHERE t < to_timestamp($2) GROUP BY ev ORDER BY 2 DESC"
    } > "$RESULTS/waits-$CUR-$1.txt"
    say "   $CUR $1 waits: $(tr '\n' ' ' < "$RESULTS/waits-$CUR-$1.txt")"
}
# Time an SQL statement while pgbench -S runs; records <metric>_s and <metric>_stall_ms.
# With want_kb, a statement that gives up waiting for the worker (an ERROR)
# is noted (<metric>_gave_up) and the time is until the worker has applied
# the size.
timed_under_load() {   # metric sql [want_kb]
    local t0 t1 s i
    waits_start
    pgbench_loop "$1"
    t0=$(now)
    if ! q "$2" >/dev/null; then
        [ -n "${3:-}" ] || { pkill_loop; return 1; }
        record "$1_gave_up_s" "$(since "$t0")"
        for i in $(seq 1 36000); do
            [ "$(q "SELECT state = 5 AND current_size_in_kb = $3 FROM bpext_configuration")" = t ] && break
            sleep 0.1
        done
    fi
    t1=$(now)
    sleep 3
    pkill_loop
    waits_stop "$1" "$t0" "$t1"
    record "$1_s" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')"
    read -r s base <<< "$(stall_ms "$1" "$t0" "$t1")"
    record "$1_stall_ms" "$s"
    record "$1_baseline_max_ms" "$base"
}
timed_sql() {   # metric sql [db]; echoes the result into LAST
    local t0
    t0=$(now)
    LAST=$(psql_at -d "${3:-postgres}" -c "$2")
    record "$1" "$(since "$t0")"
}
worker_cpu() {   # the bpext tier worker's CPU seconds per second under pgbench -S
    local pid a b t0 hz
    pid=$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'bpext tier worker'")
    [ -n "$pid" ] || { say "   no bpext tier worker"; return 0; }
    hz=$(getconf CLK_TCK)
    a=$(awk '{ print $14 + $15 }' "/proc/$pid/stat"); t0=$(now)
    as_pg "$PGBIN/pgbench" -h "$WORK" -p "$PORT" -n -S -M prepared -c 4 -j 2 -T "$PGBENCH_SECONDS" postgres > "$RESULTS/pgbench-$CUR.log" 2>&1
    b=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
    record worker_cpu_per_s "$(awk -v a="$a" -v b="$b" -v hz="$hz" -v t="$(since "$t0")" 'BEGIN { printf "%.4f", (b - a) / hz / t }')"
    record pgbench_S_tps "$(sed -nE 's/^tps = ([0-9.]+).*/\1/p' "$RESULTS/pgbench-$CUR.log" | head -1)"
}
# Bytes the tier worker and its helpers (its children) have written.
worker_written_bytes() {
    local pid p v total=0
    pid=$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'bpext tier worker'")
    [ -n "$pid" ] || { echo 0; return 0; }
    for p in $pid $(ps -o pid= --ppid "$pid"); do
        v=$(awk '/^wchar:/ { print $2 }' "/proc/$p/io" 2>/dev/null || true)
        total=$((total + ${v:-0}))
    done
    echo "$total"
}
views() {
    local rows
    local t
    timed_sql descriptors_count_s "SELECT count(*) FROM bpext_buffer_descriptors"
    t=$(tail -1 "$CSV" | cut -d, -f4)
    rows=$LAST
    record descriptors_rows "$rows"
    record descriptors_rows_per_s "$(awk -v r="$rows" -v t="$t" 'BEGIN { printf "%.0f", r / (t > 0 ? t : 1) }')"
    timed_sql relation_buffers_s "SELECT count(*) FROM bpext_relation_buffers"
    if [ "$(q "SELECT count(*) FROM pg_class WHERE relname = 'bpext_buffer_summary'")" != 0 ]; then
        timed_sql buffer_summary_s "SELECT count(*) FROM bpext_buffer_summary"
    fi
}
# DROP DATABASE of a database with SWEEP_MB in the tier: the sweep of the map.
drop_database_sweep() {
    q "DROP DATABASE IF EXISTS bpext_sweep" >/dev/null
    q "CREATE DATABASE bpext_sweep" >/dev/null
    psql_at -d bpext_sweep -c "CREATE EXTENSION IF NOT EXISTS bpext" \
        -c "CREATE TABLE t AS SELECT g AS id, repeat('x', 900) AS pad FROM generate_series(1, $((SWEEP_MB * 8))) g" \
        -c "SELECT bpext_prewarm('t')" >/dev/null
    timed_sql drop_database_s "DROP DATABASE bpext_sweep"
}
prewarm_pgbench() {   # records prewarm MB/s
    local t0 pages
    t0=$(now)
    pages=$(q "SELECT sum(bpext_prewarm(c.oid)) FROM pg_class c WHERE c.relname IN ('pgbench_accounts', 'pgbench_accounts_pkey')")
    local s; s=$(since "$t0")
    record prewarm_pages "$pages"
    record prewarm_s "$s"
    record prewarm_MB_per_s "$(awk -v p="$pages" -v s="$s" 'BEGIN { printf "%.1f", p * 8192 / 1048576 / s }')"
}
shm_figures() {
    record map_bytes_per_page "$(q "SELECT map_bytes_per_page FROM bpext_configuration")"
    record shared_memory_MB "$(q "SELECT setting FROM pg_settings WHERE name = 'shared_memory_size'")"
    record allocated_pages "$(q "SELECT allocated_pages FROM bpext_configuration")"
}
save_line() {   # logpos
    tail -n +"$(($1 + 1))" "$LOG" | sed -nE 's/.*saved the tier map at shutdown: .* in ([0-9]+) ms.*/\1/p' | tail -1
}
new_cluster() {   # pgbench scale
    stop_server
    rm -rf "$DATA" "$WORK/tier"
    cp -a "$PRISTINE" "$DATA"
    set_bpext ""
    start_server
    say "   pgbench -i -s $1"
    as_pg "$PGBIN/pgbench" -h "$WORK" -p "$PORT" -i -q -I dtGvp -s "$1" postgres >/dev/null 2>&1
    q "CHECKPOINT" >/dev/null
}

resize_both() {   # gb half
    timed_under_load resize_down "SELECT bpext_resize('${2}GB')" $(($2 * 1048576))
    timed_under_load resize_up "SELECT bpext_resize('${1}GB')" $(($1 * 1048576))
}
# With the data files in the page cache: the queries read what the drop
# takes from shared buffers from there, so that their longest wait is the
# drop's doing, not the data disk's (a cold read here takes up to 170 ms).
# And what the tier worker and its helpers wrote from the drop's start until
# 15 s after its end (once they have written what came before: under 1 MB
# in 2 s) (their write calls, wchar: the slot directory chunks,
# pages pushed meanwhile, messages between them), beside the tier page
# bytes bpext_stats counts over the same time.
drop_clean() {
    local w0 b0 i
    find "$DATA/base" -type f -exec cat {} + > /dev/null
    # The fill's own directory writes first, so that they are not counted.
    w0=$(worker_written_bytes)
    for i in $(seq 1 300); do
        sleep 2
        b0=$(worker_written_bytes)
        [ $((b0 - w0)) -lt 1048576 ] && break
        w0=$b0
    done
    w0=$(worker_written_bytes)
    b0=$(q "SELECT bytes_written FROM bpext_stats")
    timed_under_load drop_clean_buffers "SELECT bpext_drop_clean_buffers()"
    sleep 15
    record drop_clean_worker_written_MB "$(( ($(worker_written_bytes) - w0) / 1048576 ))"
    record drop_clean_tier_pages_written_MB "$(( ($(q "SELECT bytes_written FROM bpext_stats") - b0) / 1048576 ))"
}

# The operations at one size.  fill: "real" (prewarm pgbench data) or
# "synthetic" (bpext_test_fill over a sparse file).
measure_size() {   # gb fill
    local gb=$1 fill=$2 pages scale logpos t0 half
    CUR="${gb}GB-$fill"
    CUR_PAGES=$((gb * 131072 - 1))
    half=$((gb / 2)); [ "$half" -ge 1 ] || half=1
    say "== $CUR ($CUR_PAGES tier pages)"
    if [ "$fill" = real ]; then
        # The dataset is about 90% of the tier (15 MB per pgbench scale unit).
        scale=$((gb * 1024 * 9 / 10 / 15)); [ "$scale" -ge 1 ] || scale=1
    else
        scale=10
    fi
    new_cluster "$scale"
    stop_timed; record stop_without_bpext_s "$STOP_SECONDS"
    start_server; record start_without_bpext_s "$START_SECONDS"
    stop_timed
    if [ "$fill" = real ]; then
        set_bpext "$gb" "bpext.size = 0"
    else
        set_bpext "$gb" "bpext.size = 0" "bpext.test_sparse_file = on"
    fi
    start_server; record start_cold_s "$START_SECONDS"
    q "CREATE EXTENSION IF NOT EXISTS bpext" >/dev/null
    q "CREATE EXTENSION IF NOT EXISTS pg_prewarm" >/dev/null
    psql_at -d postgres -f "$TOP/test/sql/bpext_test.sql" >/dev/null
    timed_under_load enable "SELECT bpext_enable('$WORK/tier', '${gb}GB')"
    wait_enabled
    shm_figures
    if [ "$fill" = real ]; then
        prewarm_pgbench
    else
        # Prewarm first: a map full of pages used once gives no slot to a
        # prewarm within its tries (tier_map_alloc_slot's ALLOC_MAX_TRIES).
        prewarm_pgbench
        timed_sql synthetic_fill_s "SELECT bpext_test_fill($CUR_PAGES)"
        record synthetic_filled "$LAST"
    fi
    record allocated_pages_filled "$(q "SELECT allocated_pages FROM bpext_configuration")"
    if [ "$OPS" != all ]; then
        ! has "$OPS" resize || resize_both "$gb" "$half"
        ! has "$OPS" drop || drop_clean
        stop_server
        return 0
    fi
    views
    worker_cpu
    resize_both "$gb" "$half"
    # Full again for the stop and the warm start.
    if [ "$fill" = real ]; then
        q "SELECT sum(bpext_prewarm(c.oid)) FROM pg_class c WHERE c.relname IN ('pgbench_accounts', 'pgbench_accounts_pkey')" >/dev/null
    else
        q "SELECT bpext_test_fill($CUR_PAGES)" >/dev/null
    fi
    record allocated_pages_at_stop "$(q "SELECT allocated_pages FROM bpext_configuration")"
    logpos=$(wc -l < "$LOG")
    stop_timed; record stop_s "$STOP_SECONDS"
    record stop_save_logged_ms "$(save_line "$logpos")"
    logpos=$(wc -l < "$LOG")
    t0=$(now)
    start_server; record start_warm_s "$START_SECONDS"
    wait_warm_load "$logpos" "$t0"
    record pages_reused "$(q "SELECT pages_reused FROM bpext_configuration")"
    timed_sql flush_s "SELECT bpext_flush()"
    drop_database_sweep
    drop_clean
    stop_server
}

# Lookup cost on a map holding synthetic pages only: ns per hit and per
# miss with huge_pages off, then (after a warm restart, which reloads the
# same map) on.
lookup_cost() {   # gb
    local gb=$1 logpos t0 need
    CUR="${gb}GB-lookup"
    CUR_PAGES=$((gb * 131072 - 1))
    say "== $CUR"
    stop_server
    rm -rf "$DATA" "$WORK/tier"
    cp -a "$PRISTINE" "$DATA"
    set_bpext "$gb" "bpext.size = '${gb}GB'" "bpext.test_sparse_file = on"
    start_server
    q "CREATE EXTENSION IF NOT EXISTS bpext" >/dev/null
    psql_at -d postgres -f "$TOP/test/sql/bpext_test.sql" >/dev/null
    wait_enabled
    q "SELECT bpext_test_fill($CUR_PAGES)" >/dev/null
    record lookup_hit_ns "$(q "SELECT round(bpext_test_lookup_cost($LOOKUPS, true)::numeric, 1)")"
    record lookup_miss_ns "$(q "SELECT round(bpext_test_lookup_cost($LOOKUPS, false)::numeric, 1)")"
    record lookup_line_ns "$(q "SELECT round(bpext_test_line_cost($LOOKUPS)::numeric, 1)")"
    [ "$HUGE" = 1 ] || { stop_server; return 0; }
    stop_server
    need=$(as_pg "$PGBIN/postgres" -D "$DATA" -C shared_memory_size_in_huge_pages 2>/dev/null || echo 0)
    echo $((need + 16)) > /proc/sys/vm/nr_hugepages
    if [ "$(cat /proc/sys/vm/nr_hugepages)" -lt "$need" ]; then
        say "   could not reserve $need huge pages (got $(cat /proc/sys/vm/nr_hugepages)): no huge_pages = on figures"
        release_hugepages
        return 0
    fi
    echo "huge_pages = on" >> "$DATA/bpext_bench.conf"
    logpos=$(wc -l < "$LOG"); t0=$(now)
    start_server
    wait_warm_load "$logpos" "$t0"
    record lookup_huge_hit_ns "$(q "SELECT round(bpext_test_lookup_cost($LOOKUPS, true)::numeric, 1)")"
    record lookup_huge_miss_ns "$(q "SELECT round(bpext_test_lookup_cost($LOOKUPS, false)::numeric, 1)")"
    record lookup_huge_line_ns "$(q "SELECT round(bpext_test_line_cost($LOOKUPS)::numeric, 1)")"
    stop_server
    release_hugepages
}

# Instructions per lookup: the server under callgrind, counting only inside
# test_hooks.c's lookup_loop (--toggle-collect).  The fill runs under
# callgrind too, which makes a terabyte (134M pages) take very long.  With
# its cache simulation, the data reads that miss the last-level cache per
# lookup too (DLmr: the simulated cache is this CPU's, so a map larger
# than it shows the cache lines a lookup must wait for, a count that no
# load on the machine changes).
lookup_instructions() {   # gb
    local gb=$1 pid hit f n i kind ll
    CUR="${gb}GB-lookup"
    CUR_PAGES=$((gb * 131072 - 1))
    command -v valgrind >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
    say "== $CUR under callgrind"
    stop_server
    rm -rf "$DATA" "$WORK/tier" "$WORK/cg"
    cp -a "$PRISTINE" "$DATA"
    mkdir -p "$WORK/cg"; chown postgres "$WORK/cg"
    set_bpext "$gb" "bpext.size = '${gb}GB'" "bpext.test_sparse_file = on" "bpext.warm_restart = off"
    as_pg valgrind --tool=callgrind --collect-atstart=no --cache-sim=yes \
        --toggle-collect='*lookup_loop*' --callgrind-out-file="$WORK/cg/cg.%p" \
        "$PGBIN/postgres" -D "$DATA" > "$WORK/cg/valgrind.log" 2>&1 &
    for i in $(seq 1 600); do
        as_pg "$PGBIN/pg_isready" -q -h "$WORK" -p "$PORT" && break
        sleep 1
    done
    q "CREATE EXTENSION IF NOT EXISTS bpext" >/dev/null
    psql_at -d postgres -f "$TOP/test/sql/bpext_test.sql" >/dev/null
    wait_enabled
    q "SELECT bpext_test_fill($CUR_PAGES)" >/dev/null
    for hit in true false; do
        # One session; its counts are written when it exits.
        pid=$(psql_at -d postgres -c "SELECT pg_backend_pid()" \
            -c "SELECT bpext_test_lookup_cost($CG_LOOKUPS, $hit)" | sed -n 1p)
        sleep 2
        f="$WORK/cg/cg.$pid"
        kind=$([ "$hit" = true ] && echo hit || echo miss)
        # The events line names the columns of the summary line.
        awk -v k="$CG_LOOKUPS" '
            /^events:/ { for (i = 2; i <= NF; i++) col[$i] = i }
            /^(summary|totals):/ && !done {
                printf "%.0f %.2f\n", $(col["Ir"]) / k, $(col["DLmr"]) / k; done = 1 }' \
            "$f" 2>/dev/null > "$WORK/cg/per-lookup" || true
        read -r n ll < "$WORK/cg/per-lookup" || { n=""; ll=""; }
        record "lookup_${kind}_instructions" "$n"
        record "lookup_${kind}_llc_misses" "$ll"
    done
    stop_server
}

for gb in ${REAL_SIZES//,/ }; do measure_size "$gb" real; done
for gb in ${SYNTH_SIZES//,/ }; do measure_size "$gb" synthetic; done
for gb in ${LOOKUP_SIZES//,/ }; do lookup_cost "$gb"; done
for gb in ${CALLGRIND_SIZES//,/ }; do lookup_instructions "$gb"; done

$PY "$HERE/scale_report.py" "$RESULTS" || say "the report failed; the figures are in $CSV"

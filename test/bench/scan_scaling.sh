#!/usr/bin/env bash
# Scan scaling of bpext's worker pool: a full bpext_buffer_descriptors scan
# (and a bpext_prewarm) with bpext.parallel_scan off and on, side by side in
# one run, for each pool size in --workers.  See test/bench/README.md.
#
#   test/bench/scan_scaling.sh [--shared-buffers 2GB] [--tier-size 1GB]
#                              [--workers "1 2 4"] [--rounds 7]
#
# Runs as root (the server runs as postgres) or as postgres, against an
# installed bpext.  The throwaway cluster lives under --workdir and is
# removed at exit, also on failure.  PG_MAJOR picks the major (default: the
# one this Debian release ships; another one runs in test/pg_chroot.sh's
# chroot, as root, which builds and installs bpext there first).
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
. "$TOP/test/pg_major.sh"
NATIVE_MAJOR=$(bpext_native_major || true)
MAJOR=${PG_MAJOR:-$NATIVE_MAJOR}
[ -n "$MAJOR" ] || { echo "scan_scaling: this system ships no supported PostgreSQL major; set PG_MAJOR" >&2; exit 2; }
bpext_check_majors "$MAJOR" || exit 2
if [ -z "${PGBIN:-}" ] && ! bpext_major_is_native "$MAJOR"; then
    exec "$TOP/test/pg_chroot.sh" "$MAJOR" bash -c \
        'build=$(mktemp -d) && cp -r /bpext/. "$build/" && rm -rf "$build/test/bench/results" &&
         make -C "$build" -s PG_CONFIG=/usr/lib/postgresql/$PG_MAJOR/bin/pg_config clean all install >/dev/null &&
         rm -rf "$build" &&
         exec /bpext/test/bench/scan_scaling.sh "$@"' scan_scaling "$@"
fi
PGBIN=${PGBIN:-/usr/lib/postgresql/$MAJOR/bin}

SHARED_BUFFERS=2GB
TIER_SIZE=1GB
WORKERS="1 2 4"
ROUNDS=7
PORT=5497
WORKDIR_PARENT=/var/tmp
RESULTS=""

usage() {
    cat <<EOF
Usage: $0 [options]
  --shared-buffers SIZE  shared_buffers, filled before measuring (default $SHARED_BUFFERS)
  --tier-size SIZE       bpext.size, filled with bpext_prewarm (default $TIER_SIZE)
  --workers "N ..."      pool sizes to measure, one restart each (default "$WORKERS")
  --rounds N             serial/parallel pairs per pool size (default $ROUNDS)
  --port N               server port (default $PORT)
  --workdir DIR          parent of the throwaway cluster (default $WORKDIR_PARENT)
  --results DIR          where results go (default test/bench/results/scan-<time>)
EOF
}

while [ $# -gt 0 ]; do
    case "$1" in
        --shared-buffers) SHARED_BUFFERS=$2; shift 2 ;;
        --tier-size) TIER_SIZE=$2; shift 2 ;;
        --workers) WORKERS=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --port) PORT=$2; shift 2 ;;
        --workdir) WORKDIR_PARENT=$2; shift 2 ;;
        --results) RESULTS=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done

RESULTS=${RESULTS:-$HERE/results/scan-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$RESULTS"
WORK=$(mktemp -d "$WORKDIR_PARENT/bpext-scan.XXXXXX")
DATA=$WORK/data

as_pg() {
    if [ "$(id -un)" = postgres ]; then "$@"; else runuser -u postgres -- "$@"; fi
}
sql() { as_pg "$PGBIN/psql" -h "$WORK" -p "$PORT" -X -q -At -v ON_ERROR_STOP=1 -d postgres "$@"; }

cleanup() {
    as_pg "$PGBIN/pg_ctl" -D "$DATA" stop -m immediate >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
[ "$(id -u)" = 0 ] && chown postgres "$WORK"

as_pg "$PGBIN/initdb" -D "$DATA" -A trust >/dev/null
cat >> "$DATA/postgresql.conf" <<EOF
shared_preload_libraries = 'bpext'
shared_buffers = $SHARED_BUFFERS
port = $PORT
unix_socket_directories = '$WORK'
listen_addresses = ''
max_worker_processes = 16
bpext.path = '$WORK/tier.bin'
bpext.size = '$TIER_SIZE'
bpext.max_size = '$TIER_SIZE'
EOF

# Rows of about 660 bytes: enough of them to fill shared buffers and the tier.
sb_mb=$(numfmt --from=iec "${SHARED_BUFFERS%B}" | awk '{print int($1/1048576)}')
tier_mb=$(numfmt --from=iec "${TIER_SIZE%B}" | awk '{print int($1/1048576)}')
rows=$(( (sb_mb + tier_mb) * 1600 ))

echo "workers,mode,client_ms,scan_ms,parallel_tasks,rows" > "$RESULTS/rounds.csv"
echo "workers,serial_ms,parallel_ms,speedup,serial_scan_ms,parallel_scan_ms,parallel_tasks,rows,prewarm_serial_ms,prewarm_parallel_ms" > "$RESULTS/scan.csv"
first=1
for w in $WORKERS; do
    sed -i "/^bpext.scan_workers/d" "$DATA/postgresql.conf"
    echo "bpext.scan_workers = $w" >> "$DATA/postgresql.conf"
    as_pg "$PGBIN/pg_ctl" -D "$DATA" -l "$WORK/log" -w start >/dev/null
    if [ $first = 1 ]; then
        sql -c "CREATE EXTENSION bpext" -c "CREATE EXTENSION pg_prewarm" \
            -c "CREATE TABLE big AS SELECT g, repeat('x', 600) AS pad FROM generate_series(1, $rows) g"
        first=0
    fi
    # Wait for the pool and the tier.
    for _ in $(seq 100); do
        ready=$(sql -c "SELECT (SELECT count(*) FROM pg_stat_activity
                                 WHERE backend_type = 'bpext scan worker') >= $w
                           AND (SELECT state FROM bpext_configuration) = 5")
        [ "$ready" = t ] && break
        sleep 0.2
    done
    # bpext_prewarm, serial and parallel, each into an emptied tier (the
    # first, unmeasured, writes the whole tier file once).
    sql -c "SELECT bpext_prewarm('big')" >/dev/null
    for r in 1 2 3; do
        for mode in off on; do
            pw=$(sql -c "SELECT bpext_drop_clean_buffers()" -c "SET bpext.parallel_scan = $mode" \
                     -c "SELECT bpext_prewarm('big')" \
                     -c "SELECT round(elapsed_ms) FROM bpext_scan_history ORDER BY scan_id DESC LIMIT 1" | tail -1)
            echo "$w,$mode,$pw" >> "$RESULTS/prewarm.csv"
        done
    done
    pw_ser=$(awk -F, -v w="$w" '$1 == w && $2 == "off" {print $3}' "$RESULTS/prewarm.csv" | sort -n | sed -n 2p)
    pw_par=$(awk -F, -v w="$w" '$1 == w && $2 == "on" {print $3}' "$RESULTS/prewarm.csv" | sort -n | sed -n 2p)
    sql -c "SELECT pg_prewarm('big')" >/dev/null

    # Serial and parallel alternate, so that drift hits both alike.
    for r in $(seq "$ROUNDS"); do
        for mode in off on; do
            t=$(sql -c "SET bpext.parallel_scan = $mode" -c "\\timing on" \
                    -c "SELECT count(*) FROM bpext_buffer_descriptors" | awk '/^Time:/ {print $2}')
            h=$(sql -c "SELECT round(elapsed_ms::numeric, 1), parallel_tasks, scanned_buffers FROM bpext_scan_history ORDER BY scan_id DESC LIMIT 1" | tr '|' ',')
            echo "$w,$mode,$t,$h" >> "$RESULTS/rounds.csv"
        done
    done
    as_pg "$PGBIN/pg_ctl" -D "$DATA" stop >/dev/null
    python3 - "$RESULTS/rounds.csv" "$w" "$pw_ser" "$pw_par" >> "$RESULTS/scan.csv" <<'EOF'
import csv, statistics, sys
path, w, pw_ser, pw_par = sys.argv[1:5]
rows = [r for r in csv.reader(open(path)) if r[0] == w]
def med(mode, col):
    return statistics.median(float(r[col]) for r in rows if r[1] == mode)
s, p = med('off', 2), med('on', 2)
print(f"{w},{s:.1f},{p:.1f},{s / p:.2f},{med('off', 3):.1f},{med('on', 3):.1f},"
      f"{med('on', 4):.0f},{med('on', 5):.0f},{pw_ser},{pw_par}")
EOF
    tail -1 "$RESULTS/scan.csv"
done

{
    echo "# Scan scaling, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "shared_buffers $SHARED_BUFFERS (full), tier $TIER_SIZE (full), $(nproc) CPUs, medians of $ROUNDS alternating rounds."
    echo "Command: test/bench/scan_scaling.sh --shared-buffers $SHARED_BUFFERS --tier-size $TIER_SIZE --workers \"$WORKERS\" --rounds $ROUNDS"
    echo
    echo "| scan workers | serial ms | parallel ms | speedup | parallel_tasks | rows | prewarm serial ms | prewarm parallel ms |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
    tail -n +2 "$RESULTS/scan.csv" | awk -F, '{printf "| %s | %s | %s | %sx | %s | %s | %s | %s |\n", $1, $2, $3, $4, $7, $8, $9, $10}'
} > "$RESULTS/scan.md"
cat "$RESULTS/scan.md"

#!/usr/bin/env bash
# How close is the sizing advisor (bpext_sizing) to the tier it predicts?
# For each workload: a run with the tier off measures the pages the
# workload touches (bpext_sizing_window.pages_touched, its hot set); then,
# for each fraction of that hot set, a run with a cold tier of that size
# compares the tier's measured hit ratio (bpext_stats: hits over lookups,
# the shared-buffer misses it served) with the advisor's estimate for the
# same size over the same window (the row of bpext_sizing for the current
# tier), and the whole predicted curve is kept for the plot; beside them,
# the share of the pages leaving shared buffers that the bpext worker
# failed to push (missed_pushes over pages_pushed plus missed_pushes),
# which moves the tier's hit ratio and which the model does not know
# (doc/sizing.md, Accuracy).  Every run
# starts from a fresh copy of one pgbench dataset.  Adaptive admission is
# off: the dataset is in the page cache, where the tier pauses admission
# after a few seconds by design, and the curve is that of a tier that
# admits (what a server whose data is not in RAM has).  Hit ratios are counts,
# not times, so this is not a timed benchmark: a busy machine runs fewer
# transactions, not different ratios.
#
#   sudo test/bench/sizing_accuracy.sh [--scale N] [--duration S]
#        [--shared-buffers MB] [--workloads select,skew,skewrw,tpcb]
#        [--fractions "0.25 0.5 1"] [--sample-rate R]
#        [--samples-per-second N] [--no-build]
#
# PGBIN picks the PostgreSQL binaries (default: the native major's).
# Results: test/bench/results/sizing-<timestamp>/ (accuracy.tsv, the
# curves in curves.tsv, and a log).
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
. "$TOP/test/pg_major.sh"
MAJOR=${PG_MAJOR:-$(bpext_native_major)}
PGBIN=${PGBIN:-/usr/lib/postgresql/$MAJOR/bin}

SCALE=30
DURATION=60
SHARED_BUFFERS=16
WORKLOADS=select,skew,skewrw,tpcb
FRACTIONS="0.25 0.5 1"
SAMPLE_RATE=1.0          # the server's defaults
SAMPLES_PER_SECOND=20000
CLIENTS=4
SKEW=exponential:4
SKEW_UPDATE_PCT=20
PORT=5498
BUILD=1

usage() {
    sed -n '2,/^set -E/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit "${1:-0}"
}
while [ $# -gt 0 ]; do
    case "$1" in
        --scale) SCALE=$2; shift ;;
        --duration) DURATION=$2; shift ;;
        --shared-buffers) SHARED_BUFFERS=$2; shift ;;
        --workloads) WORKLOADS=$2; shift ;;
        --fractions) FRACTIONS=$2; shift ;;
        --sample-rate) SAMPLE_RATE=$2; shift ;;
        --samples-per-second) SAMPLES_PER_SECOND=$2; shift ;;
        --clients) CLIENTS=$2; shift ;;
        --no-build) BUILD=0 ;;
        --help|-h) usage 0 ;;
        *) echo "sizing_accuracy: unknown option $1" >&2; usage 2 >&2 ;;
    esac
    shift
done
for w in ${WORKLOADS//,/ }; do
    [[ $w =~ ^(select|skew|skewrw|tpcb)$ ]] ||
        { echo "sizing_accuracy: unknown workload $w" >&2; exit 2; }
done
[ "$(id -u)" -eq 0 ] || { echo "sizing_accuracy: run as root (the servers run as postgres)" >&2; exit 2; }

WORK=$(mktemp -d /var/tmp/bpext-sizing.XXXXXX)
chmod 755 "$WORK"
RESULTS=$TOP/test/bench/results/sizing-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$RESULTS"
LOG=$RESULTS/log
as_pg() { runuser -u postgres -- "$@"; }
psql_at() { as_pg "$PGBIN/psql" -X -h "$WORK" -p "$PORT" -Atq -v ON_ERROR_STOP=1 -d postgres "$@"; }
cleanup() {
    [ -f "$WORK/run/postmaster.pid" ] && as_pg "$PGBIN/pg_ctl" -D "$WORK/run" -m immediate stop >/dev/null 2>&1
    rm -rf "$WORK"
}
trap cleanup EXIT
say() { echo "$*" | tee -a "$LOG"; }

if [ "$BUILD" = 1 ]; then
    build=$(mktemp -d)
    tar -C "$TOP" --exclude=./.git --exclude=./test/bench/results -cf - . | tar -C "$build" -xf -
    make -C "$build" -s PG_CONFIG="$PGBIN/pg_config" clean
    make -C "$build" -s PG_CONFIG="$PGBIN/pg_config"
    make -C "$build" -s PG_CONFIG="$PGBIN/pg_config" install
    rm -rf "$build"
fi

# The dataset, built once.
chown postgres "$WORK"
as_pg "$PGBIN/initdb" -D "$WORK/base" -A trust -U postgres >/dev/null
cat >> "$WORK/base/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$WORK'
port = $PORT
shared_buffers = ${SHARED_BUFFERS}MB
shared_preload_libraries = 'bpext'
bpext.path = '$WORK/tier/bpext.tier'
bpext.max_size = 4GB
bpext.min_free_space = 0
bpext.warm_restart = off
bpext.sizing_sample_rate = $SAMPLE_RATE
bpext.sizing_samples_per_second = $SAMPLES_PER_SECOND
bpext.adaptive_admission = off
max_wal_size = 4GB
checkpoint_timeout = 30min
CONF
as_pg mkdir "$WORK/tier"
as_pg "$PGBIN/pg_ctl" -D "$WORK/base" -l "$WORK/base.log" -w start >/dev/null
psql_at -c 'CREATE EXTENSION bpext'
as_pg "$PGBIN/pgbench" -h "$WORK" -p "$PORT" -i -q -s "$SCALE" postgres >/dev/null 2>&1
psql_at -c 'VACUUM ANALYZE' -c CHECKPOINT
as_pg "$PGBIN/pg_ctl" -D "$WORK/base" -w stop >/dev/null
naccounts=$((SCALE * 100000))

SKEW_DIST=${SKEW%%:*}; SKEW_PARAM=${SKEW#*:}
cat > "$WORK/skew.sql" <<SQL
\\set aid random_${SKEW_DIST}(1, $naccounts, $SKEW_PARAM)
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
SQL
cat > "$WORK/skewrw_update.sql" <<SQL
\\set aid random_${SKEW_DIST}(1, $naccounts, $SKEW_PARAM)
\\set delta random(-5000, 5000)
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
SQL
chown postgres "$WORK"/*.sql

# start_run TIER_MB: a fresh copy of the dataset, started with a cold tier
# of that size (0: off), the advisor and the counters reset.
start_run() {
    local tier_mb=$1
    [ -d "$WORK/run" ] && rm -rf "$WORK/run"
    rm -f "$WORK/tier/bpext.tier"
    cp -a "$WORK/base" "$WORK/run"
    echo "bpext.size = ${tier_mb}MB" >> "$WORK/run/postgresql.conf"
    as_pg "$PGBIN/pg_ctl" -D "$WORK/run" -l "$WORK/run.log" -w start >/dev/null
    if [ "$tier_mb" -gt 0 ]; then
        local state i
        for i in $(seq 1 300); do
            state=$(psql_at -c "SELECT state FROM bpext_configuration")
            [ "$state" = 5 ] && break
            sleep 0.2
        done
        [ "$state" = 5 ] || { say "the tier did not come on (state $state)"; tail -n 20 "$WORK/run.log"; exit 1; }
    fi
    psql_at -c 'SELECT bpext_sizing_reset(), bpext_stats_reset()' >/dev/null
}
stop_run() { as_pg "$PGBIN/pg_ctl" -D "$WORK/run" -w stop >/dev/null; }

run_workload() {
    local w=$1 args
    case "$w" in
        select) args=(-S) ;;
        skew) args=(-f "$WORK/skew.sql") ;;
        skewrw) args=(-f "$WORK/skew.sql@$((100 - SKEW_UPDATE_PCT))"
                      -f "$WORK/skewrw_update.sql@$SKEW_UPDATE_PCT") ;;
        tpcb) args=() ;;
    esac
    as_pg "$PGBIN/pgbench" -h "$WORK" -p "$PORT" -n -M prepared -c "$CLIENTS" -j 2 \
        -T "$DURATION" "${args[@]}" postgres 2>&1 | grep -E '^(number of transactions actually|tps)' |
        head -n 2 | tr '\n' ' ' >> "$LOG"
    echo >> "$LOG"
}

printf 'workload\thot_set_pages\tfraction\ttier_pages\tmisses\tmeasured\tpredicted\tdifference_points\tdual_written\tadmission_skips\tsample_rate\tsampled_pages\tmissed_push_share\n' > "$RESULTS/accuracy.tsv"
printf 'workload\tfraction\ttier_pages_run\tcurve_tier_pages\tpredicted\n' > "$RESULTS/curves.tsv"
say "sizing accuracy: PostgreSQL $MAJOR, scale $SCALE, shared_buffers ${SHARED_BUFFERS}MB, $CLIENTS clients, ${DURATION}s per run, sample rate $SAMPLE_RATE, at most $SAMPLES_PER_SECOND sampled references a second, skew $SKEW"
for w in ${WORKLOADS//,/ }; do
    start_run 0
    run_workload "$w"
    hot=$(psql_at -c 'SELECT pages_touched FROM bpext_sizing_window')
    psql_at -F $'\t' -c "SELECT '$w', 0, 0, tier_pages, hit_ratio FROM bpext_sizing" >> "$RESULTS/curves.tsv"
    stop_run
    say "$w: the tier off touched $hot pages"
    for f in $FRACTIONS; do
        tier_mb=$(awk -v h="$hot" -v f="$f" 'BEGIN { m = h * f * 8192 / 1048576; printf "%d", (m == int(m)) ? m : int(m) + 1 }')
        start_run "$tier_mb"
        run_workload "$w"
        # The advisor's own row for the current tier (bpext_sizing has one).
        IFS=$'\t' read -r tier_pages predicted lookups hits written skipped rate sampled pushed missed stats_json < <(psql_at -F $'\t' -c "
            SELECT z.tier_pages, z.hit_ratio, s.lookups, s.hits,
                   s.pages_dual_written, s.admission_skips,
                   round(w.sample_rate::numeric, 4), w.sampled_pages,
                   s.pages_pushed, s.missed_pushes,
                   row_to_json(s)
              FROM bpext_configuration c, bpext_stats s, bpext_sizing z,
                   bpext_sizing_window w
             ORDER BY abs(z.tier_pages - c.current_size_in_kb / 8) LIMIT 1")
        psql_at -F $'\t' -c "SELECT '$w', $f, $tier_pages, tier_pages, hit_ratio FROM bpext_sizing" >> "$RESULTS/curves.tsv"
        # Pages held by shared buffers and the tier both, at the end: the
        # overlap the model takes away from their sum (doc/sizing.md).
        overlap=$(psql_at -c "
            SELECT count(*) FROM (
                SELECT relfilenode, relforknumber, relblocknumber
                  FROM bpext_buffer_descriptors WHERE NOT is_in_bpool_extension
                INTERSECT
                SELECT relfilenode, relforknumber, relblocknumber
                  FROM bpext_buffer_descriptors WHERE is_in_bpool_extension) x")
        stop_run
        line=$(awk -v w="$w" -v hot="$hot" -v f="$f" -v tp="$tier_pages" -v l="$lookups" -v h="$hits" -v p="$predicted" \
            -v dw="$written" -v sk="$skipped" -v r="$rate" -v sp="$sampled" -v pu="$pushed" -v mi="$missed" \
            'BEGIN { m = (l > 0) ? h / l : 0; ms = (pu + mi > 0) ? mi / (pu + mi) : 0; printf "%s\t%d\t%s\t%d\t%d\t%.4f\t%.4f\t%+.1f\t%d\t%d\t%s\t%d\t%.2f", w, hot, f, tp, l, m, p, 100 * (p - m), dw, sk, r, sp, ms }')
        printf '%s\n' "$line" >> "$RESULTS/accuracy.tsv"
        printf '%s\t%s\t%s\t%s\n' "$w" "$f" "$overlap" "$stats_json" >> "$RESULTS/stats.tsv"
        say "$line"
    done
done
say "results: $RESULTS"
# Debian's python3 (python3-matplotlib) for the plot, as scale.sh does.
python3 -c 'import matplotlib' 2>/dev/null ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-matplotlib >/dev/null 2>&1 ||
    say "no matplotlib: the table is written, the plot is not"
/usr/bin/python3 "$HERE/sizing_report.py" "$RESULTS" | tee -a "$LOG"

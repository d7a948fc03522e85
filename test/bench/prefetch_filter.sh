#!/usr/bin/env bash
# Does bpext's prefetch wrapper (PostgreSQL 17 and later) keep tier hits
# from costing data-file reads ahead of time?  A bitmap heap scan over a
# table whose every page is in the tier, with the page cache dropped just
# before: the data-file pages the kernel holds afterwards (fincore) were
# read ahead for nothing.  Measured with bpext as built, and with a copy
# whose prefetch wrapper passes every block to md, alternating.
#
#   sudo test/bench/prefetch_filter.sh [--rounds N] [--rows N]
#
# PG_MAJOR picks the major (default 17); one that this Debian release does
# not ship runs in test/pg_chroot.sh's chroot.  Counts pages, not time:
# the figure does not depend on the machine's load.
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
. "$TOP/test/pg_major.sh"
MAJOR=${PG_MAJOR:-17}
ROUNDS=2
ROWS=300000

while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --rows) ROWS=$2; shift 2 ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) echo "prefetch_filter: unknown option $1" >&2; exit 2 ;;
    esac
done
bpext_check_majors "$MAJOR" || exit 2
[ "$MAJOR" -ge 17 ] || { echo "prefetch_filter: PostgreSQL $MAJOR has no vectored read path to prefetch for" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "prefetch_filter: run as root (it drops the page cache)" >&2; exit 2; }
if ! bpext_major_is_native "$MAJOR"; then
    exec "$TOP/test/pg_chroot.sh" "$MAJOR" /bpext/test/bench/prefetch_filter.sh \
        --rounds "$ROUNDS" --rows "$ROWS"
fi

command -v fincore >/dev/null ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq util-linux-extra >/dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq util-linux-extra >/dev/null; }

PGBIN=/usr/lib/postgresql/$MAJOR/bin
WORK=$(mktemp -d /var/tmp/bpext-prefetch.XXXXXX)
chmod 755 "$WORK"
chown postgres "$WORK"
as_pg() { runuser -u postgres -- "$@"; }
sql() { as_pg "$PGBIN/psql" -h "$WORK" -p 5488 -XAtq -v ON_ERROR_STOP=1 -d postgres "$@"; }
cleanup() {
    [ -f "$WORK/data/postmaster.pid" ] &&
        as_pg "$PGBIN/pg_ctl" -D "$WORK/data" -m immediate -w stop >/dev/null 2>&1
    rm -rf "$WORK"
}
trap cleanup EXIT

# Build and install bpext as it is (filter) or with the wrapper's tier
# lookup bypassed (passthrough), from a copy of the tree.
install_variant() {
    local build
    build=$(mktemp -d)
    tar -C "$TOP" --exclude=./.git --exclude=./test/bench/results \
        --exclude='./test/bench/.venv*' -cf - . | tar -C "$build" -xf -
    if [ "$1" = passthrough ]; then
        sed -i '/^bpext_prefetch(/,/^}/ s/if (!bpext_smgr_serves(reln))/if (true)/' \
            "$build/src/smgr_wrap_vectored.c"
        grep -q 'if (true)' "$build/src/smgr_wrap_vectored.c" ||
            { echo "prefetch_filter: could not make the passthrough build" >&2; exit 1; }
    fi
    make -C "$build" -s PG_CONFIG="$PGBIN/pg_config" clean all install >/dev/null
    rm -rf "$build"
}

measure() {
    local variant=$1 file pages tier0 tier1 cached
    install_variant "$variant"
    rm -rf "$WORK/data" "$WORK/tier"
    as_pg "$PGBIN/initdb" -D "$WORK/data" -A trust >/dev/null
    cat >> "$WORK/data/postgresql.conf" <<EOF
shared_buffers = '16MB'
autovacuum = off
listen_addresses = ''
unix_socket_directories = '$WORK'
port = 5488
shared_preload_libraries = 'bpext'
bpext.path = '$WORK/tier'
bpext.size = '400MB'
bpext.max_size = '512MB'
effective_io_concurrency = 32
EOF
    as_pg "$PGBIN/pg_ctl" -D "$WORK/data" -l "$WORK/log" -w start >/dev/null
    sql -c "CREATE EXTENSION bpext" -c "CREATE EXTENSION pg_buffercache" \
        -c "CREATE TABLE big (id int, r float8, pad text) WITH (fillfactor = 50)" \
        -c "INSERT INTO big SELECT g, random(), repeat('x', 200) FROM generate_series(1, $ROWS) g" \
        -c "CREATE INDEX ON big (r)" -c "VACUUM ANALYZE big" -c "CHECKPOINT" \
        -c "SELECT bpext_prewarm('big')" \
        -c "SELECT count(pg_buffercache_evict(bufferid)) FROM pg_buffercache WHERE relfilenode = pg_relation_filenode('big')" >/dev/null
    file=$WORK/data/$(sql -c "SELECT pg_relation_filepath('big')")
    pages=$(sql -c "SELECT pg_relation_size('big') / 8192")
    sync
    echo 3 > /proc/sys/vm/drop_caches
    tier0=$(sql -c "SELECT extension_page_reads FROM bpext_stats")
    sql -c "SET enable_seqscan = off" -c "SET enable_indexscan = off" \
        -c "SET enable_indexonlyscan = off" \
        -c "SELECT count(*) FROM big WHERE r < 0.5" >/dev/null
    tier1=$(sql -c "SELECT extension_page_reads FROM bpext_stats")
    cached=$(fincore -n -b -o RES "$file" | tr -d ' ')
    as_pg "$PGBIN/pg_ctl" -D "$WORK/data" -m fast -w stop >/dev/null
    printf '| %s | %s | %s | %s |\n' "$variant" "$pages" "$((tier1 - tier0))" "$((cached / 8192))"
}

echo "PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}'): bitmap heap scan (effective_io_concurrency 32) over a table held whole by the tier, page cache dropped first."
echo
echo "| prefetch | table pages | tier reads | data-file pages read ahead |"
echo "|---|---:|---:|---:|"
for _ in $(seq "$ROUNDS"); do
    measure filter
    measure passthrough
done
install_variant filter

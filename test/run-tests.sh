#!/usr/bin/env bash
# Build bpext, install it into PostgreSQL 15, and run every test suite:
# pg_regress (sql/, expected/) and the TAP suites (test/t/), each in
# throwaway clusters.  Run as root on Debian 12; the servers run as the
# postgres user, from a copy of the tree it owns.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)

test/install-deps.sh
export PATH=/usr/lib/postgresql/15/bin:$PATH
make -s PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
make -s PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config install

work=$(mktemp -d /tmp/bpext-tests.XXXXXX)
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
cp -r "$src/." "$work/"
chown -R postgres "$work"

status=0
runuser -u postgres -- make -C "$work" -s PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config \
    installcheck "$@" || status=$?
if [ "$status" -ne 0 ]; then
    for f in "$work"/regression.diffs "$work"/tmp_check/log/*; do
        [ -f "$f" ] && { echo "=== $f"; tail -n 200 "$f"; }
    done
fi
exit "$status"

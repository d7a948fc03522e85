#!/usr/bin/env bash
# Install what building and testing bpext needs on Debian 12: PostgreSQL 15
# with its server headers, the TAP test modules, pgbench, a compiler.
set -euo pipefail

packages=(postgresql-15 postgresql-server-dev-15 postgresql-contrib-15
          libipc-run-perl make gcc)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "install-deps: need root to install: ${missing[*]}" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The source of PostgreSQL's own regression suite, for
# test/t/106_pg_regress.pl (which runs as postgres and cannot fetch it).
# Best effort: without it that test is skipped.
if [ "${BPEXT_PG_REGRESS:-1}" != 0 ] && [ "$(id -u)" -eq 0 ]; then
    "$(dirname "$0")/pg_regress_with_bpext.sh" --prepare || true
fi

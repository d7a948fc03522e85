#!/usr/bin/env bash
# PostgreSQL's own recovery TAP suite (src/test/recovery: crash restart,
# timeline switches, relfilenode reuse, unlogged reinit, wal_level =
# minimal, CREATE DATABASE replay, the regression suite on a streaming
# standby, ...) with bpext preloaded and a tier of its own on every node,
# against the same tests without bpext: no test may fail only with bpext.
#
# Every node gets bpext through $TEMP_CONFIG, which PostgreSQL::Test::Cluster
# appends to each node's postgresql.conf, and its own bpext.path through
# test/perl/BpextEveryNode.pm (loaded into each test by prove --exec).  shared_buffers is
# 16MB in both runs so that the suites' reads miss shared buffers and the
# tiers serve them; bpext.log_events makes every node log what its tier
# served, which is summed to show the tiers were used.
#
# Three test files run at a time (they mostly wait on servers).  The whole
# suite runs once with bpext; the tests that failed are run again
# without it, and only a test that fails with bpext and passes without it
# is a failure (the suite's source is a minor release that may differ from
# the installed server's, so a few tests can fail for everybody).
#
# From 18 on the nodes with bpext take the io_methods in turn (worker, sync,
# and io_uring where the kernel allows it; see BpextEveryNode), so that every
# io_method runs primaries and standbys in the one pass.
#
#   sudo PG_MAJOR=17 test/pg_recovery_with_bpext.sh    # as root: runs as postgres
#   BPEXT_RECOVERY_TESTS='t/001_stream_rep.pl t/013_crash_restart.pl' ...
#
# The source comes from test/pg_regress_with_bpext.sh --source (apt-get
# source of the same major, prepared by test/install-deps.sh).  bpext must
# be installed in the server's library directory.
#
# Exit status: 0 if bpext broke nothing, 1 if it did, 77 without a source
# tree, 2 on a setup error.
set -euo pipefail

major=${PG_MAJOR:-15}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/$major/bin/pg_config}
here=$(cd "$(dirname "$0")" && pwd)
tests=${BPEXT_RECOVERY_TESTS:-t/*.pl}
usable_io_methods=""   # set by run_suites

say() { echo "pg_recovery_with_bpext: $*"; }
die() { say "$*" >&2; exit 2; }

bindir=$("$PG_CONFIG" --bindir)
pg_regress=$("$PG_CONFIG" --pkglibdir)/pgxs/src/test/regress/pg_regress

# One pass of the suite (or of the given tests) in $work/$mode.
run_pass() {
    local work=$1 mode=$2; shift 2
    local dir=$work/$mode
    rm -rf "$dir"
    mkdir -p "$dir/tmp_check/log"
    {
        echo "shared_buffers = 16MB"
        if [ "$mode" = with ]; then
            echo "shared_preload_libraries = 'bpext'"
            echo "bpext.size = '64MB'"
            echo "bpext.max_size = '64MB'"
            echo "bpext.min_free_space = 0"
            echo "bpext.log_events = on"
        fi
    } >"$dir/temp.conf"

    # The tests (not prove itself, whose output PostgreSQL::Test::Utils
    # would capture) load BpextEveryNode.
    # The nodes with bpext take the usable io_methods in turn (18 on).
    local io_methods=""
    [ "$mode" = with ] && io_methods=$usable_io_methods
    local exec=(--exec "perl -I $work/perl -I .")
    [ "$mode" = with ] && exec=(--exec "perl -I $work/perl -I . -I $here/perl -MBpextEveryNode")
    (cd "$work/recovery" &&
        env TEMP_CONFIG="$dir/temp.conf" \
            PATH="$bindir:$PATH" PG_REGRESS="$pg_regress" \
            REGRESS_SHLIB="$work/lib/regress.so" \
            TESTDIR="$dir" TESTDATADIR="$dir/tmp_check" TESTLOGDIR="$dir/tmp_check/log" \
            BPEXT_IO_METHODS="$io_methods" BPEXT_IO_METHODS_LOG="$dir/io_methods.log" \
            PGPORT=$((40000 + RANDOM % 10000)) \
            prove -j 3 "${exec[@]}" "$@") >"$dir/prove.out" 2>&1 || true
}

# The tests a pass reports as failed, one per line.
failed_tests() {
    sed -nE 's/^(t\/[A-Za-z0-9_]+\.pl) +\(Wstat.*/\1/p' "$1" | sort -u
}

run_suites() {
    local work=$1 status=0 start
    start=$SECONDS
    # The test files, expanded where they are.
    local list
    # shellcheck disable=SC2086
    list=$(cd "$work/recovery" && echo $tests)
    usable_io_methods=$(PG_MAJOR=$major "$here/pg_regress_with_bpext.sh" --io-methods)
    say "running the recovery suite with bpext on every node${usable_io_methods:+ (io_method in turn: $usable_io_methods)}"
    # shellcheck disable=SC2086
    run_pass "$work" with $list
    local ran failed_with
    ran=$(grep -cE '^t/[A-Za-z0-9_]+\.pl \.+' "$work/with/prove.out" || true)
    failed_with=$(failed_tests "$work/with/prove.out")
    say "with bpext: $ran test files in $((SECONDS - start)) s, failed: $(echo ${failed_with:-none})"
    if [ -n "$usable_io_methods" ]; then
        local io_method
        for io_method in $usable_io_methods; do
            say "io_method $io_method: $(awk -v m="$io_method" '$3 == m' "$work/with/io_methods.log" 2>/dev/null | wc -l) nodes"
        done
    fi
    if [ "$ran" -lt 1 ]; then
        tail -30 "$work/with/prove.out"
        die "the suite did not run"
    fi

    local failed_without=""
    if [ -n "$failed_with" ]; then
        say "running those again without bpext"
        # shellcheck disable=SC2086
        run_pass "$work" without $failed_with
        failed_without=$(failed_tests "$work/without/prove.out")
        say "without bpext: failed: $(echo ${failed_without:-none})"
    fi
    local newly
    newly=$(comm -23 <(echo "$failed_with" | sed '/^$/d') \
                     <(echo "$failed_without" | sed '/^$/d'))
    if [ -n "$newly" ]; then
        say "FAIL: tests failing only with bpext: $(echo $newly)"
        local t
        for t in $newly; do
            grep -A40 "^$t" "$work/with/prove.out" | head -60
        done
        status=1
    else
        say "no test fails with bpext that passes without it"
    fi

    # Every node's tier was on, the tiers served reads, and none failed.
    local logs=("$work"/with/tmp_check/log/*.log)
    local enabled reads errors
    enabled=$({ grep -l 'bpext tier enabled' "${logs[@]}" 2>/dev/null || true; } | wc -l)
    reads=$({ grep -hoE 'pages_read [0-9]+' "${logs[@]}" 2>/dev/null || true; } |
                awk '{ s += $2 } END { print s + 0 }')
    errors=$({ grep -hE 'bpext tier disabled after an error|bpext could not' "${logs[@]}" 2>/dev/null || true; } | wc -l)
    say "tiers: enabled on $enabled nodes, $reads pages read from them, $errors tier errors"
    if [ "$enabled" -lt 1 ] || [ "$reads" -lt 1000 ] || [ "$errors" -ne 0 ]; then
        say "FAIL: the tiers were not enabled and serving reads without errors"
        grep -hE 'bpext tier disabled after an error|bpext could not' "${logs[@]}" | head -20
        status=1
    fi
    [ "$status" -eq 0 ] && say "PASS"
    return "$status"
}

if [ "${1:-}" = --run-only ]; then
    run_suites "$2"
    exit $?
fi

src=$(PG_MAJOR=$major "$here/pg_regress_with_bpext.sh" --source) || {
    [ "$major" != 16 ] ||
        say "no source of PostgreSQL 16 can be had here: no Debian release ships 16, and the registries' servers (test/pg_major.sh) come without test sources"
    say "SKIP: no PostgreSQL $major source for the recovery suite"
    exit 77
}
say "recovery suite from $src"
[ -x "$pg_regress" ] || die "no pg_regress at $pg_regress"

work=${BPEXT_RECOVERY_WORK:-$(mktemp -d /tmp/bpext-pg-recovery.XXXXXX)}
cleanup() { [ "${KEEP:-0}" = 1 ] || [ -n "${BPEXT_RECOVERY_WORK:-}" ] || rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/lib"
cp -r "$src/src/test/recovery" "$src/src/test/regress" "$src/src/test/perl" "$work/"
"${CC:-cc}" -O2 -fPIC -shared -I"$("$PG_CONFIG" --includedir-server)" \
    "$src/src/test/regress/regress.c" -o "$work/lib/regress.so" ||
    die "could not build regress.so"

if [ "$(id -u)" -eq 0 ]; then
    chmod 755 "$work"
    chown -R postgres "$work"
    status=0
    runuser -u postgres -- env PG_MAJOR="$major" BPEXT_RECOVERY_TESTS="$tests" \
        "$here/pg_recovery_with_bpext.sh" --run-only "$work" || status=$?
    exit "$status"
fi
run_suites "$work"

#!/usr/bin/env bash
# Build bpext, install it, and run every test suite: pg_regress (sql/,
# expected/), the isolation spec and the TAP suites (test/t/), each in
# throwaway clusters, for every supported PostgreSQL major, or those in
# $PG_MAJOR (e.g. PG_MAJOR=17).  Run as root on Debian 12: the major Debian
# 12 ships (15) runs here, the others in a chroot of the Debian release
# that ships them (test/pg_chroot.sh).  The servers run as the postgres
# user, from a copy of the tree it owns.  Extra arguments go to make, e.g.
# PROVE_TESTS=test/t/001_tier_reads.pl.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
. test/pg_major.sh

majors=${PG_MAJOR:-$BPEXT_SUPPORTED_MAJORS}
bpext_check_majors "$majors"

# After a failed run: the diffs and logs of the suites that failed, then,
# last (CI shows the end of the output), which ones failed and how.
report_failures() {
    local work=$1 major=$2 out=$3 failed name f
    failed=$(sed -n 's/^\(test\/t\/[^ ]*\)\.pl  *(Wstat.*/\1/p' \
        "$out" | sort -u)
    for f in "$work"/regression.diffs "$work"/output_iso/regression.diffs; do
        [ -f "$f" ] && { echo "=== $f"; tail -n 200 "$f"; }
    done
    for name in $failed; do
        name=${name#test/t/}
        for f in "$work"/tmp_check/log/"${name}"_*.log; do
            [ -f "$f" ] && { echo "=== $f"; tail -n 60 "$f"; }
        done
        f=$work/tmp_check/log/regress_log_$name
        [ -f "$f" ] && { echo "=== $f"; tail -n 300 "$f"; }
    done
    echo "=== what failed on PostgreSQL $major"
    [ -f "$work/regression.diffs" ] && echo "pg_regress: see regression.diffs above"
    [ -f "$work/output_iso/regression.diffs" ] && echo "isolation: see regression.diffs above"
    for name in $failed; do
        echo "$name.pl:"
        f=$work/tmp_check/log/regress_log_${name#test/t/}
        if [ -f "$f" ]; then
            grep -hE '(^|\) )not ok |#   (Failed test|at |  +got|  +expected|  +[<>=]+)|Looks like|Bail out|timed out| line [0-9]+\.$' \
                "$f" | head -n 40
        else
            # It died before it logged anything (a Perl compilation error).
            grep -B 8 -A 2 "^$name\.pl \.\. *\$" "$out" | head -n 40
        fi
    done
    return 0
}

# The tests that skip unless bpext is a test-hook build, among those the
# arguments ask for (PROVE_TESTS=..., or all of them); relative to the tree.
hook_tests_wanted() {
    local work=$1; shift
    local t wanted="" arg
    for arg in "$@"; do
        case $arg in
            PROVE_TESTS=*) wanted=${arg#PROVE_TESTS=} ;;
        esac
    done
    for t in $(cd "$work" && grep -l "not a BPEXT_TEST_HOOKS=1 build" test/t/*.pl); do
        if [ -z "$wanted" ] || [[ " $wanted " == *" $t "* ]]; then
            printf '%s ' "$t"
        fi
    done
}

# The device that hangs for real (test/hung_device.sh), set up by run_native
# for the tests that need one, and taken down on every way out.
hung_dir=""
hung_device_teardown() {
    [ -n "$hung_dir" ] || return 0
    test/hung_device.sh teardown "$hung_dir" ||
        echo "=== could not take down the hung device in $hung_dir" >&2
    hung_dir=""
}

# Set the device up when this machine can (root, /dev/fuse, a loop device,
# ext4 tools) and it proves to hang for real; the tests find it in
# BPEXT_HUNG_DEVICE, or why there is none in BPEXT_HUNG_DEVICE_SKIP.  One
# already in BPEXT_HUNG_DEVICE (set up by hand) is used as it is.
hung_device_setup() {
    local out
    [ -z "${BPEXT_HUNG_DEVICE:-}" ] || return 0
    [ "${BPEXT_HUNG_DEVICE_SETUP:-1}" != 0 ] || {
        export BPEXT_HUNG_DEVICE_SKIP="BPEXT_HUNG_DEVICE_SETUP=0"
        return 0
    }
    hung_dir=$(mktemp -d /tmp/bpext-hung.XXXXXX)
    if out=$(test/hung_device.sh setup "$hung_dir" 2>&1) &&
        out=$(test/hung_device.sh check "$hung_dir" 2>&1); then
        echo "=== a device that hangs: $hung_dir/ssd"
        export BPEXT_HUNG_DEVICE=$hung_dir
    else
        export BPEXT_HUNG_DEVICE_SKIP=${out##*$'\n'}
        echo "=== no device that hangs (its tests skip): $BPEXT_HUNG_DEVICE_SKIP"
        hung_device_teardown
    fi
}

# One major on this system: build in a private copy (never in the tree,
# which other majors' builds share), install, test.
run_native() {
    local major=$1; shift
    local pg_config=/usr/lib/postgresql/$major/bin/pg_config
    local work status=0
    export PG_MAJOR=$major

    PG_MAJOR=$major test/install-deps.sh
    # The Debian package of this major, built, installed, tested and purged
    # before make install puts bpext here (BPEXT_PACKAGE=0 skips it).
    if [ "${BPEXT_PACKAGE:-1}" != 0 ]; then
        test/package.sh check "$major" || {
            echo "=== the Debian package check failed on PostgreSQL $major (its last lines say why)"
            return 1
        }
    fi
    work=$(mktemp -d /tmp/bpext-tests.XXXXXX)
    # shellcheck disable=SC2064
    trap "hung_device_teardown; rm -rf '$work'" EXIT
    cp -r "$src/." "$work/"
    make -C "$work" -s PG_CONFIG="$pg_config" clean
    make -C "$work" -s PG_CONFIG="$pg_config"
    make -C "$work" -s PG_CONFIG="$pg_config" install
    # bpext for the majors test/t/111_pg_upgrade.pl upgrades from, each
    # built in a copy of its own.
    for m in $(bpext_upgrade_from_majors "$major"); do
        mkdir "$work/upgrade-from-$m"
        cp -r "$src/." "$work/upgrade-from-$m/"
        make -C "$work/upgrade-from-$m" -s PG_CONFIG="/usr/lib/postgresql/$m/bin/pg_config" clean
        make -C "$work/upgrade-from-$m" -s -j"$(nproc)" PG_CONFIG="/usr/lib/postgresql/$m/bin/pg_config"
        make -C "$work/upgrade-from-$m" -s PG_CONFIG="/usr/lib/postgresql/$m/bin/pg_config" install
        rm -rf "$work/upgrade-from-$m"
    done
    chown -R postgres "$work"

    export PATH=/usr/lib/postgresql/$major/bin:$PATH
    hung_device_setup
    runuser -u postgres -- make -C "$work" -s PG_CONFIG="$pg_config" \
        installcheck "$@" 2>&1 | tee "$work/installcheck.out" || status=$?
    [ "$status" -eq 0 ] || report_failures "$work" "$major" "$work/installcheck.out"

    # The tests that need the test-hook build (they skip on the release
    # build above): that build, from a copy of its own, installed over the
    # release one for them alone, which is then installed again.  Their
    # prove run empties tmp_check: the failures above are reported first.
    local hook_tests
    hook_tests=$(hook_tests_wanted "$work" "$@")
    if [ -n "$hook_tests" ]; then
        echo "=== the tests that need the test-hook build (BPEXT_TEST_HOOKS=1)"
        mkdir "$work/hooks"
        cp -r "$src/." "$work/hooks/"
        make -C "$work/hooks" -s PG_CONFIG="$pg_config" clean
        make -C "$work/hooks" -s -j"$(nproc)" PG_CONFIG="$pg_config" BPEXT_TEST_HOOKS=1
        make -C "$work/hooks" -s PG_CONFIG="$pg_config" BPEXT_TEST_HOOKS=1 install
        rm -rf "$work/hooks"
        local hook_status=0
        runuser -u postgres -- make -C "$work" -s PG_CONFIG="$pg_config" \
            installcheck REGRESS= ISOLATION= PROVE_TESTS="$hook_tests" 2>&1 |
            tee "$work/installcheck-hooks.out" || hook_status=$?
        [ "$hook_status" -eq 0 ] ||
            report_failures "$work" "$major" "$work/installcheck-hooks.out"
        [ "$status" -ne 0 ] || status=$hook_status
        make -C "$work" -s PG_CONFIG="$pg_config" install
    fi
    hung_device_teardown
    rm -rf "$work"
    trap - EXIT
    return "$status"
}

# Inside a chroot (or with a single major asked for), run that one alone.
if [ "$(echo "$majors" | wc -w)" -eq 1 ] && bpext_major_is_native "$majors"; then
    run_native "$majors" "$@"
    exit $?
fi

summary=()
status=0
for major in $majors; do
    echo "=== bpext on PostgreSQL $major"
    start=$SECONDS
    result=0
    if bpext_major_is_native "$major"; then
        # A process of its own: inside "|| result=$?" a function or subshell
        # runs with set -e off, so a failing make would not stop it.
        PG_MAJOR=$major "$src/test/run-tests.sh" "$@" || result=$?
    else
        test/pg_chroot.sh "$major" /bpext/test/run-tests.sh "$@" || result=$?
    fi
    verdict=PASS
    [ "$result" -eq 0 ] || { verdict="FAIL (exit $result)"; status=1; }
    summary+=("PostgreSQL $major: $verdict in $((SECONDS - start)) s")
done

echo "=== bpext test summary"
printf '%s\n' "${summary[@]}"
exit "$status"

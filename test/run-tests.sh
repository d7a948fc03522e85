#!/usr/bin/env bash
# Build bpext, install it, and run every test suite: pg_regress (sql/,
# expected/), the isolation spec and the TAP suites (test/t/), each in
# throwaway clusters, for every supported PostgreSQL major, or those in
# $PG_MAJOR (e.g. PG_MAJOR=17).  Run as root on Debian 12: the major Debian
# 12 ships (15) runs here, 16 here too from the package registries (its
# servers 16.2 and 16.14, test/pg_major.sh), the others in a chroot of the
# Debian release that ships them (test/pg_chroot.sh).  The servers run as
# the postgres user, from a copy of the tree it owns.  Extra arguments go
# to make, e.g. PROVE_TESTS=test/t/001_tier_reads.pl.
#
# Each major (each of 16's servers) is a job.  Several jobs run
# $BPEXT_JOBS at a time (default 3), longest first, each into a log of its
# own in $BPEXT_LOG_DIR (default: a new /tmp/bpext-tests-logs.XXXXXX, kept),
# printed whole when the job ends; last comes a summary that says which
# jobs failed, where, and how.  Installing what the jobs need (apt, the
# registries, building a missing chroot) happens first, one major at a
# time.  Jobs at once share the machine, not files: each builds in a copy
# of the tree, runs its chroot in a tree of its own, and its clusters on
# Unix sockets in directories of their own (the TCP ports that 109 and
# 110 bind are checked free before use); anything a test makes outside
# its directories (a mount, a loop device, a cgroup) must be named for its
# own run.  BPEXT_JOBS=1 runs the jobs one after another, their output as
# it comes.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
. test/pg_major.sh
bpext_usage_if_asked "$0" "$@"

majors=${PG_MAJOR:-$BPEXT_SUPPORTED_MAJORS}
bpext_check_majors "$majors"

# After a failed run: the diffs and logs of the suites that failed, then,
# last (CI shows the end of the output), which ones failed and how.
report_failures() {
    local work=$1 label=$2 out=$3 failed name f
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
    echo "=== what failed on PostgreSQL $label"
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
            grep -B 8 -A 2 "$name\.pl \.\. *\$" "$out" | head -n 40
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

# One major on this system, in the installation of $pg_config: build in a
# private copy (never in the tree, which other majors' builds share),
# install, test.
run_native() {
    local major=$1 pg_config=$2; shift 2
    local work label status=0 pgxs_global
    local make_args=(PG_CONFIG="$pg_config")
    export PG_MAJOR=$major PG_CONFIG=$pg_config
    # The majors test/t/111_pg_upgrade.pl may upgrade from: those built
    # below, not whatever else is installed here.
    BPEXT_UPGRADE_FROM_MAJORS=$(bpext_upgrade_from_majors "$major" || true)
    export BPEXT_UPGRADE_FROM_MAJORS

    PG_MAJOR=$major test/install-deps.sh
    label=$("$pg_config" --version | sed 's/^PostgreSQL //')
    # An installation whose PGXS was configured without TAP tests (16's,
    # from the registries) runs them all the same.
    pgxs_global=$(dirname "$("$pg_config" --pgxs)")/../Makefile.global
    grep -q '^enable_tap_tests[[:space:]]*=[[:space:]]*yes' "$pgxs_global" ||
        make_args+=(enable_tap_tests=yes PROVE=prove)
    # The Debian package of this major, built, installed, tested and purged
    # before make install puts bpext here (BPEXT_PACKAGE=0 skips it).
    if [ "${BPEXT_PACKAGE:-1}" != 0 ]; then
        if [ "$major" = 16 ]; then
            echo "=== no Debian package check on PostgreSQL $label: no Debian package of PostgreSQL 16 can be had here (README, Packages)"
        else
            test/package.sh check "$major" || {
                echo "=== the Debian package check failed on PostgreSQL $major (its last lines say why)"
                return 1
            }
        fi
    fi
    work=$(mktemp -d /tmp/bpext-tests.XXXXXX)
    # shellcheck disable=SC2064
    trap "hung_device_teardown; rm -rf '$work'" EXIT
    cp -r "$src/." "$work/"
    make -C "$work" -s "${make_args[@]}" clean
    make -C "$work" -s "${make_args[@]}"
    make -C "$work" -s "${make_args[@]}" install
    # bpext for the majors test/t/111_pg_upgrade.pl upgrades from, each
    # built in a copy of its own.
    for m in $BPEXT_UPGRADE_FROM_MAJORS; do
        mkdir "$work/upgrade-from-$m"
        cp -r "$src/." "$work/upgrade-from-$m/"
        make -C "$work/upgrade-from-$m" -s PG_CONFIG="/usr/lib/postgresql/$m/bin/pg_config" clean
        make -C "$work/upgrade-from-$m" -s -j"$(nproc)" PG_CONFIG="/usr/lib/postgresql/$m/bin/pg_config"
        make -C "$work/upgrade-from-$m" -s PG_CONFIG="/usr/lib/postgresql/$m/bin/pg_config" install
        rm -rf "$work/upgrade-from-$m"
    done
    chown -R postgres "$work"

    PATH=$("$pg_config" --bindir):$PATH
    export PATH
    hung_device_setup
    # --timer: each TAP file's time in the log, for keeping CI's time in hand.
    runuser -u postgres -- make -C "$work" -s "${make_args[@]}" \
        installcheck BPEXT_PROVE_FLAGS=--timer "$@" 2>&1 | tee "$work/installcheck.out" || status=$?
    [ "$status" -eq 0 ] || report_failures "$work" "$label" "$work/installcheck.out"

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
        make -C "$work/hooks" -s "${make_args[@]}" clean
        make -C "$work/hooks" -s -j"$(nproc)" "${make_args[@]}" BPEXT_TEST_HOOKS=1
        make -C "$work/hooks" -s "${make_args[@]}" BPEXT_TEST_HOOKS=1 install
        rm -rf "$work/hooks"
        local hook_status=0
        runuser -u postgres -- make -C "$work" -s "${make_args[@]}" \
            installcheck REGRESS= ISOLATION= PROVE_TESTS="$hook_tests" 2>&1 |
            tee "$work/installcheck-hooks.out" || hook_status=$?
        [ "$hook_status" -eq 0 ] ||
            report_failures "$work" "$label" "$work/installcheck-hooks.out"
        [ "$status" -ne 0 ] || status=$hook_status
        make -C "$work" -s "${make_args[@]}" install
    fi
    hung_device_teardown
    rm -rf "$work"
    trap - EXIT
    return "$status"
}

# The jobs: each major, but 16 one per server.
jobs=()
for major in $majors; do
    if [ "$major" = 16 ]; then
        for server in ${BPEXT_PG16_SERVERS:-$BPEXT_PG16_ALL_SERVERS}; do
            bpext_pg16_prefix "$server" >/dev/null || {
                echo "PostgreSQL 16 server $server is not one of $BPEXT_PG16_ALL_SERVERS" >&2
                exit 2
            }
            jobs+=("$server")
        done
    else
        jobs+=("$major")
    fi
done

# One native job (inside a chroot too, where the chroot's major is native):
# run it in this process.
if [ "${#jobs[@]}" -eq 1 ] && bpext_major_is_native "${jobs[0]%%.*}"; then
    major=${jobs[0]%%.*}
    pg_config=$(BPEXT_PG16_SERVERS=${jobs[0]} bpext_major_pg_configs "$major")
    run_native "$major" "$pg_config" "$@"
    exit $?
fi

# The order jobs start in: the longest first, so that the last to finish
# is a short one (minutes each job took in CI, a parallel run of all).
job_rank() {
    case "$1" in
        19) echo 1 ;; 18) echo 2 ;; 17) echo 3 ;; 16.14) echo 4 ;;
        15) echo 5 ;; 16.2) echo 6 ;; *) echo 9 ;;
    esac
}
summary_order=("${jobs[@]}")
mapfile -t jobs < <(for j in "${jobs[@]}"; do echo "$(job_rank "$j") $j"; done |
                        sort -n -s -k1,1 | cut -d' ' -f2)

log_dir=${BPEXT_LOG_DIR:-$(mktemp -d /tmp/bpext-tests-logs.XXXXXX)}
mkdir -p "$log_dir"
parallel=${BPEXT_JOBS:-3}
[ "$parallel" -ge 1 ] 2>/dev/null || { echo "BPEXT_JOBS must be a number >= 1" >&2; exit 2; }

# Install first, one major at a time (apt, the registries and a chroot's
# first build must not run twice at once): each major's dependencies here,
# or its chroot if there is none yet (a chroot's later runs install what
# they miss in their own tree).  A major whose installation fails fails
# its jobs.
declare -A prepare_failed=()
if [ "$parallel" -gt 1 ]; then
    prepared=" "
    for job in "${jobs[@]}"; do
        major=${job%%.*}
        [[ "$prepared" != *" $major "* ]] || continue
        prepared+="$major "
        echo "=== installing what PostgreSQL $major needs"
        if bpext_major_is_native "$major"; then
            PG_MAJOR=$major test/install-deps.sh || prepare_failed[$major]=1
        elif [ ! -f "${BPEXT_CHROOT_CACHE:-/var/tmp}/bpext-$(bpext_major_suite "$major").tar.zst" ]; then
            test/pg_chroot.sh "$major" true || prepare_failed[$major]=1
        fi
    done
fi

# Running jobs: pid -> job; when each started, how it ended.
declare -A running=() started=() verdict=() seconds=()
# shellcheck disable=SC2317
stop_jobs() {
    local pid
    for pid in "${!running[@]}"; do
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
}
trap 'stop_jobs' EXIT
trap 'exit 130' INT TERM

# What runs a job, in the foreground.
job_command() {
    local job=$1 major=${1%%.*}; shift
    if [ -n "${prepare_failed[$major]:-}" ]; then
        echo "installing what PostgreSQL $major needs failed (above)"
        return 1
    elif bpext_major_is_native "$major"; then
        # A process of its own: inside "|| result=$?" a function or
        # subshell runs with set -e off, so a failing make would not stop it.
        PG_MAJOR=$major BPEXT_PG16_SERVERS=$job "$src/test/run-tests.sh" "$@"
    else
        test/pg_chroot.sh "$major" /bpext/test/run-tests.sh "$@"
    fi
}

job_started() {
    started[$1]=$SECONDS
    echo "=== bpext on PostgreSQL $1: started$([ "$parallel" -gt 1 ] && echo ", log $log_dir/$1.log")"
}

job_ended() {
    local job=$1 result=$2
    seconds[$job]=$((SECONDS - started[$job]))
    if [ "$result" -eq 0 ]; then verdict[$job]=PASS; else verdict[$job]="FAIL (exit $result)"; fi
}

if [ "$parallel" -eq 1 ]; then
    for job in "${jobs[@]}"; do
        job_started "$job"
        result=0
        job_command "$job" "$@" 2>&1 | tee "$log_dir/$job.log" || result=$?
        job_ended "$job" "$result"
    done
else
    set -m    # each job in a process group of its own, to stop it whole
    next=0
    while [ "$next" -lt "${#jobs[@]}" ] || [ "${#running[@]}" -gt 0 ]; do
        while [ "$next" -lt "${#jobs[@]}" ] && [ "${#running[@]}" -lt "$parallel" ]; do
            job=${jobs[$next]}
            next=$((next + 1))
            job_started "$job"
            job_command "$job" "$@" > "$log_dir/$job.log" 2>&1 &
            running[$!]=$job
        done
        result=0
        wait -n -p pid "${!running[@]}" || result=$?
        job=${running[$pid]}
        unset "running[$pid]"
        job_ended "$job" "$result"
        # Its whole log, now, in one piece.
        echo "=== bpext on PostgreSQL $job: ${verdict[$job]} in ${seconds[$job]} s; its log:"
        cat "$log_dir/$job.log"
        echo "=== end of the log of PostgreSQL $job"
    done
    set +m
fi
trap - EXIT

echo "=== bpext test summary (logs in $log_dir)"
status=0
npass=0
nfail=0
for job in "${summary_order[@]}"; do
    echo "PostgreSQL $job: ${verdict[$job]} in ${seconds[$job]} s"
    if [ "${verdict[$job]}" = PASS ]; then
        npass=$((npass + 1))
    else
        nfail=$((nfail + 1))
        status=1
        # What its report says failed (report_failures, package.sh), and
        # where that names nothing, its last lines.
        report=$(awk '/^=== (what failed on|the Debian package check failed)/ { p = 1; print; next }
                      /^=== / { p = 0 } p' "$log_dir/$job.log")
        [ -n "$report" ] && printf '%s\n' "$report" | sed 's/^/    /'
        if [ "$(printf '%s\n' "$report" | grep -cv '^=== what failed on')" -eq 0 ]; then
            echo "    the last lines of its log:"
            tail -n 8 "$log_dir/$job.log" | sed 's/^/    /'
        fi
    fi
done
echo "majors: $npass passed, $nfail failed"
exit "$status"

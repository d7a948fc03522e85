#!/usr/bin/env bash
# PostgreSQL's own regression suite (src/test/regress, the parallel
# schedule) run against throwaway instances with the same small
# shared_buffers: once without bpext, then with bpext preloaded and its tier
# enabled, so that most of the suite's reads miss shared buffers and are
# served by the tier.  From 18 on the run with bpext is repeated under each
# io_method (worker, sync, and io_uring where the kernel allows it; the
# script says when it does not).  No test may fail with bpext that passes
# without it; the tier must have served reads, and no tier error or server
# crash may show in the log.
#
# It takes about a minute per run on two cores, so it runs with
# the other TAP suites, through test/t/106_pg_regress.pl; BPEXT_PG_REGRESS=0
# turns it off.  test/install-deps.sh (root) calls this script with
# --prepare to fetch the source beforehand, because the TAP suites run as
# postgres, who cannot set up apt.  Directly:
#
#   sudo test/pg_regress_with_bpext.sh     # as root (runs the servers as postgres)
#   test/pg_regress_with_bpext.sh          # as postgres, once the source is there
#   sudo test/run-tests.sh PROVE_TESTS=test/t/106_pg_regress.pl
#
# The suite's SQL, expected output and test C libraries come from the
# source of the same PostgreSQL major ($PG_MAJOR, default 15), found in
# this order:
#   1. $BPEXT_PG_SRC (an unpacked source tree);
#   2. the source of the installed version in the cache $BPEXT_PG_SRC_CACHE
#      (default /var/tmp/bpext-pg<major>-src), fetched by an earlier run;
#   3. `apt-get source postgresql-<major>=<installed version>` into the
#      cache, else another version the mirror lists, else (a mirror may list
#      a version whose files it no longer serves) the .dsc of one of the
#      three previous minor releases straight from the pool.  As root, the
#      script adds Debian's deb-src entries (with the security suite, which
#      carries the newest minor releases) and installs dpkg-dev if they are
#      missing; as another user it can only use what is set up;
#   4. any other source in the cache;
#   5. for a major whose source package Debian does not serve (19, a
#      release candidate in experimental): a tarball of the test sources
#      ($BPEXT_PG_TESTS_DIR/postgresql-<major>*-tests.tar.xz, src/test and
#      contrib/spi of the major's tree; test/pg_chroot.sh mounts the
#      directory in the chroot), unpacked into the cache;
# and if there is none it exits with 77 (skip).
# The test libraries (regress.so, and refint.so and autoinc.so from
# contrib/spi) are built from that source against the installed server
# headers.  A source tree of another minor release of the same major works
# too: the comparison only counts tests that pass without bpext.
#
# The servers cannot run as root: run as root, the script prepares
# everything, then runs the suites as the postgres user.
#
# Environment:
#   PG_MAJOR                           default 15
#   PG_CONFIG                          default /usr/lib/postgresql/$PG_MAJOR/bin/pg_config
#   BPEXT_PG_REGRESS_SHARED_BUFFERS    default 1MB (128 buffers for the
#                                      suite's 20 concurrent sessions)
#   BPEXT_PG_REGRESS_TIER_SIZE         default 256MB
#   BPEXT_PG_REGRESS_CONF              more postgresql.conf lines, both runs
#   BPEXT_PG_REGRESS_WORK              work directory (default: a new one
#                                      under /tmp, removed unless KEEP=1)
#   BPEXT_PG_REGRESS_ONLY              "with" to skip the run without bpext
#
# Exit status: 0 if bpext broke nothing, 1 if it did (the diffs are
# printed), 77 if the source could not be found, 2 on a setup error.
set -euo pipefail

major=${PG_MAJOR:-15}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/$major/bin/pg_config}
package=postgresql-$major
shared_buffers=${BPEXT_PG_REGRESS_SHARED_BUFFERS:-1MB}
tier_size=${BPEXT_PG_REGRESS_TIER_SIZE:-256MB}
cache=${BPEXT_PG_SRC_CACHE:-/var/tmp/bpext-pg$major-src}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/pg_major.sh"
bpext_usage_if_asked "$0" "$@"

say() { echo "pg_regress_with_bpext: $*"; }
pg16_no_source="no source of PostgreSQL 16 can be had here: no Debian release ships 16, and the registries' servers (test/pg_major.sh) come without test sources; BPEXT_PG_SRC=<an unpacked 16 source tree> runs the suite"
die() { say "$*" >&2; exit 2; }

bindir=$("$PG_CONFIG" --bindir)
pg_regress=$("$PG_CONFIG" --pkglibdir)/pgxs/src/test/regress/pg_regress
[ -x "$pg_regress" ] || die "no pg_regress at $pg_regress (install postgresql-server-dev-$major)"

# --- the source --------------------------------------------------------------------

installed_version() {
    dpkg-query -W -f='${Version}' "$package" 2>/dev/null
}

# An unpacked source tree: the given one, one of the installed version in
# the cache, or (with "any") whatever there is.
find_source() {
    local want=${1:-} d upstream
    upstream=$(installed_version | sed -E 's/-[^-]*$//')
    local candidates=("${BPEXT_PG_SRC:-}" "$cache/$package-$upstream"
                      "$cache/postgresql-$upstream")
    [ "$want" = any ] && candidates+=("$cache"/postgresql-*)
    for d in "${candidates[@]}"; do
        if [ -n "$d" ] && [ -f "$d/src/test/regress/parallel_schedule" ] &&
               [ -f "$d/src/test/regress/regress.c" ]; then
            echo "$d"
            return 0
        fi
    done
    return 1
}

# The test sources of the major from a tarball of them (see the header),
# unpacked into the cache.
fetch_tests_tarball() {
    local tarball
    tarball=$(ls -1 "${BPEXT_PG_TESTS_DIR:-/nonexistent}"/postgresql-"$major"*-tests.tar.xz 2>/dev/null |
                  sort -V | tail -1)
    [ -n "$tarball" ] || return 1
    mkdir -p "$cache" && tar -C "$cache" -xJf "$tarball" || return 1
    [ "$(id -u)" -eq 0 ] && chmod 755 "$cache"
    say "unpacked the test sources $(basename "$tarball") into $cache"
}

# apt-get source of the installed version (Debian's security and updates
# suites carry the newest minor releases).
fetch_source() {
    local version
    if [ "$major" = 16 ]; then
        say "$pg16_no_source"
        return 1
    fi
    [ "$(bpext_major_archive "$major")" = "$(bpext_major_suite "$major")" ] ||
        { fetch_tests_tarball; return; }
    version=$(installed_version) ||
        { say "$package is not installed from Debian's packages"; return 1; }
    if [ "$(id -u)" -eq 0 ]; then
        if ! apt-cache showsrc "$package" 2>/dev/null | grep -qx "Version: $version"; then
            # shellcheck disable=SC1091
            . /etc/os-release
            local codename=${VERSION_CODENAME:-bookworm} suites
            suites="$codename-updates"
            grep -rqsE '^(Types: .*deb-src|deb-src )' /etc/apt/sources.list /etc/apt/sources.list.d/ ||
                suites="$codename $suites"
            say "adding Debian's deb-src entries ($suites, $codename-security)"
            cat > /etc/apt/sources.list.d/bpext-deb-src.sources <<EOF
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $suites
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: $codename-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
            apt-get update -qq || true
        fi
        command -v dpkg-source >/dev/null ||
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dpkg-dev >/dev/null
    elif ! command -v dpkg-source >/dev/null; then
        say "dpkg-source (dpkg-dev) is missing; run as root once to fetch the source"
        return 1
    fi
    if ! mkdir -p "$cache" 2>/dev/null || ! [ -w "$cache" ]; then
        say "cannot write to $cache to fetch the source"
        return 1
    fi
    [ "$(id -u)" -eq 0 ] && chmod 755 "$cache"
    say "apt-get source $package into $cache"
    # A mirror may list a version without serving it: then the newest it
    # serves (another minor release of the major works, see above).
    local v
    for v in "$version" $(apt-cache showsrc "$package" 2>/dev/null |
                              sed -n 's/^Version: //p' | sort -rV | grep -vx "$version"); do
        if (cd "$cache" && apt-get source -qq "$package=$v" >/dev/null 2>&1); then
            say "fetched the source of $package $v"
            return 0
        fi
        say "apt-get source $package=$v failed"
    done
    fetch_from_pool "$version"
}

# The source of one of the three minor releases before the installed one,
# straight from Debian's pool (the mirror's index may name only a version
# whose files it does not serve yet).  Only the upstream tarball is needed.
fetch_from_pool() {
    local version=$1 upstream minor revision pool v dsc tarball
    upstream=${version%%-*}
    revision=${version#*-}
    minor=${upstream#*.}
    pool=http://deb.debian.org/debian/pool/main/p/$package
    for ((v = minor - 1; v >= minor - 3 && v >= 0; v--)); do
        dsc=${package}_$major.$v-${revision%u*}u1.dsc
        [ "$revision" = "${revision%u*}" ] && dsc=${package}_$major.$v-$revision.dsc
        tarball=${package}_$major.$v.orig.tar.bz2
        if /usr/lib/apt/apt-helper download-file "$pool/${dsc//+/%2b}" "$cache/$dsc" >/dev/null 2>&1 &&
           /usr/lib/apt/apt-helper download-file "$pool/$tarball" "$cache/$tarball" >/dev/null 2>&1 &&
           tar -C "$cache" -xjf "$cache/$tarball"; then
            rm -f "$cache/$tarball" "$cache/$dsc"
            say "fetched the source of $package $major.$v from the pool"
            return 0
        fi
        rm -f "$cache/$tarball" "$cache/$dsc"
    done
    say "no source of $package found in the pool"
    return 1
}

# --- the run, as a user that may run servers ------------------------------------------

# The io_methods (18 and later) the suites run under with bpext: worker
# (the default), sync, and io_uring if this kernel and build allow it
# (said on stderr if not).  Nothing before 18.  Run as a user that may run
# servers.
usable_io_methods() {
    [ "$major" -ge 18 ] || return 0
    local d
    d=$(mktemp -d /tmp/bpext-io-uring-probe.XXXXXX)
    if "$bindir/initdb" -D "$d/data" -A trust --no-locale >"$d/initdb.log" 2>&1 &&
           printf "listen_addresses = ''\nunix_socket_directories = '%s'\nio_method = io_uring\n" "$d" \
               >>"$d/data/postgresql.conf" &&
           "$bindir/pg_ctl" -D "$d/data" -l "$d/server.log" -w start >/dev/null 2>&1; then
        "$bindir/pg_ctl" -D "$d/data" -m immediate -w stop >/dev/null 2>&1 || true
        echo "worker sync io_uring"
    else
        echo "worker sync"
        say "io_method io_uring is not available here: $(grep -hE 'FATAL|ERROR' "$d/server.log" "$d/initdb.log" 2>/dev/null | head -1)" >&2
    fi
    rm -rf "$d"
}

# One run of the schedule in $work/$run: "without" bpext or "with" it, under
# the given io_method (none: the server's default).
run_schedule() {
    local work=$1 src=$2 mode=$3 io_method=$4 run=$5
    local regressdir=$src/src/test/regress
    local dir=$work/$run
    local label="$mode bpext${io_method:+ (io_method $io_method)}"
    rm -rf "$dir"
    mkdir -p "$dir"
    "$bindir/initdb" -D "$dir/data" -A trust --no-locale -E UTF8 >"$dir/initdb.log" 2>&1 ||
        { cat "$dir/initdb.log"; die "initdb failed"; }
    # synchronize_seqscans off in every run: at this shared_buffers every
    # table over a few pages is "large", so a sequential scan may start
    # wherever a concurrent one in the same parallel group is, and the
    # tests that expect physical order (portals' cursor over tenk2) then
    # fail or pass with the timing, bpext or not (18's run under io_method
    # worker, in one CI run).
    cat >>"$dir/data/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '$dir'
port = 5432
shared_buffers = '$shared_buffers'
max_connections = 40
fsync = off
autovacuum = on
synchronize_seqscans = off
log_line_prefix = '%m [%p] %q%a '
EOF
    if [ "$mode" = with ]; then
        cat >>"$dir/data/postgresql.conf" <<EOF
shared_preload_libraries = 'bpext'
bpext.path = '$dir/bpext.tier'
bpext.size = '$tier_size'
bpext.max_size = '$tier_size'
bpext.min_free_space = 0
EOF
    fi
    [ -n "$io_method" ] && echo "io_method = $io_method" >>"$dir/data/postgresql.conf"
    [ -n "${BPEXT_PG_REGRESS_CONF:-}" ] &&
        printf '%s\n' "$BPEXT_PG_REGRESS_CONF" >>"$dir/data/postgresql.conf"
    "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start >/dev/null ||
        { tail -20 "$dir/server.log"; die "the server $label did not start"; }

    say "running the core regression suite $label (shared_buffers $shared_buffers)"
    local start=$SECONDS
    "$pg_regress" --host="$dir" --port=5432 \
        --inputdir="$regressdir" --outputdir="$dir/out" \
        --bindir="$bindir" --dlpath="$work/lib" \
        --max-concurrent-tests=20 \
        --schedule="$regressdir/parallel_schedule" >"$dir/pg_regress.out" 2>&1 || true
    say "$label: $((SECONDS - start)) s; $(grep -E '^(# )?(All|[0-9]+ of) [0-9]+ tests' "$dir/pg_regress.out" | head -1)"

    if [ "$mode" = with ]; then
        "$bindir/psql" -h "$dir" -p 5432 -d postgres -XAtq \
            -c "CREATE EXTENSION IF NOT EXISTS bpext" \
            -c "SELECT state, extension_page_reads, extension_page_writes, crc_failures, io_errors
                  FROM bpext_configuration, bpext_stats" >"$dir/tier.out" 2>&1 || true
    fi
    "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
}

# A run's test results, one "name ok|FAILED" per line.  pg_regress prints
# "test name ... ok" up to 15 and TAP ("ok 12 - name", "not ok 13 + name")
# from 16 on.
results() {
    sed -nE 's/^[ #]*(test |parallel group \([0-9]+ tests\): )?[ ]*([A-Za-z0-9_]+)[ ]+\.\.\. (ok|FAILED|failed \(ignored\)).*/\2 \3/p
             s/^ok [0-9]+ +[-+] +([A-Za-z0-9_]+) .*/\1 ok/p
             s/^not ok [0-9]+ +[-+] +([A-Za-z0-9_]+) .*/\1 FAILED/p' "$1" | sort
}

# Compare the run with bpext in $work/$run with the run without it (whose
# failed tests are given), and check its tier and its log.  Returns 1 if
# bpext broke something.
check_run() {
    local work=$1 run=$2 label=$3 failed_without=$4
    local status=0 total failed_with newly
    results "$work/$run/pg_regress.out" >"$work/$run.results"
    total=$(wc -l <"$work/$run.results")
    failed_with=$(awk '$2 != "ok" { print $1 }' "$work/$run.results" | sort)
    if [ "$total" -lt 100 ]; then
        say "only $total test results $label (did the suite run?):"
        tail -30 "$work/$run/pg_regress.out"
        status=1
    fi
    say "$label: $total tests, failed: ${failed_with:-none}" | tr '\n' ' '
    echo
    newly=$(comm -23 <(echo "$failed_with" | sed '/^$/d') <(echo "$failed_without" | sed '/^$/d'))
    if [ -n "$newly" ]; then
        say "FAIL: tests failing only $label: $(echo "$newly" | tr '\n' ' ')"
        [ -f "$work/$run/out/regression.diffs" ] && head -300 "$work/$run/out/regression.diffs"
        status=1
    else
        say "no test fails $label that passes without it"
    fi

    local state reads writes crc ioerr
    IFS='|' read -r state reads writes crc ioerr <"$work/$run/tier.out" || true
    say "tier ($label): state ${state:-?}, ${reads:-?} pages read from it, ${writes:-?} written, ${crc:-?} checksum failures, ${ioerr:-?} I/O errors"
    if [ "${state:-}" != 5 ] || [ "${reads:-0}" -lt 1000 ] || [ "${crc:-1}" != 0 ] || [ "${ioerr:-1}" != 0 ]; then
        say "FAIL: the tier was not enabled and serving reads without errors throughout"
        cat "$work/$run/tier.out"
        status=1
    fi
    local crash='bpext tier disabled after an error|bpext could not|PANIC|TRAP:|was terminated by signal'
    if grep -E "$crash" "$work/$run/server.log" | head -20 | grep -q .; then
        say "FAIL: the log of the run $label shows a tier error or a crash:"
        grep -E "$crash" "$work/$run/server.log" | head -20
        status=1
    fi
    return "$status"
}

# The schedule without bpext, then with it: once, or from 18 on once per
# usable io_method.
run_suites() {
    local work=$1 src=$2
    local status=0 failed_without="" io_method methods
    methods=$(usable_io_methods)

    if [ "${BPEXT_PG_REGRESS_ONLY:-}" != with ]; then
        run_schedule "$work" "$src" without "" without
        results "$work/without/pg_regress.out" >"$work/without.results"
        failed_without=$(awk '$2 != "ok" { print $1 }' "$work/without.results" | sort)
        say "without bpext: $(wc -l <"$work/without.results") tests, failed: ${failed_without:-none}" | tr '\n' ' '
        echo
    fi
    if [ -z "$methods" ]; then
        run_schedule "$work" "$src" with "" with
        check_run "$work" with "with bpext" "$failed_without" || status=1
    fi
    for io_method in $methods; do
        run_schedule "$work" "$src" with "$io_method" "with-$io_method"
        check_run "$work" "with-$io_method" "with bpext (io_method $io_method)" \
            "$failed_without" || status=1
    done
    [ "$status" -eq 0 ] && say "PASS"
    return "$status"
}

# --- main ----------------------------------------------------------------------------

if [ "${1:-}" = --run-only ]; then
    run_suites "$2" "$3"
    exit $?
fi

# --io-methods: print the io_methods the suites run under with bpext (see
# usable_io_methods; for test/pg_recovery_with_bpext.sh, as postgres).
if [ "${1:-}" = --io-methods ]; then
    usable_io_methods
    exit 0
fi

# --source: print the source tree the suites would use (for
# test/pg_recovery_with_bpext.sh), or exit 77 if there is none.
if [ "${1:-}" = --source ]; then
    find_source || find_source any || exit 77
    exit 0
fi

# --prepare (test/install-deps.sh, as root): make sure a source tree is
# there for later runs as postgres, fetching it only if there is none.
# Never fails.
if [ "${1:-}" = --prepare ]; then
    if src=$(find_source any); then
        say "regression suite source: $src"
    else
        fetch_source || true
        src=$(find_source any) && say "regression suite source: $src" ||
            say "no regression suite source; test/t/106_pg_regress.pl will be skipped"
    fi
    exit 0
fi

src=$(find_source) || { fetch_source && src=$(find_source); } || src=$(find_source any) ||
    { say "SKIP: no PostgreSQL $major source for the regression suite"; exit 77; }
say "regression suite from $src"

work=${BPEXT_PG_REGRESS_WORK:-$(mktemp -d /tmp/bpext-pg-regress.XXXXXX)}
mkdir -p "$work/lib"
cleanup() { [ "${KEEP:-0}" = 1 ] || [ -n "${BPEXT_PG_REGRESS_WORK:-}" ] || rm -rf "$work"; }
trap cleanup EXIT

# The test libraries, against the installed server headers.
cc=${CC:-cc}
inc=$("$PG_CONFIG" --includedir-server)
build() {
    local out=$1; shift
    "$cc" -O2 -fPIC -shared -I"$inc" "$@" -o "$work/lib/$out" ||
        die "could not build $out"
}
build regress.so "$src/src/test/regress/regress.c"
build refint.so -DREFINT_VERBOSE "$src/contrib/spi/refint.c"
build autoinc.so "$src/contrib/spi/autoinc.c"

if [ "$(id -u)" -eq 0 ]; then
    chmod 755 "$work"
    chown -R postgres "$work"
    status=0
    runuser -u postgres -- "$here/pg_regress_with_bpext.sh" --run-only "$work" "$src" || status=$?
    exit "$status"
fi
run_suites "$work" "$src"

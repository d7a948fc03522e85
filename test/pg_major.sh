# Sourced by the test scripts: which PostgreSQL majors bpext supports, and
# which Debian release ships each as binary packages.  A major that the
# running Debian release does not ship runs in a chroot of the release that
# does (test/pg_chroot.sh).

# Every supported major, oldest first: what the test command runs by default.
BPEXT_SUPPORTED_MAJORS="15 17 18"

# The Debian suite whose own packages are that major.
bpext_major_suite() {
    case "$1" in
        15) echo bookworm ;;
        17) echo trixie ;;
        18) echo sid ;;
        *) return 1 ;;
    esac
}

# The major the running system ships, if it is one bpext supports.
bpext_native_major() {
    local m codename
    # shellcheck disable=SC1091
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    # Unstable names itself after the next release ("forky/sid").
    case "$(cat /etc/debian_version 2>/dev/null)" in */sid) codename=sid ;; esac
    for m in $BPEXT_SUPPORTED_MAJORS; do
        [ "$(bpext_major_suite "$m")" = "$codename" ] && { echo "$m"; return 0; }
    done
    return 1
}

# Fails with a message unless every word of $1 is a supported major.
bpext_check_majors() {
    local m
    for m in $1; do
        case " $BPEXT_SUPPORTED_MAJORS " in
            *" $m "*) ;;
            *)
                if [ "$m" = 16 ]; then
                    echo "PostgreSQL 16 is not supported: no Debian release or package registry reachable here ships its server headers, so bpext has never been built or tested against it" >&2
                else
                    echo "PostgreSQL $m is not supported (supported: $BPEXT_SUPPORTED_MAJORS)" >&2
                fi
                return 1 ;;
        esac
    done
}

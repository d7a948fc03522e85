#!/usr/bin/env bash
# Run a command in a chroot of the Debian suite that ships a PostgreSQL major
# as its own binary packages (test/pg_major.sh: 17 comes from trixie), so
# that bpext is built and tested against the exact binaries users install.
# The bpext tree is bind-mounted at /bpext.
#
#   test/pg_chroot.sh MAJOR [command ...]     # default command: a shell
#
# On first use the chroot is built with debootstrap (under a minute to a
# few minutes, 2 GB once the server is installed) and packed into
# $BPEXT_CHROOT_CACHE (default /var/tmp) as bpext-<suite>.tar.zst; later
# runs unpack that (seconds).  Each run unpacks into a fresh directory,
# runs test/install-deps.sh there for the major (which installs the server,
# its headers and the source of its test suites on first use), packs the
# tree again if that changed anything, runs the command, and removes the
# tree with its mounts on exit: nothing a test run does in the chroot
# outlives it.  PG_MAJOR, CI and every BPEXT_* variable reach the command.
#
# Run as root.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/test/pg_major.sh"
bpext_usage_if_asked "$0" "$@"

major=${1:?usage: test/pg_chroot.sh MAJOR [command ...]}
shift
cache=${BPEXT_CHROOT_CACHE:-/var/tmp}
bpext_check_majors "$major" || exit 2
suite=$(bpext_major_suite "$major")

[ "$(id -u)" -eq 0 ] || { echo "pg_chroot: run as root" >&2; exit 2; }

tarball=$cache/bpext-$suite.tar.zst
root=$(mktemp -d "$cache/bpext-$suite.XXXXXX")

# The chroot's / must be searchable by the postgres user that runs servers.
chmod 755 "$root"

mounted=()
cleanup() {
    local i
    [ -z "${saving:-}" ] || rm -f "$saving"
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount -l "${mounted[i]}" 2>/dev/null || true
    done
    # Only remove the tree once nothing is mounted below it any more.
    if ! grep -q " $root/" /proc/mounts; then
        rm -rf --one-file-system "$root"
    else
        echo "pg_chroot: $root still has mounts; left in place" >&2
    fi
}
trap cleanup EXIT INT TERM

need() {
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" && continue
        [ -n "${apt_updated:-}" ] || { apt-get update -qq; apt_updated=1; }
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" >/dev/null
    done
}
need zstd

# Pack the tree into the tarball, through a file of this run's own (18 and
# 19 share the sid chroot, so two runs may save it at once); cleanup removes
# a half-written one.
saving=
save() {
    saving=$(mktemp "$tarball.XXXXXX")
    chmod 644 "$saving"
    if tar -C "$root" --zstd --one-file-system --exclude=./bpext --exclude=./bpext-pg-tests \
            --exclude=./proc --exclude=./sys --exclude=./dev -cpf "$saving" .; then
        mv "$saving" "$tarball"
    else
        rm -f "$saving"
        echo "pg_chroot: could not save $tarball; the next run installs again" >&2
    fi
    saving=
}

if [ -f "$tarball" ]; then
    tar -C "$root" --zstd -xpf "$tarball"
    chmod 755 "$root"
else
    need debootstrap
    echo "pg_chroot: building a $suite chroot (first use; about 3 minutes)"
    debootstrap --variant=minbase "$suite" "$root" http://deb.debian.org/debian \
        > "$root.debootstrap.log" 2>&1 || {
        tail -n 30 "$root.debootstrap.log" >&2
        rm -f "$root.debootstrap.log"
        exit 2
    }
    rm -f "$root.debootstrap.log"
    cat > "$root/etc/apt/sources.list" <<EOF
deb http://deb.debian.org/debian $suite main
deb-src http://deb.debian.org/debian $suite main
EOF
    rm -f "$root/etc/apt/sources.list.d/"*
    echo 'APT::Install-Recommends "false";' > "$root/etc/apt/apt.conf.d/90bpext"
    # A chroot has no /dev/pts for dpkg's terminal handling.
    echo 'Dpkg::Use-Pty "false";' >> "$root/etc/apt/apt.conf.d/90bpext"
    # sid's Release file on the mirrors reachable here is past its
    # Valid-Until date; the packages are still signed and checked.
    [ "$suite" != sid ] ||
        echo 'Acquire::Check-Valid-Until "false";' >> "$root/etc/apt/apt.conf.d/90bpext"
    save
fi

bind() {
    mkdir -p "$2"
    mount --bind "$1" "$2"
    mounted+=("$2")
}
bind /proc "$root/proc"
# /sys with what is mounted below it (the cgroup controllers the bench
# uses), as a slave, so that nothing unmounted here leaves the host.
mkdir -p "$root/sys"
mount --rbind /sys "$root/sys"
mount --make-rslave "$root/sys"
mounted+=("$root/sys")
bind /dev "$root/dev"
mkdir -p "$root/dev/shm"
mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
mounted+=("$root/dev/shm")
bind "$here" "$root/bpext"
# The test sources of majors Debian ships no source package of
# (test/pg_regress_with_bpext.sh), read-only.
tests_dir=${BPEXT_PG_TESTS_DIR:-$here/../shared/pg-src}
if [ -d "$tests_dir" ]; then
    bind "$tests_dir" "$root/bpext-pg-tests"
    mount -o remount,bind,ro "$root/bpext-pg-tests"
    export BPEXT_PG_TESTS_DIR=/bpext-pg-tests
fi
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true

# The environment the command sees: a clean one, with what the test
# scripts read passed through.
environment=(PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
             PG_MAJOR="$major")
while IFS='=' read -r name _; do
    case "$name" in
        BPEXT_*|CI) environment+=("$name=${!name}") ;;
    esac
done < <(env)
in_chroot() { chroot "$root" /usr/bin/env -i "${environment[@]}" "$@"; }

# Install (first use) what the major needs, and keep it for the next run.
stamp=$(mktemp "$root/tmp/bpext-stamp.XXXXXX")
in_chroot /bpext/test/install-deps.sh
if [ -n "$(find "$root/var/lib/dpkg/status" "$root/var/tmp" -newer "$stamp" -print -quit)" ]; then
    rm -f "$stamp"
    echo "pg_chroot: saving the $suite chroot with PostgreSQL $major in $tarball"
    save
fi
rm -f "$stamp"

status=0
if [ $# -eq 0 ]; then
    chroot "$root" /bin/bash -l || status=$?
else
    in_chroot "$@" || status=$?
fi
exit "$status"

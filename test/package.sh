#!/usr/bin/env bash
# bpext's Debian packages, built the way Debian builds PostgreSQL
# extensions (debian/, pg_buildext), and the check CI runs on them.
#
#   test/package.sh build [DIR]   # "make deb": a postgresql-<major>-bpext
#                                 # package for each major in
#                                 # debian/pgversions that this system's
#                                 # PostgreSQL supports, into DIR (default
#                                 # /tmp/bpext-packages)
#   test/package.sh check MAJOR   # CI, as root (test/run-tests.sh runs it
#                                 # before its make install): see below
#   test/package.sh control       # regenerate debian/control after an
#                                 # edit of debian/control.in or pgversions
#   test/package.sh dist          # "make dist": the PGXN archive
#                                 # bpext-<version>.zip of HEAD, in the tree
#
# The check builds postgresql-MAJOR-bpext from the tree, installs it with
# apt (so that its dependencies resolve), runs the pg_regress suite
# (REGRESS, in its temporary instance) against the installed files,
# creates the extension at 1.0 and updates it to the default version (the
# result must match a fresh CREATE EXTENSION), purges the package, and
# checks that nothing of it is left.  It starts by removing any bpext files
# an earlier "make install" left in this major's directories, and says so:
# the package must be the only thing providing bpext while it is checked.
# It installs and runs PostgreSQL of the system it runs on: where that is
# shared, hold whatever lock guards it (as for test/run-tests.sh).
set -Eeuo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
. "$src/test/pg_major.sh"
bpext_usage_if_asked "$0" "$@"

say() { echo "package: $*"; }
die() { echo "package: FAILED: $*" >&2; exit 1; }
# Any other command that fails ends the check with what it was.
trap 'echo "package: FAILED: line $LINENO: $BASH_COMMAND (exit $?)" >&2' ERR

# A variable of the Makefile as PGXS sets it, for the major of $pg_config.
mkvar() {
    make -s --no-print-directory -C "$src" -f Makefile -f - \
        PG_CONFIG="$pg_config" "bpext-print-$1" <<'EOF'
bpext-print-%:
	@echo $($*)
EOF
}

# The extension's default version (bpext.control) as a three-part version:
# what debian/changelog and META.json carry.
upstream_version() {
    local v
    v=$(sed -n "s/^default_version *= *'\(.*\)'.*/\1/p" "$src/bpext.control")
    case "$v" in *.*.*) echo "$v" ;; *.*) echo "$v.0" ;; *) echo "$v.0.0" ;; esac
}

# A copy of the tree without build products (an object in the tree would
# be found through VPATH and linked into another major's build).
copy_tree() {
    mkdir -p "$1"
    cp -r "$src/." "$1/"
    rm -rf "$1/.git" "$1"/tmp_check* "$1/results" "$1/output_iso" "$1/log" \
        "$1/test/bench/results" "$1/regression.diffs" "$1/regression.out" \
        "$1"/debian/postgresql-*-bpext "$1"/build-*
    find "$1" \( -name '*.o' -o -name '*.so' -o -name '*.bc' \) -delete
}

# Build the packages of the majors pg_buildext picks (PG_SUPPORTED_VERSIONS
# narrows them) in $1/bpext; the .deb files end up in $1.
build_in() {
    local work=$1 want have
    copy_tree "$work/bpext"
    want=$(upstream_version)
    have=$(cd "$work/bpext" && dpkg-parsechangelog -S Version)
    [ "${have%-*}" = "$want" ] ||
        say "WARNING: debian/changelog is at $have but bpext.control's default_version is $want: add a changelog entry before releasing"
    (cd "$work/bpext" && pg_buildext updatecontrol) || die "pg_buildext updatecontrol failed"
    say "building in $work/bpext (dpkg-buildpackage, log in $work/build.log)"
    if ! (cd "$work/bpext" &&
            DEB_BUILD_OPTIONS="parallel=$(nproc) ${DEB_BUILD_OPTIONS:-}" \
                dpkg-buildpackage -b -us -uc) > "$work/build.log" 2>&1; then
        tail -n 40 "$work/build.log" >&2
        die "dpkg-buildpackage failed (above: the end of its log)"
    fi
}

cmd_control() {
    # Every supported major, whatever this system's PostgreSQL supports.
    (cd "$src" && PG_SUPPORTED_VERSIONS="$BPEXT_SUPPORTED_MAJORS" pg_buildext updatecontrol)
}

cmd_build() {
    local out=${1:-/tmp/bpext-packages} work
    work=$(mktemp -d /tmp/bpext-deb.XXXXXX)
    # shellcheck disable=SC2064
    trap "rm -rf '$work'" EXIT
    build_in "$work"
    mkdir -p "$out"
    mv "$work"/*.deb "$out/"
    say "built into $out:"
    ls -1 "$out"/*.deb
}

# Whether dpkg has the package installed or its configuration files.
known() {
    local status
    status=$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null) || return 1
    [ -n "$status" ] && [ "$status" != not-installed ]
}

# The files of bpext in a major's directories, whoever put them there.
bpext_files() {
    local d dirs=()
    for d in "$pkglibdir" "$sharedir/extension" "$pkglibdir/bitcode"; do
        [ -d "$d" ] && dirs+=("$d")
    done
    find "${dirs[@]}" -maxdepth 1 -name 'bpext*' | sort
}

cmd_check() {
    local major=${1:?usage: test/package.sh check MAJOR} start=$SECONDS
    bpext_check_majors "$major"
    [ "$(id -u)" -eq 0 ] || die "run as root: it installs and removes a package"
    pkg=postgresql-$major-bpext
    pg_config=/usr/lib/postgresql/$major/bin/pg_config
    [ -x "$pg_config" ] || die "$pg_config is missing (test/install-deps.sh installs it)"
    bindir=$("$pg_config" --bindir)
    pkglibdir=$("$pg_config" --pkglibdir)
    sharedir=$("$pg_config" --sharedir)

    # The packaging claims exactly the supported majors.
    local pgversions control
    pgversions=$(grep -v '^#' "$src/debian/pgversions" | xargs)
    [ "$pgversions" = "$BPEXT_SUPPORTED_MAJORS" ] ||
        die "debian/pgversions lists '$pgversions', test/pg_major.sh supports '$BPEXT_SUPPORTED_MAJORS'"
    control=$(mktemp -d)
    cp -r "$src/debian" "$control/"
    (cd "$control" && PG_SUPPORTED_VERSIONS="$BPEXT_SUPPORTED_MAJORS" pg_buildext updatecontrol)
    if ! diff -u "$src/debian/control" "$control/debian/control"; then
        rm -rf "$control"
        die "debian/control is out of date: run test/package.sh control"
    fi
    rm -rf "$control"

    work=$(mktemp -d /tmp/bpext-pkgcheck.XXXXXX)
    chmod 755 "$work"
    trap cleanup_check EXIT

    # Start from no bpext at all in this major's directories.
    if known "$pkg"; then
        say "purging $pkg, left installed by an earlier run"
        apt-get remove --purge -y -qq -o DPkg::Lock::Timeout=300 "$pkg" >/dev/null
    fi
    local f stale=()
    while read -r f; do
        ! dpkg -S "$f" >/dev/null 2>&1 || die "$f belongs to $(dpkg -S "$f" | cut -d: -f1), not to a make install"
        stale+=("$f")
    done < <(bpext_files)
    if [ "${#stale[@]}" -gt 0 ]; then
        say "removing bpext files that no package owns (a make install's, or put there by hand), so that the package is checked alone: ${stale[*]}"
        say "(test/run-tests.sh make-installs bpext again after this check; run alone, make install again if you need it)"
        rm -rf "${stale[@]}"
    fi

    # Build this major's package only.
    PG_SUPPORTED_VERSIONS=$major build_in "$work"
    local deb
    deb=$(ls "$work/${pkg}_"*.deb 2>/dev/null) || die "the build made no $pkg package: $(ls "$work"/*.deb 2>/dev/null | xargs)"
    say "built $(basename "$deb") in $((SECONDS - start)) s"

    # What the package must hold: the library, the control file, the SQL
    # scripts of DATA, the JIT bitcode where the server does JIT, and the
    # docs (README.md and doc/, uncompressed, so that the links between them
    # work); nothing else.
    local expected=$work/expected.list installed=$work/installed.list
    {
        echo "$pkglibdir/bpext.so"
        echo "$sharedir/extension/bpext.control"
        for f in $(mkvar DATA); do echo "$sharedir/extension/$(basename "$f")"; done
        if [ "$(mkvar with_llvm)" = yes ]; then
            echo "$pkglibdir/bitcode/bpext.index.bc"
            for f in $(mkvar OBJS); do echo "$pkglibdir/bitcode/bpext/${f%.o}.bc"; done
        fi
        for f in copyright changelog.Debian.gz README.md "$src"/doc/*; do
            echo "/usr/share/doc/$pkg/${f#"$src"/}"
        done
    } | sort > "$expected"

    say "installing $(basename "$deb") with apt"
    installed_pkg=1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 "$deb" > "$work/apt.log" 2>&1 ||
        { cat "$work/apt.log" >&2; die "apt-get install $deb failed"; }
    dpkg -L "$pkg" > "$work/dpkg-L.list"
    while read -r f; do
        [ -d "$f" ] || echo "$f"
    done < "$work/dpkg-L.list" | sort > "$installed"
    if ! diff -u "$expected" "$installed" > "$work/files.diff"; then
        cat "$work/files.diff" >&2
        die "$pkg installs other files than bpext's library, control file, SQL scripts (DATA), bitcode and docs (- missing, + unexpected)"
    fi
    say "$pkg installed $(wc -l < "$installed") files, as expected"

    # The pg_regress suite against the installed files, in its temporary
    # instance (test/regress.conf); the tree copy holds no library.
    chown -R postgres "$work/bpext"
    say "make installcheck (REGRESS only) against the installed package"
    if ! runuser -u postgres -- env PATH="$bindir:$PATH" make -C "$work/bpext" -s \
            PG_CONFIG="$pg_config" installcheck ISOLATION= TAP_TESTS= \
            > "$work/installcheck.log" 2>&1; then
        cat "$work/installcheck.log" >&2
        [ -f "$work/bpext/regression.diffs" ] && tail -n 200 "$work/bpext/regression.diffs" >&2
        die "the pg_regress suite failed against the installed $pkg"
    fi
    grep -E '^(ok|not ok|test |All|#)' "$work/installcheck.log" | sed 's/^/  /'

    check_update

    say "apt-get remove --purge $pkg"
    DEBIAN_FRONTEND=noninteractive apt-get remove --purge -y -qq -o DPkg::Lock::Timeout=300 "$pkg" > "$work/apt.log" 2>&1 ||
        { cat "$work/apt.log" >&2; die "apt-get remove --purge $pkg failed"; }
    installed_pkg=
    local left=()
    while read -r f; do
        case "$f" in
            # Directories other packages share (/usr, .../lib, ...) stay.
            */bpext|*/bpext/*|*/"$pkg"|*/"$pkg"/*|*bpext*.*) ;;
            *) [ -d "$f" ] && continue ;;
        esac
        if [ -e "$f" ] || [ -L "$f" ]; then left+=("$f"); fi
    done < "$work/dpkg-L.list"
    while read -r f; do
        case " ${left[*]} " in *" $f "*) ;; *) left+=("$f") ;; esac
    done < <(bpext_files)
    if known "$pkg"; then
        left+=("(dpkg still lists $pkg as $(dpkg-query -W -f='${db:Status-Status}' "$pkg"))")
    fi
    [ "${#left[@]}" -eq 0 ] || die "left after apt-get remove --purge $pkg: ${left[*]}"
    say "purged: none of its $(wc -l < "$installed") files and no bpext file left in $pkglibdir, $sharedir/extension"
    say "PASS: $pkg $(dpkg-deb -f "$deb" Version) in $((SECONDS - start)) s"
}

# CREATE EXTENSION at 1.0, ALTER EXTENSION UPDATE to the default version:
# the same objects, definitions and privileges as a fresh CREATE EXTENSION.
check_update() {
    local db=$work/cluster want got
    mkdir -p "$db"
    chown postgres "$db"
    runuser -u postgres -- "$bindir/initdb" -D "$db/data" -A trust -U postgres --no-sync \
        > "$db/initdb.log" 2>&1 || { cat "$db/initdb.log" >&2; die "initdb failed"; }
    {
        cat "$src/test/regress.conf"
        echo "listen_addresses = ''"
        echo "unix_socket_directories = '$db'"
    } >> "$db/data/postgresql.conf"
    server=$db
    runuser -u postgres -- "$bindir/pg_ctl" -D "$db/data" -l "$db/server.log" -w start >/dev/null ||
        { cat "$db/server.log" >&2; die "the server with the installed bpext did not start"; }
    sql() { runuser -u postgres -- "$bindir/psql" -X -q -At -h "$db" -v ON_ERROR_STOP=1 "$@"; }
    surface() {
        sql -d "$1" -c "
            SELECT pg_describe_object(d.classid, d.objid, 0) || ' | ' ||
                   coalesce(CASE d.classid
                       WHEN 'pg_proc'::regclass THEN
                           (SELECT pg_get_functiondef(p.oid) || ' acl=' || coalesce(p.proacl::text, '')
                              FROM pg_proc p WHERE p.oid = d.objid)
                       WHEN 'pg_class'::regclass THEN
                           (SELECT c.relkind::text || ' acl=' || coalesce(c.relacl::text, '') ||
                                   CASE WHEN c.relkind = 'v' THEN ' ' || pg_get_viewdef(c.oid) ELSE '' END
                              FROM pg_class c WHERE c.oid = d.objid)
                       WHEN 'pg_type'::regclass THEN format_type(d.objid, NULL)
                   END, '')
              FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
             WHERE d.refclassid = 'pg_extension'::regclass AND e.extname = 'bpext'
               AND d.deptype = 'e'
             ORDER BY 1"
    }
    want=$(sed -n "s/^default_version *= *'\(.*\)'.*/\1/p" "$sharedir/extension/bpext.control")
    sql -d postgres -c 'CREATE DATABASE updated' -c 'CREATE DATABASE fresh'
    sql -d updated -c "CREATE EXTENSION bpext VERSION '1.0'"
    got=$(sql -d updated -c "SELECT extversion FROM pg_extension WHERE extname = 'bpext'")
    [ "$got" = 1.0 ] || die "CREATE EXTENSION bpext VERSION '1.0' made version $got"
    sql -d updated -c 'ALTER EXTENSION bpext UPDATE'
    got=$(sql -d updated -c "SELECT extversion FROM pg_extension WHERE extname = 'bpext'")
    [ "$got" = "$want" ] || die "ALTER EXTENSION bpext UPDATE from 1.0 reached $got, not the default version $want"
    sql -d fresh -c 'CREATE EXTENSION bpext'
    surface updated > "$db/updated.out"
    surface fresh > "$db/fresh.out"
    if ! diff -u "$db/fresh.out" "$db/updated.out" > "$db/surface.diff"; then
        cat "$db/surface.diff" >&2
        die "bpext updated from 1.0 to $want differs from a fresh CREATE EXTENSION ($want) (- fresh, + updated)"
    fi
    runuser -u postgres -- "$bindir/pg_ctl" -D "$db/data" -m fast -w stop >/dev/null
    server=
    say "CREATE EXTENSION bpext VERSION '1.0', ALTER EXTENSION bpext UPDATE: $want, $(wc -l < "$db/fresh.out") objects as a fresh CREATE EXTENSION makes them"
}

cleanup_check() {
    local status=$?
    if [ -n "${server:-}" ]; then
        runuser -u postgres -- "$bindir/pg_ctl" -D "$server/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    # A failed check leaves no package behind: test/run-tests.sh's make
    # install would otherwise overwrite files dpkg owns.
    if [ -n "${installed_pkg:-}" ]; then
        DEBIAN_FRONTEND=noninteractive apt-get remove --purge -y -qq -o DPkg::Lock::Timeout=300 "$pkg" >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
    exit "$status"
}

# The PGXN archive: git archive of HEAD (committed files only) with a
# bpext-<version>/ prefix, once META.json agrees with bpext.control and
# validates (pgxn_meta, where installed: cargo install pgxn_meta).
cmd_dist() {
    local version meta name meta_version provides_version zip validator f
    local missing=() unwanted
    version=$(upstream_version)
    meta=$(perl -MJSON::PP -e 'local $/; my $m = decode_json(<STDIN>);
        print join(" ", $m->{name}, $m->{version}, $m->{provides}{bpext}{version}), "\n"' \
        < "$src/META.json") || die "META.json is not valid JSON"
    read -r name meta_version provides_version <<< "$meta"
    [ "$name" = bpext ] || die "META.json names the distribution '$name'"
    [ "$meta_version" = "$version" ] && [ "$provides_version" = "$version" ] ||
        die "META.json says version $meta_version (provides: $provides_version), bpext.control's default_version makes $version"
    validator=$(command -v pgxn_meta || echo "${CARGO_HOME:-$HOME/.cargo}/bin/pgxn_meta")
    if [ -x "$validator" ]; then
        "$validator" "$src/META.json" || die "META.json does not validate against the PGXN Meta Spec"
    else
        say "WARNING: pgxn_meta is not installed (cargo install pgxn_meta): META.json not validated"
    fi
    git -C "$src" rev-parse --verify -q HEAD >/dev/null || die "make dist archives HEAD of the git repository: none here"
    [ -z "$(git -C "$src" status --porcelain --untracked-files=no)" ] ||
        say "WARNING: uncommitted changes are not in the archive (it is HEAD)"
    zip=$src/bpext-$version.zip
    rm -f "$zip"
    git -C "$src" archive --format=zip --prefix="bpext-$version/" -o "$zip" HEAD
    # What building, installing and testing needs; no build or test output.
    pg_config=${PG_CONFIG:-pg_config}
    for f in Makefile bpext.control META.json README.md LICENSE test/regress.conf \
            $(mkvar DATA) $(mkvar OBJS | sed 's/\.o\b/.c/g') \
            $(cd "$src" && ls sql/*.sql expected/*.out); do
        unzip -l "$zip" "bpext-$version/$f" >/dev/null 2>&1 || missing+=("$f")
    done
    [ "${#missing[@]}" -eq 0 ] || die "$zip lacks ${missing[*]}"
    unwanted=$(unzip -Z1 "$zip" | grep -vE "^bpext-$version/" || true)
    unwanted+=$(unzip -Z1 "$zip" | grep -E '(^|/)(tmp_check[^/]*|results|output_iso|log)/|\.(o|so|bc)$|regression\.(diffs|out)$' || true)
    [ -z "$unwanted" ] || die "$zip holds what it should not: $unwanted"
    say "wrote $zip: $(unzip -Z1 "$zip" | grep -vc '/$') files of HEAD ($(git -C "$src" rev-parse --short HEAD))"
}

case "${1:-}" in
    build) shift; cmd_build "$@" ;;
    check) shift; cmd_check "$@" ;;
    control) cmd_control ;;
    dist) cmd_dist ;;
    *) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac

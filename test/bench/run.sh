#!/usr/bin/env bash
# bpext benchmark harness: pgbench on emulated slow storage with a small RAM
# budget, with and without the tier, side by side.  See test/bench/README.md.
#
#   sudo test/bench/run.sh [options]        (or: sudo make bench BENCH_ARGS="...")
#
# PG_MAJOR picks the PostgreSQL major (default: the one this Debian release
# ships); another supported major runs in a chroot of the Debian release
# that ships it (test/pg_chroot.sh), with this machine's loop devices and
# cgroups.  PGBIN overrides where the binaries are.
#
# Needs root (loop device, mount, cgroups, drop_caches) and the blkio+memory
# controllers of cgroup v1 or the io+memory controllers of cgroup v2.
# Everything it sets up (servers, loop device, mount, throttle rules, cgroups,
# work directory) is torn down at exit, also on failure and on Ctrl-C.
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
. "$TOP/test/pg_major.sh"
NATIVE_MAJOR=$(bpext_native_major || true)
MAJOR=${PG_MAJOR:-$NATIVE_MAJOR}
[ -n "$MAJOR" ] || { echo "bench: this system ships no supported PostgreSQL major; set PG_MAJOR" >&2; exit 2; }
bpext_check_majors "$MAJOR" || exit 2
if [ -z "${PGBIN:-}" ] && ! bpext_major_is_native "$MAJOR"; then
    [ "$(id -u)" -eq 0 ] || { echo "bench: must run as root" >&2; exit 2; }
    # The chroot has no git: name the commit here, for the report.
    BPEXT_COMMIT=$(git -C "$TOP" describe --always --dirty 2>/dev/null || echo unknown)
    export BPEXT_COMMIT
    exec "$TOP/test/pg_chroot.sh" "$MAJOR" /bpext/test/bench/run.sh "$@"
fi
PGBIN=${PGBIN:-/usr/lib/postgresql/$MAJOR/bin}
ORIG_ARGS=("$@")

# ---------------------------------------------------------------- defaults
SCALE=100               # pgbench scale (15 MB each)
CLIENTS=8               # pgbench clients for select/skew/tpcb
THREADS=2               # pgbench threads
SCAN_CLIENTS=2          # clients of the scan workload (each scan is parallel)
DURATION=25             # seconds per measured run
COLD_SECONDS=15         # select-only from a cold start in A and B (0: skip)
RESTART_SECONDS=120     # R: select-only after a clean restart, per start mode
OVERHEAD_DURATION=15    # seconds per E/E0 run
ROUNDS=2                # E0/E rounds, ABBA order
AB_ROUNDS=3             # A/B rounds, ABBA order: B/A per round, its median and spread
IOPS=1000               # read and write IOPS of the slow data disk
READ_IOPS=""            # override the read or write limit alone
WRITE_IOPS=""
MBPS=0                  # optional bandwidth limit of the slow disk (0: none)
READAHEAD_KB=128        # read_ahead_kb of the slow disk (loop devices default to more)
RAM=640                 # MB: shared memory + page cache + processes of A, B, C
SHARED_BUFFERS=128      # MB, A, B, C
BIG_SB=auto             # MB, D, E, E0: large enough to hold the database
TIER_SIZE=auto          # MB, B and E: large enough to hold the database
ADMISSION=evict         # bpext.admission in B and E
WRITE_POLICY=dual_write # bpext.write_policy in B and E
DIRECT_IO=off           # bpext.direct_io in B and E (bpext's default)
TIER_LATENCY_US=0       # >0: the tier on an emulated SSD with this latency per request
TIER_READ_DEPTH=""      # bpext.tier_read_depth in B and E ("": bpext's default)
TIER_READERS=""         # bpext.tier_readers in B and E ("": bpext's default)
CONFIGS=A,B,C,D,E,R
WORKLOADS=select,skew,skewrw,scan,tpcb
RAM_TIER_SMALL=auto     # MB, MS: smaller than the database (2/3 of it)
RAM_TIER_LARGE=auto     # MB, ML: holds the database (as --tier-size auto)
RAM_WORKLOADS=select    # workloads of M0, MS, ML
RAM_WARMUP=60           # seconds of select-only before M0, MS, ML measure
OVERHEAD_WORKLOADS=select,tpcb
SKEW=exponential:4      # exponential:P or zipfian:S over aid
SKEW_UPDATE_PCT=20      # skewrw: share of transactions that update a row
PROTOCOL=prepared
PROGRESS_EVERY=5        # show every Nth 1-second progress line
PROFILE_SECONDS=0       # >0: sample the CPU with perf for this long in each measured run
WORKDIR_PARENT=/var/tmp # fast local disk: tier file, C/E data, loop backing file
RESULTS=""
IO_METHOD=""
PORT=5499
BUILD=1
KEEP=0

usage() {
    cat <<EOF
Usage: sudo $0 [options]

Sizes are in MB unless they carry a unit (640MB, 2GB).

  --scale N              pgbench scale factor (default $SCALE, about 15 MB each)
  --clients N            clients for select/skew/tpcb (default $CLIENTS)
  --threads N            pgbench threads (default $THREADS)
  --scan-clients N       clients for the scan workload (default $SCAN_CLIENTS)
  --duration S           seconds per measured run (default $DURATION)
  --cold-seconds S       select-only from a cold start in A and B, 0 skips (default $COLD_SECONDS)
  --restart-seconds S    R: select-only after a clean restart (default $RESTART_SECONDS)
  --overhead-duration S  seconds per E/E0 run (default $OVERHEAD_DURATION)
  --rounds N             E0/E rounds, alternating ABBA (default $ROUNDS)
  --ab-rounds N          A/B rounds, alternating ABBA; each its own server start on
                         a fresh copy of the dataset (default $AB_ROUNDS)
  --iops N               read and write IOPS limit of the slow disk (default $IOPS)
  --read-iops N, --write-iops N   set one of the two alone
  --mbps N               also limit the slow disk's bandwidth (default $MBPS = none)
  --readahead-kb N       read_ahead_kb of the slow disk (default $READAHEAD_KB)
  --ram SIZE             memory cgroup limit of A, B, C (default ${RAM}MB)
  --shared-buffers SIZE  shared_buffers of A, B, C (default ${SHARED_BUFFERS}MB)
  --big-shared-buffers SIZE|auto  shared_buffers of D, E, E0 (default $BIG_SB: 1.2 x database)
  --tier-size SIZE|auto  bpext.size of B and E (default $TIER_SIZE: 1.25 x database)
  --admission evict|read bpext.admission in B and E (default $ADMISSION)
  --write-policy P       bpext.write_policy in B and E (default $WRITE_POLICY)
  --direct-io on|off     bpext.direct_io in B and E (default $DIRECT_IO)
  --tier-latency TIME    put the tier file on an emulated SSD that answers each request
                         after TIME (100us, 1ms), many side by side: ext4 on a loop device
                         (direct I/O) on a FUSE file (test/hung_device.sh); 0 (the default):
                         the tier file on the fast disk
  --tier-read-depth N    bpext.tier_read_depth in B and E (default: bpext's)
  --tier-readers N       bpext.tier_readers in B and E (default: bpext's)
  --io-method M          io_method of every configuration, 18 and later: sync, worker
                         or io_uring (default: the server's, worker)
  --configs LIST         of A,B,C,D,E,R,M (E runs E and E0; R runs R0, RC, RW;
                         M runs M0, MS, ML) (default $CONFIGS)
  --ram-tier-small SIZE|auto  bpext.size of MS (default $RAM_TIER_SMALL: 2/3 of the database)
  --ram-tier-large SIZE|auto  bpext.size of ML (default $RAM_TIER_LARGE: 1.25 x database)
  --ram-workloads LIST   workloads of M0, MS, ML (default $RAM_WORKLOADS)
  --ram-warmup S         M0, MS, ML: seconds of select-only before measuring (default $RAM_WARMUP)
  --workloads LIST       of select,skew,skewrw,scan,tpcb, run in this order
                         (default $WORKLOADS)
  --overhead-workloads LIST  workloads of E/E0 (default $OVERHEAD_WORKLOADS)
  --skew DIST:P          exponential:P or zipfian:S for skew and skewrw (default $SKEW)
  --skew-update-pct N    skewrw: percentage of transactions that update (default $SKEW_UPDATE_PCT)
  --protocol P           pgbench -M (default $PROTOCOL)
  --progress-every N     print every Nth per-second progress line (default $PROGRESS_EVERY)
  --profile S            in each measured run, sample every CPU with perf (cpu-clock)
                         for S seconds from its 3rd second, and report the server's
                         CPU by library: bpext.so's own samples are the tier's code
  --workdir-parent DIR   where the work directory goes, on the fast disk (default $WORKDIR_PARENT)
  --results DIR          results directory (default test/bench/results/<timestamp>)
  --port N               port (names the socket; servers listen on a private socket only)
  --no-build             do not install dependencies, build and install bpext
  --keep                 keep the work directory (data directories) at the end
  -h, --help             this text

Configurations:
  A   no tier (bpext not loaded); data on the throttled disk; RAM budget
  B   bpext tier on the fast disk; data on the throttled disk; RAM budget
  C   data on the fast disk, unthrottled; RAM budget (the SSD ceiling)
  D   shared_buffers holding everything; data on the throttled disk (the RAM ceiling)
  E   bpext loaded, tier on, data fits in shared_buffers; E0 the same without bpext
  R   after a clean restart, as A (R0), as B with the tier starting cold (RC,
      bpext.warm_restart off) and starting warm (RW): throughput over time
  M   data in RAM: data on the fast disk, no memory limit, shared_buffers as A:
      no bpext (M0), a tier smaller than the database (MS), a tier that holds
      it (ML), in --ab-rounds rounds (M0 MS ML, ML MS M0, ...)
EOF
}

die() { echo "bench: $*" >&2; exit 1; }

to_mb() {   # 640, 640MB, 2GB, 1.5GB, 512kB -> MB (integer)
    local v=${1^^}
    awk -v v="$v" 'BEGIN {
        n = v + 0; u = v; sub(/^[0-9.]+/, "", u);
        if (u == "" || u == "MB" || u == "M") m = n;
        else if (u == "GB" || u == "G") m = n * 1024;
        else if (u == "TB" || u == "T") m = n * 1024 * 1024;
        else if (u == "KB" || u == "K") m = n / 1024;
        else { print "ERR"; exit }
        printf "%d\n", m + 0.5 }'
}
size_arg() { local m; m=$(to_mb "$2"); [[ $m =~ ^[0-9]+$ ]] || die "$1: not a size: $2"; echo "$m"; }
int_arg() { [[ $2 =~ ^[0-9]+$ ]] || die "$1: not a number: $2"; echo "$2"; }
usec_arg() {   # 100us, 1ms, 0 -> microseconds
    case $2 in
        0) echo 0 ;;
        *us) int_arg "$1" "${2%us}" ;;
        *ms) echo $(( $(int_arg "$1" "${2%ms}") * 1000 )) ;;
        *) die "$1: a time in us or ms (100us, 1ms), not $2" ;;
    esac
}

while [ $# -gt 0 ]; do
    opt=$1; val=${2:-}
    case $opt in
        --scale) SCALE=$(int_arg "$opt" "$val"); shift ;;
        --clients) CLIENTS=$(int_arg "$opt" "$val"); shift ;;
        --threads) THREADS=$(int_arg "$opt" "$val"); shift ;;
        --scan-clients) SCAN_CLIENTS=$(int_arg "$opt" "$val"); shift ;;
        --duration) DURATION=$(int_arg "$opt" "$val"); shift ;;
        --cold-seconds) COLD_SECONDS=$(int_arg "$opt" "$val"); shift ;;
        --restart-seconds) RESTART_SECONDS=$(int_arg "$opt" "$val"); shift ;;
        --overhead-duration) OVERHEAD_DURATION=$(int_arg "$opt" "$val"); shift ;;
        --rounds) ROUNDS=$(int_arg "$opt" "$val"); shift ;;
        --ab-rounds) AB_ROUNDS=$(int_arg "$opt" "$val"); shift ;;
        --iops) IOPS=$(int_arg "$opt" "$val"); shift ;;
        --read-iops) READ_IOPS=$(int_arg "$opt" "$val"); shift ;;
        --write-iops) WRITE_IOPS=$(int_arg "$opt" "$val"); shift ;;
        --mbps) MBPS=$(int_arg "$opt" "$val"); shift ;;
        --readahead-kb) READAHEAD_KB=$(int_arg "$opt" "$val"); shift ;;
        --ram) RAM=$(size_arg "$opt" "$val"); shift ;;
        --shared-buffers) SHARED_BUFFERS=$(size_arg "$opt" "$val"); shift ;;
        --big-shared-buffers) [ "$val" = auto ] && BIG_SB=auto || BIG_SB=$(size_arg "$opt" "$val"); shift ;;
        --tier-size) [ "$val" = auto ] && TIER_SIZE=auto || TIER_SIZE=$(size_arg "$opt" "$val"); shift ;;
        --ram-tier-small) [ "$val" = auto ] && RAM_TIER_SMALL=auto || RAM_TIER_SMALL=$(size_arg "$opt" "$val"); shift ;;
        --ram-tier-large) [ "$val" = auto ] && RAM_TIER_LARGE=auto || RAM_TIER_LARGE=$(size_arg "$opt" "$val"); shift ;;
        --ram-workloads) RAM_WORKLOADS=$val; shift ;;
        --ram-warmup) RAM_WARMUP=$(int_arg "$opt" "$val"); shift ;;
        --admission) ADMISSION=$val; shift ;;
        --write-policy) WRITE_POLICY=$val; shift ;;
        --direct-io) DIRECT_IO=$val; shift ;;
        --tier-latency) TIER_LATENCY_US=$(usec_arg "$opt" "$val"); shift ;;
        --tier-read-depth) TIER_READ_DEPTH=$(int_arg "$opt" "$val"); shift ;;
        --tier-readers) TIER_READERS=$(int_arg "$opt" "$val"); shift ;;
        --io-method) IO_METHOD=$val; shift ;;
        --configs) CONFIGS=${val^^}; shift ;;
        --workloads) WORKLOADS=$val; shift ;;
        --overhead-workloads) OVERHEAD_WORKLOADS=$val; shift ;;
        --skew) SKEW=$val; shift ;;
        --skew-update-pct) SKEW_UPDATE_PCT=$(int_arg "$opt" "$val"); shift ;;
        --protocol) PROTOCOL=$val; shift ;;
        --progress-every) PROGRESS_EVERY=$(int_arg "$opt" "$val"); shift ;;
        --profile) PROFILE_SECONDS=$(int_arg "$opt" "$val"); shift ;;
        --workdir-parent) WORKDIR_PARENT=$val; shift ;;
        --results) RESULTS=$val; shift ;;
        --port) PORT=$(int_arg "$opt" "$val"); shift ;;
        --no-build) BUILD=0 ;;
        --keep) KEEP=1 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown option: $opt" ;;
    esac
    shift
done
READ_IOPS=${READ_IOPS:-$IOPS}
WRITE_IOPS=${WRITE_IOPS:-$IOPS}

has() { [[ ",$1," == *",$2,"* ]]; }
[[ -z $IO_METHOD || $IO_METHOD =~ ^(sync|worker|io_uring)$ ]] ||
    die "--io-method: sync, worker or io_uring, not $IO_METHOD"
for c in ${CONFIGS//,/ }; do [[ $c =~ ^(A|B|C|D|E|R|M)$ ]] || die "--configs: unknown configuration $c"; done
for w in ${WORKLOADS//,/ } ${OVERHEAD_WORKLOADS//,/ } ${RAM_WORKLOADS//,/ }; do
    [[ $w =~ ^(select|skew|skewrw|scan|tpcb)$ ]] || die "unknown workload $w"
done
[[ $ADMISSION =~ ^(evict|read)$ ]] || die "--admission: evict or read"
[[ $WRITE_POLICY =~ ^(dual_write|invalidate)$ ]] || die "--write-policy: dual_write or invalidate"
[[ $DIRECT_IO =~ ^(on|off)$ ]] || die "--direct-io: on or off"
[[ $SKEW =~ ^(exponential|zipfian):[0-9.]+$ ]] || die "--skew: exponential:P or zipfian:S"
[ "$SCALE" -ge 1 ] && [ "$CLIENTS" -ge 1 ] && [ "$DURATION" -ge 1 ] || die "scale, clients and duration must be positive"
[ "$AB_ROUNDS" -ge 1 ] || die "--ab-rounds must be at least 1"
[ "$PROFILE_SECONDS" = 0 ] || [ "$PROFILE_SECONDS" -le $((DURATION - 5)) ] ||
    die "--profile must end at least 3 s before the run does (at most --duration $DURATION less 5)"
[ "$SKEW_UPDATE_PCT" -le 100 ] || die "--skew-update-pct: 0 to 100"
[ "$READ_IOPS" -ge 1 ] && [ "$WRITE_IOPS" -ge 1 ] || die "IOPS limits must be positive"
[ "$RAM" -gt $((SHARED_BUFFERS + 64)) ] || die "--ram ${RAM}MB leaves nothing beside shared_buffers ${SHARED_BUFFERS}MB"

# ---------------------------------------------------------------- what it needs
need_msg() {
    cat >&2 <<EOF
bench: $1

This harness emulates a slow data disk and a small RAM budget honestly, which
needs root on Linux with:
  * loop devices (losetup --direct-io, mkfs.ext4, mount),
  * cgroup v1 with the blkio and memory controllers mounted under
    /sys/fs/cgroup/blkio and /sys/fs/cgroup/memory (blkio.throttle.*_iops_device,
    memory.limit_in_bytes), or cgroup v2 at /sys/fs/cgroup with the io and
    memory controllers available (io.max, memory.max),
  * write access to /proc/sys/vm/drop_caches,
  * PostgreSQL $MAJOR in $PGBIN and a 'postgres' user.
Run it as root (sudo make bench) on a machine or VM that has these; inside an
unprivileged container it cannot work.
EOF
    exit 2
}
[ "$(id -u)" -eq 0 ] || need_msg "must run as root (it creates a loop device, mounts it, and sets up cgroups)"
[ "$(uname -s)" = Linux ] || need_msg "Linux only"
# A minimal system (the chroot of another major) may lack the disk tools.
if ! command -v mkfs.ext4 >/dev/null || ! command -v losetup >/dev/null ||
   ! command -v python3 >/dev/null; then
    if command -v apt-get >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        tools=(e2fsprogs mount util-linux python3)
        { apt-get install -y -qq "${tools[@]}" || { apt-get update -qq &&
            apt-get install -y -qq "${tools[@]}"; }; } >/dev/null 2>&1 || true
    fi
fi
[ "$PROFILE_SECONDS" = 0 ] || command -v perf >/dev/null ||
    need_msg "--profile needs perf (apt-get install linux-perf)"
for t in losetup mkfs.ext4 mount umount runuser fallocate awk; do
    command -v "$t" >/dev/null || need_msg "missing tool: $t"
done
[ -w /proc/sys/vm/drop_caches ] || need_msg "/proc/sys/vm/drop_caches is not writable"
if [ -e /sys/fs/cgroup/blkio/blkio.throttle.read_iops_device ] &&
   [ -e /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
    CG_MODE=v1
elif [ -f /sys/fs/cgroup/cgroup.controllers ] &&
     grep -qw io /sys/fs/cgroup/cgroup.controllers &&
     grep -qw memory /sys/fs/cgroup/cgroup.controllers; then
    CG_MODE=v2
else
    need_msg "neither cgroup v1 blkio+memory nor cgroup v2 io+memory controllers are available"
fi
losetup --help 2>&1 | grep -q -- --direct-io || need_msg "losetup has no --direct-io (util-linux too old)"

# ---------------------------------------------------------------- results, logging
STAMP=$(date +%Y%m%d-%H%M%S)
RESULTS=${RESULTS:-$HERE/results/$STAMP}
mkdir -p "$RESULTS/runs" "$RESULTS/logs"
RESULTS=$(cd "$RESULTS" && pwd)
MANIFEST=$RESULTS/manifest.jsonl
: > "$MANIFEST"
# tee -i: a Ctrl-C must not kill the logger before the cleanup has printed.
exec > >(tee -ia "$RESULTS/run.log") 2>&1
START_EPOCH=$(date +%s)

elapsed() { local s=$(( $(date +%s) - START_EPOCH )); printf '%02d:%02d' $((s / 60)) $((s % 60)); }
say() { printf '[%s] %s\n' "$(elapsed)" "$*"; }
phase() { printf '[%s] == %s\n' "$(elapsed)" "$*"; }
now() { date +%s.%N; }
secs_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
emit() { printf '%s\n' "$1" >> "$MANIFEST"; }   # one JSON object per line
jstr() { local s=${1//\\/\\\\}; s=${s//\"/\\\"}; printf '"%s"' "$s"; }

# ---------------------------------------------------------------- state for cleanup
WORK=""
LOOP=""
TIERDEV=""                  # the emulated SSD's directory (--tier-latency)
TIERLOOP=""                 # and its loop device's name
MAJMIN=""
MNT=""
THROTTLED=0
CG2_SUBTREE_ADDED=""
declare -a CGROUPS=()       # cgroup directories we created
declare -a STARTED=()       # data directories of servers we started
CLEANED=0
REPORTED=0
PY=python3
CUR_PGB=""
CUR_PROFILER=""

as_pg() { runuser -u postgres -- "$@"; }

server_pid() { [ -f "$1/postmaster.pid" ] && head -n 1 "$1/postmaster.pid" || true; }

stop_server() {   # data-dir [fast|immediate]
    local data=$1 mode=${2:-fast} pid
    pid=$(server_pid "$data")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
    as_pg "$PGBIN/pg_ctl" -D "$data" -m "$mode" -w -t 120 stop >/dev/null 2>&1 ||
        as_pg "$PGBIN/pg_ctl" -D "$data" -m immediate -w -t 60 stop >/dev/null 2>&1 || true
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null || true
        sleep 1
    fi
}

cg_kill_members() {   # processes left in a cgroup we created are our servers' processes
    local cg=$1 p
    [ -f "$cg/cgroup.procs" ] || return 0
    for p in $(cat "$cg/cgroup.procs" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
}

cg_remove() {
    local cg=$1 i
    [ -d "$cg" ] || return 0
    cg_kill_members "$cg"
    [ -f "$cg/memory.force_empty" ] && { echo 0 > "$cg/memory.force_empty"; } 2>/dev/null || true
    for i in 1 2 3 4 5 6 7 8 9 10; do
        rmdir "$cg" 2>/dev/null && return 0
        cg_kill_members "$cg"; sleep 0.5
    done
    echo "bench: could not remove cgroup $cg" >&2
}

throttle_set() {   # read-iops write-iops (0 0 removes)
    [ -n "$MAJMIN" ] || return 0
    if [ "$CG_MODE" = v1 ]; then
        local b=/sys/fs/cgroup/blkio bps=0
        echo "$MAJMIN $1" > $b/blkio.throttle.read_iops_device
        echo "$MAJMIN $2" > $b/blkio.throttle.write_iops_device
        if [ "$MBPS" -gt 0 ] || [ "$1" -eq 0 ]; then
            [ "$1" -gt 0 ] && bps=$((MBPS * 1024 * 1024))
            echo "$MAJMIN $bps" > $b/blkio.throttle.read_bps_device
            echo "$MAJMIN $bps" > $b/blkio.throttle.write_bps_device
        fi
    fi
    # v2: the limit is io.max of each configuration's cgroup (cg_create).
}
throttle_on() { throttle_set "$READ_IOPS" "$WRITE_IOPS"; THROTTLED=1; }
throttle_off() { throttle_set 0 0; THROTTLED=0; }

cleanup() {
    local rc=$?
    [ "$CLEANED" = 1 ] && return 0
    CLEANED=1
    trap '' INT TERM HUP PIPE
    set +e
    echo
    say "cleaning up (exit status $rc)"
    local d cg
    [ -n "$CUR_PGB" ] && kill "$CUR_PGB" 2>/dev/null
    [ -n "$CUR_PROFILER" ] && pkill -INT -P "$CUR_PROFILER" perf 2>/dev/null
    for d in "${STARTED[@]}"; do stop_server "$d" immediate; done
    for cg in "${CGROUPS[@]}"; do cg_remove "$cg"; done
    if [ -n "$WORK" ] && [ -d "$WORK/logs" ]; then
        cp -f "$WORK"/logs/* "$RESULTS/logs/" 2>/dev/null
    fi
    [ "$THROTTLED" = 1 ] && throttle_off
    if [ -n "$MNT" ] && mountpoint -q "$MNT"; then
        umount "$MNT" 2>/dev/null || { sleep 2; umount "$MNT" 2>/dev/null; } || umount -l "$MNT"
    fi
    if [ -n "$LOOP" ]; then
        losetup -d "$LOOP" 2>/dev/null || { sleep 2; losetup -d "$LOOP"; }
    fi
    if [ -n "$TIERDEV" ]; then
        "$TOP/test/hung_device.sh" teardown "$TIERDEV" ||
            say "warning: could not tear down the emulated SSD at $TIERDEV"
    fi
    # A run cut short still gets a report of what it measured.
    if [ "$REPORTED" = 0 ] && [ -s "${MANIFEST:-/nonexistent}" ] && grep -q '"kind":"run"' "$MANIFEST"; then
        say "report of the runs completed so far"
        "$PY" "$HERE/report.py" "$RESULTS" > /dev/null 2>&1 && say "written to $RESULTS/results.md"
    fi
    if [ -n "$CG2_SUBTREE_ADDED" ]; then
        echo "$CG2_SUBTREE_ADDED" > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
    fi
    if [ -n "$WORK" ] && [ -d "$WORK" ]; then
        if [ "$KEEP" = 1 ]; then
            say "kept the work directory $WORK"
        else
            rm -rf "$WORK"
        fi
    fi
    # What is left of ours, for the record: nothing, normally.
    local left=""
    [ -n "$WORK" ] && losetup -a 2>/dev/null | grep -F "$WORK" && left+=" loop"
    [ -n "$WORK" ] && grep -F "$WORK" /proc/mounts && left+=" mount"
    ls -d /sys/fs/cgroup/*/bpext-bench-$$-* /sys/fs/cgroup/bpext-bench-$$-* 2>/dev/null && left+=" cgroups"
    [ -n "$MAJMIN" ] && grep -h "^$MAJMIN " /sys/fs/cgroup/blkio/blkio.throttle.*_device 2>/dev/null && left+=" throttle"
    if [ -n "$left" ]; then
        say "cleanup left:$left"
    else
        say "cleanup done: servers stopped, no loop device, mount, cgroup or throttle rule left"
    fi
    say "results: $RESULTS"
    return 0
}
trap cleanup EXIT
trap 'echo; say "interrupted"; exit 130' INT TERM HUP

# ---------------------------------------------------------------- cgroups
# A server's CPU time is counted in CPU_CG: under v1 a cgroup of the
# cpuacct hierarchy beside the memory one (none where it is not mounted),
# under v2 the server's own cgroup, whose cpu.stat every cgroup has.
cg_create() {   # name limit-MB throttled(0|1) -> sets CG and CPU_CG
    local name=$1 limit_mb=$2 throttled=$3
    local bytes=$((limit_mb * 1024 * 1024))
    if [ "$CG_MODE" = v1 ]; then
        CG=/sys/fs/cgroup/memory/bpext-bench-$$-$name
        mkdir "$CG"; CGROUPS+=("$CG")
        echo "$bytes" > "$CG/memory.limit_in_bytes"
        echo 0 > "$CG/memory.swappiness" 2>/dev/null || true
        # Not where cpu and cpuacct share a hierarchy: a cgroup there would
        # also make the server one CFS group, weighing against pgbench as
        # much as one task does, and change what is measured.
        CPU_CG=""
        if [ -f /sys/fs/cgroup/cpuacct/cpuacct.usage ] && [ ! -e /sys/fs/cgroup/cpuacct/cpu.shares ]; then
            CPU_CG=/sys/fs/cgroup/cpuacct/bpext-bench-$$-$name
            mkdir "$CPU_CG"; CGROUPS+=("$CPU_CG")
        fi
    else
        CG=/sys/fs/cgroup/bpext-bench-$$-$name
        mkdir "$CG"; CGROUPS+=("$CG")
        echo "$bytes" > "$CG/memory.max"
        echo 0 > "$CG/memory.swap.max" 2>/dev/null || true
        if [ "$throttled" = 1 ]; then
            local lim="riops=$READ_IOPS wiops=$WRITE_IOPS"
            [ "$MBPS" -gt 0 ] && lim+=" rbps=$((MBPS * 1048576)) wbps=$((MBPS * 1048576))"
            echo "$MAJMIN $lim" > "$CG/io.max"
        fi
        CPU_CG=$CG
    fi
}
# CPU time (user and system) of every process of the server so far, in ns:
# exited backends included.  "null" where it is not counted.
cg_cpu_ns() {
    if [ -z "$CPU_CG" ]; then
        echo null
    elif [ "$CG_MODE" = v1 ]; then
        cat "$CPU_CG/cpuacct.usage"
    else
        awk '$1 == "usage_usec" { printf "%.0f\n", $2 * 1000 }' "$CPU_CG/cpu.stat"
    fi
}
cg_peak_json() {
    if [ "$CG_MODE" = v1 ]; then
        printf '{"limit":%s,"max_usage":%s,"failcnt":%s}' "$(cat "$CG/memory.limit_in_bytes")" \
            "$(cat "$CG/memory.max_usage_in_bytes")" "$(cat "$CG/memory.failcnt")"
    else
        local peak=null
        [ -f "$CG/memory.peak" ] && peak=$(cat "$CG/memory.peak")
        printf '{"limit":%s,"max_usage":%s,"failcnt":%s}' "$(cat "$CG/memory.max")" "$peak" \
            "$(awk '$1 == "max" { print $2 }' "$CG/memory.events")"
    fi
}

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# ---------------------------------------------------------------- build, tools
if [ "$BUILD" = 1 ]; then
    phase "installing dependencies, building and installing bpext"
    PG_MAJOR=$MAJOR "$TOP/test/install-deps.sh"
    # In a copy: the tree is shared with the other majors' builds.
    build=$(mktemp -d)
    tar -C "$TOP" --exclude=./.git --exclude=./test/bench/results \
        --exclude='./test/bench/.venv*' -cf - . | tar -C "$build" -xf -
    make -C "$build" -s PG_CONFIG="$PGBIN/pg_config" clean
    make -C "$build" -s PG_CONFIG="$PGBIN/pg_config"
    make -C "$build" -s PG_CONFIG="$PGBIN/pg_config" install
    rm -rf "$build"
fi
for t in pg_ctl initdb postgres pgbench psql; do
    [ -x "$PGBIN/$t" ] || need_msg "missing $PGBIN/$t (PostgreSQL $MAJOR server and client)"
done
id postgres >/dev/null 2>&1 || need_msg "there is no 'postgres' user"
[ -f "$("$PGBIN/pg_config" --pkglibdir)/bpext.so" ] || die "bpext is not installed (drop --no-build)"
[ -f "$("$PGBIN/pg_config" --sharedir)/extension/pg_prewarm.control" ] ||
    die "pg_prewarm (PostgreSQL contrib) is not installed"

# Python for the tables and charts: matplotlib from wherever it already is,
# else a venv under test/bench/ (one per Debian release: the tree is shared
# with the chroots of other majors), else Debian's python3-matplotlib.
VENV=$HERE/.venv-$(. /etc/os-release && echo "${VERSION_CODENAME:-local}")
find_python() {
    local p
    for p in "$VENV/bin/python" python3 /usr/bin/python3; do
        if command -v "$p" >/dev/null && "$p" -c 'import matplotlib' 2>/dev/null; then
            PY=$p; return 0
        fi
    done
    return 1
}
if ! find_python; then
    phase "installing matplotlib into $VENV"
    { python3 -m venv "$VENV" && "$VENV/bin/pip" install -q matplotlib; } ||
        { rm -rf "$VENV"; command -v apt-get >/dev/null && apt-get install -y -qq python3-matplotlib >/dev/null; } || true
    find_python || { PY=python3; say "warning: no matplotlib; tables only, no charts"; }
fi

# ---------------------------------------------------------------- work directory
mkdir -p "$WORKDIR_PARENT"
WORK=$(mktemp -d "$WORKDIR_PARENT/bpext-bench.XXXXXX")
chmod 755 "$WORK"
mkdir -p "$WORK/fast" "$WORK/slow" "$WORK/sock" "$WORK/logs" "$WORK/scripts"
chown postgres "$WORK/fast" "$WORK/sock" "$WORK/logs" "$WORK/scripts"
MNT=$WORK/slow
SOCK=$WORK/sock
PRISTINE=$WORK/fast/pristine
FASTDATA=$WORK/fast/data
SLOWDATA=$MNT/data
TIERFILE=$WORK/fast/tier.bpe

need_kb=$(( SCALE * 15 * 1024 * 9 + 6 * 1024 * 1024 ))
avail_kb=$(df -Pk "$WORK" | awk 'NR == 2 { print $4 }')
[ "$avail_kb" -gt "$need_kb" ] ||
    die "$WORKDIR_PARENT has $((avail_kb / 1024)) MB free, needs about $((need_kb / 1024)) MB (use --workdir-parent)"

psql_at() {   # data-less helper: query the running server
    as_pg env PGOPTIONS="-c client_min_messages=warning" "$PGBIN/psql" -h "$SOCK" -p "$PORT" -X -v ON_ERROR_STOP=1 -Atq -d postgres "$@"
}

# ---------------------------------------------------------------- the dataset
phase "building the dataset: pgbench scale $SCALE on the fast disk ($WORK)"
as_pg "$PGBIN/initdb" -D "$PRISTINE" -A trust -E UTF8 --no-sync >/dev/null
cat >> "$PRISTINE/postgresql.conf" <<CONF

# bpext bench: per-configuration settings
include_if_exists = 'bench.conf'
CONF
write_conf() {   # data-dir shared-buffers-MB extra-lines...
    local data=$1 sb=$2; shift 2
    {
        echo "port = $PORT"
        echo "listen_addresses = ''"
        echo "unix_socket_directories = '$SOCK'"
        echo "max_connections = 60"
        echo "shared_buffers = ${sb}MB"
        echo "huge_pages = off"            # so shared memory is charged to the memory cgroup
        echo "max_wal_size = 8GB"          # no checkpoint triggered by WAL volume during a run
        echo "checkpoint_timeout = 1h"
        echo "autovacuum = off"            # no background I/O competing with the measured runs
        echo "jit = off"
        echo "track_io_timing = on"
        echo "log_checkpoints = on"
        [ -n "$IO_METHOD" ] && echo "io_method = $IO_METHOD"
        local l; for l in "$@"; do echo "$l"; done
    } > "$data/bench.conf"
    chown postgres "$data/bench.conf"
}
write_conf "$PRISTINE" 256 "maintenance_work_mem = 256MB" "synchronous_commit = off"
START_LOG=$WORK/logs/server-init.log
as_pg "$PGBIN/pg_ctl" -D "$PRISTINE" -l "$START_LOG" -w -t 300 -s start
STARTED+=("$PRISTINE")
t0=$(now)
as_pg "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -i -q -s "$SCALE" postgres 2>&1 | grep -v "^$" | tail -n 4
psql_at -c "CHECKPOINT"
DB_BYTES=$(psql_at -c "SELECT pg_database_size('postgres')")
ACC_BYTES=$(psql_at -c "SELECT pg_relation_size('pgbench_accounts')")
IDX_BYTES=$(psql_at -c "SELECT pg_relation_size('pgbench_accounts_pkey')")
stop_server "$PRISTINE" fast
say "dataset: $((DB_BYTES / 1048576)) MB (pgbench_accounts $((ACC_BYTES / 1048576)) MB, pkey $((IDX_BYTES / 1048576)) MB), built in $(secs_since "$t0") s"
: > "$PRISTINE/bench.conf"

DB_MB=$((DB_BYTES / 1048576))
round_up64() { echo $(( ($1 + 63) / 64 * 64 )); }
[ "$BIG_SB" = auto ] && BIG_SB=$(round_up64 $(( DB_MB * 12 / 10 + 64 )))
[ "$TIER_SIZE" = auto ] && TIER_SIZE=$(round_up64 $(( DB_MB * 125 / 100 + 64 )))
[ "$RAM_TIER_SMALL" = auto ] && RAM_TIER_SMALL=$(round_up64 $(( DB_MB * 2 / 3 )))
[ "$RAM_TIER_LARGE" = auto ] && RAM_TIER_LARGE=$(round_up64 $(( DB_MB * 125 / 100 + 64 )))
# M: no memory limit but the machine's.
MEM_MB=$(awk '/MemTotal/ { print int($2 / 1024) }' /proc/meminfo)
BIG_RAM=$(( BIG_SB + RAM - SHARED_BUFFERS ))
NACCOUNTS=$((SCALE * 100000))

# The workload scripts.
SKEW_DIST=${SKEW%%:*}; SKEW_PARAM=${SKEW#*:}
cat > "$WORK/scripts/skew.sql" <<SQL
\\set aid random_${SKEW_DIST}(1, $NACCOUNTS, $SKEW_PARAM)
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
SQL
# skewrw: the same skewed keys, read by most transactions and updated by
# SKEW_UPDATE_PCT of them (pgbench picks a script per transaction by weight).
cat > "$WORK/scripts/skewrw_update.sql" <<SQL
\\set aid random_${SKEW_DIST}(1, $NACCOUNTS, $SKEW_PARAM)
\\set delta random(-5000, 5000)
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
SQL
cat > "$WORK/scripts/scan.sql" <<SQL
SELECT sum(abalance), count(*) FROM pgbench_accounts;
SQL
chown postgres "$WORK"/scripts/*.sql

# ---------------------------------------------------------------- the slow disk
IMG=$WORK/slow.img
img_mb=$(( DB_MB * 2 + 4096 ))
phase "slow disk: ${img_mb} MB ext4 on a loop device (direct I/O), ${READ_IOPS}/${WRITE_IOPS} read/write IOPS"
fallocate -l "${img_mb}M" "$IMG"
LOOP=$(losetup --find --show --direct-io=on "$IMG")
LOOPNAME=$(basename "$LOOP")
MAJMIN=$(cat "/sys/block/$LOOPNAME/dev")
[ "$(cat "/sys/block/$LOOPNAME/loop/dio" 2>/dev/null)" = 1 ] ||
    say "warning: $LOOP does not do direct I/O; the backing file is cached twice"
echo "$READAHEAD_KB" > "/sys/block/$LOOPNAME/queue/read_ahead_kb"
mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$LOOP"
mount -o noatime "$LOOP" "$MNT"
chown postgres "$MNT"
if [ "$CG_MODE" = v2 ]; then
    missing=""
    for c in io memory; do
        grep -qw "$c" /sys/fs/cgroup/cgroup.subtree_control || missing+=" +$c"
    done
    if [ -n "$missing" ]; then
        echo "$missing" > /sys/fs/cgroup/cgroup.subtree_control
        CG2_SUBTREE_ADDED=$(echo "$missing" | sed 's/+/-/g')
    fi
fi
# ---------------------------------------------------------------- the emulated SSD
if [ "$TIER_LATENCY_US" -gt 0 ]; then
    TIERDEV=$WORK/tierdev
    phase "emulated SSD for the tier: ${TIER_LATENCY_US} us a request, $((TIER_SIZE + 512)) MB"
    HUNG_DEVICE_MB=$((TIER_SIZE + 512)) HUNG_DEVICE_LOOP_DIO=on \
        "$TOP/test/hung_device.sh" setup "$TIERDEV" | tail -n 1 ||
        die "could not set up the emulated SSD (test/hung_device.sh setup $TIERDEV)"
    echo "$TIER_LATENCY_US" > "$TIERDEV/ctl/latency_us"
    for _ in $(seq 1 50); do
        grep -qx "latency_us=$TIER_LATENCY_US" "$TIERDEV/ctl/status" && break
        sleep 0.1
    done
    grep -qx "latency_us=$TIER_LATENCY_US" "$TIERDEV/ctl/status" ||
        die "the emulated SSD did not take its latency"
    TIERLOOP=$(basename "$(cat "$TIERDEV/loopdev")")
    TIERFILE=$TIERDEV/ssd/tier.bpe
fi
say "$LOOP ($MAJMIN) on $MNT; cgroup $CG_MODE; tier file $TIERFILE"

loop_stat_json() {
    awk '{ printf "{\"reads\":%s,\"read_sectors\":%s,\"read_ms\":%s,\"writes\":%s,\"write_sectors\":%s,\"write_ms\":%s}",
           $1, $3, $4, $5, $7, $8 }' "/sys/block/$LOOPNAME/stat"
}

# ---------------------------------------------------------------- parameters on record
cat > "$RESULTS/params.json" <<JSON
{"command": $(jstr "$0 ${ORIG_ARGS[*]}"), "started": $(jstr "$(date -Is)"),
 "host": $(jstr "$(hostname)"), "kernel": $(jstr "$(uname -r)"), "cpus": $(nproc),
 "mem_total_kb": $(awk '/MemTotal/ { print $2 }' /proc/meminfo),
 "postgres": $(jstr "$("$PGBIN/postgres" --version)"),
 "bpext_commit": $(jstr "${BPEXT_COMMIT:-$(git -C "$TOP" describe --always --dirty 2>/dev/null || echo unknown)}"),
 "cgroup": "$CG_MODE", "scale": $SCALE, "clients": $CLIENTS, "threads": $THREADS,
 "scan_clients": $SCAN_CLIENTS, "duration": $DURATION, "cold_seconds": $COLD_SECONDS,
 "restart_seconds": $RESTART_SECONDS,
 "overhead_duration": $OVERHEAD_DURATION, "rounds": $ROUNDS, "ab_rounds": $AB_ROUNDS,
 "read_iops": $READ_IOPS, "write_iops": $WRITE_IOPS, "mbps": $MBPS, "readahead_kb": $READAHEAD_KB,
 "ram_mb": $RAM, "shared_buffers_mb": $SHARED_BUFFERS, "big_shared_buffers_mb": $BIG_SB,
 "big_ram_mb": $BIG_RAM, "tier_size_mb": $TIER_SIZE, "admission": "$ADMISSION",
 "ram_tier_small_mb": $RAM_TIER_SMALL, "ram_tier_large_mb": $RAM_TIER_LARGE,
 "ram_workloads": "$RAM_WORKLOADS", "ram_warmup": $RAM_WARMUP,
 "write_policy": "$WRITE_POLICY", "direct_io": "$DIRECT_IO",
 "tier_latency_us": $TIER_LATENCY_US, "tier_read_depth": $(jstr "${TIER_READ_DEPTH:-default}"),
 "tier_readers": $(jstr "${TIER_READERS:-default}"), "profile_seconds": $PROFILE_SECONDS, "io_method": "${IO_METHOD:-default}", "configs": "$CONFIGS", "workloads": "$WORKLOADS",
 "overhead_workloads": "$OVERHEAD_WORKLOADS", "skew": "$SKEW",
 "skew_update_pct": $SKEW_UPDATE_PCT, "protocol": "$PROTOCOL",
 "db_bytes": $DB_BYTES, "accounts_bytes": $ACC_BYTES, "accounts_pkey_bytes": $IDX_BYTES,
 "fast_dir": $(jstr "$WORK"), "slow_device": $(jstr "$LOOP")}
JSON

# ---------------------------------------------------------------- one configuration's server
CUR_CFG=""; CUR_DATA=""; CUR_BPEXT=0; CG=""; CPU_CG=""; CUR_ROUND=""

fresh_copy() {   # target-dir on-slow-disk(0|1)
    local target=$1 slow=$2
    [ "$slow" = 1 ] && throttle_off
    rm -rf "$target"
    cp -a "$PRISTINE" "$target"
    sync
    [ "$slow" = 1 ] && throttle_on
    return 0
}

start_config() {   # name data-dir slow(0|1) shared-buffers-MB ram-MB bpext(0|1)
    local name=$1 data=$2 slow=$3 sb=$4 ram=$5 bpext=$6
    CUR_CFG=$name; CUR_DATA=$data; CUR_BPEXT=$bpext
    local extra=()
    if [ "$bpext" = 1 ]; then
        rm -f "$TIERFILE"
        extra=("shared_preload_libraries = 'bpext'"
               "bpext.path = '$TIERFILE'"
               "bpext.size = ${CFG_TIER_SIZE:-$TIER_SIZE}MB"
               "bpext.max_size = ${CFG_TIER_SIZE:-$TIER_SIZE}MB"
               "bpext.admission = $ADMISSION"
               "bpext.write_policy = $WRITE_POLICY"
               "bpext.direct_io = $DIRECT_IO"
               ${TIER_READ_DEPTH:+"bpext.tier_read_depth = $TIER_READ_DEPTH"}
               ${TIER_READERS:+"bpext.tier_readers = $TIER_READERS"}
               # B and E measure a tier that starts empty; only RW keeps it.
               "bpext.warm_restart = ${WARM_RESTART:-off}")
    fi
    write_conf "$data" "$sb" "${extra[@]}"
    drop_caches
    cg_create "$name" "$ram" "$slow"
    pg_start || return 1
}

pg_start() {   # start the server of CUR_CFG in CG; wait for the tier
    # The server and everything it forks live in the memory cgroup.
    ( echo "$BASHPID" > "$CG/cgroup.procs" || exit 1
      [ -z "$CPU_CG" ] || [ "$CPU_CG" = "$CG" ] || echo "$BASHPID" > "$CPU_CG/cgroup.procs" || exit 1
      exec runuser -u postgres -- "$PGBIN/pg_ctl" -D "$CUR_DATA" -l "$WORK/logs/server-$CUR_CFG.log" \
          -w -t 600 -s start )
    STARTED+=("$CUR_DATA")
    psql_at -c "CREATE EXTENSION IF NOT EXISTS pg_prewarm" >/dev/null
    if [ "$CUR_BPEXT" = 1 ]; then
        psql_at -c "CREATE EXTENSION IF NOT EXISTS bpext" >/dev/null
        local i state=""
        for i in $(seq 1 240); do
            state=$(psql_at -c "SELECT state FROM bpext_configuration")
            [ "$state" = 5 ] && break
            sleep 0.5
        done
        if [ "$state" != 5 ]; then
            say "error: $CUR_CFG: the tier did not come up: $(psql_at -c "SELECT state_description || ' ' || coalesce(last_error, '') FROM bpext_configuration")"
            grep -E "WARNING|ERROR|FATAL|PANIC|HINT" "$WORK/logs/server-$CUR_CFG.log" | tail -n 5 | sed 's/^/    /'
            emit "{\"kind\":\"failure\",\"config\":\"$CUR_CFG\",\"what\":\"tier did not come up\"}"
            return 1
        fi
    fi
}

stop_config() {   # [mode]
    local mode=${1:-immediate}
    emit "{\"kind\":\"memory\",\"config\":\"$CUR_CFG\",\"memory\":$(cg_peak_json)}"
    if [ "$CUR_BPEXT" = 1 ]; then
        local conf st
        conf=$(psql_at -c "SELECT row_to_json(c) FROM bpext_configuration c" 2>/dev/null) || true
        st=$(bpext_json 2>/dev/null) || true
        emit "{\"kind\":\"tier\",\"config\":\"$CUR_CFG\",\"configuration\":${conf:-null},\"stats\":${st:-null}}"
    fi
    stop_server "$CUR_DATA" "$mode"
    cg_remove "$CG"
    [ -z "$CPU_CG" ] || [ "$CPU_CG" = "$CG" ] || cg_remove "$CPU_CG"
    CG=""; CPU_CG=""
}

bpext_json() {
    if [ "$CUR_BPEXT" = 1 ]; then psql_at -c "SELECT row_to_json(s) FROM bpext_stats s"; else echo null; fi
}
db_json() {
    psql_at -c "SELECT row_to_json(d) FROM (SELECT blks_read, blks_hit, blk_read_time, blk_write_time,
                    xact_commit, tup_returned FROM pg_stat_database WHERE datname = current_database()) d"
}
# CPU time of the bpext tier worker so far (its own: not its helpers'),
# in ms, as "pid ms" ("null" without one).
worker_cpu() {
    local pid=""
    [ "$CUR_BPEXT" = 1 ] &&
        pid=$(psql_at -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'bpext tier worker'" 2>/dev/null)
    if [ -z "$pid" ] || [ ! -r "/proc/$pid/stat" ]; then
        echo null
        return
    fi
    # utime and stime, the 14th and 15th fields, counted after the ")"
    # that ends the command name.
    sed 's/.*) //' "/proc/$pid/stat" |
        awk -v pid="$pid" -v hz="$(getconf CLK_TCK)" '{ printf "%s %.0f\n", pid, ($12 + $13) * 1000 / hz }'
}
# The worker's ms between two worker_cpu readings, or null if it was not
# the same worker.
worker_cpu_delta() {   # before after
    local p0=${1% *} p1=${2% *}
    if [ "$1" = null ] || [ "$2" = null ] || [ "$p0" != "$p1" ]; then
        echo null
    else
        json_delta "${1#* }" "${2#* }"
    fi
}
mem_usage() {
    if [ "$CG_MODE" = v1 ]; then cat "$CG/memory.usage_in_bytes"; else cat "$CG/memory.current"; fi
}

# One pgbench run, with its progress shown and everything recorded.
run_pgbench() {   # workload seconds tag
    local wl=$1 secs=$2 tag=$3 clients=$CLIENTS args=()
    case $wl in
        select) args=(-S) ;;
        tpcb) args=() ;;
        skew) args=(-f "$WORK/scripts/skew.sql") ;;
        skewrw) args=(-f "$WORK/scripts/skew.sql@$((100 - SKEW_UPDATE_PCT))"
                      -f "$WORK/scripts/skewrw_update.sql@$SKEW_UPDATE_PCT") ;;
        scan) args=(-f "$WORK/scripts/scan.sql"); clients=$SCAN_CLIENTS ;;
    esac
    local threads=$(( THREADS < clients ? THREADS : clients ))
    local log=$RESULTS/runs/$CUR_CFG-$wl-$tag${CUR_ROUND:+-r$CUR_ROUND}.log
    phase "$CUR_CFG: $wl ($tag), $clients clients, $secs s"
    local dev0 bp0 db0 t0 t1 cpu0 cpu1 wcpu0 wcpu1 rc=0
    dev0=$(loop_stat_json); bp0=$(bpext_json); db0=$(db_json); wcpu0=$(worker_cpu)
    t0=$(now); cpu0=$(cg_cpu_ns)
    as_pg "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -n -M "$PROTOCOL" -s "$SCALE" \
        -c "$clients" -j "$threads" -T "$secs" -P 1 "${args[@]}" postgres > "$log" 2>&1 &
    local pgb=$!
    CUR_PGB=$pgb
    # The emulated SSD's reads in flight, every 0.1 s while pgbench runs.
    local inflight_log=$WORK/logs/inflight.txt sampler=""
    if [ -n "$TIERLOOP" ] && [ "$CUR_BPEXT" = 1 ]; then
        : > "$inflight_log"
        ( while kill -0 "$pgb" 2>/dev/null; do
              awk '{ print $1 }' "/sys/block/$TIERLOOP/inflight" >> "$inflight_log"
              sleep 0.1
          done ) &
        sampler=$!
    fi
    local profiler="" profile_data=""
    if [ "$PROFILE_SECONDS" -gt 0 ] && [ "$tag" = main ]; then
        profile_data=$WORK/profile.data
        # The server's processes as the sampling starts (pgbench's
        # sessions are open by then) and as it ends: only their samples
        # are the server's.
        ( sleep 2
          cat "$CG/cgroup.procs" > "$profile_data.pids"
          perf record -q -a -e cpu-clock -F 999 -o "$profile_data" -- sleep "$PROFILE_SECONDS"
          cat "$CG/cgroup.procs" >> "$profile_data.pids" ) > "$WORK/logs/perf.log" 2>&1 &
        profiler=$!
        CUR_PROFILER=$profiler
    fi
    # Show every PROGRESS_EVERY-th progress line while it runs.
    tail -n +1 -F --pid=$pgb "$log" 2>/dev/null | awk -v every="$PROGRESS_EVERY" '
        /^progress:/ { if (int($2) % every == 0) { print "    " $0; fflush() } }' &
    local tailer=$!
    wait "$pgb" || rc=$?
    cpu1=$(cg_cpu_ns); wcpu1=$(worker_cpu)
    local profile=null
    if [ -n "$profiler" ]; then
        wait "$profiler" || say "warning: perf failed: $(tail -n 1 "$WORK/logs/perf.log")"
        CUR_PROFILER=""
        profile=$(profile_json "$profile_data" "$RESULTS/runs/$(basename "$log" .log).profile.txt") ||
            profile=null
        rm -f "$profile_data" "$profile_data.pids"
    fi
    wait "$tailer" 2>/dev/null || true
    [ -z "$sampler" ] || wait "$sampler" 2>/dev/null || true
    CUR_PGB=""
    local inflight=null
    if [ -n "$sampler" ]; then
        inflight=$(awk '{ n++; s += $1; if ($1 > m) m = $1 }
                        END { printf "{\"mean\":%.2f,\"max\":%d}", n ? s / n : 0, m }' "$inflight_log")
        say "$CUR_CFG $wl ($tag): emulated SSD reads in flight $inflight"
    fi
    t1=$(now)
    sleep 1   # let the exiting backends flush their statistics
    local tps lat
    tps=$(awk '/^tps = / { print $3 }' "$log" | tail -n 1)
    lat=$(awk '/^latency average/ { print $4 }' "$log" | tail -n 1)
    if [ "$rc" -ne 0 ]; then
        say "warning: pgbench failed (status $rc); see $log"
        tail -n 5 "$log" | sed 's/^/    /'
    fi
    say "$CUR_CFG $wl ($tag): ${tps:-?} tps, latency ${lat:-?} ms, data disk $(loop_delta "$dev0" "$(loop_stat_json)" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')")"
    emit "{\"kind\":\"run\",\"config\":\"$CUR_CFG\",\"workload\":\"$wl\",\"tag\":\"$tag\",\"round\":${CUR_ROUND:-1},\"clients\":$clients,\"threads\":$threads,\"seconds\":$secs,\"log\":$(jstr "runs/$(basename "$log")"),\"status\":$rc,\"t0\":$t0,\"t1\":$t1,\"load\":$(jstr "$(cut -d' ' -f1-3 /proc/loadavg)"),\"mem_usage\":$(mem_usage),\"server_cpu_ns\":$(json_delta "$cpu0" "$cpu1"),\"worker_cpu_ms\":$(worker_cpu_delta "$wcpu0" "$wcpu1"),\"dev_before\":$dev0,\"dev_after\":$(loop_stat_json),\"tier_inflight\":$inflight,\"profile\":$profile,\"bpext_before\":$bp0,\"bpext_after\":$(bpext_json),\"db_before\":$db0,\"db_after\":$(db_json)}"
    case $CUR_CFG in A|B) cache_snapshot "$wl" "$tag" ;; esac
}

# The server's share of the samples of a profile by library, as JSON
# ({"postgres": 61.2, "bpext.so": 3.1, ...}: percent of the samples of the
# server's processes, those of its cgroup as the sampling started or ended;
# samples_share: theirs of all samples), and the symbols above 0.1% of
# all samples into a text file.  Each library's own samples (self time):
# what bpext.so calls in PostgreSQL, libc or the kernel counts there.
profile_json() {   # perf-data text-out
    [ -s "$1" ] && [ -s "$1.pids" ] || { echo null; return; }
    { perf report -i "$1" --sort comm,dso,sym --stdio -q --percent-limit 0.1 || true; } > "$2" 2>/dev/null
    { perf report -i "$1" --sort pid,dso --stdio -q --percent-limit 0 2>/dev/null || true; } |
        awk 'FNR == NR { server[$1] = 1; next }
             { sub(/%/, "", $1); split($2, p, ":") }
             p[1] in server { share[$3] += $1; total += $1 }
             END { if (total == 0) { print "null"; exit }
                   printf "{"; sep = ""
                   for (d in share) { printf "%s\"%s\":%.2f", sep, d, 100 * share[d] / total; sep = "," }
                   printf ",\"samples_share\":%.2f}\n", total }' "$1.pids" -
}

json_delta() {   # before after -> after - before, or null
    if [[ $1 =~ ^[0-9]+$ ]] && [[ $2 =~ ^[0-9]+$ ]]; then echo $(($2 - $1)); else echo null; fi
}

# What the page cache holds of pgbench_accounts and its key, and of the tier
# file, and how many pages it holds twice: as a data-file page and as the
# tier's copy of the same block (page_cache.py; it reads nothing).
cache_json() {
    local rels map=$WORK/slotmap.tsv args=()
    rels=$(psql_at -c "SELECT pg_relation_filepath(r) FROM unnest(ARRAY['pgbench_accounts',
                         'pgbench_accounts_pkey']::regclass[]) r") || return 1
    if [ "$CUR_BPEXT" = 1 ]; then
        psql_at -F $'\t' -c "SELECT d.bufferid, pg_relation_filepath(c.oid), d.relblocknumber
                             FROM bpext_buffer_descriptors d
                             JOIN pg_class c ON c.relfilenode = d.relfilenode
                            WHERE d.is_in_bpool_extension AND d.relforknumber = 0
                              AND d.reldatabase = (SELECT oid FROM pg_database
                                                    WHERE datname = current_database())
                              AND c.relname IN ('pgbench_accounts', 'pgbench_accounts_pkey')" \
            > "$map" || return 1
        args=(--tier "$TIERFILE" "$map")
    fi
    # shellcheck disable=SC2086
    (cd "$CUR_DATA" && python3 "$HERE/page_cache.py" $rels "${args[@]}")
}
# Dirty and under-writeback page cache of the server's cgroup, in bytes:
# pages no advice can drop before the slow disk has taken them.
cg_dirty_bytes() {
    if [ "$CG_MODE" = v1 ]; then
        awk '$1 == "total_dirty" || $1 == "total_writeback" { n += $2 } END { print n + 0 }' "$CG/memory.stat"
    else
        awk '$1 == "file_dirty" || $1 == "file_writeback" { n += $2 } END { print n + 0 }' "$CG/memory.stat"
    fi
}
cache_snapshot() {   # workload tag: after a run of A or B
    local c
    c=$(cache_json) || { say "warning: $CUR_CFG: could not measure the page cache"; return 0; }
    emit "{\"kind\":\"cache\",\"config\":\"$CUR_CFG\",\"workload\":\"$1\",\"tag\":\"$2\",\"round\":${CUR_ROUND:-1},\"cache\":$c,\"dirty_bytes\":$(cg_dirty_bytes)}"
}

loop_delta() {   # before-json after-json seconds -> "N r/s, M w/s"
    local r0 w0 r1 w1
    r0=$(sed 's/.*"reads":\([0-9]*\).*/\1/' <<< "$1"); w0=$(sed 's/.*"writes":\([0-9]*\).*/\1/' <<< "$1")
    r1=$(sed 's/.*"reads":\([0-9]*\).*/\1/' <<< "$2"); w1=$(sed 's/.*"writes":\([0-9]*\).*/\1/' <<< "$2")
    awk -v r=$((r1 - r0)) -v w=$((w1 - w0)) -v s="$3" 'BEGIN { printf "%.0f r/s, %.0f w/s", r / s, w / s }'
}

prewarm() {   # function relation mode
    local fn=$1 rel=$2 mode=${3:-} t0 pages secs dev0
    dev0=$(loop_stat_json)
    t0=$(now)
    if [ "$fn" = bpext_prewarm ]; then
        pages=$(psql_at -c "SELECT bpext_prewarm('$rel')")
    else
        pages=$(psql_at -c "SELECT pg_prewarm('$rel', '$mode')")
    fi
    secs=$(secs_since "$t0")
    say "$CUR_CFG: $fn($rel${mode:+, $mode}): $pages pages ($((pages * 8 / 1024)) MB) in $secs s"
    emit "{\"kind\":\"prewarm\",\"config\":\"$CUR_CFG\",\"function\":\"$fn\",\"mode\":\"$mode\",\"relation\":\"$rel\",\"pages\":$pages,\"seconds\":$secs,\"dev_before\":$dev0,\"dev_after\":$(loop_stat_json),\"bpext_after\":$(bpext_json)}"
}

warm() {   # how the configuration is warmed before measuring
    case $1 in
        bpext) prewarm bpext_prewarm pgbench_accounts; prewarm bpext_prewarm pgbench_accounts_pkey ;;
        read) prewarm pg_prewarm pgbench_accounts read; prewarm pg_prewarm pgbench_accounts_pkey read ;;
        buffer) prewarm pg_prewarm pgbench_accounts buffer; prewarm pg_prewarm pgbench_accounts_pkey buffer
                psql_at -c "SELECT pg_prewarm(c.oid) FROM pg_class c WHERE c.relname IN
                            ('pgbench_branches', 'pgbench_tellers', 'pgbench_branches_pkey',
                             'pgbench_tellers_pkey')" >/dev/null ;;
    esac
}

run_workloads() {
    local wl
    for wl in ${WORKLOADS//,/ }; do run_pgbench "$wl" "$DURATION" main; done
}

# A, B, D: data on the slow disk.  C: the same data on the fast disk.
slow_config() {   # name bpext sb ram warm-mode cold(0|1)
    local name=$1 bpext=$2 sb=$3 ram=$4 warm_mode=$5 cold=$6
    fresh_copy "$SLOWDATA" 1
    start_config "$name" "$SLOWDATA" 1 "$sb" "$ram" "$bpext" || { stop_config; return 0; }
    if [ "$cold" = 1 ] && [ "$COLD_SECONDS" -gt 0 ]; then
        run_pgbench select "$COLD_SECONDS" cold
        # Restart so that the timed warm-up starts from nothing again: the
        # tier and shared buffers start empty at every server start.
        stop_server "$SLOWDATA" fast
        drop_caches
        pg_start || { stop_config; return 0; }
    fi
    warm "$warm_mode"
    run_workloads
    stop_config immediate
}

# R: select-only over time right after a clean restart (fast shutdown),
# from the state a warmed-up server was in: steady throughput first, then
# the restart, with the page cache dropped in between as after a reboot.
restart_config() {   # name bpext(0|1) warm_restart(on|off) warm-mode
    local name=$1 bpext=$2 warm_restart=$3 warm_mode=$4
    fresh_copy "$SLOWDATA" 1
    WARM_RESTART=$warm_restart start_config "$name" "$SLOWDATA" 1 "$SHARED_BUFFERS" "$RAM" "$bpext" ||
        { stop_config; return 0; }
    warm "$warm_mode"
    run_pgbench select "$DURATION" steady
    stop_server "$SLOWDATA" fast
    drop_caches
    pg_start || { stop_config; return 0; }
    [ "$bpext" = 1 ] && say "$name: $(psql_at -c "SELECT 'tier start: ' || start_mode || coalesce(' (' || cold_start_reason || ')', '') FROM bpext_configuration")"
    run_pgbench select "$RESTART_SECONDS" restart
    stop_config immediate
}

# M: data in RAM.  Data on the fast disk, read into the page cache, no
# memory limit but the machine's; select-only for RAM_WARMUP seconds (the
# small tier fills and keeps turning over; adaptive admission settles),
# then the measured runs.  M0 gets the same warm-up.
ram_config() {   # name bpext(0|1) tier-MB
    local name=$1 bpext=$2 tier_mb=$3 wl
    fresh_copy "$FASTDATA" 0
    CFG_TIER_SIZE=$tier_mb start_config "$name" "$FASTDATA" 0 "$SHARED_BUFFERS" "$MEM_MB" "$bpext" ||
        { stop_config; return 0; }
    warm read
    [ "$RAM_WARMUP" -gt 0 ] && run_pgbench select "$RAM_WARMUP" warmup
    for wl in ${RAM_WORKLOADS//,/ }; do run_pgbench "$wl" "$DURATION" main; done
    [ "$bpext" = 1 ] && say "$name: $(psql_at -c "SELECT 'admission ' || CASE WHEN admission_paused THEN 'paused' ELSE 'admitting' END || ', ' || admission_pauses || ' pauses, ' || admission_resumes || ' resumes' FROM bpext_stats")"
    stop_config immediate
    rm -rf "$FASTDATA"
}

tier_disk() {
    if [ "$TIER_LATENCY_US" -gt 0 ]; then
        echo "an emulated SSD (${TIER_LATENCY_US} us a request)"
    else
        echo "the fast disk"
    fi
}

describe() {
    case $1 in
        A) echo "A: no tier, data on the ${READ_IOPS}-IOPS disk, shared_buffers ${SHARED_BUFFERS}MB, RAM ${RAM}MB" ;;
        B) echo "B: bpext tier ${TIER_SIZE}MB on $(tier_disk), data on the ${READ_IOPS}-IOPS disk, shared_buffers ${SHARED_BUFFERS}MB, RAM ${RAM}MB" ;;
        C) echo "C: data on the fast disk, shared_buffers ${SHARED_BUFFERS}MB, RAM ${RAM}MB (SSD ceiling)" ;;
        D) echo "D: shared_buffers ${BIG_SB}MB, data on the ${READ_IOPS}-IOPS disk, RAM ${BIG_RAM}MB (RAM ceiling)" ;;
        E) echo "E/E0: shared_buffers ${BIG_SB}MB, data on the fast disk, RAM ${BIG_RAM}MB, bpext tier on / not loaded" ;;
        R) echo "R: select-only for ${RESTART_SECONDS} s after a clean restart: no tier (R0), tier starting cold (RC), tier starting warm (RW)" ;;
        M) echo "M: data in RAM (fast disk, no memory limit), shared_buffers ${SHARED_BUFFERS}MB: no bpext (M0), tier ${RAM_TIER_SMALL}MB smaller than the database (MS), tier ${RAM_TIER_LARGE}MB holding it (ML)" ;;
    esac
}

# ---------------------------------------------------------------- the run
say "database ${DB_MB}MB; tier ${TIER_SIZE}MB; large shared_buffers ${BIG_SB}MB"
for c in A B C D E R M; do has "$CONFIGS" "$c" && say "  $(describe "$c")"; done

# A and B alternate for AB_ROUNDS rounds in ABBA order (A B, B A, A B, ...),
# each run its own server start on a fresh copy of the dataset, so that a
# drift of the shared machine lands on both and B/A comes with its spread.
# Only the first round runs the cold start.
ab_order=""
for r in $(seq 1 "$AB_ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then pair="A B"; else pair="B A"; fi
    for c in $pair; do has "$CONFIGS" "$c" && ab_order+=" $r:$c"; done
done
for rc in $ab_order; do
    r=${rc%%:*}; c=${rc#*:}
    [ "$AB_ROUNDS" -gt 1 ] && CUR_ROUND=$r
    phase "$(describe "$c")${CUR_ROUND:+, round $r of $AB_ROUNDS}"
    cold=0; [ "$r" = 1 ] && cold=1
    if [ "$c" = A ]; then
        slow_config A 0 "$SHARED_BUFFERS" "$RAM" read "$cold"
    else
        slow_config B 1 "$SHARED_BUFFERS" "$RAM" bpext "$cold"
    fi
done
CUR_ROUND=""
if has "$CONFIGS" C; then
    phase "$(describe C)"
    fresh_copy "$FASTDATA" 0
    start_config C "$FASTDATA" 0 "$SHARED_BUFFERS" "$RAM" 0
    warm read
    run_workloads
    stop_config immediate
    rm -rf "$FASTDATA"
fi
if has "$CONFIGS" D; then
    phase "$(describe D)"
    slow_config D 0 "$BIG_SB" "$BIG_RAM" buffer 0
fi
if has "$CONFIGS" E; then
    phase "$(describe E)"
    # One data directory each, reused across rounds (fast shutdowns).
    fresh_copy "$WORK/fast/e0" 0
    fresh_copy "$WORK/fast/e" 0
    for r in $(seq 1 "$ROUNDS"); do
        # ABBA: E0 E, E E0, ... so that drift on a shared machine cancels.
        if [ $((r % 2)) = 1 ]; then order="E0 E"; else order="E E0"; fi
        for name in $order; do
            if [ "$name" = E ]; then bp=1; data=$WORK/fast/e; else bp=0; data=$WORK/fast/e0; fi
            start_config "$name" "$data" 0 "$BIG_SB" "$BIG_RAM" "$bp" || { stop_config fast; continue; }
            warm buffer
            for wl in ${OVERHEAD_WORKLOADS//,/ }; do run_pgbench "$wl" "$OVERHEAD_DURATION" "r$r"; done
            stop_config fast
        done
    done
fi

if has "$CONFIGS" M; then
    # Rounds in ABC CBA order, as A and B: a drift lands on every side.
    for r in $(seq 1 "$AB_ROUNDS"); do
        [ "$AB_ROUNDS" -gt 1 ] && CUR_ROUND=$r
        if [ $((r % 2)) = 1 ]; then order="M0 MS ML"; else order="ML MS M0"; fi
        for name in $order; do
            phase "$(describe M): $name${CUR_ROUND:+, round $r of $AB_ROUNDS}"
            case $name in
                M0) ram_config M0 0 0 ;;
                MS) ram_config MS 1 "$RAM_TIER_SMALL" ;;
                ML) ram_config ML 1 "$RAM_TIER_LARGE" ;;
            esac
        done
    done
    CUR_ROUND=""
fi

if has "$CONFIGS" R; then
    phase "$(describe R)"
    restart_config R0 0 off read
    restart_config RC 1 off bpext
    restart_config RW 1 on bpext
fi

phase "report"
REPORTED=1
"$PY" "$HERE/report.py" "$RESULTS" || say "warning: the report failed"

#!/usr/bin/env bash
# A tier device that really hangs, for the tests of test/t that need one
# (doc/testing.md, "A device that hangs"):
#
#   test/hung_device.sh setup DIR      # build, mount; DIR/ssd is the device
#   test/hung_device.sh check DIR      # prove that it hangs (D state)
#   test/hung_device.sh hang DIR | release DIR | status DIR
#   test/hung_device.sh teardown DIR   # release, unmount, detach, remove DIR
#
# Layers, bottom up: DIR/backing.img, a sparse file on an ordinary file
# system; DIR/fuse/disk, the same bytes served by hangfs (test/hung_device/
# hangfs.c), which holds every request while DIR/ctl/hang exists; a loop
# device on that file (direct I/O off); an ext4 file system on the loop
# device, mounted at DIR/ssd, owned by postgres (0700).  DIR/ctl is owned by
# postgres too, so the tests (running as postgres) hang and release the
# device by creating and removing DIR/ctl/hang.  While it hangs, every
# process doing I/O on DIR/ssd that must reach the device sleeps in the
# kernel in state D, as on a stuck SSD; nothing in user space (no signal)
# ends that sleep.
#
# setup fails with a one-line reason (the last line of its output) when the
# machine cannot do it: not root, no /dev/fuse, no loop device, no ext4
# tools, no libfuse3 to build against.  Several setups may run at once (one
# per chroot): each has its own DIR, loop device and hangfs process.  Run
# as root; DIR must be empty or not exist, and its parent searchable by
# postgres.  HUNG_DEVICE_MB sets the device's size (default 2048).
# HUNG_DEVICE_LOOP_DIO=on attaches the loop device with direct I/O, so that
# it passes requests to hangfs side by side instead of one at a time (the
# bench's emulated SSD with latency, test/bench/run.sh --tier-latency).
set -euo pipefail

cmd=${1:?usage: test/hung_device.sh setup|check|hang|release|status|teardown DIR}
dir=${2:?usage: test/hung_device.sh $cmd DIR}
here=$(cd "$(dirname "$0")" && pwd)
size_mb=${HUNG_DEVICE_MB:-2048}
owner=${HUNG_DEVICE_OWNER:-postgres}
loop_dio=${HUNG_DEVICE_LOOP_DIO:-off}

fail() { echo "hung_device: $*" >&2; exit 1; }

# Wait up to $1 tenths of a second for the command that follows to succeed.
wait_for() {
    local tenths=$1; shift
    local i
    for ((i = 0; i < tenths; i++)); do
        "$@" && return 0
        sleep 0.1
    done
    "$@"
}

is_mounted() { grep -q " $1 " /proc/mounts; }

device_status() { cat "$dir/ctl/status" 2>/dev/null || echo "no status"; }
status_is() { device_status | head -n 1 | grep -q "^$1"; }

hang() {
    touch "$dir/ctl/hang"
    wait_for 50 status_is hung || fail "hangfs did not take the hang ($(device_status))"
}

release() {
    rm -f "$dir/ctl/hang"
    [ ! -f "$dir/hangfs.pid" ] || ! kill -0 "$(cat "$dir/hangfs.pid")" 2>/dev/null ||
        wait_for 50 status_is answering ||
        fail "hangfs did not take the release ($(device_status))"
}

setup() {
    [ "$(id -u)" -eq 0 ] || fail "not root (mounting a FUSE file system and a loop device needs root)"
    [ -c /dev/fuse ] || fail "no /dev/fuse (the kernel has no FUSE, or /dev is not there)"
    [ -c /dev/loop-control ] || [ -b /dev/loop0 ] || fail "no loop device (no /dev/loop-control or /dev/loop0)"
    command -v losetup >/dev/null || fail "no losetup"
    command -v mkfs.ext4 >/dev/null || fail "no mkfs.ext4 (e2fsprogs)"
    id "$owner" >/dev/null 2>&1 || fail "no user $owner"
    pkg-config --exists fuse3 2>/dev/null || fail "no libfuse3 to build hangfs against (libfuse3-dev)"
    if [ -e "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
        fail "$dir is not empty"
    fi
    mkdir -p "$dir"
    chmod 755 "$dir"
    mkdir "$dir/fuse" "$dir/ssd" "$dir/ctl"
    chown "$owner" "$dir/ctl"
    chmod 755 "$dir/ctl"

    # shellcheck disable=SC2046
    gcc -O2 -Wall -Wextra -Werror -o "$dir/hangfs" "$here/hung_device/hangfs.c" \
        $(pkg-config --cflags --libs fuse3) > "$dir/build.log" 2>&1 ||
        fail "could not build hangfs: $(tail -n 1 "$dir/build.log")"
    truncate -s "${size_mb}M" "$dir/backing.img"

    # hangfs in the foreground of a session of its own, so that nothing of
    # the caller's (a terminal's ^C, a test harness's process group) ends
    # it before teardown.
    setsid "$dir/hangfs" "$dir/backing.img" "$dir/ctl" "$dir/fuse" \
        < /dev/null > "$dir/hangfs.log" 2>&1 &
    echo $! > "$dir/hangfs.pid"
    wait_for 50 test -e "$dir/fuse/disk" ||
        fail "hangfs did not mount: $(tail -n 1 "$dir/hangfs.log")"
    wait_for 50 status_is answering || fail "hangfs wrote no status"

    [[ $loop_dio =~ ^(on|off)$ ]] || fail "HUNG_DEVICE_LOOP_DIO must be on or off, not $loop_dio"
    losetup --find --show --direct-io="$loop_dio" "$dir/fuse/disk" > "$dir/loopdev" 2> "$dir/losetup.log" ||
        fail "no loop device could be attached: $(tail -n 1 "$dir/losetup.log")"
    local loop
    loop=$(cat "$dir/loopdev")
    [ -b "$loop" ] || fail "losetup gave $loop, which is not a block device here"
    # No discard (the FUSE file has no fallocate) and no lazy
    # initialization, which would write through the device in the
    # background, hung or not.
    mkfs.ext4 -q -F -E nodiscard,lazy_itable_init=0,lazy_journal_init=0 \
        -L bpext-hung "$loop" > "$dir/mkfs.log" 2>&1 ||
        fail "mkfs.ext4 failed: $(tail -n 1 "$dir/mkfs.log")"
    mount -t ext4 "$loop" "$dir/ssd" || fail "could not mount $loop"
    chown "$owner" "$dir/ssd"
    chmod 700 "$dir/ssd"
    if [ "$loop_dio" = on ] && [ "$(cat "/sys/block/${loop#/dev/}/loop/dio" 2>/dev/null)" != 1 ]; then
        fail "$loop does not do direct I/O on $dir/fuse/disk (the kernel refused it)"
    fi
    echo "hung_device: $dir/ssd is ext4 on $loop (direct I/O $loop_dio) on $dir/fuse/disk (${size_mb} MB)"
}

# The state letter of process pid (/proc/PID/stat: pid (comm) state ...),
# and how many times it has been switched out so far.
proc_state() { sed -n 's/^[0-9]* (.*) \([A-Za-z]\) .*/\1/p' "/proc/$1/stat" 2>/dev/null; }
proc_switches() { awk '/ctxt_switches/ { n += $2 } END { print n }' "/proc/$1/status" 2>/dev/null; }

# A direct-I/O write and its fsync on the hung device stay in D state
# until the device answers again, and then finish.
check() {
    local pid state switches last="" run=0 held=0 i out=$dir/ssd/.hung_device_check
    is_mounted "$dir/ssd" || fail "$dir/ssd is not mounted"
    rm -f "$out"
    hang
    dd if=/dev/zero of="$out" bs=64k count=16 oflag=direct conv=fsync status=none &
    pid=$!
    # Two seconds on end in D without running once in between.
    for ((i = 0; i < 100; i++)); do
        state=$(proc_state "$pid")
        switches=$(proc_switches "$pid")
        if [ "$state" = D ] && [ "$switches" = "$last" ]; then
            run=$((run + 1))
            [ "$run" -lt 20 ] || { held=1; break; }
        else
            run=0
        fi
        last=$switches
        sleep 0.1
    done
    echo "hung_device: with the device hung, dd (pid $pid) is in state ${state:-gone} ($(device_status | head -n 1)), wchan $(cat "/proc/$pid/wchan" 2>/dev/null)"
    release
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && fail "dd did not finish within 10 s of the release"
    wait "$pid" || fail "dd failed after the release"
    rm -f "$out"
    [ "$held" -eq 1 ] || fail "dd was not held in D state by the hung device"
    echo "hung_device: released, dd finished"
}

teardown() {
    local i loop=""
    [ -d "$dir" ] || return 0
    [ ! -d "$dir/ctl" ] || release || true
    [ ! -f "$dir/loopdev" ] || loop=$(cat "$dir/loopdev")
    if is_mounted "$dir/ssd"; then
        for ((i = 0; i < 20; i++)); do
            umount "$dir/ssd" 2>/dev/null && break
            sleep 0.5
        done
        # Still busy (a process of a failed test holds a file there): let
        # go of the name; the file system goes when the last user does.
        is_mounted "$dir/ssd" && { umount -l "$dir/ssd" ||
            echo "hung_device: could not unmount $dir/ssd" >&2; }
    fi
    if [ -n "$loop" ] && losetup "$loop" 2>/dev/null | grep -q "$dir/fuse/disk"; then
        losetup -d "$loop" ||
            echo "hung_device: could not detach $loop" >&2
    fi
    if is_mounted "$dir/fuse"; then
        for ((i = 0; i < 20; i++)); do
            { fusermount3 -u "$dir/fuse" 2>/dev/null || umount "$dir/fuse" 2>/dev/null; } && break
            sleep 0.5
        done
        is_mounted "$dir/fuse" && { umount -l "$dir/fuse" ||
            echo "hung_device: could not unmount $dir/fuse" >&2; }
    fi
    if [ -f "$dir/hangfs.pid" ]; then
        local pid
        pid=$(cat "$dir/hangfs.pid")
        for ((i = 0; i < 50; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            [ "$i" -ne 20 ] || kill "$pid" 2>/dev/null || true
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
    fi
    if is_mounted "$dir/ssd" || is_mounted "$dir/fuse"; then
        echo "hung_device: $dir still has mounts; left in place" >&2
        return 1
    fi
    rm -rf --one-file-system "$dir"
}

case $cmd in
    setup) setup ;;
    check) check ;;
    hang) hang ;;
    release) release ;;
    status) device_status ;;
    teardown) teardown ;;
    *) fail "unknown command $cmd" ;;
esac

#!/usr/bin/env bash
# The test suite's own disk (scripts/test.sh, root only): a journaled ext4 on a loop
# device over a sparse file beside the mount point.
#   suite-disk.sh up DIR          mount it on the empty folder DIR; prints the loop device
#   suite-disk.sh down DIR LOOP   unmount it, detach LOOP, remove the file and DIR
set -euo pipefail
case "${1:-}" in
up)
    dir=$2
    truncate -s 24G "$dir.img"
    # few inodes, written now: no lazy initialisation writing behind the suite's back
    mkfs.ext4 -q -F -N 262144 -E lazy_itable_init=0,lazy_journal_init=0 "$dir.img"
    loop=$(losetup --find --show "$dir.img")
    mount "$loop" "$dir" || { losetup -d "$loop"; exit 1; }
    chmod 1777 "$dir"  # like /var/tmp: every user's work areas, none can move another's
    echo "$loop"
    ;;
down)
    dir=$2 loop=${3:-}
    [ -n "$dir" ] || exit 0
    if mountpoint -q "$dir"; then
        umount "$dir" 2>/dev/null || umount --lazy "$dir"  # a process left on it: detached
    fi
    [ -z "$loop" ] || losetup -d "$loop" 2>/dev/null || true
    rm -f "$dir.img"
    rmdir "$dir" 2>/dev/null || true
    ;;
*)
    echo "usage: $0 up DIR | down DIR LOOP" >&2
    exit 2
    ;;
esac

"""Everything that changes the machine: the subprocess helper, the undo journal, work areas
and the registry of runs, block devices and mounts, the zfs-fuse daemon. Code outside this
package (and the layers that call it) only reads the machine."""

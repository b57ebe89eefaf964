"""What each key of the experiment file means, in words, with an example: the prose of the
generated reference (docs/reference.md) and of the JSON Schema's descriptions. Types,
defaults and ranges are not written here: spec/schema.py reads them from the models that
validate the file. A test holds this table to those models key for key, and checks every
example against them (tests/unit/test_schema.py).

Each entry: "table.key" -> (what it is, an example value, limits the model's validators
enforce beyond what its types say, or "")."""

from __future__ import annotations

Doc = tuple[str, object, str]

TABLES: dict[str, str] = {
    "experiment": "The experiment's name and seed. Required.",
    "postgres": "Which installed PostgreSQL runs the trials, and as whom.",
    "build": "PostgreSQL compiled from source (examples/wal-blocksize.toml); root. Builds are "
    "made before the first trial and cached by a hash of the pinned source, the options and "
    "the compiler's version.",
    "storage": "The filesystem the cluster lives on (root). Without it, clusters live in the "
    "results folder's work area.",
    "storage.wal": "The WAL device's filesystem; unset keys follow the data device's.",
    "storage.zfs": "Where filesystem = \"zfs\": zfs-fuse 0.7 (no sync property, no lz4), "
    "pgsweep's own daemon; refused when kernel ZFS is loaded.",
    "cluster": "The cluster and its data: a change means a new cluster (initdb, pgbench -i, "
    "a snapshot).",
    "server": "Any postgresql.conf setting, the base of every configuration. Names are "
    "case-insensitive, as PostgreSQL's; each value is checked by the server binary itself "
    "(postgres -C) and by a real start of a scratch cluster. Settings pgsweep manages "
    "(port, listen_addresses, unix_socket_directories, hba_file, logging_collector, ...), "
    "SSL files and include directives are refused as factors; in [server] (a stock "
    "postgresql.conf pasted in) they are not used, and plan, run and show --env say so.",
    "workload": "What pgbench (or sysbench, with tool) runs in each trial's measured window.",
    "os": "Kernel settings (root); each is written through the undo journal and put back "
    "after the run.",
    "os.sysctl": "Writable sysctls under vm., kernel.sched_*, kernel.shm*, fs. and net. (never "
    "one that runs a program or weakens a protection), each inside its safe range (SECURITY.md "
    "lists them: floors at what is in use). Keys are quoted: \"vm.swappiness\" = 10.",
    "replication": "Streaming standbys of the trial's primary (examples/replication.toml).",
    "replication.standby": "Settings of the standbys only, checked by the server binary. A "
    "standby also gets the primary's max_connections, max_wal_senders, max_worker_processes, "
    "max_prepared_transactions and max_locks_per_transaction (it must have them at least as "
    "high).",
    "factors": "The levels to compare: [factors] mirrors the layer tables with lists of "
    "levels, and pgsweep measures the full factorial (at most 10,000 configurations and "
    "100,000 trials). A factor's levels must be distinct and mean different things (\"1GB\" "
    "and \"1024MB\" are refused).",
    "repeat": "How many rounds, and how cluster-level levels are replicated.",
    "report": "How `pgsweep report` compares (optional).",
    "hosts.NAME": "Another machine a role may run on, reached over SSH (its name: lower-case "
    "letters, digits, - and _, not \"local\"); pgsweep starts its agent there "
    "(`pgsweep agent`). A host no role names is not contacted. The files named are absolute "
    "paths checked before use: regular files no other user can change.",
    "roles": "Where a trial's roles run: every role is on `local` (the machine pgsweep runs "
    "on) unless placed on a host [hosts] names: the server, the client (the workload tool) "
    "and each standby, each reaching the server over TCP with the run's password when it "
    "is not beside it.",
}

KEYS: dict[str, Doc] = {
    "experiment.name": ("The experiment's name: it names the results folder.",
                        "shared-buffers-vs-clients", "letters, digits, - _ ."),
    "experiment.seed": ("Fixes the run order; recorded when absent.", 7, ""),
    "experiment.description": ("Free text.", "what this experiment asks", ""),
    "experiment.hosts_may_differ": (
        "Host facts a fleet's groups (`run --inventory`) may differ in. Before dispatch every "
        "group's host reports its kernel, CPU model, microcode, usable CPUs, memory (GiB), "
        "NUMA nodes and PostgreSQL server; groups that differ in a fact not listed here are "
        "refused (exit 2), and the report names the facts that differ.",
        ["microcode"], "kernel, cpu_model, microcode, usable_cpus, memory_gib, numa_nodes, "
        "postgres"),
    "experiment.cpu_profile": (
        "Opt in: after the measured window of each configuration's round-1 trial, pgbench "
        "runs this long again while `perf record -g` samples that server's processes (and "
        "no other) at 99 Hz; the "
        "server's stacks are kept per trial and the HTML report draws a differential flame "
        "graph in each explain panel. Outside the window: no verdict is perturbed. Needs "
        "root and perf (apt-get install linux-perf).", "5s", "0s (none) to 10min"),
    "experiment.io_latency": (
        "Opt in: in the same window after each configuration's round-1 trial (the longer of "
        "the two lengths), `perf record -a` times every request on the server's data and WAL "
        "block devices (the kernel's block_rq_issue and block_rq_complete tracepoints, "
        "filtered to those devices: every request on them, whoever issued it); each trial "
        "keeps a latency histogram per device and kind (read, write, flush, discard) in "
        "quarter-octave buckets, shown in explain and exported (`export --what io_latency`). "
        "A server on tmpfs has no block device: nothing is timed, and the trial says so. "
        "Needs root and perf.", "10s", "0s (none) to 10min"),
    "postgres.bin": ("The PostgreSQL binaries: \"auto\" is the newest /usr/lib/postgresql/N/bin, "
                     "else pg_config on PATH; or a directory.", "/usr/lib/postgresql/15/bin",
                     ""),
    "postgres.user": ("The OS user the server runs as when pgsweep runs as root: a system "
                      "account, never root or a person's (default: the account pgsweep made, "
                      "else postgres).", "pgsweep", ""),
    "build.source": ("\"installed\" (postgres.bin, nothing built) | \"apt:postgresql-N\" "
                     "(Debian's source package, fetched by apt-get as its sandbox user _apt "
                     "through a private sources list and checked against apt's signed index; "
                     "its orig tarball, without Debian's patches) | an absolute path to a "
                     "release tarball | an absolute path to a git work tree (git runs as its "
                     "owner with no system or global configuration; its git directories and "
                     "tracked files must be ones no other user can change).",
                     "apt:postgresql-15", ""),
    "build.ref": ("With a git work tree: the commit, tag or branch to build (a patch under "
                  "test); without ref, HEAD plus the work tree's uncommitted changes to "
                  "tracked files.", "REL_17_STABLE", ""),
    "build.wal_blocksize": ("--with-wal-blocksize, in kB.", 4, ""),
    "build.blocksize": ("--with-blocksize, in kB.", 8, ""),
    "build.segsize": ("--with-segsize, in GB.", 1, ""),
    "build.optimize": ("The -O level (default: configure's -O2).", "2", ""),
    "build.debug": ("--enable-debug.", True, ""),
    "build.cflags": ("More CFLAGS: -O, -g, -D/-U, -W, -f and -m options only (nothing that "
                     "names a path, loads a plugin or dumps files).",
                     "-march=native -fno-omit-frame-pointer", "option shapes only"),
    "build.configure": ("More configure options, space-separated: --enable-X, --disable-X, "
                        "--with-X[=value without /], --without-X; never --prefix, "
                        "--with-includes/libraries/system-tzdata; --enable-cassert needs "
                        "allow_cassert.", "--with-lz4 --without-icu", "option shapes only"),
    "build.allow_cassert": ("Allows --enable-cassert; every report then marks the assertion "
                            "build's numbers. Not a factor.", True, ""),
    "build.pgbench": ("\"shared\": every configuration runs the installed pgbench "
                      "(postgres.bin), so a faster client never passes for a faster server; "
                      "\"own\": each build's own pgbench (and pgbench -i). Not a factor.",
                      "shared", ""),
    "storage.device": ("\"loop:SIZE\": a sparse file in the work area as a loop device; or "
                       "\"/dev/sdX\", only with `run --allow-device /dev/sdX` (see "
                       "SECURITY.md).", "loop:8GiB", "a loop device of at least 256MiB"),
    "storage.sector_size": ("Loop devices: losetup --sector-size.", 4096, ""),
    "storage.filesystem": ("The filesystem made on the device.", "xfs", ""),
    "storage.mkfs_options": ("Passed to mkfs.FS: only options that cannot name another "
                             "device or file (no -l logdev=, -J device=, -d, -F, ...).",
                             "-b 4096", "no device or file options"),
    "storage.mount_options": ("mount -o: no logdev=, rtdev=, journal_path=, device=, loop, "
                              "bind, x-*; an option the kernel rejects fails the trial "
                              "quoting the kernel's message. pgsweep adds nosuid,nodev, and "
                              "for ext4 noinit_itable (no inode-table zeroing in the "
                              "background during the first trials) unless the level names "
                              "init_itable.", "data=writeback",
                              "no device options"),
    "storage.btrfs_nocow": ("chattr +C on the empty mount: every cluster file without "
                            "copy-on-write.", True, ""),
    "storage.loop_direct_io": ("Loop devices bypass the host page cache.", False, ""),
    "storage.wal_device": ("pg_wal on a device of its own (initdb --waldir), in the forms "
                           "of device.", "loop:2GiB", "as device"),
    "storage.wal.filesystem": ("The WAL device's filesystem.", "xfs", ""),
    "storage.wal.mkfs_options": ("As storage.mkfs_options, for the WAL device.", "", ""),
    "storage.wal.mount_options": ("As storage.mount_options, for the WAL device.", "noatime",
                                  ""),
    "storage.wal.sector_size": ("As storage.sector_size, for the WAL device.", 512, ""),
    "storage.zfs.recordsize": ("The dataset's recordsize; it applies to new writes only, so a "
                               "change means a new cluster.", "8K",
                               "a power of two from 512 to 128K"),
    "storage.zfs.primarycache": ("A live property: a change restarts the server only (the "
                                 "pool is exported and imported to empty the ARC).", "all", ""),
    "storage.zfs.secondarycache": ("A live property, as primarycache.", "all", ""),
    "storage.zfs.compression": ("Compression of new writes (a new cluster); zfs-fuse has no "
                                "lz4.", "off", ""),
    "storage.zfs.logbias": ("A live property: a change restarts the server only.", "latency",
                            ""),
    "storage.zfs.atime": ("A live property: a change restarts the server only.", "on", ""),
    "storage.zfs.sync": ("Refused: zfs-fuse 0.7 has no sync property.", "standard", ""),
    "storage.zfs.ashift": ("The pool's sector shift (zpool create -o ashift).", 12, ""),
    "storage.zfs.arc_max": ("The ARC limit (zfs-fuse -m).", "512MiB", "16MiB to 16GiB"),
    "cluster.scale": ("pgbench -i -s.", 10, ""),
    "cluster.size": ("Instead of scale: \"200MB\" or \"N% of RAM\" (RAM = os.memory_limit when "
                     "set); the scale is computed from the bytes a scale-2 load took. plan "
                     "refuses data that cannot fit where it will live (data, its snapshot, "
                     "WAL, standbys' copies), with the figures.", "50% of RAM",
                     "at least 20MB; a share above 0% and at most 1000%"),
    "cluster.data_checksums": ("initdb --data-checksums.", True, ""),
    "cluster.wal_segsize": ("initdb --wal-segsize, in MB (default: PostgreSQL's).", 64,
                            "a power of two, 1 to 1024"),
    "workload.tool": ("The program that runs the workload: pgbench, Debian's sysbench (its "
                      "PostgreSQL driver) or pgreplay; plan names the package when one is "
                      "missing. With sysbench, `sysbench TEST prepare` loads the data "
                      "(cluster.scale, size and from are refused), clients are its threads, "
                      "duration, warmup and rate mean what they mean for pgbench. pgreplay "
                      "replays the csvlog `replay` names on the loaded data (pgbench -i, or "
                      "cluster.from's dump): the log says who connects, when and for how long "
                      "(clients, duration, warmup and rate are refused). Each tool refuses "
                      "the others' keys; each runs where [roles] client puts it.", "sysbench",
                      "not a factor"),
    "workload.test": ("sysbench's OLTP test, one of those sharing oltp_common's tables "
                      "(oltp_read_write when unset): a name only, never a path or a Lua "
                      "script. A factor of tests shares one loaded cluster.", "oltp_read_only",
                      "offered by the sysbench installed"),
    "workload.tables": ("sysbench --tables: how many sbtest tables prepare loads.", 4,
                        "not a factor"),
    "workload.table_size": ("sysbench --table-size: rows in each table.", 100000,
                            "not a factor"),
    "workload.replay": ("pgreplay: the absolute path of a csvlog captured with log_statement "
                        "= 'all', log_connections and log_disconnections on and lc_messages "
                        "= 'C', on the database postgres (read once at validation, never "
                        "through a link, only if the server user may read it; pgreplay parses "
                        "it then: a line it cannot read is exit 2, naming the line). Its "
                        "roles are made in every cluster; every trial starts from the loaded "
                        "data.", "/srv/capture/postgresql.csv", "at most 256 MiB, not a factor"),
    "workload.replay_speed": ("pgreplay -s: 1 replays at the captured pace, 2 twice as fast; "
                              "the window lasts the log's span divided by it.", 2.0,
                              "above 0, at most 1000"),
    "workload.script": ("tpcb-like | simple-update | select-only | a path to a custom script "
                        "(UTF-8 text, at most 1 MiB, read once when the file is validated, "
                        "never through a link; the server user must be able to read it).",
                        "select-only", ""),
    "workload.clients": ("pgbench -c.", 8, ""),
    "workload.jobs": ("pgbench -j (capped at clients).", 2, ""),
    "workload.duration": ("The measured window: seconds, or \"30s\", \"2min\", \"1h\".", "60s",
                          "1 s to a day"),
    "workload.warmup": ("A separate pgbench run just before the window, not counted (\"0s\" "
                        "for none).", "10s", "0 s to a day"),
    "workload.rate": ("pgbench -R, transactions per second; latency then runs from the "
                      "scheduled start.", 500, "finite, at most 10 million/s"),
    "workload.latency_limit": ("pgbench -L: with rate, transactions later than this are "
                               "skipped and counted.", "50ms", "above 0, at most 1 h"),
    "workload.protocol": ("pgbench -M.", "prepared", ""),
    "workload.prewarm": ("pg_prewarm the pgbench tables and indexes after each server start.",
                         True, ""),
    "workload.latency_log": ("The per-transaction log (-l): \"auto\" samples about 2,000 lines "
                             "a second when the expected rate is above 2,000 tx/s; \"off\"; or "
                             "a fixed sampling rate.", "auto", "a sampling rate above 0, at "
                             "most 1"),
    "workload.explain": ("Collect the explain figures over each window (wait states, CPU by "
                         "process type, devices per second): on by default; false for a "
                         "trial without them (a factor of it measures what they cost).",
                         False, "true or false"),
    "workload.max_tries": ("pgbench --max-tries (PG 15+): retries of serialization and "
                           "deadlock errors.", 3, ""),
    "workload.standby_script": ("A read load on each standby during the window (builtin or a "
                                "custom script that only reads; PG 15+), measured apart "
                                "(standby.*); queries cancelled by recovery conflicts are "
                                "retried and counted.", "select-only", ""),
    "workload.standby_clients": ("Its pgbench -c, per standby.", 2, ""),
    "os.huge_pages": ("Shared memory in huge pages: reserved (the count the server asks for), "
                      "verified in the postmaster's smaps; a short reservation is retried once "
                      "after compacting memory, and dropping the page cache when the trial "
                      "warms up first. \"off\" runs the server without them.", "2MB", ""),
    "os.thp": ("/sys/kernel/mm/transparent_hugepage/enabled.", "never",
               "a value the kernel's menu offers"),
    "os.thp_defrag": ("/sys/kernel/mm/transparent_hugepage/defrag.", "never",
                      "a value the kernel's menu offers"),
    "os.thp_shmem": ("/sys/kernel/mm/transparent_hugepage/shmem_enabled: governs shared "
                     "memory without huge pages.", "never", "a value the kernel's menu offers"),
    "os.io_scheduler": ("The I/O scheduler of the devices under PGDATA and pg_wal (and what "
                        "backs them).", "mq-deadline", "a scheduler the device offers"),
    "os.read_ahead_kb": ("read_ahead_kb of the same devices.", 128, ""),
    "os.drop_caches": ("\"before_trial\": stop the server, sync and drop the page cache (on zfs "
                       "also the ARC: the pool is exported and imported).", "before_trial", ""),
    "os.memory_limit": ("The server (and the page cache it reads) in a cgroup v1 memory group; "
                        "refused when the server's shared memory alone would not fit.", "4GiB",
                        "at least 64MiB"),
    "os.sysctl": ("sysctl name -> value (see [os.sysctl]).", {"vm.swappiness": 10},
                  "a writable sysctl inside its safe range"),
    "replication.standbys": ("pg_basebackup -X stream -R from the running primary, each its own "
                             "server (same unprivileged user, own socket, cluster_name s1..).",
                             1, ""),
    "replication.mode": ("\"sync\" sets the primary's synchronous_standby_names.", "sync", ""),
    "replication.sync_standbys": ("How many standbys a commit waits for.", "FIRST 1",
                                  "\"FIRST n\" or \"ANY n\", n at most standbys"),
    "replication.network": ("Root: the primary's TCP side and the standbys in two network "
                            "namespaces of pgsweep's own, joined by a veth pair (10.213.0.1 and "
                            ".2, inside them only: nothing is added to the host's network; hba "
                            "trusts the standbys' address alone); the round trip is measured "
                            "per trial.", True, ""),
    "replication.bandwidth": ("With network: tc tbf on the primary's end of the link (the WAL).",
                              "100mbit", "a tc rate"),
    "replication.delay": ("Refused: this kernel has no netem, pgsweep no latency proxy.", "5ms",
                          ""),
    "replication.max_lag": ("A standby whose replay falls further behind fails the trial.",
                            "60s", "at least 1 s"),
    "repeat.rounds": ("A number of rounds (every configuration once per round), or \"auto\": "
                      "look at TPS after every round and stop once decided. Default: \"auto\" "
                      "with two configurations or more, 3 with one.", "auto", ""),
    "repeat.min_rounds": ("Adaptive only: rounds before the first look (default 3, or "
                          "max_rounds if less).", 3, ""),
    "repeat.max_rounds": ("Adaptive only: rounds at most. Default: what `interest` needs with "
                          "80% power on this machine's recorded noise, plus 20% for the looks, "
                          "within `budget`; plan's trial count and ETA are for this many.", 15,
                          ""),
    "repeat.decide": ("Adaptive only: \"baseline\" decides every configuration against it, "
                      "\"effects\" the factor effects.", "baseline", ""),
    "repeat.precision": ("Adaptive only: the equivalence margin, and the interval half-width "
                         "that is enough.", "2%", "above 0% and below 100%"),
    "repeat.interest": ("Adaptive only: the smallest change worth finding; futility asks about "
                        "it.", "10%", "above 0% and below 100%"),
    "repeat.budget": ("Adaptive only: the machine time the default max_rounds may take.", "2h",
                      "at least a minute"),
    "repeat.rebuild": ("New instances of cluster-level levels (clusters, filesystems): "
                       "\"auto\" (every round, or every N rounds when rebuilding would more "
                       "than double the run, two instances per level at least), \"per_round\", "
                       "N (every N rounds), or \"once\" (no verdict across those levels).",
                       "auto", ""),
    "report.baseline": ("The configuration every other is compared with, by its levels "
                        "(default: every factor's first level).",
                        {"server.shared_buffers": "128MB"}, "levels of the file's factors"),
    "report.margin": ("An interval wholly inside +-margin reads \"equivalent within margin\".",
                      "2%", ""),
    "hosts.NAME.ssh": ("The destination as ssh takes it: [user@]host or ssh://user@host:port "
                       "(never starting with -).", "root@10.0.0.2", ""),
    "hosts.NAME.identity_file": ("A private key file for ssh (absolute path).",
                                 "/root/.ssh/id_ed25519", "an absolute path"),
    "hosts.NAME.known_hosts": ("A known_hosts file, checked strictly (absolute path).",
                               "/root/.ssh/known_hosts", "an absolute path"),
    "hosts.NAME.pgsweep": ("The command that runs pgsweep on that host.",
                           "/opt/pgsweep/bin/pgsweep", ""),
    "roles.server": ("Where the server runs: local (pgsweep's machine), or a [hosts] name. "
                     "A server on another host listens on its address as this machine "
                     "reached it; the client (this machine by default, its own host, or a "
                     "third) reaches it over TCP with the run's password; each standby "
                     "runs beside it (roles.standbys naming it, or beyond the list) or on "
                     "a host of its own, not on this machine; every layer acts on that "
                     "host through its agent ([storage] on loop devices alone; a [build] is "
                     "compiled here and copied into its build cache).",
                     "local", "local or a [hosts] name"),
    "roles.client": ("Where the workload tool runs (pgbench, sysbench or pgreplay): local, "
                     "or a [hosts] name. It reaches the server over TCP with the run's "
                     "password; a replay's log is copied there and its sessions' roles are "
                     "admitted by name from that host alone.", "local",
                     "local or a [hosts] name"),
    "roles.standbys": ("Where standby s1, s2, ... runs: a [hosts] name, or the server's own "
                       "host (local for a server here) to run it beside the server; standbys "
                       "beyond the list run beside the server. A standby on another host "
                       "streams over the real network (TCP, scram-sha-256 with the run's "
                       "password, admitted for replication alone).",
                       ["local", "replica1"], "a list of local or [hosts] names"),
    "report.alpha": ("The chance of any false \"different\" among a metric's verdicts.", 0.05,
                     ""),
}

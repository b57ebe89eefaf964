"""The results database's schema: one migration per version (PRAGMA user_version counts
those applied); a folder made by an older pgsweep is brought up to date when opened."""

from __future__ import annotations

MIGRATIONS: list[str] = [
    # 1: experiments, configurations, trials, per-second samples, raw outputs
    """
    CREATE TABLE experiment (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        name TEXT NOT NULL, file_text TEXT NOT NULL, fingerprint TEXT NOT NULL,
        seed INTEGER NOT NULL, plan_json TEXT NOT NULL, created_at TEXT NOT NULL,
        pgsweep_version TEXT NOT NULL, postgres_version TEXT NOT NULL
    );
    CREATE TABLE configuration (
        id TEXT PRIMARY KEY, label TEXT NOT NULL, levels_json TEXT NOT NULL, grp INTEGER NOT NULL
    );
    CREATE TABLE trial (
        id TEXT PRIMARY KEY, ord INTEGER NOT NULL, round INTEGER NOT NULL,
        config_id TEXT NOT NULL REFERENCES configuration(id),
        status TEXT NOT NULL CHECK (status IN ('ok', 'failed')),
        reason TEXT, log_tail TEXT, started_at TEXT NOT NULL, finished_at TEXT NOT NULL,
        warmup_s INTEGER, duration_s INTEGER,
        tps REAL, transactions INTEGER, failed_transactions INTEGER,
        latency_avg_ms REAL, latency_stddev_ms REAL,
        events_json TEXT NOT NULL DEFAULT '[]', effective_json TEXT NOT NULL DEFAULT '{}',
        server_started_at TEXT, pgbench_argv TEXT
    );
    CREATE TABLE sample (
        trial_id TEXT NOT NULL REFERENCES trial(id), at_s REAL NOT NULL, tps REAL NOT NULL,
        latency_ms REAL, stddev_ms REAL, failed INTEGER, lag_ms REAL, skipped INTEGER,
        PRIMARY KEY (trial_id, at_s)
    );
    CREATE TABLE artifact (
        trial_id TEXT NOT NULL, name TEXT NOT NULL, gz BLOB NOT NULL,
        PRIMARY KEY (trial_id, name)
    );
    """,
    # 2: counters over each trial's measured window (disk.DEV.*, host.*, pg.*)
    """
    CREATE TABLE counter (
        trial_id TEXT NOT NULL REFERENCES trial(id), name TEXT NOT NULL, value REAL NOT NULL,
        PRIMARY KEY (trial_id, name)
    )
    """,
    # 3: the environment: scope "host", "cluster-N" (storage) or a configuration id
    """
    CREATE TABLE environment (
        scope TEXT NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (scope, name)
    )
    """,
    # 4: figures derived per trial (latency.p99_ms, io.wal_bytes_per_tx, ...), the
    # per-second series and latency histogram from the transaction log, and the I/O of
    # each cluster's load phase
    """
    CREATE TABLE metric (
        trial_id TEXT NOT NULL REFERENCES trial(id), name TEXT NOT NULL, value REAL NOT NULL,
        PRIMARY KEY (trial_id, name)
    );
    CREATE TABLE second (
        trial_id TEXT NOT NULL REFERENCES trial(id), second INTEGER NOT NULL,
        tps REAL NOT NULL, failed INTEGER NOT NULL, skipped INTEGER NOT NULL,
        latency_mean_ms REAL, latency_p50_ms REAL, latency_p90_ms REAL, latency_p99_ms REAL,
        latency_max_ms REAL, lag_mean_ms REAL,
        PRIMARY KEY (trial_id, second)
    );
    CREATE TABLE latency_bin (
        trial_id TEXT NOT NULL REFERENCES trial(id), low_ms REAL NOT NULL,
        high_ms REAL NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (trial_id, low_ms)
    );
    CREATE TABLE load_counter (
        cluster TEXT NOT NULL, name TEXT NOT NULL, value REAL NOT NULL,
        PRIMARY KEY (cluster, name)
    )
    """,
    # 5: every standby's replication state, once a second of the measured window
    """
    CREATE TABLE standby_second (
        trial_id TEXT NOT NULL REFERENCES trial(id), standby TEXT NOT NULL,
        second INTEGER NOT NULL, state TEXT, sync_state TEXT,
        write_lag_ms REAL, flush_lag_ms REAL, replay_lag_ms REAL,
        sent_bytes_behind REAL, write_bytes_behind REAL, flush_bytes_behind REAL,
        replay_bytes_behind REAL,
        PRIMARY KEY (trial_id, standby, second)
    )
    """,
    # 6: the host group and shard that ran each trial (`run --shard K/N`, `merge`)
    """
    ALTER TABLE trial ADD COLUMN host_group TEXT;
    ALTER TABLE trial ADD COLUMN shard INTEGER
    """,
    # 7: what explains a trial (issue 26): where sessions waited (average sessions per
    # process type, wait class and event, from pg_stat_activity sampled over the window)
    # and CPU, context switches and page faults per process type (/proc); folders from
    # before have none, and the reports say so
    """
    CREATE TABLE wait (
        trial_id TEXT NOT NULL REFERENCES trial(id), backend_type TEXT NOT NULL,
        wait_class TEXT NOT NULL, wait_event TEXT NOT NULL, sessions REAL NOT NULL,
        PRIMARY KEY (trial_id, backend_type, wait_class, wait_event)
    );
    CREATE TABLE process_cpu (
        trial_id TEXT NOT NULL REFERENCES trial(id), process_type TEXT NOT NULL,
        processes INTEGER NOT NULL, user_s REAL, system_s REAL, voluntary_switches REAL,
        involuntary_switches REAL, minor_faults REAL, major_faults REAL,
        PRIMARY KEY (trial_id, process_type)
    )
    """,
    # 8: the server's devices once a second of the measured window (diskstats, as iostat
    # derives it) and the machine's Dirty and Writeback (device "memory"): issue 26
    """
    CREATE TABLE device_second (
        trial_id TEXT NOT NULL REFERENCES trial(id), device TEXT NOT NULL,
        second INTEGER NOT NULL, reads_s REAL, writes_s REAL, read_kb_s REAL,
        write_kb_s REAL, await_ms REAL, queue_depth REAL, util_pct REAL, dirty_kb REAL,
        writeback_kb REAL,
        PRIMARY KEY (trial_id, device, second)
    )
    """,
    # 9: the workload tool's own figures once a second, beside the TPS and p99 `second`
    # holds (sysbench: QPS, reads, writes and other queries, errors and reconnects a second)
    """
    CREATE TABLE tool_second (
        trial_id TEXT NOT NULL REFERENCES trial(id), second INTEGER NOT NULL,
        name TEXT NOT NULL, value REAL NOT NULL,
        PRIMARY KEY (trial_id, second, name)
    )
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)

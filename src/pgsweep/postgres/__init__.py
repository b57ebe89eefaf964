"""Everything that talks to PostgreSQL's own programs: binaries, clusters, pgbench."""

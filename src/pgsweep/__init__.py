"""pgsweep: does this change make PostgreSQL faster, slower, or no different?"""

__version__ = "0.1.0"

"""Moved to :mod:`streams_app.postgres.server` (the database edge uses it too); kept importable."""

from streams_app.postgres.server import BINDIR_ENV, PostgresServer, ensure_installed, find_bindir

__all__ = ["BINDIR_ENV", "PostgresServer", "ensure_installed", "find_bindir"]

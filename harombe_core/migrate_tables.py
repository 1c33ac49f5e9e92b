"""The earlier import path of :mod:`harombe_core.migrate.tables`, kept so existing code works."""

from harombe_core.migrate.tables import CHECKPOINT_TABLES, Table, copy_tables, verify_tables

__all__ = ["CHECKPOINT_TABLES", "Table", "copy_tables", "verify_tables"]

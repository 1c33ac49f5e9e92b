"""The earlier import path of :mod:`harombe_core.migrate.items`, kept so existing code works."""

from harombe_core.migrate.items import copy_store_items, verify_store_items

__all__ = ["copy_store_items", "verify_store_items"]

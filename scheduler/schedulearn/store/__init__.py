"""The persistent job store: `SqlStore(url)` implements the engine's `Store` protocol on
SQLAlchemy (a SQLite file by default, PostgreSQL for shared clusters). Its schema is created and
upgraded by the Alembic migrations under `migrations/` (see `migrate`) when a store opens.

    from schedulearn.store import SqlStore
    engine = Engine(nodes, "fifo", executor, store=SqlStore("sqlite:///jobs.db"))
"""

from .migrate import SchemaError
from .sql import SqlStore, StoreError, default_url, persisted_extra

__all__ = ["SchemaError", "SqlStore", "StoreError", "default_url", "persisted_extra"]

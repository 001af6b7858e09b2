"""Alembic environment of the job store. Run through `schedulearn.store.migrate`, which passes
an open connection in `config.attributes["connection"]` (no alembic.ini)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context
from schedulearn.store.schema import VERSION_TABLE, metadata

config = context.config


def _run(connection: sa.Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER most things
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:  # `sqlalchemy.url` set on the config (a developer's command line)
    engine = sa.create_engine(config.get_main_option("sqlalchemy.url"))
    with engine.begin() as conn:
        _run(conn)
    engine.dispose()

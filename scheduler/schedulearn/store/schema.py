"""The tables of the job store. Alembic migrations (`migrations/versions/`) create and upgrade
them; a test checks that the migrated schema equals this metadata (autogenerate finds nothing).
Change a table here only together with a new migration."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

#: The table that records the schema revision (not `alembic_version`: a shared PostgreSQL
#: database may hold other applications' Alembic histories).
VERSION_TABLE = "schedulearn_alembic_version"

STATES = ("queued", "starting", "running", "succeeded", "failed", "cancelled")
STATE_CHECK = "state IN (" + ", ".join(f"'{s}'" for s in STATES) + ")"

#: JSON everywhere, JSONB on PostgreSQL.
Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_name)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),  # given by the engine
    sa.Column("spec", Json, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("submit_time", sa.Double, nullable=False),
    sa.Column("start_time", sa.Double),
    sa.Column("end_time", sa.Double),
    sa.Column("alloc", Json, nullable=False),  # {node: [gpu index, ...]}
    sa.Column("attained_base", sa.Double, nullable=False),
    sa.Column("run_base", sa.Double, nullable=False),
    sa.Column("since", sa.Double, nullable=False),
    sa.Column("restarts", sa.Integer, nullable=False),
    sa.Column("exit_code", sa.Integer),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("batch_size", sa.Integer),
    sa.Column("stopping", sa.String(16)),
    sa.Column("user", sa.String(200), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("extra", Json, nullable=False),  # the JSON-able part of Job.extra
    sa.Column("last_alloc", Json, nullable=False, server_default=sa.text("'{}'")),  # kept after the end
    sa.Column("releasing", Json, nullable=False, server_default=sa.text("'{}'")),  # a shrink's old GPUs
    sa.CheckConstraint(STATE_CHECK, name="state"),
    sa.CheckConstraint("restarts >= 0", name="restarts"),
    sa.Index("ix_jobs_state", "state"),
    sa.Index("ix_jobs_user", "user"),
)

events = sa.Table(
    "events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id", ondelete="CASCADE")),  # None: cluster-wide
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("data", Json, nullable=False),
    sa.Column("t", sa.Double, nullable=False),
    sa.Index("ix_events_job_id", "job_id"),
)

settings = sa.Table(
    "settings",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

"""Initial schema: jobs, events, settings.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("spec", Json, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("submit_time", sa.Double, nullable=False),
        sa.Column("start_time", sa.Double),
        sa.Column("end_time", sa.Double),
        sa.Column("alloc", Json, nullable=False),
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
        sa.Column("extra", Json, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
        sa.CheckConstraint(
            "state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')", name="ck_jobs_state"
        ),
        sa.CheckConstraint("restarts >= 0", name="ck_jobs_restarts"),
    )
    op.create_index("ix_jobs_state", "jobs", ["state"])
    op.create_index("ix_jobs_user", "jobs", ["user"])
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.Integer),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("data", Json, nullable=False),
        sa.Column("t", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_events"),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_events_job_id_jobs", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_events_job_id", "events", ["job_id"])
    op.create_table(
        "settings",
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("value", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_settings"),
    )


def downgrade() -> None:
    op.drop_table("settings")
    op.drop_index("ix_events_job_id", table_name="events")
    op.drop_table("events")
    op.drop_index("ix_jobs_user", table_name="jobs")
    op.drop_index("ix_jobs_state", table_name="jobs")
    op.drop_table("jobs")

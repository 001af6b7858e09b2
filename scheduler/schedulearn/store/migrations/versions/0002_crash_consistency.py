"""Crash consistency: the `starting` state (a launch's write-ahead record), `last_alloc` (the
allocation a job held last, kept after it ends) and `releasing` (GPUs a shrink gave up, held
until the old run exited).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
OLD = "state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')"
NEW = "state IN ('queued', 'starting', 'running', 'succeeded', 'failed', 'cancelled')"


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("last_alloc", Json, nullable=False, server_default=sa.text("'{}'")))
        batch.add_column(sa.Column("releasing", Json, nullable=False, server_default=sa.text("'{}'")))
        batch.drop_constraint("ck_jobs_state", type_="check")
        batch.create_check_constraint("ck_jobs_state", sa.text(NEW))
    # Jobs that ended before this revision: their last allocation is unknown; running ones hold it.
    op.execute("UPDATE jobs SET last_alloc = alloc")


def downgrade() -> None:
    op.execute("UPDATE jobs SET state = 'queued', alloc = '{}' WHERE state = 'starting'")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint("ck_jobs_state", type_="check")
        batch.create_check_constraint("ck_jobs_state", sa.text(OLD))
        batch.drop_column("releasing")
        batch.drop_column("last_alloc")

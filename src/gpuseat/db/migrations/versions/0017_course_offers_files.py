"""A course's own offers files: ``courses.offers_files``, their names and texts, stored by ``course create``.

A course file may name offers files (``offers_files = ["my-offers.toml"]``, relative to the course file).
``course create`` stored only the course file's text, so every later re-plan of the stored course (the
report's alternatives) fell back to the bundled offers. The column keeps each file as
``{"name": as the course file names it, "text": its text}``, in the course file's order; courses stored
before this revision have NULL (they name no offers file, or theirs were never stored).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"  # created 2026-12-06
down_revision = "0016"


def upgrade() -> None:
    """Add the nullable JSON column (existing courses: NULL)."""
    with op.batch_alter_table("courses", recreate="never") as batch:
        batch.add_column(sa.Column("offers_files", sa.JSON(), nullable=True))


def downgrade() -> None:
    """Drop the column (in place: a rebuild of ``courses`` would break the archive triggers that name it)."""
    with op.batch_alter_table("courses", recreate="never") as batch:
        batch.drop_column("offers_files")

"""Builders for the columns and constraints that the revisions in ``versions/`` spell alike.

FROZEN: revisions that have shipped call these, so the schema they produce depends on exactly what each
function returns today (names, types, nullability, ``ON DELETE``). Never change what one returns; a new
revision that needs something else spells it out or gets a new function here. (Not in ``versions/``:
Alembic loads every module there as a revision.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from alembic import op


def ident(*, big: bool = False) -> sa.Column[Any]:
    """The surrogate key ``id``; ``big`` for tables that grow without end (SQLite's rowid stays INTEGER)."""
    type_ = sa.BigInteger().with_variant(sa.Integer(), "sqlite") if big else sa.Integer()
    return sa.Column("id", type_, nullable=False)


def at(name: str, *, nullable: bool) -> sa.Column[Any]:
    """A point in time, stored with its time zone."""
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def pk(table: str, *columns: str) -> sa.PrimaryKeyConstraint:
    """``pk_<table>`` over ``columns`` (``id`` when none are named)."""
    return sa.PrimaryKeyConstraint(*(columns or ("id",)), name=f"pk_{table}")


def foreign_key(
    table: str, column: str, *, nullable: bool = False, ondelete: str = "CASCADE"
) -> tuple[sa.Column[Any], sa.ForeignKeyConstraint]:
    """The integer column ``<thing>_id`` and its ``fk_<table>_<column>_<things>`` to ``<things>.id``.

    Spread it (``*foreign_key(...)``) where the column goes: the constraint is still written after all
    columns, in the order these calls come.
    """
    target = column.removesuffix("_id") + "s"
    return (
        sa.Column(column, sa.Integer(), nullable=nullable),
        sa.ForeignKeyConstraint([column], [f"{target}.id"], name=f"fk_{table}_{column}_{target}", ondelete=ondelete),
    )


def index_revision(name: str, table: str, columns: list[str]) -> tuple[Callable[[], None], Callable[[], None]]:
    """``(upgrade, downgrade)`` of a revision that only adds the index ``name`` on ``table (columns)``: rows stay
    as they are, and the downgrade drops it again (``upgrade, downgrade = index_revision(...)`` in the revision)."""

    def upgrade() -> None:
        op.create_index(name, table, columns)

    def downgrade() -> None:
        op.drop_index(name, table_name=table)

    return upgrade, downgrade

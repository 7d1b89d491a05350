"""Agents' wake-up channel per schema: ``gpuseat_events_<schema>`` instead of one ``gpuseat_events``.

Two gpuseat stores in one PostgreSQL database (one schema each, ``options=-csearch_path=…`` in the URL)
woke each other's agents, and a listener read the other store's event ids. The channel now names the
schema of the ``events`` table, cut to PostgreSQL's 63-byte identifier limit (``pg_notify`` refuses a
longer name); the listener computes the same name from its ``current_schema()``.
"""

from __future__ import annotations

from alembic import op

revision = "0016"  # created 2026-12-06
down_revision = "0015"

_BODY = """
CREATE OR REPLACE FUNCTION gpuseat_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM agent_leases WHERE expires_at > extract(epoch FROM clock_timestamp())) THEN
        PERFORM pg_notify({channel}, NEW.id::text);
    END IF;
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    """The trigger's function notifies the channel of its own schema."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_BODY.format(channel="left('gpuseat_events_' || TG_TABLE_SCHEMA, 63)"))


def downgrade() -> None:
    """Back to revision 0014's one channel."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_BODY.format(channel="'gpuseat_events'"))

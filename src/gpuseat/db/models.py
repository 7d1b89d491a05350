"""The course database schema (SQLAlchemy 2): roster, samples, one-minute aggregates, alerts.

Rows that grow with time (``samples``, ``minute_aggregates``) hold only small integers and
foreign keys, so a 15-day, 16-seat course stays a few tens of MB. The migration in
``migrations/versions`` creates exactly these tables; a test compares the two.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Declarative base with fixed constraint names (so migrations are stable across engines)."""

    metadata = MetaData(naming_convention=NAMING)


class Participant(Base):
    """A course participant; ``key`` is the id used in seat files and the portal."""

    __tablename__ = "participants"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(128), unique=True)
    name: Mapped[str | None] = mapped_column(String(256))
    unix_user: Mapped[str | None] = mapped_column(String(64))
    email: Mapped[str | None] = mapped_column(String(256))


class Seat(Base):
    """A seat: one GPU or MIG instance (by UUID) on a host, with its partition profile."""

    __tablename__ = "seats"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(128), unique=True)
    host: Mapped[str | None] = mapped_column(String(256))
    device_uuid: Mapped[str] = mapped_column(String(96), unique=True)
    profile: Mapped[str | None] = mapped_column(String(64))


class Assignment(Base):
    """Seat ↔ participant from ``valid_from`` until ``valid_to`` (None = still assigned)."""

    __tablename__ = "assignments"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    seat_id: Mapped[int] = mapped_column(ForeignKey("seats.id", ondelete="CASCADE"), index=True)
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id", ondelete="CASCADE"), index=True)
    valid_from: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    valid_to: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Device(Base):
    """A device the monitor has seen (GPU or MIG instance), so samples store a small integer."""

    __tablename__ = "devices"
    __table_args__ = (UniqueConstraint("host", "uuid", name="uq_devices_host_uuid"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host: Mapped[str] = mapped_column(String(256))
    uuid: Mapped[str] = mapped_column(String(96))
    name: Mapped[str | None] = mapped_column(String(256))
    parent_uuid: Mapped[str | None] = mapped_column(String(96))
    profile: Mapped[str | None] = mapped_column(String(64))


class Sample(Base):
    """One raw reading of one device (kept for the last hour, then rolled up)."""

    __tablename__ = "samples"
    __table_args__ = (
        Index("ix_samples_ts", "ts"),
        Index("ux_samples_device_id_ts", "device_id", "ts", unique=True),  # one sample per device and second
    )
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    ts: Mapped[int] = mapped_column(Integer)  # Unix seconds
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id", ondelete="CASCADE"))
    seat_id: Mapped[int | None] = mapped_column(ForeignKey("seats.id", ondelete="SET NULL"))
    participant_id: Mapped[int | None] = mapped_column(ForeignKey("participants.id", ondelete="SET NULL"))
    memory_used_mib: Mapped[int | None] = mapped_column(Integer)
    memory_total_mib: Mapped[int | None] = mapped_column(Integer)
    utilization_gpu: Mapped[int | None] = mapped_column(SmallInteger)
    power_w: Mapped[float | None] = mapped_column(Float)
    temperature_c: Mapped[int | None] = mapped_column(SmallInteger)
    processes: Mapped[int] = mapped_column(SmallInteger)
    foreign_processes: Mapped[int] = mapped_column(SmallInteger)
    active: Mapped[bool] = mapped_column(Boolean)


class MinuteAggregate(Base):
    """One device over one minute: how many samples, how many in use, memory peak and mean."""

    __tablename__ = "minute_aggregates"
    minute: Mapped[int] = mapped_column(Integer, primary_key=True)  # Unix seconds // 60
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id", ondelete="CASCADE"), primary_key=True)
    seat_id: Mapped[int | None] = mapped_column(ForeignKey("seats.id", ondelete="SET NULL"))
    participant_id: Mapped[int | None] = mapped_column(ForeignKey("participants.id", ondelete="SET NULL"))
    samples: Mapped[int] = mapped_column(SmallInteger)
    active_samples: Mapped[int] = mapped_column(SmallInteger)
    memory_max_mib: Mapped[int | None] = mapped_column(Integer)
    memory_avg_mib: Mapped[int | None] = mapped_column(Integer)
    utilization_avg: Mapped[int | None] = mapped_column(SmallInteger)


class AlertRecord(Base):
    """An alert as raised (and when it cleared)."""

    __tablename__ = "alerts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    key: Mapped[str] = mapped_column(String(256))
    seat: Mapped[str | None] = mapped_column(String(128))
    participant: Mapped[str | None] = mapped_column(String(128))
    message: Mapped[str] = mapped_column(Text)
    raised_at: Mapped[float] = mapped_column(Float)
    cleared_at: Mapped[float | None] = mapped_column(Float)

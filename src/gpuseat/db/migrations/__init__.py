"""Alembic migrations of the course database, shipped in the package and run programmatically."""

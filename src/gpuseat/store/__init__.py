"""The course store: the one package that owns every query and every write of the course database.

Only ``gpuseat.store`` and ``gpuseat.db`` (models, migrations, connection) speak SQL; services, the
CLI, the portal, the monitor and the hub hooks call the facade here.
"""

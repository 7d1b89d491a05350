"""The service layer: one module per job (planning, carving, courses, monitoring, …).

The CLI, the portal and the JupyterHub hooks call these functions and nothing below them; services
take a :class:`gpuseat.catalog.bundle.Catalog` value and database URLs as arguments and return result
types with one ``to_dict()`` each.
"""

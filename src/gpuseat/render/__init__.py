"""Renderers: one module per engine behind the interface in :mod:`gpuseat.render.base`."""

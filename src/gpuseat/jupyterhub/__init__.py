"""GPU seats through JupyterHub: hooks for ``jupyterhub_config.py``, its generator, and a GPU-aware culler.

In a hub's config (``gpuseat jupyterhub config`` writes this for you)::

    from gpuseat.jupyterhub import HubSettings, SeatHooks
    gpuseat = SeatHooks(HubSettings(course="ml-2026", db_url="postgresql+psycopg://…", mode="pool"))
    c.Spawner.pre_spawn_hook = gpuseat.pre_spawn_hook
    c.Spawner.post_stop_hook = gpuseat.post_stop_hook
"""

from __future__ import annotations

from gpuseat.jupyterhub.config import HubSettings, render
from gpuseat.jupyterhub.hooks import SeatHooks

__all__ = ["HubSettings", "SeatHooks", "render"]

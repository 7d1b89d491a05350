"""Slurm as a seat engine: config generation (pure, :mod:`.config`) and the command adapter (:mod:`.engine`).

Debian 12 ships Slurm 22.05, whose reservations cannot hold GPUs; see ``docs/slurm.md`` for how
gpuseat binds GPUs to cores and reserves the cores instead.
"""

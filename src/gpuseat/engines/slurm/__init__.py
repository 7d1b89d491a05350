"""The Slurm engine: config generation (pure, :mod:`.config`), the command adapter through the Runner
(:mod:`.adapter`), a course as Slurm sees it (:mod:`.course`) and the engine (:mod:`.engine`).

Debian 12 ships Slurm 22.05, whose reservations cannot hold GPUs; see ``docs/slurm.md`` for how
gpuseat binds GPUs to cores and reserves the cores instead.
"""

"""Seat engines: each delivers seats on its kind of machine through one interface (plan, apply,
observe, check, connect: :mod:`gpuseat.engines.base`), found through one registry
(:mod:`gpuseat.engines.registry`), running every external command through one Runner
(:mod:`gpuseat.engines.runner`). :mod:`gpuseat.engines.apply` carries the store to the machines once;
:mod:`gpuseat.engines.agent` keeps doing it. One sub-package per engine: ``host``, ``libvirt``,
``jupyterhub``, ``slurm``, ``skypilot``, ``kubernetes``.
"""

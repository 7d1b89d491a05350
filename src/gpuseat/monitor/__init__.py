"""Seat monitoring: samplers (NVML, nvidia-smi XML/CSV/SSH, replay) → attribution → alerts, store, metrics.

Data flows one way: a sampler yields a :class:`~gpuseat.readings.Snapshot`;
:mod:`~gpuseat.monitor.attribution` ties processes to users, seats and participants;
:mod:`~gpuseat.monitor.runner` feeds alerts, the course database (:mod:`gpuseat.db`) and the
Prometheus collector. Only :mod:`~gpuseat.monitor.nvml` imports ``pynvml``.
"""

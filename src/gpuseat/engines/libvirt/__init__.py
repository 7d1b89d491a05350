"""Seats as virtual machines through libvirt: one domain per seat, a qcow2 overlay and a NoCloud seed.

:mod:`.names` checks every name that reaches XML, a file name or a guest, :mod:`.seed` builds the
cloud-init seed (pure), :mod:`.libvirt_host` is the only module that talks to libvirt. The service
(:mod:`gpuseat.services.vms`) ties them to the course store and the doctor.
"""

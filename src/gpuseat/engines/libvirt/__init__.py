"""The libvirt engine: one VM per seat, its login made by a cloud-init seed.

:mod:`.engine` plans and applies (the engine interface), :mod:`.machine` says what a seat's VM is
made of and makes it, :mod:`.libvirt_host` is the only module that talks to libvirt, :mod:`.names`
checks every name that reaches XML, a file name or a guest, :mod:`.seed` builds the cloud-init seed
and :mod:`.domain` reads a domain's owner and drift back from libvirt's XML (both pure).
"""

"""gpuseat: one GPU seat per course participant, at the lowest cost, known to work.

The library API lives in the submodules (``gpuseat.catalog``, ``gpuseat.core``, ...); the CLI in
``gpuseat.cli`` is a thin layer over it.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]

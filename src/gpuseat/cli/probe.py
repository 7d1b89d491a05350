"""CLI for ``gpuseat probe``: write one bundle of what the driver says (see :mod:`gpuseat.services.probe`)."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add ``gpuseat probe``."""

    @app.command("probe")
    def probe_command(
        out: Path = typer.Argument(..., metavar="OUT", help="New folder, or OUT.tar.gz, for the bundle."),
        root: Path = typer.Option(Path("/"), "--root", help="Read DIR/sys, DIR/proc instead of / (tests)."),
        nvidia_smi: str = typer.Option("nvidia-smi", "--nvidia-smi", help="The nvidia-smi to run."),
        no_doctor: bool = typer.Option(False, "--no-doctor", help="Leave out the doctor's /proc and /sys capture."),
    ) -> None:
        """Record nvidia-smi -q -x/-L, mig -lgip/-lgipp/-lgi/-lci, vgpu -s -v/-c and the vGPU sysfs layout."""
        from gpuseat.services.probe import write_bundle

        manifest = write_bundle(out, root=root, nvidia_smi=nvidia_smi, doctor=not no_doctor)
        failed = [f"{n} (exit {c['exit']})" for n, c in manifest["commands"].items() if c["exit"] != 0]
        print(f"{out}: driver {manifest['driver_version'] or 'unknown'}, vGPU layout {manifest['vgpu_layout']}")
        if failed:
            print("not recorded (the command failed: no MIG or no vGPU manager is normal): " + ", ".join(failed))
        print(f"Next: gpuseat carve --from-probe {out}  (or doctor / top / monitor --from-probe {out})")

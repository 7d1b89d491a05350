"""The SkyPilot engine: cloud seats launched, stopped and autostopped through SkyPilot's Python API
(:mod:`.engine`), their tasks and schedule (:mod:`.tasks`), and the SDK boundary (:mod:`.sdk`)."""

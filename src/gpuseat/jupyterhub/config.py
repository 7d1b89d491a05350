"""What a hub needs to know about gpuseat, and the ``jupyterhub_config.py`` that wires it.

:class:`HubSettings` is checked once (by the CLI and again when the hub loads the file); :func:`render`
writes every value with ``repr``, so a course key, a contact line or a database URL can never become
Python code in the hub's config.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpuseat import __version__
from gpuseat.core.seating import COURSE_KEY_PATTERN, ClaimMode
from gpuseat.errors import InputError

SpawnerName = Literal["local", "systemd", "docker", "kubernetes"]
MatchBy = Literal["key", "email", "unix_user"]
MigStrategy = Literal["mixed", "single"]

SPAWNER_CLASSES: dict[str, str] = {
    "local": "jupyterhub.spawner.LocalProcessSpawner",
    "systemd": "systemdspawner.SystemdSpawner",
    "docker": "dockerspawner.DockerSpawner",
    "kubernetes": "kubespawner.KubeSpawner",
}
CULL_SERVICE = "gpuseat-cull"
# Exactly what the culler does: list users, read their servers (started, ready), stop a server.
CULL_SCOPES: tuple[str, ...] = ("list:users", "read:servers", "delete:servers")
ENGINE_SERVICE = "gpuseat-engine"
# What the engine does (gpuseat apply / agent --engine jupyterhub): list users and their servers, stop servers,
# create accounts, and issue the probe's short-lived token owned by the participant (a token carries only
# what its issuer holds, hence access:servers).
ENGINE_SCOPES: tuple[str, ...] = (
    "list:users",
    "read:users",
    "admin:users",
    "admin:servers",
    "tokens",
    "access:servers",
)
MAX_IDLE_HOURS = 24.0 * 366


class HubSettings(BaseModel):
    """How the hooks find a user's seat and what the culler does."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    course: str = Field(description="the course key in the gpuseat store")
    db_url: str = Field(min_length=1, description="the gpuseat database URL")
    mode: ClaimMode = Field("assigned", description="assigned: the user's own seat; pool: the first free one")
    match_by: MatchBy = Field("key", description="which participant field equals the JupyterHub user name")
    contact: str = Field("the course organizer", min_length=1, max_length=300, description="whom to ask")
    mig_strategy: MigStrategy = "mixed"
    sessions_only: bool = Field(False, description="refuse starts outside the course's lab sessions")
    session_lead_min: int = Field(10, ge=0, le=240, description="minutes before a session when starts open")
    cull_idle_hours: float = Field(
        2.0, ge=0, le=MAX_IDLE_HOURS, allow_inf_nan=False, description="0 turns the culler off"
    )
    cull_every_s: int = Field(300, ge=1, le=86_400)

    @field_validator("course")
    @classmethod
    def _course_key(cls, value: str) -> str:
        if not COURSE_KEY_PATTERN.fullmatch(value):
            raise ValueError("a course key is lowercase letters, digits and '-' (at most 63)")
        return value

    @field_validator("contact")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if any(ch in value for ch in "\r\n\x00"):
            raise ValueError("must be one line")
        return value


def cull_command(settings: HubSettings) -> list[str]:
    """The culler's argument list after the Python executable (``python -m gpuseat …``)."""
    return [
        "-m",
        "gpuseat",
        "jupyterhub",
        "cull",
        "--course",
        settings.course,
        "--idle-hours",
        repr(settings.cull_idle_hours),
        "--every",
        str(settings.cull_every_s),
    ]


def render(
    settings: HubSettings,
    spawner: SpawnerName = "local",
    *,
    set_spawner_class: bool = True,
    engine_token_file: str | None = None,
) -> str:
    """A complete ``jupyterhub_config.py``: hooks, spawner class, culler service and its role, and with
    ``engine_token_file`` the engine's service (its token read from that file when the hub starts).

    ``set_spawner_class=False`` leaves the hub's own spawner class alone (TLJH's user-creating
    SystemdSpawner, z2jh's KubeSpawner); the hooks recognise the family by class anyway.
    """
    if engine_token_file is not None and (
        not engine_token_file.startswith("/") or any(ord(ch) < 32 or ch == "\x7f" for ch in engine_token_file)
    ):
        # the path is also named in a comment line: a line break there would start a line of hub code
        raise InputError(
            f"{engine_token_file!r} is not an absolute path on one line",
            where="engine_token_file",
            fix="the absolute path of the engine service's token file, e.g. /etc/gpuseat/hub-token",
        )
    fields = settings.model_dump()
    db_url = fields.pop("db_url")
    args = "".join(f"    {name}={value!r},\n" for name, value in fields.items())
    lines = [
        f"# jupyterhub_config.py written by `gpuseat jupyterhub config --spawner {spawner}` (gpuseat {__version__}).",
        "# Each server gets its participant's GPU seat from the gpuseat course store; a user without a usable",
        "# seat gets an HTTP 503 saying why and whom to ask. Add your authenticator and site settings below.",
        "import os",
        "import sys",
        "",
        "from gpuseat.jupyterhub import HubSettings, SeatHooks",
        "",
        "# JupyterHub's config loader defines c; so do load_subconfig and Zero to JupyterHub's hub.extraConfig,",
        "# where get_config is z2jh's get_config(key, default) and calling it without a key would fail.",
        'if "c" not in globals():',
        "    c = get_config()  # noqa: F821 (JupyterHub provides get_config)",
        "",
        "# The database URL: GPUSEAT_DB_URL in the hub's environment wins (keep passwords out of this file).",
        f"GPUSEAT_DB_URL = os.environ.get('GPUSEAT_DB_URL', {db_url!r})",
        "gpuseat = SeatHooks(HubSettings(",
        args + "    db_url=GPUSEAT_DB_URL,",
        "))",
        f"c.JupyterHub.spawner_class = {SPAWNER_CLASSES[spawner]!r}"
        if set_spawner_class
        else f"# the hub's own spawner class is kept (gpuseat treats it as {spawner})",
        "c.Spawner.pre_spawn_hook = gpuseat.pre_spawn_hook",
        "c.Spawner.post_stop_hook = gpuseat.post_stop_hook",
        "# A refusal is an HTTP 503; JupyterHub counts it as a failed spawn, and a few in a row must not stop the hub.",
        "c.Spawner.consecutive_failure_limit = 0",
    ]
    if spawner == "systemd":
        lines += [
            "# isolate_devices=True would hide /dev/nvidia* from every server (systemdspawner#67).",
            "c.SystemdSpawner.isolate_devices = False",
        ]
    if settings.cull_idle_hours > 0:
        service = {
            "name": CULL_SERVICE,
            "command": "[sys.executable, *" + repr(cull_command(settings)) + "]",
            "environment": "{'GPUSEAT_DB_URL': GPUSEAT_DB_URL}",
        }
        role = {"name": CULL_SERVICE, "scopes": list(CULL_SCOPES), "services": [CULL_SERVICE]}
        lines += [
            "",
            f"# GPU-aware culling: stop servers whose seat had no GPU compute for {settings.cull_idle_hours:g} h.",
            "c.JupyterHub.services.append(",
            "    {",
            f"        'name': {service['name']!r},",
            f"        'command': {service['command']},",
            f"        'environment': {service['environment']},",
            "    }",
            ")",
            "# Its token may list users, read their servers and stop them: nothing else.",
            f"c.JupyterHub.load_roles.append({role!r})",
        ]
    if engine_token_file:
        role = {"name": ENGINE_SERVICE, "scopes": list(ENGINE_SCOPES), "services": [ENGINE_SERVICE]}
        lines += [
            "",
            "# The gpuseat engine (gpuseat apply / gpuseat agent --engine jupyterhub) stops the servers of people who",
            "# no longer hold a seat. Its token is read from a file only root reads (the engine reads the same file:",
            f"# gpuseat engines settings jupyterhub token_file={engine_token_file}).",
            f"with open({engine_token_file!r}, encoding='utf-8') as _token:",
            f"    c.JupyterHub.services.append({{'name': {ENGINE_SERVICE!r}, 'api_token': _token.read().strip()}})",
            f"c.JupyterHub.load_roles.append({role!r})",
        ]
    return "\n".join(lines) + "\n"

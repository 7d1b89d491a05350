"""The catalog as one immutable value: loaded once, then passed into plan, carve, render and doctor.

``load_catalog()`` reads the bundled TOML/CSV files; ``load_catalog(overlay=DIR)`` lays a user's folder
of files with the same names and shapes on top (``gpus.toml``, ``offers.toml``, ``licences.toml``,
``providers.toml``, ``mig_profiles.toml``, ``vgpu_profiles.toml``, ``sharing.toml``, ``doctor.toml``):
a row whose key matches a bundled row replaces it, any other row is added. Core and render code never
call loaders themselves, so the same inputs give the same answer on every machine.

The bundled catalog is validated once per content and kept, pickled, in the user's cache folder
(:func:`bundled_catalog`): parsing its 160 KB of TOML and validating every row was about a third of
``gpuseat plan``'s own start-up (issue 39). A user's overlay is parsed and validated on every run.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import stat
import sys
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pydantic
from pydantic import ValidationError

from gpuseat import __version__, paths
from gpuseat.catalog import GpuModel, ReferenceResult, _norm, parse_references
from gpuseat.catalog.doctor import DoctorCatalog, build_doctor
from gpuseat.catalog.licences import Licence, build_licences
from gpuseat.catalog.offers import Offer, OffersFile, ProviderRules
from gpuseat.catalog.partitions import PartitionCatalog, build_partitions
from gpuseat.catalog.rules import Rule, RuleError, build_rules
from gpuseat.errors import GpuseatError, InputError, did_you_mean

# file name → {array-of-tables name: the fields that identify a row}
_KEYS: dict[str, dict[str, tuple[str, ...]]] = {
    "gpus.toml": {"gpu": ("id",)},
    "offers.toml": {"offer": ("id",)},
    "licences.toml": {"licence": ("id",)},
    "providers.toml": {"provider": ("name",)},
    "rules.toml": {"rule": ("id",)},
    "mig_profiles.toml": {"gpu": ("gpu",), "profile": ("gpu", "name")},
    "vgpu_profiles.toml": {"gpu": ("gpu",), "profile": ("gpu", "name"), "board": ("prefix",)},
    "sharing.toml": {"mode": ("mode",)},
    "doctor.toml": {"pci": ("device",), "mig_min": ("gpu",), "pci_class": ("code",)},
}
#: every bundled file a catalog is built from; the cache key covers each one's bytes
BUNDLE_FILES = (*_KEYS, "bench_reference.csv")
#: the cached bundled catalog in the cache folder: a key line, then the pickle
CACHE_NAME = "catalog.pickle"


@dataclass(frozen=True)
class Catalog:
    """Everything gpuseat knows about GPUs, offers, partitioning, licences and hosts, as one value."""

    gpus: Mapping[str, GpuModel]
    offers: tuple[Offer, ...]
    providers: Mapping[str, ProviderRules]
    partitions: PartitionCatalog
    licences: Mapping[str, Licence]
    doctor: DoctorCatalog
    references: tuple[ReferenceResult, ...]
    overlay: str | None = None
    _index: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    rules: Mapping[str, Rule] = field(default_factory=dict)

    def offer_context(self) -> dict[str, Any]:
        """What validating an offer against this catalog needs: GPU lookup, billing rules, provider defaults."""
        return {
            "find_gpu": self.find_gpu,
            "gpu_names": list(self.gpus),
            "rules": self.rules,
            "provider_rules": {name: (p.rules, p.type_rules) for name, p in self.providers.items()},
        }

    def offer_rules(self, offer: Offer) -> tuple[Rule, ...]:
        """The rule rows an offer is billed under (unknown ids were refused when it was loaded)."""
        return tuple(self.rules[r] for r in offer.rules if r in self.rules)

    def find_gpu(self, name: str) -> GpuModel | None:
        """The model whose id, name or alias matches ``name`` (case, spaces, dashes ignored), or None."""
        key = _norm(name)
        model_id = self._index.get(key)
        if model_id is None and key.startswith("nvidia"):
            model_id = self._index.get(key[len("nvidia") :])
        return self.gpus[model_id] if model_id else None

    def resolve_gpu(self, name: str, *, where: str = "GPU model") -> GpuModel:
        """Like :meth:`find_gpu`, but an unknown name is an input error with a suggestion."""
        model = self.find_gpu(name)
        if model is None:
            from gpuseat.errors import UnknownGpu

            raise UnknownGpu(
                f"unknown GPU model '{name}'.{did_you_mean(name, self.gpus)}",
                where=where,
                fix=f"use one of: {', '.join(self.gpus)}, or add it in a --catalog folder's gpus.toml",
            )
        return model

    def __reduce__(self) -> tuple[Callable[[dict[str, Any]], Catalog], tuple[dict[str, Any]]]:
        """Pickled for the cache with its read-only mappings as plain dicts (a mappingproxy does not pickle)."""
        return _thaw, ({f.name: _plain(getattr(self, f.name)) for f in fields(self)},)


def _plain(value: Any) -> Any:
    return dict(value) if isinstance(value, MappingProxyType) else value


def _thaw(values: dict[str, Any]) -> Catalog:
    """A catalog back from its pickled fields, every mapping read-only again."""
    thawed: dict[str, Any] = {k: MappingProxyType(v) if isinstance(v, dict) else v for k, v in values.items()}
    return Catalog(**thawed)


def _merge(base: dict[str, Any], extra: dict[str, Any], keys: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    """Rows of ``extra`` replace rows of ``base`` with the same key; other rows are appended."""
    out = dict(base)
    for table, value in extra.items():
        if table not in keys:
            out[table] = value
            continue
        fields = keys[table]
        rows: dict[tuple[Any, ...], Any] = {tuple(r.get(f) for f in fields): r for r in base.get(table, [])}
        for row in value if isinstance(value, list) else []:
            # a row that is not a table keeps its own slot; validation then names it
            rows[tuple(row.get(f) for f in fields) if isinstance(row, dict) else (id(row),)] = row
        out[table] = list(rows.values())
    return out


def _raw(name: str, texts: Mapping[str, str], overlay: Path | None) -> tuple[dict[str, Any], str]:
    raw = tomllib.loads(texts[name])
    if overlay is None or not (overlay / name).exists():
        return raw, f"bundled {name}"
    from gpuseat.files import read_toml

    return _merge(raw, read_toml(overlay / name), _KEYS[name]), str(overlay / name)


def _build(where: str, make: Callable[[], Any]) -> Any:
    from gpuseat.files import field_path

    try:
        return make()
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(
            f"field '{field_path(tuple(err['loc']))}': {err['msg']}",
            where=where,
            fix="correct that row (same shape as the bundled file of this name)",
        ) from None
    except RuleError as exc:
        raise InputError(str(exc), where=where, fix="correct that rule row (see gpuseat.catalog.rules)") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"malformed catalog data: {exc}", where=where, fix="use the bundled file's shape") from None


def load_catalog(overlay: Path | str | None = None) -> Catalog:
    """The bundled catalog, with ``overlay`` (a folder of TOML files of the same names) laid on top."""
    if overlay is None:
        return bundled_catalog()
    folder = Path(overlay)
    if not folder.is_dir():
        raise InputError("not a folder", where=f"--catalog {folder}", fix="give a folder holding gpus.toml, …")
    names = sorted(p.name for p in folder.glob("*.toml"))
    strays = [n for n in names if n not in _KEYS]  # a misspelt file was left out unsaid, the bundled one used
    if strays or not names:
        what = f"{strays[0]!r} is not a catalog file" if strays else "no catalog file (*.toml) in it"
        raise InputError(
            f"{what}.{did_you_mean(strays[0], list(_KEYS)) if strays else ''}",
            where=f"--catalog {folder}",
            fix=f"name each file as the bundled one it changes: {', '.join(_KEYS)}",
        )
    blobs = _read_bundle(_bundled_data())
    return _validate({name: blob.decode("utf-8") for name, blob in blobs.items()}, folder)


def _bundled_data() -> Traversable:
    return resources.files("gpuseat.catalog").joinpath("data")


def _read_bundle(data: Traversable) -> dict[str, bytes]:
    return {name: data.joinpath(name).read_bytes() for name in BUNDLE_FILES}


def bundled_catalog(data: Traversable | None = None, cache_dir: Path | None = None) -> Catalog:
    """The catalog of the bundled files (``data``: the package's own by default), validated on the first
    run and then read back from ``cache_dir/catalog.pickle`` while the files, gpuseat, Python and Pydantic
    are the same (the key hashes all of them, so an edited file is never answered from a stale cache)."""
    blobs = _read_bundle(data if data is not None else _bundled_data())
    key = cache_key(blobs)
    path = (cache_dir if cache_dir is not None else paths.cache_dir()) / CACHE_NAME
    cached = _read_cache(path, key)
    if cached is not None:
        return cached
    catalog = _validate({name: blob.decode("utf-8") for name, blob in blobs.items()}, None)
    _write_cache(path, key, catalog)
    return catalog


def cache_key(blobs: Mapping[str, bytes]) -> str:
    """What a cached catalog was built from: the bundled files' bytes, the catalog code (its classes and
    validators are in the pickle), and the versions of gpuseat, Python and Pydantic."""
    digest = hashlib.sha256(f"{__version__}\0{sys.version}\0{pydantic.VERSION}\0".encode())
    code = resources.files("gpuseat.catalog")
    sources = {f"{entry.name}": entry.read_bytes() for entry in code.iterdir() if entry.name.endswith(".py")}
    for name, blob in [*sorted(blobs.items()), *sorted(sources.items())]:
        digest.update(f"{name}\0{len(blob)}\0".encode())
        digest.update(blob)
    return digest.hexdigest()


def _read_cache(path: Path, key: str) -> Catalog | None:
    """The cached catalog when the file is this user's own, writable by nobody else, and made under
    ``key``; else None (a missing, foreign, stale or damaged cache only costs a rebuild)."""
    try:
        with open(path, "rb") as handle:
            st = os.fstat(handle.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
                return None
            if handle.readline() != f"{key}\n".encode():
                return None
            catalog = pickle.load(handle)
    except Exception:  # unpickling a damaged file raises almost anything: a miss
        return None
    return catalog if isinstance(catalog, Catalog) else None


def _write_cache(path: Path, key: str, catalog: Catalog) -> None:
    """Keep the validated catalog for the next run; a cache folder that cannot be written is no error."""
    from gpuseat.files import write_file

    blob = f"{key}\n".encode() + pickle.dumps(catalog, protocol=pickle.HIGHEST_PROTOCOL)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_file(path, blob, mode=0o600)
    except (OSError, GpuseatError):
        pass


def _validate(texts: Mapping[str, str], folder: Path | None) -> Catalog:
    """Parse and validate the bundled ``texts`` with the ``folder`` overlay's files laid on top."""
    gpus_raw, where = _raw("gpus.toml", texts, folder)
    gpus: dict[str, GpuModel] = _build(
        where, lambda: {g["id"]: GpuModel.model_validate(g) for g in gpus_raw.get("gpu", [])}
    )
    index: dict[str, str] = {}
    for model in gpus.values():
        for key in (model.id, model.name, *model.aliases):
            index[_norm(key)] = model.id
    rules_raw, where = _raw("rules.toml", texts, folder)
    rules: dict[str, Rule] = _build(where, lambda: build_rules(rules_raw))
    prov_raw, where = _raw("providers.toml", texts, folder)
    providers = _build(where, lambda: {p["name"]: ProviderRules.model_validate(p) for p in prov_raw["provider"]})
    for name, prov in providers.items():
        missing = [r for r in prov.rules if r not in rules]
        if missing:
            raise InputError(
                f"provider '{name}': unknown billing rule '{missing[0]}'", where=where, fix="use an id from rules.toml"
            )
    probe = Catalog(gpus, (), providers, None, {}, None, (), _index=index, rules=rules)  # type: ignore[arg-type]

    offers_raw, where = _raw("offers.toml", texts, folder)
    offers = _build(where, lambda: OffersFile.model_validate(offers_raw, context=probe.offer_context()).offer)
    lic_raw, where = _raw("licences.toml", texts, folder)
    licences = _build(where, lambda: build_licences(lic_raw))
    mig, w1 = _raw("mig_profiles.toml", texts, folder)
    vgpu, w2 = _raw("vgpu_profiles.toml", texts, folder)
    sharing, w3 = _raw("sharing.toml", texts, folder)
    partitions = _build(f"{w1}, {w2}, {w3}", lambda: build_partitions(mig, vgpu, sharing))
    doc_raw, where = _raw("doctor.toml", texts, folder)
    doctor = _build(where, lambda: build_doctor(doc_raw, gpus))
    return Catalog(
        gpus=MappingProxyType(gpus),
        offers=tuple(offers),
        providers=MappingProxyType(providers),
        partitions=partitions,
        licences=MappingProxyType(licences),
        doctor=doctor,
        references=parse_references(texts["bench_reference.csv"]),
        overlay=str(folder) if folder else None,
        _index=MappingProxyType(index),
        rules=MappingProxyType(rules),
    )

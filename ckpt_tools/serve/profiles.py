"""Typed views over the serving knowledge in rules/: a runtime profile's CLI table and serving facts, the hardware
profile's limits, model-family serving entries and drafter pairings.

Code here only reads data (rules/README.md documents every key); it never hard-codes a flag, a value or a limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any

from ..knowledge import Hardware, Runtime, hardware, load_toml, runtime, runtime_ids


@dataclass(frozen=True)
class FlagInfo:
    """One option of the runtime's CLI: canonical name, how it takes a value, and what the value must be."""

    name: str
    arity: str  # "value", "boolean" (also --no-<name>), "switch" (store_true), "optional_value"
    spec: Mapping[str, Any]  # [flags."--x"] table, may be empty
    choices: tuple[str, ...] | None

    @property
    def type(self) -> str:
        return str(self.spec.get("type", "choice" if self.choices is not None else "str"))

    def normalize(self, value: str) -> str:
        how = self.spec.get("normalize")
        if how == "lower-dash":
            return value.lower().replace("-", "_")
        if how == "upper":
            return value.upper()
        return value


@dataclass(frozen=True)
class ServeRuntime:
    """A runtime profile seen from the serving side."""

    profile: Runtime

    @property
    def id(self) -> str:
        return self.profile.id

    @property
    def name(self) -> str:
        return self.profile.name

    @property
    def data(self) -> Mapping[str, Any]:
        return self.profile.data

    @property
    def serve(self) -> Mapping[str, Any]:
        return self.data.get("serve", {})

    @property
    def behaviour(self) -> Mapping[str, Any]:
        return self.serve.get("behaviour", {})

    @property
    def image(self) -> str:
        return str(self.serve["image"])

    @property
    def hardware_ids(self) -> tuple[str, ...]:
        """Hardware the runtime runs on; empty means any profile in rules/hardware.toml."""
        return tuple(self.serve.get("hardware", ()))

    @property
    def dflash(self) -> Mapping[str, Any]:
        return self.data.get("speculative", {}).get("dflash", {})

    def choices(self, key: str) -> tuple[str, ...]:
        base = list(self.data.get("choices", {}).get(key, []))
        base += self.data.get("choices_extra", {}).get(key, [])
        return tuple(base)

    @cached_property
    def flags(self) -> Mapping[str, FlagInfo]:
        cli = self.data.get("cli", {})
        specs = self.data.get("flags", {})
        out: dict[str, FlagInfo] = {}
        for arity in ("value", "boolean", "switch", "optional_value"):
            for name in cli.get(arity, []):
                spec = specs.get(name, {})
                key = spec.get("choices")
                choices = None
                if isinstance(key, str):
                    choices = self.choices(key) + tuple(spec.get("also", ()))
                out[name] = FlagInfo(name, arity, spec, choices)
        return out

    @cached_property
    def aliases(self) -> Mapping[str, str]:
        return dict(self.data.get("cli", {}).get("aliases", {}))

    def lookup(self, spelled: str) -> tuple[FlagInfo | None, bool]:
        """(flag, negated) for an option as typed; underscores become dashes like FlexibleArgumentParser does."""
        name = spelled
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        name = self.aliases.get(name, name)
        if name in self.flags:
            return self.flags[name], False
        if name.startswith("--no-"):
            positive = "--" + name[5:]
            info = self.flags.get(positive)
            if info is not None and info.arity == "boolean":
                return info, True
        return None, False

    @property
    def env_known(self) -> frozenset[str]:
        env = self.data.get("env", {})
        return frozenset(env.get("known", ())) | frozenset(env.get("extra_known", ()))

    @property
    def env_removed(self) -> Mapping[str, Mapping[str, Any]]:
        return {e["name"]: e for e in self.data.get("env", {}).get("removed", [])}

    @property
    def env_traps(self) -> tuple[Mapping[str, Any], ...]:
        return tuple(self.data.get("env", {}).get("trap", ()))

    def source_of(self, flag: str) -> str:
        spec = self.data.get("flags", {}).get(flag, {})
        return f"rules/runtimes ({self.id}): {spec.get('source') or self.data.get('cli', {}).get('source', '')}"


def serve_runtime(profile_id: str | None) -> ServeRuntime:
    return ServeRuntime(runtime(profile_id) if profile_id else runtime())


def runtime_for_image(image: str) -> ServeRuntime | None:
    """The profile whose image reference matches a `docker run` image (same repository and tag)."""
    for rid in runtime_ids():
        rt = serve_runtime(rid)
        if "image" in rt.serve and rt.image == image:
            return rt
    return None


# ---- hardware ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServeHardware:
    profile: Hardware

    @property
    def id(self) -> str:
        return self.profile.id

    def get(self, key: str) -> Any:
        return self.profile.data.get(key)

    @property
    def source(self) -> str:
        return f"rules/hardware.toml ({self.id}): {self.get('serving_source') or self.get('source')}"

    @property
    def env_traps(self) -> tuple[Mapping[str, Any], ...]:
        return tuple(self.get("env_trap") or ())


def serve_hardware(profile_id: str | None) -> ServeHardware | None:
    return ServeHardware(hardware(profile_id)) if profile_id else None


# ---- families, pairings, drafters (rules/serving.toml) --------------------------------------------------------


@cache
def _serving() -> Mapping[str, Any]:
    return load_toml("serving.toml")


def serving_family(architecture: str | None, model_type: str | None) -> Mapping[str, Any] | None:
    fams = _serving()["family"]
    for fam in fams:
        if architecture and architecture in fam.get("architectures", []):
            return fam
    for fam in fams:
        if model_type and model_type in fam.get("model_types", []):
            return fam
    return None


def pairing(architecture: str | None, method: str) -> Mapping[str, Any] | None:
    for p in _serving().get("pairing", []):
        if p["method"] == method and architecture in p.get("architectures", []):
            return p
    return None


def drafter_kinds() -> tuple[Mapping[str, Any], ...]:
    return tuple(_serving().get("drafter", ()))


def docker_value_options() -> frozenset[str]:
    return frozenset(_serving()["docker"]["value_options"])


def require_hardware_fits(rt: ServeRuntime, hw: ServeHardware | None) -> str | None:
    """Why the runtime cannot run on the hardware, or None."""
    if hw is None or not rt.hardware_ids or hw.id in rt.hardware_ids:
        return None
    return (
        f"{rt.name} is built for {', '.join(rt.hardware_ids)} only, not {hw.id}: its CUDA kernels are compiled "
        f"for those GPUs alone, so on {hw.id} vLLM stops at the first kernel launch ('no kernel image is available "
        f"for execution on the device')"
    )

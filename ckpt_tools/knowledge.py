"""Load the knowledge kept as data in `rules/` (runtime profiles, hardware profiles, architecture families).

Code applies this data; it never hard-codes a runtime's accepted values. The folder ships inside the wheel as
`ckpt_tools/_rules` and is read from the source tree's `rules/` in a checkout. Schemas: rules/README.md.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from .errors import UsageError

DEFAULT_RUNTIME = "vllm-0.33"


def rules_dir() -> Path:
    packaged = Path(__file__).with_name("_rules")
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "rules"


@cache
def load_toml(relative: str) -> Mapping[str, Any]:
    path = rules_dir() / relative
    with open(path, "rb") as fh:
        return tomllib.load(fh)


# ---- runtime profiles ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Runtime:
    id: str
    name: str
    data: Mapping[str, Any]

    @property
    def quant(self) -> Mapping[str, Any]:
        return self.data.get("quantization", {})

    @property
    def modelopt_algos(self) -> Mapping[str, str]:
        return self.quant.get("modelopt_algos", {})

    @property
    def modelopt_nested_algos(self) -> Mapping[str, str]:
        return self.quant.get("modelopt_nested_algos", {})

    @property
    def modelopt(self) -> Mapping[str, Any]:
        return self.quant.get("modelopt", {})

    @property
    def source(self) -> str:
        return str(self.data.get("source", ""))

    @property
    def architectures(self) -> frozenset[str] | None:
        """Architectures the runtime serves natively, or None when the profile does not list them."""
        table = self.data.get("architectures")
        return frozenset(table["supported"]) if isinstance(table, dict) and "supported" in table else None

    @property
    def previously_supported(self) -> Mapping[str, str]:
        """Architectures the runtime dropped -> the last vLLM release that served them."""
        table = self.data.get("architectures")
        return table.get("previously_supported", {}) if isinstance(table, dict) else {}


def _top_level(path: Path) -> Mapping[str, Any]:
    """The keys of a TOML file that come before its first table, without parsing the tables (a runtime profile is
    40 KB of flag tables; a command needs one profile, not all of them parsed to learn their ids). When the text
    before the first line opening with `[` is not valid TOML by itself (that line was inside a multi-line value),
    the whole file is parsed instead, so the answer is always the file's own."""
    text = path.read_text(encoding="utf-8")
    cut = next((i for i, line in enumerate(text.splitlines(keepends=True)) if line.startswith("[")), None)
    if cut is not None:
        try:
            return tomllib.loads("".join(text.splitlines(keepends=True)[:cut]))
        except tomllib.TOMLDecodeError:
            pass
    return tomllib.loads(text)


@cache
def _runtime_files() -> Mapping[str, str]:
    """Profile id -> file. Upstream profiles are named after their id; image profiles after the image tag."""
    out: dict[str, str] = {}
    for p in sorted((rules_dir() / "runtimes").glob("*.toml")):
        pid = _top_level(p).get("id", p.stem)
        if pid in out:
            raise ValueError(f"runtime profile id {pid!r} is declared by {out[pid]} and {p.name}")
        out[pid] = p.name
    return out


def runtime_ids() -> list[str]:
    return sorted(_runtime_files())


@cache
def runtime(profile_id: str = DEFAULT_RUNTIME) -> Runtime:
    files = _runtime_files()
    if profile_id not in files:
        raise UsageError(f"unknown runtime profile {profile_id!r}; choose one of: {', '.join(runtime_ids())}")
    data = load_toml(f"runtimes/{files[profile_id]}")
    return Runtime(id=data["id"], name=data["name"], data=data)


# ---- hardware -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hardware:
    id: str
    name: str
    family: str
    native_fp4: bool
    nvfp4_w4a4: str
    nvfp4_w4a16: str
    data: Mapping[str, Any]


@cache
def hardware_profiles() -> tuple[Hardware, ...]:
    return tuple(
        Hardware(
            id=p["id"],
            name=p["name"],
            family=p["family"],
            native_fp4=bool(p["native_fp4"]),
            nvfp4_w4a4=p["nvfp4_w4a4"],
            nvfp4_w4a16=p["nvfp4_w4a16"],
            data=p,
        )
        for p in load_toml("hardware.toml")["profile"]
    )


def hardware(profile_id: str) -> Hardware:
    """A hardware profile by id, in any case (`GB10`, `gb10`)."""
    wanted = profile_id.strip().lower()
    for p in hardware_profiles():
        if p.id == wanted:
            return p
    ids = ", ".join(p.id for p in hardware_profiles())
    raise UsageError(f"unknown hardware profile {profile_id!r}; choose one of: {ids}")


# ---- architecture families ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Root:
    component: str
    prefixes: tuple[str, ...]
    children: frozenset[str] | None  # allowed first segments below the root, when known


@dataclass(frozen=True)
class Family:
    id: str
    name: str
    roots: tuple[Root, ...]
    vllm_prefix_map: tuple[tuple[str, str], ...]
    dropped_prefixes: tuple[str, ...]
    source: str
    _heads: dict[str, tuple[Root, str] | None] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def root_of(self, name: str) -> tuple[Root, str] | None:
        """The longest root prefix `name` starts with, and that prefix."""
        # Root prefixes span at most two segments, so the first three segments decide; caching on them keeps this
        # O(unique heads) on checkpoints with hundreds of thousands of tensors.
        head = ".".join(name.split(".", 3)[:3])
        if head != name:
            head += "."
        try:
            return self._heads[head]
        except KeyError:
            pass
        best: tuple[Root, str] | None = None
        for root in self.roots:
            for prefix in root.prefixes:
                if head.startswith(prefix) and (best is None or len(prefix) > len(best[1])):
                    best = (root, prefix)
        self._heads[head] = best
        return best

    def canonical_root(self, component: str) -> str | None:
        """Where a component's tensors belong: the first prefix of its main root (the one with known children)."""
        candidates = [r for r in self.roots if r.component == component]
        if not candidates:
            return None
        with_children = [r for r in candidates if r.children is not None]
        return (with_children or candidates)[0].prefixes[0]

    def to_vllm(self, name: str) -> str:
        """The module name vLLM sees for a checkpoint name (hf_to_vllm_mapper prefix rules)."""
        for old, new in self.vllm_prefix_map:
            if name.startswith(old):
                return new + name[len(old) :]
        return name


@cache
def families() -> tuple[Family, ...]:
    data = load_toml("architectures.toml")
    return tuple(
        Family(
            id=f["id"],
            name=f["name"],
            roots=tuple(
                Root(r["component"], tuple(r["prefixes"]), frozenset(r["children"]) if "children" in r else None)
                for r in f["roots"]
            ),
            vllm_prefix_map=tuple((a, b) for a, b in f.get("vllm_prefix_map", [])),
            dropped_prefixes=tuple(f.get("dropped_prefixes", [])),
            source=f["source"],
        )
        for f in data["family"]
    )


@cache
def markers() -> Mapping[str, tuple[str, ...]]:
    return {k: tuple(v) for k, v in load_toml("architectures.toml")["markers"].items()}


def family_for(architecture: str | None, model_type: str | None) -> Family:
    data = load_toml("architectures.toml")["family"]
    for raw, fam in zip(data, families(), strict=True):
        if architecture and architecture in raw.get("architectures", []):
            return fam
    for raw, fam in zip(data, families(), strict=True):
        if model_type and model_type in raw.get("model_types", []):
            return fam
    for raw, fam in zip(data, families(), strict=True):
        if raw.get("fallback"):
            return fam
    raise LookupError("rules/architectures.toml has no fallback family")


# ---- transformers model classes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TransformersClasses:
    version: str
    classes: frozenset[str]
    base_model: Mapping[str, str]  # model_type -> base class (what vLLM uses when `architectures` is missing)
    causal_lm: Mapping[str, str]  # model_type -> causal LM class


@cache
def transformers_classes() -> TransformersClasses:
    data = load_toml("transformers.toml")
    return TransformersClasses(data["version"], frozenset(data["classes"]), data["base_model"], data["causal_lm"])

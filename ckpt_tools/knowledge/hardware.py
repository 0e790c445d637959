"""rules/hardware.toml: GPU profiles (kernel paths for NVFP4, memory, and the serving limits a source gives)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from ..errors import UsageError
from ._load import Table, build_file

GPU_FAMILIES = ("hopper", "blackwell-datacenter", "blackwell-consumer")
SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class EnvTrap:
    """An environment variable that breaks or slows serving (`[[env.trap]]` of a runtime, `[[profile.env_trap]]`)."""

    name: str
    value: str | None  # None: any value
    severity: str
    message: str
    fix: str
    source: str


def env_trap(t: Table) -> EnvTrap:
    return EnvTrap(
        t.string("name"),
        t.opt_string("value"),
        t.choice("severity", SEVERITIES),
        t.string("message"),
        t.string("fix"),
        t.string("source"),
    )


@dataclass(frozen=True)
class Hardware:
    id: str
    name: str
    family: str
    compute_capability: str
    memory: str  # unified or dedicated
    memory_gb: int | None
    native_fp4: bool
    nvfp4_w4a4: str
    nvfp4_w4a16: str
    source: str
    # Serving limits, present only where a source gives them.
    gpu_memory_utilization_max: float | None
    gpu_memory_utilization: float | None
    gpu_memory_utilization_colocated: float | None
    max_num_batched_tokens: int | None
    max_num_batched_tokens_max: int | None
    serving_source: str | None
    env_traps: tuple[EnvTrap, ...]

    @property
    def serving_citation(self) -> str:
        return f"rules/hardware.toml ({self.id}): {self.serving_source or self.source}"


def _profile(t: Table) -> Hardware:
    return Hardware(
        id=t.string("id"),
        name=t.string("name"),
        family=t.choice("family", GPU_FAMILIES),
        compute_capability=t.string("compute_capability"),
        memory=t.choice("memory", ("unified", "dedicated")),
        memory_gb=t.opt_integer("memory_gb"),
        native_fp4=t.boolean("native_fp4"),
        nvfp4_w4a4=t.string("nvfp4_w4a4"),
        nvfp4_w4a16=t.string("nvfp4_w4a16"),
        source=t.string("source"),
        gpu_memory_utilization_max=t.opt_number("gpu_memory_utilization_max"),
        gpu_memory_utilization=t.opt_number("gpu_memory_utilization"),
        gpu_memory_utilization_colocated=t.opt_number("gpu_memory_utilization_colocated"),
        max_num_batched_tokens=t.opt_integer("max_num_batched_tokens"),
        max_num_batched_tokens_max=t.opt_integer("max_num_batched_tokens_max"),
        serving_source=t.opt_string("serving_source"),
        env_traps=t.each("env_trap", env_trap),
    )


def parse(root: Table) -> tuple[Hardware, ...]:
    return root.each("profile", _profile, required=True)


@cache
def profiles() -> tuple[Hardware, ...]:
    return build_file("hardware.toml", parse, "hardware/1")


def hardware(profile_id: str) -> Hardware:
    """A hardware profile by id, in any case (`GB10`, `gb10`)."""
    wanted = profile_id.strip().lower()
    for p in profiles():
        if p.id == wanted:
            return p
    ids = ", ".join(p.id for p in profiles())
    raise UsageError(f"unknown hardware profile {profile_id!r}; choose one of: {ids}")

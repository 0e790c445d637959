"""Which kernel family vLLM auto-selects for each quantized module on each hardware profile (rules/kernels.toml).

One job: apply the selection table to a scheme, a layer kind (linear / fused MoE), a GPU's compute capability and
the model (where vLLM decides by model type), for the runtime profiles whose release the table restates. The report
header's `kernels` lines, the JSON `checkpoint.kernels`, inspect's per-layer `kernel` field and the
kernel-selection rule (CK405) all ask `kernels_for`, so they cannot disagree. Schema: rules/README.md
("kernels.toml").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .detect.resolve import Detection, ModuleRow, RowClass
from .knowledge.hardware import Hardware, hardware
from .knowledge.hardware import profiles as hardware_profiles
from .knowledge.kernels import Selection, kernel_table
from .knowledge.runtimes import Runtime
from .model.schemes import Scheme


@dataclass(frozen=True)
class Kernel:
    """What vLLM runs one module with on one GPU: `family` None means no kernel (vLLM raises `no_kernel`);
    `fallback` says why the family is a slow fallback for this checkpoint, else None."""

    family: str | None
    fallback: str | None
    selection: str
    source: str
    no_kernel: str

    @property
    def label(self) -> str:
        if self.family is None:
            return "no kernel"
        return f"{self.family} (slow fallback)" if self.fallback else self.family


def selections() -> tuple[Selection, ...]:
    return kernel_table().selections


def table_version() -> str:
    """The vLLM release whose selection rules/kernels.toml restates."""
    return kernel_table().vllm_version


def modelled(runtime: Runtime) -> bool:
    """Whether rules/kernels.toml restates this runtime's kernel selection (an image built from another vLLM release
    gets no kernel facts rather than another release's)."""
    return runtime.id in kernel_table().runtimes


def default_profiles(runtime: Runtime) -> tuple[Hardware, ...]:
    """The profiles kernels are named for when no `--hardware` is given: the GPUs the runtime runs on (an image
    built for some), else every profile."""
    ids = runtime.hardware_ids
    return tuple(hardware(h) for h in ids) if ids else hardware_profiles()


def kernel_profiles(runtime: Runtime, chosen: Sequence[Hardware] = ()) -> tuple[Hardware, ...]:
    """The profiles kernel facts are given for: the chosen ones (`--hardware`), else `default_profiles`; none when
    the table does not model the runtime."""
    if not modelled(runtime):
        return ()
    return tuple(chosen) if chosen else default_profiles(runtime)


def capability(hw: Hardware) -> int:
    """A profile's compute capability as vLLM compares it: "12.1" -> 121."""
    major, _, minor = hw.compute_capability.partition(".")
    return int(major) * 10 + int(minor or 0)


def layer_kind(module: str) -> str:
    """`moe` for expert projections and fused expert banks (vLLM's FusedMoE), else `linear`."""
    return "moe" if ".experts." in module or module.endswith(".experts") else "linear"


def select(
    scheme: Scheme,
    layer: str,
    hw: Hardware,
    group_size: int | None = None,
    method: str | None = None,
    input_type: str | None = None,
    text_model_type: str | None = None,
) -> Kernel | None:
    """The kernel family for one scheme and layer kind on one GPU, under the `--quantization` method vLLM resolved
    (`input_type`: the config group's activation type, `int` / `float`, where it gives one; `text_model_type`: the
    text config's model_type, which some picks depend on); None when the table does not model the scheme."""
    if not scheme.quantized:
        return None
    for sel in selections():
        if not sel.covers(scheme, layer, method, input_type):
            continue
        cc = capability(hw)
        for pick in sel.picks:
            if pick.matches(cc, group_size, text_model_type):
                family = pick.kernel if pick.kernel is not None else str(getattr(hw, sel.hardware_key or ""))
                return Kernel(family, pick.fallback, sel.id, sel.source, sel.no_kernel)
        return Kernel(None, None, sel.id, sel.source, sel.no_kernel)
    return None


def _group_args(det: Detection, group: str | None, part: str) -> Mapping[str, Any] | None:
    """The compressed-tensors config group's `weights` / `input_activations` for a module of `group`, or None."""
    groups = (det.config.data or {}).get("config_groups")
    if not (isinstance(groups, dict) and isinstance(group, str) and isinstance(groups.get(group), dict)):
        return None
    args = groups[group].get(part)
    return args if isinstance(args, dict) else None


def group_size(det: Detection, row: ModuleRow | RowClass) -> int | None:
    """The weight group size the config gives this module (compressed-tensors group, GPTQ / AWQ / AutoRound
    top level), or None. It reads the row's config group only, so a class answers for its members."""
    return _group_size(det, row.group)


def input_type(det: Detection, row: ModuleRow | RowClass) -> str | None:
    """The activation type (`int` / `float`) the module's config group quantizes inputs to, or None."""
    return _input_type(det, row.group)


def _group_size(det: Detection, group: str | None) -> int | None:
    data: Mapping[str, Any] = det.config.data or {}
    groups = data.get("config_groups")
    if isinstance(groups, dict) and isinstance(group, str) and group in groups:
        value = (_group_args(det, group, "weights") or {}).get("group_size")
    else:
        value = data.get("group_size")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _input_type(det: Detection, group: str | None) -> str | None:
    value = (_group_args(det, group, "input_activations") or {}).get("type")
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class KernelUse:
    """One (scheme, layer kind) class of modules and the kernel it gets on one GPU."""

    hardware: str
    scheme: str
    layer: str
    modules: int
    kernel: Kernel


def loads(det: Detection) -> bool:
    """Whether vLLM builds kernels for this checkpoint at all: a method it resolves and no config-time refusal."""
    return det.vllm_quantization is not None and not det.rejection


def text_model_type(config: Mapping[str, Any] | None) -> str | None:
    """The model_type of vLLM's `hf_text_config`: the config's `text_config`, else the config itself."""
    cfg = config or {}
    text = cfg.get("text_config")
    value = (text if isinstance(text, dict) else cfg).get("model_type")
    return value if isinstance(value, str) else None


def kernels_for(det: Detection, profiles: Sequence[Hardware], model_type: str | None = None) -> list[KernelUse]:
    """Per profile, per (declared scheme, layer kind): the kernel vLLM builds for a model whose text config has
    `model_type`, in a stable order; [] for a checkpoint vLLM refuses."""
    if not loads(det):
        return []
    # Keyed by label, not by Scheme: a hostile config's detail may be unhashable. A row class shares the declared
    # scheme, the config group (which gives the group size and input type) and the layer kind, so it is counted
    # whole; classes come sorted by first member, so each key keeps the scheme of its first row by name.
    classes: dict[tuple[str, str, int | None, str | None], list] = {}
    for c in det.classes:
        if c.declared.quantized:
            key = (c.declared.label, layer_kind(c.names[0]), _group_size(det, c.group), _input_type(det, c.group))
            classes.setdefault(key, [c.declared, 0])[1] += len(c.names)
    out = []
    for hw in profiles:
        for (label, layer, gs, it), (scheme, n) in sorted(classes.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            k = select(scheme, layer, hw, gs, det.vllm_quantization, it, model_type)
            if k is not None:
                if k.family is None and gs is not None:
                    k = replace(k, no_kernel=k.no_kernel.replace("group_size = N", f"group_size = {gs}"))
                out.append(KernelUse(hw.id, label, layer, n, k))
    return out


def row_kernels(
    det: Detection, classes: Sequence[RowClass], profiles: Sequence[Hardware], model_type: str | None = None
) -> dict[str, str]:
    """Hardware id -> the kernel labels of these row classes (one layer of inspect's table, in the order of their
    first rows), joined; {} when none of them is quantized with a modelled scheme or vLLM refuses the checkpoint."""
    out: dict[str, str] = {}
    if not loads(det):
        return out
    # The kernel depends on the class only (the declared scheme, the layer kind and the config group, which gives
    # the group size and input type): a layer holds thousands of modules of a few classes.
    picked: dict[tuple[str, str, str, str | None], Kernel | None] = {}
    for hw in profiles:
        by_kind: dict[str, list[str]] = {}
        for c in classes:
            kind = layer_kind(c.names[0])
            key = (hw.id, c.declared.label, kind, c.group)
            if key not in picked:
                picked[key] = select(
                    c.declared,
                    kind,
                    hw,
                    _group_size(det, c.group),
                    det.vllm_quantization,
                    _input_type(det, c.group),
                    model_type,
                )
            k = picked[key]
            if k is not None and k.label not in by_kind.get(kind, []):
                by_kind.setdefault(kind, []).append(k.label)
        if len(by_kind) == 1:
            out[hw.id] = "; ".join(next(iter(by_kind.values())))
        elif by_kind:
            out[hw.id] = "; ".join(
                f"{'experts' if kind == 'moe' else 'linear'}: {', '.join(by_kind[kind])}" for kind in sorted(by_kind)
            )
    return out


def use_dict(u: KernelUse) -> dict[str, Any]:
    return {
        "scheme": u.scheme,
        "layer": u.layer,
        "modules": u.modules,
        "kernel": u.kernel.family,
        "fallback": u.kernel.fallback,
        "source": u.kernel.source,
    }


def kernel_facts(det: Detection, chosen: Sequence[Hardware] = (), model_type: str | None = None) -> dict[str, Any]:
    """The report's `checkpoint.kernels`: which release's selection is applied (`vllm_version`, None when the table
    does not model the runtime), and per GPU (the chosen ones, else the runtime's) the kernel of every quantized
    (scheme, layer kind) class. `hardware` is empty for an unquantized checkpoint, one vLLM refuses, or a runtime
    the table does not model."""
    profiles = kernel_profiles(det.runtime, chosen)
    by_hw: dict[str, list[dict[str, Any]]] = {}
    for u in kernels_for(det, profiles, model_type) if profiles else []:
        by_hw.setdefault(u.hardware, []).append(use_dict(u))
    return {
        "runtime": det.runtime.id,
        "vllm_version": table_version() if modelled(det.runtime) else None,
        "table_version": table_version(),
        "hardware": by_hw,
    }


def nvfp4_kernels(det: Detection, chosen: Sequence[Hardware] = (), model_type: str | None = None) -> dict[str, str]:
    """Hardware id -> the kernel family vLLM auto-selects for the NVFP4 linears of the activation mode it builds (W4A4
    where the config declares input activations, else W4A16), for the chosen GPUs or the runtime's; {} without
    NVFP4 layers or for a runtime the table does not model."""
    mode = det.activation_mode
    if mode is None or not loads(det):
        return {}
    scheme = Scheme("nvfp4", "A4" if mode == "W4A4" else "A16")
    out = {}
    for hw in kernel_profiles(det.runtime, chosen):
        k = select(scheme, "linear", hw, None, det.vllm_quantization, None, model_type)
        if k is not None and k.family is not None:
            out[hw.id] = k.family
    return out

"""Check 5 of the conformance run: rules/kernels.toml against vLLM 0.33's own kernel selection functions, called on
CPU with the platform made to look like each GPU of rules/hardware.toml (capability, CUDA).

Which selections can be called without a GPU: the pure-Python ones.
- Weight-only int linears (GPTQ / AWQ / AutoRound / compressed-tensors W4A16): `choose_mp_linear_kernel` on an
  `MPLinearLayerConfig` (uint4b8 weights, bf16 activations) for group sizes -1, 32, 64, 128 and 16, with
  humming-kernels reported installed (a dependency of the release); the same for compressed-tensors W4A8 int, whose
  layer asks `choose_mp_linear_kernel` for signed int4 weights with 16-bit activations.
- gpt-oss MXFP4 experts: `_get_priority_backends_for_gpt_oss` filtered to BF16 activations, each backend's expert
  classes asked `_supports_current_device` and `_supports_quant_scheme(kMxfp4Static, ...)`, FlashInfer and the OAI
  triton_kernels reported installed; plus `Mxfp4Config.get_min_capability`.
- FP8 MoE experts: `_get_priority_backends` (tensor parallelism, no DeepEP) for each (weight, activation) scale
  layout the FP8 MoE methods pass (block FP8 from the fp8 method, per-channel / dynamic per-token and per-tensor static
  from compressed-tensors with vLLM CUTLASS allowed, per-tensor static from ModelOpt without it), each backend's
  standard-format expert classes asked `_supports_current_device` and `_supports_quant_scheme`. FlashInfer and
  DeepGEMM are reported installed; `supports_fp8` (8.9 and up), `support_deep_gemm` (SM90, SM100 / SM12x families)
  are the CUDA platform's own rules, and the compiled `cutlass_group_gemm_supported` answers as its C++ source does
  (9.0 and up). Routing method, activation and hidden-size checks are not asked (SiLU top-k experts pass them).
The NVFP4, FP8 linear and MXFP8 selections call compiled capability probes (`torch.ops._C`, FlashInfer / CUTLASS imports)
that do not exist on CPU; mocking them would test the mocks, so they are not checked here (their facts are read from
the source: docs/reference/vllm-0.33.md §4).

Run alone or from run.py (side venv only):

    /work/venv-vllm/bin/python bench/conformance/kernel_check.py
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

import vllm_side  # noqa: E402, F401 - sets the CPU platform before vLLM is imported

from ckpt_tools.kernels import capability, select  # noqa: E402
from ckpt_tools.knowledge.hardware import profiles as hardware_profiles  # noqa: E402
from ckpt_tools.model.schemes import Scheme  # noqa: E402

GROUP_SIZES = (-1, 32, 64, 128, 16)
# vLLM's class / backend -> the family name rules/kernels.toml must start with.
WNA16_FAMILY = {
    "MacheteLinearKernel": "Machete",
    "MarlinLinearKernel": "Marlin",
    "HummingLinearKernel": "Humming",
    "TritonW4A16LinearKernel": "Triton W4A16",
}
MXFP4_FAMILY = {
    "FLASHINFER_TRTLLM_MXFP4_BF16": "FlashInfer TRTLLM MXFP4",
    "TRITON": "OAI Triton kernels",
    "FLASHINFER_CUTLASS_MXFP4_BF16": "FlashInfer-CUTLASS",
    "MARLIN": "Marlin",
}
FP8_MOE_FAMILY = {
    "FLASHINFER_TRTLLM": "FlashInfer TRTLLM",
    "FLASHINFER_CUTLASS": "FlashInfer-CUTLASS",
    "DEEPGEMM": "DeepGEMM",
    "VLLM_CUTLASS": "vLLM CUTLASS",
    "TRITON": "Triton",
    "MARLIN": "Marlin",
    "HUMMING": "Humming",
}
# (what, our scheme detail, the method vLLM resolved, weight key, activation key, vLLM CUTLASS allowed)
FP8_MOE_CASES = (
    ("FP8 block experts (fp8)", "block", "fp8", "kFp8Static128BlockSym", "kFp8Dynamic128Sym", False),
    (
        "FP8 channel experts (compressed-tensors)",
        "channel",
        "compressed-tensors",
        "kFp8StaticChannelSym",
        "kFp8DynamicTokenSym",
        True,
    ),
    (
        "FP8 tensor experts (compressed-tensors)",
        "tensor",
        "compressed-tensors",
        "kFp8StaticTensorSym",
        "kFp8StaticTensorSym",
        True,
    ),
    ("FP8 tensor experts (modelopt)", "tensor", "modelopt", "kFp8StaticTensorSym", "kFp8StaticTensorSym", False),
)


@dataclass
class KernelRow:
    what: str
    hardware: str
    vllm: str
    ckpt: str
    ok: bool


def _pretend(major: int, minor: int) -> None:
    """Make vLLM's platform object answer as a CUDA device of this capability."""
    from vllm.platforms import PlatformEnum, current_platform
    from vllm.platforms.interface import DeviceCapability

    def pair(c):
        return c if isinstance(c, tuple) else divmod(c, 10)

    p = current_platform
    p._enum = PlatformEnum.CUDA
    p.get_device_capability = lambda device_id=0: DeviceCapability(major, minor)
    p.is_cuda = p.is_cuda_alike = lambda: True
    p.is_rocm = p.is_cpu = p.is_xpu = lambda: False
    p.has_device_capability = lambda c, device_id=0: (major, minor) >= pair(c)
    p.is_device_capability = lambda c, device_id=0: (major, minor) == pair(c)
    p.is_device_capability_family = lambda c, device_id=0: major == (c // 10 if isinstance(c, int) else c[0])


def _installed() -> None:
    """Report the release's own kernel packages as installed (the CPU venv has none of them)."""
    import vllm.model_executor.kernels.linear.mixed_precision.humming as humming
    import vllm.model_executor.layers.fused_moe.experts.flashinfer_cutlass_moe as fi_cutlass
    import vllm.model_executor.layers.fused_moe.experts.gpt_oss_triton_kernels_moe as oai
    import vllm.model_executor.layers.fused_moe.experts.trtllm_mxfp4_moe as trtllm
    import vllm.model_executor.layers.fused_moe.oracle.mxfp4
    import vllm.model_executor.layers.quantization.mxfp4  # noqa: F401

    humming.has_humming = lambda: True
    for module in (fi_cutlass, oai, trtllm):
        for name in ("has_flashinfer", "has_triton_kernels", "has_flashinfer_cutlass_fused_moe"):
            if hasattr(module, name):
                setattr(module, name, lambda: True)


def _wna16(cc: int, group: int, weight_type: str = "uint4b8") -> str:
    import torch
    from vllm.model_executor.kernels.linear import MPLinearLayerConfig, choose_mp_linear_kernel
    from vllm.scalar_type import scalar_types

    config = MPLinearLayerConfig(
        full_weight_shape=(4096, 4096),
        partition_weight_shape=(4096, 4096),
        weight_type=getattr(scalar_types, weight_type),
        act_type=torch.bfloat16,
        group_size=group,
        zero_points=False,
    )
    try:
        return choose_mp_linear_kernel(config, cc).__name__
    except ValueError:
        return "no kernel"


def _gpt_oss(cc: int) -> str:
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4 as oracle
    from vllm.model_executor.layers.quantization.mxfp4 import Mxfp4Config
    from vllm.model_executor.layers.quantization.utils.quant_utils import kMxfp4Static

    if cc < Mxfp4Config.get_min_capability():
        return "no kernel"
    for backend in oracle._filter_by_activation(oracle._get_priority_backends_for_gpt_oss(), None):
        act = oracle._backend_activation_key(backend)
        for cls in oracle.backend_to_kernel_cls(backend):
            if cls._supports_current_device() and cls._supports_quant_scheme(kMxfp4Static, act):
                return backend.value
    return "no kernel"


def _fp8_platform(cc: int) -> None:
    """The CUDA platform's FP8 and DeepGEMM rules and the installed FlashInfer / DeepGEMM, for capability `cc`."""
    import vllm.model_executor.layers.fused_moe.experts.cutlass_moe as cutlass_moe
    import vllm.model_executor.layers.fused_moe.experts.flashinfer_cutlass_moe as fi_cutlass
    import vllm.model_executor.layers.fused_moe.experts.trtllm_fp8_moe as trtllm_fp8
    import vllm.utils.deep_gemm as deep_gemm
    from vllm.platforms import current_platform

    current_platform.supports_fp8 = lambda: cc >= 89
    current_platform.support_deep_gemm = lambda: cc == 90 or cc // 10 in (10, 12)
    deep_gemm.has_deep_gemm = lambda: True
    getattr(deep_gemm.is_deep_gemm_supported, "cache_clear", lambda: None)()
    cutlass_moe.cutlass_group_gemm_supported = lambda *a: cc >= 90
    for module in (fi_cutlass, trtllm_fp8):
        for name in dir(module):
            if name.startswith("has_flashinfer"):
                setattr(module, name, lambda: True)


class _TensorParallel:
    use_deepep_v2_kernels = False
    ep_size = 1
    use_batched_activation_format = False


class _MoeConfig:
    moe_parallel_config = _TensorParallel()


def _fp8_moe(weight: str, activation: str, allow_vllm_cutlass: bool) -> str:
    from vllm.model_executor.layers.fused_moe.oracle import fp8 as oracle
    from vllm.model_executor.layers.quantization.utils import quant_utils

    w, a = getattr(quant_utils, weight), getattr(quant_utils, activation)
    skipped = {"AITER", "XPU", "CPU", "CPU_W8A8", "HPC"} | (set() if allow_vllm_cutlass else {"VLLM_CUTLASS"})
    for backend in oracle._get_priority_backends(_MoeConfig(), w, a):
        if backend.name.startswith("BATCHED") or backend.name in skipped:
            continue
        for cls in oracle.backend_to_kernel_cls(backend):
            if cls.__name__.startswith("Batched"):
                continue
            if cls._supports_current_device() and cls._supports_quant_scheme(w, a):
                return backend.name
    return "no kernel"


def _agrees(vllm_name: str, family: str | None, names: dict[str, str]) -> bool:
    if vllm_name == "no kernel" or family is None:
        return vllm_name == "no kernel" and family is None
    return family.startswith(names.get(vllm_name, "\0"))


def run() -> list[KernelRow]:
    _installed()
    rows = []
    profiles = [(h.id, capability(h)) for h in hardware_profiles()] + [("sm89", 89), ("sm80", 80), ("sm75", 75)]
    for hw_id, cc in profiles:
        _pretend(*divmod(cc, 10))
        fake = _profile(hw_id, cc)
        for group in GROUP_SIZES:
            got = _wna16(cc, group)
            k = select(Scheme("int4", "A16", "group"), "linear", fake, group)
            family = k.family if k is not None else None
            rows.append(
                KernelRow(
                    f"W4A16 int linear, group {group}", hw_id, got, family or "-", _agrees(got, family, WNA16_FAMILY)
                )
            )
            # compressed-tensors W4A8 int builds the same config with signed int4 weights (its own create_weights).
            got = _wna16(cc, group, "int4")
            k = select(Scheme("int4", "A8", "group"), "linear", fake, group, "compressed-tensors", "int")
            family = k.family if k is not None else None
            rows.append(
                KernelRow(
                    f"W4A8 int linear, group {group}", hw_id, got, family or "-", _agrees(got, family, WNA16_FAMILY)
                )
            )
        got = _gpt_oss(cc)
        k = select(Scheme("mxfp4", "A16", "gpt-oss"), "moe", fake)
        family = k.family if k is not None else None
        rows.append(KernelRow("gpt-oss MXFP4 experts", hw_id, got, family or "-", _agrees(got, family, MXFP4_FAMILY)))
        _fp8_platform(cc)
        for what, detail, method, weight, activation, allow in FP8_MOE_CASES:
            got = _fp8_moe(weight, activation, allow)
            k = select(Scheme("fp8", "A8", detail), "moe", fake, None, method)
            family = k.family if k is not None else None
            rows.append(KernelRow(what, hw_id, got, family or "-", _agrees(got, family, FP8_MOE_FAMILY)))
    return rows


def _profile(hw_id: str, cc: int):
    from dataclasses import replace

    base = next((h for h in hardware_profiles() if h.id == hw_id), hardware_profiles()[-1])
    return replace(base, id=hw_id, compute_capability=f"{cc // 10}.{cc % 10}")


def score(rows: list[KernelRow]) -> tuple[str, bool]:
    good = sum(r.ok for r in rows)
    return f"Kernel selection: {good}/{len(rows)} agree with vLLM's own selection functions.", good == len(rows)


def section(rows: list[KernelRow]) -> list[str]:
    line, _ = score(rows)
    out = [
        "## Kernel selection (kernel_check.py)",
        "",
        line,
        "",
        "| selection | GPU | vLLM | ckpt | |",
        "|---|---|---|---|---|",
    ]
    out += [f"| {r.what} | {r.hardware} | {r.vllm} | {r.ckpt} | {'ok' if r.ok else 'DIFF'} |" for r in rows]
    return out


def main() -> int:
    rows = run()
    print("\n".join(section(rows)))
    return 0 if score(rows)[1] else 1


if __name__ == "__main__":
    sys.exit(main())

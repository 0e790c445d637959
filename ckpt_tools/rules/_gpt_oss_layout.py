"""The gpt-oss MXFP4 expert layout, as vLLM 0.33 loads it (`models/gpt_oss.py` `_load_weights_mxfp4`,
`layers/quantization/mxfp4.py` `create_weights`) and transformers reads it (`integrations/mxfp4.py`
`Mxfp4GptOssExperts`, `_convert_moe_packed_tensors`, which asserts `blocks.shape[:-1] == scales.shape`).

One `...mlp.experts` module holds both fused projections of all E experts: `P_blocks` U8 `[E, rows, cols/32, 16]`
(two E2M1 codes per byte, 32 per MX group), `P_scales` U8 `[E, rows, cols/32]` (E8M0) and `P_bias` `[E, rows]`, with
rows x cols = 2*intermediate x hidden for `gate_up_proj` and hidden x intermediate for `down_proj`.
"""

from __future__ import annotations

from ..model.checkpoint import Checkpoint
from ..model.modules import Module

GROUP = 32  # OCP MX block: elements per E8M0 scale
PROJECTIONS = ("gate_up_proj", "down_proj")


def is_gpt_oss_experts(module: Module) -> bool:
    return any(f"{p}_blocks" in module.tensors for p in PROJECTIONS)


def _dims(ckpt: Checkpoint, proj: str) -> tuple[int, int, int] | None:
    """(experts, rows, cols) of one fused projection from config.json, or None when the config lacks a size."""
    e, h, i = (ckpt.config_value(k) for k in ("num_local_experts", "hidden_size", "intermediate_size"))
    if not all(isinstance(v, int) and v > 0 for v in (e, h, i)):
        return None
    return (e, 2 * i, h) if proj == "gate_up_proj" else (e, h, i)


def problems(ckpt: Checkpoint, module: Module) -> list[tuple[str, str, str]]:
    """(suffix, problem, detail) for one gpt-oss experts module: missing, mis-typed or mis-shaped blocks / scales."""
    out: list[tuple[str, str, str]] = []
    for proj in PROJECTIONS:
        blocks, scales = module.tensors.get(f"{proj}_blocks"), module.tensors.get(f"{proj}_scales")
        for suffix, t in ((f"{proj}_blocks", blocks), (f"{proj}_scales", scales)):
            if t is None:
                out.append((suffix, "missing", f"no `{suffix}`"))
            elif t.dtype != "U8":
                out.append((suffix, "dtype", f"`{suffix}` is {t.dtype}, expected U8"))
        if blocks is None or scales is None:
            continue
        dims = _dims(ckpt, proj)
        want_blocks = want_scales = None
        if dims is not None and dims[2] % GROUP == 0:
            e, rows, cols = dims
            want_blocks, want_scales = (e, rows, cols // GROUP, GROUP // 2), (e, rows, cols // GROUP)
        if want_blocks is not None and tuple(blocks.shape) != want_blocks:
            out.append(
                (
                    f"{proj}_blocks",
                    "shape",
                    f"`{proj}_blocks` has shape {list(blocks.shape)}, expected {list(want_blocks)} "
                    f"([experts, rows, cols/32, 16] from config.json)",
                )
            )
        elif tuple(blocks.shape[:-1]) != tuple(scales.shape) or (blocks.shape and blocks.shape[-1] != GROUP // 2):
            out.append(
                (
                    f"{proj}_scales",
                    "shape",
                    f"`{proj}_scales` {list(scales.shape)} does not match `{proj}_blocks` {list(blocks.shape)}: "
                    f"one E8M0 scale per 16-byte block of 32 FP4 values",
                )
            )
        elif want_scales is not None and tuple(scales.shape) != want_scales:
            out.append(
                (
                    f"{proj}_scales",
                    "shape",
                    f"`{proj}_scales` has shape {list(scales.shape)}, expected {list(want_scales)}",
                )
            )
    return out

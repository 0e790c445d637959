"""What vLLM itself says about a checkpoint, asked through vLLM's own config objects (runs in the side venv only).

Import this module only in the side venv built by setup.sh. It sets the CPU platform before vLLM is imported:
`VLLM_TARGET_DEVICE=cpu` lets `VllmConfig` infer a device and build a model on the meta device. Neither the CPU nor
the CUDA platform restricts quantization methods (`Platform.supported_quantization` is empty for both), and the
capability checks are skipped when no GPU capability is known, so the verdicts are the GPU-independent ones.

- `resolve(path, user_quant)`: check 1, vLLM's own method resolution: `ModelConfig` (`get_config`, the quant-config
  normalisation, `_verify_quantization` with its override chain) then `VllmConfig.get_quantization_config`
  (`get_quant_config` -> `<Config>.from_config`, `apply`-time validation). Errors are part of the answer.
- `layer_decisions(path)`: check 2, the model class built on the meta device inside a real `VllmConfig`, exactly as
  the loader does, with every call of `quant_config.get_quant_method(layer, prefix)` recorded. The only code
  replaced is GPU kernel / MoE backend selection (`init_*_linear_kernel`, `select_*_moe_backend`): each raises
  `KernelRequested` carrying its arguments, which hold the W4A4 / W4A16 decision vLLM has already made.
- `parse_serve(argv)`: check 3, `vllm serve` argv through vLLM's own parser, then `EngineArgs.create_model_config()`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")

import torch
import vllm
from vllm.config import LoadConfig, ModelConfig, VllmConfig, set_current_vllm_config

# The set-up `ckpt doctor --vllm` runs too (one copy; the repo root is on sys.path: run.py).
from ckpt_tools.vllm_dry.meta_load import error_text, selectors
from ckpt_tools.vllm_dry.meta_load import init_parallel as _init_parallel

VLLM_VERSION = vllm.__version__


@dataclass(frozen=True)
class Verdict:
    """vLLM's answer for a checkpoint: the resolved `--quantization` method, or the error it raises."""

    method: str | None
    error: str | None = None
    stage: str | None = None  # where vLLM raised: "model-config", "quant-config"

    @property
    def label(self) -> str:
        if self.error:
            return f"error ({self.stage})"
        return self.method or "unquantized"


@dataclass(frozen=True)
class LayerDecision:
    """vLLM's decision for one layer prefix: its class and what the quant config gives it."""

    prefix: str
    layer_class: str
    kind: str  # "unquantized", "nvfp4", "fp8", "int4", "int8", "mxfp8", "mxfp4", "error", "other"
    activation: str | None = None  # "A4", "A8", "A16" for quantized kinds
    detail: str = ""

    @property
    def label(self) -> str:
        if self.kind in ("unquantized", "error", "other"):
            return self.kind + (f": {self.detail}" if self.kind != "unquantized" and self.detail else "")
        return f"{self.kind} {self.activation}"


@dataclass
class ModelBuild:
    """The outcome of building the vLLM model class for a checkpoint on the meta device."""

    model_class: str | None = None
    decisions: dict[str, LayerDecision] = field(default_factory=dict)
    error: str | None = None  # the model could not be built (the reason)
    hf_to_vllm: Any = None  # the class's `hf_to_vllm_mapper` rename mapper (WeightsMapper) or None
    modules: dict[str, str] = field(default_factory=dict)  # every module of the built model -> its class name
    packed: dict[str, list[str]] = field(default_factory=dict)


# ---- check 1: method resolution -----------------------------------------------------------------------------------


def model_config(path: str, user_quant: str | None = None, **kwargs: Any) -> ModelConfig:
    return ModelConfig(model=path, tokenizer=path, skip_tokenizer_init=True, quantization=user_quant, **kwargs)


def resolve(path: str, user_quant: str | None = None) -> Verdict:
    try:
        mc = model_config(path, user_quant)
    except Exception as exc:  # noqa: BLE001 - vLLM's rejection is the answer
        return Verdict(None, error_text(exc), "model-config")
    if mc.quantization is None:
        return Verdict(None)
    try:
        qc = VllmConfig.get_quantization_config(mc, LoadConfig())
    except Exception as exc:  # noqa: BLE001
        return Verdict(mc.quantization, error_text(exc), "quant-config")
    return Verdict(qc.get_name() if qc is not None else mc.quantization)


# ---- check 2: per-layer decisions ---------------------------------------------------------------------------------


class KernelRequested(Exception):
    """Raised instead of GPU kernel / MoE backend selection; carries the selector's name and arguments."""

    def __init__(self, selector: str, kwargs: dict[str, Any], owner: object) -> None:
        super().__init__(selector)
        self.selector, self.kwargs, self.owner = selector, kwargs, owner


def _selectors() -> list[tuple[object, str, object]]:
    """(module, name, original) for every GPU kernel / MoE backend selector this check intercepts: the ones `--vllm`
    stubs (meta_load.selectors), less `choose_*_kernel`, which return a kernel class rather than pick a backend."""
    return [(module, attr, original) for module, attr, original in selectors() if not attr.startswith("choose_")]


def _raiser(selector: str) -> Any:
    def raiser(*args: Any, **kwargs: Any) -> Any:
        owner = sys._getframe(1).f_locals.get("self")
        params = dict(kwargs)
        params.update({f"arg{i}": a for i, a in enumerate(args)})
        raise KernelRequested(selector, params, owner)

    return raiser


@contextlib.contextmanager
def kernels_requested() -> Iterator[None]:
    """While active, every kernel / backend selector raises KernelRequested instead of choosing a GPU kernel."""
    selectors = _selectors()
    for module, attr, _original in selectors:
        setattr(module, attr, _raiser(attr))
    try:
        yield
    finally:
        for module, attr, original in selectors:
            setattr(module, attr, original)


def _key_bits(key: Any) -> str | None:
    """`A4` / `A8` for a vLLM QuantKey by its quantized dtype; None for no key."""
    if key is None:
        return None
    dtype = getattr(key, "dtype", key)
    text = str(dtype).lower()
    if "fp4" in text or "float4" in text or "uint8" in text:
        return "A4"
    if "float8" in text or "fp8" in text or "int8" in text:
        return "A8"
    return f"A? ({text})"


def _weight_kind(key: Any) -> str:
    text = str(getattr(key, "dtype", key)).lower()
    scale = str(getattr(getattr(key, "scale", None), "dtype", "")).lower()
    if "uint8" in scale and ("float8" in text or "fp8" in text):
        scale = "e8m0"  # MX scales are stored as uint8 (kMxfp8Static: ScaleDesc(torch.uint8, group 1x32))
    if "fp4" in text or "float4" in text or "uint8" in text:
        return "nvfp4" if "e8m0" not in scale else "mxfp4"
    if "float8" in text or "fp8" in text:
        return "mxfp8" if "e8m0" in scale else "fp8"
    return f"other({text})"


def classify_request(req: KernelRequested) -> tuple[str, str | None, str]:
    """(kind, activation, detail) from the kernel / backend vLLM asked for."""
    sel, kw = req.selector, req.kwargs
    detail = f"{sel} from {type(req.owner).__name__}"
    if sel == "init_nvfp4_linear_kernel":
        return "nvfp4", "A16" if kw.get("use_a16") else "A4", detail
    if "nvfp4" in sel:
        act = kw.get("activation_key", kw.get("arg2"))
        return "nvfp4", "A16" if act is None else "A4", detail
    if "mxfp4" in sel:
        if type(req.owner).__name__ == "GptOssMxfp4MoEMethod" and kw.get("activation_key") is None:
            # fused_moe/oracle/mxfp4.py: without an activation key gpt-oss takes the BF16-activation backends first
            return "mxfp4", "A16", detail
        return "mxfp4", "A4", detail
    if "mxfp8" in sel:
        return "mxfp8", "A8", detail
    if "fp8" in sel:
        act = kw.get("activation_quant_key", kw.get("activation_key", "missing"))
        return "fp8", "A16" if act is None else "A8", detail
    if "wna16" in sel:
        bits = getattr(getattr(req.owner, "weight_quant", None), "num_bits", None) or getattr(req.owner, "num_bits", 4)
        return f"int{bits}", "A16", detail
    if "int8" in sel:
        return "int8", "A8", detail
    return "other", None, detail


def classify_method(method: Any, layer: Any) -> tuple[str, str | None, str]:
    """(kind, activation, detail) from the quantize method vLLM's config returned without selecting a kernel."""
    name = type(method).__name__ if method is not None else "None"
    if method is None or name.startswith("Unquantized"):
        return "unquantized", None, name
    if name == "ModelOptLinearMethod":
        spec = method.spec
        act = _key_bits(spec.activation) if spec.activation is not None else "A16"
        return _weight_kind(spec.weight), act, name
    if name == "Fp8LinearMethod":  # Fp8Config (quant_method "fp8"): W8A8, dynamic or static activations
        return "fp8", "A8", name
    scheme = getattr(layer, "scheme", None)
    sname = type(scheme).__name__
    if sname == "CompressedTensorsW4A4Fp4":
        return "nvfp4", "A16" if scheme.use_a16 else "A4", sname
    if sname in ("CompressedTensorsWNA16",):
        return f"int{scheme.num_bits}", "A16", sname
    if sname == "CompressedTensorsW8A16Fp8":
        return "fp8", "A16", sname
    if sname == "CompressedTensorsW8A8Fp8":
        return "fp8", "A8", sname
    if sname == "CompressedTensorsW8A8Int8":
        return "int8", "A8", sname
    if sname == "CompressedTensorsW4A4Mxfp4":
        return "mxfp4", "A4", sname
    if sname in ("CompressedTensorsW4A8Int", "CompressedTensorsWNA8Int"):
        return f"int{getattr(scheme, 'num_bits', 4)}", "A8", sname
    # Quark: the scheme class the config chose for the layer (quark/schemes/*.py).
    if sname in ("QuarkW8A8Fp8", "QuarkW8A8Fp8PerBlock"):
        return "fp8", "A8" if getattr(scheme, "is_static_input_scheme", True) is not None else "A16", sname
    if sname == "QuarkOCP_MX":
        act = getattr(scheme, "input_dtype", None)
        return "mxfp4", "A4" if act is None or "fp4" in str(act) else "A8", sname
    if sname == "QuarkW8A8Int8":
        return "int8", "A8", sname
    # INC wraps its per-layer scheme (inc/inc_linear.py INCLinearMethod.scheme).
    if name == "INCLinearMethod":
        inner = getattr(method, "scheme", None)
        iname = type(inner).__name__
        bits = getattr(getattr(inner, "layer_config", None), "bits", None) or getattr(inner, "weight_bits", 4)
        if "WNA16" in iname or "Wna16" in iname or "XPULinear" in iname or "ARK" in iname:
            return f"int{bits}", "A16", f"{name}/{iname}"
        if "Mxfp4" in iname:
            return "mxfp4", "A4", f"{name}/{iname}"
        if "Mxfp8" in iname:
            return "mxfp8", "A8", f"{name}/{iname}"
        if "Fp8" in iname:
            return "fp8", "A8", f"{name}/{iname}"
        return "other", None, f"{name}/{iname}"
    # GPTQ / AWQ / INC int methods (auto_gptq.py, auto_awq.py, inc/schemes): weight-only int, bits from the config.
    qc = getattr(method, "quant_config", None)
    if any(k in name for k in ("GPTQ", "AWQ", "WNA16", "Wna16")):
        bits = getattr(qc, "weight_bits", None) or getattr(getattr(method, "layer_config", None), "bits", 4)
        return f"int{bits}", "A16", name
    if "Mxfp4" in name:
        return "mxfp4", "A4", name
    if "Mxfp8" in name:
        return "mxfp8", "A8", name
    if name.startswith("INCFp8"):
        return "fp8", "A8", name
    return "other", None, f"{name}/{sname}"


def layer_decisions(path: str) -> ModelBuild:
    """Build the model class on the meta device and record the quant config's decision for every layer."""
    from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod
    from vllm.model_executor.model_loader.utils import get_model_architecture, initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype

    out = ModelBuild()
    try:
        mc = model_config(path)
        vc = VllmConfig(model_config=mc, load_config=LoadConfig())
        cls, _arch = get_model_architecture(mc)
    except Exception as exc:  # noqa: BLE001
        out.error = error_text(exc)
        return out
    out.model_class = cls.__name__
    mapper = getattr(cls, "hf_to_vllm_mapper", None)
    out.hf_to_vllm = mapper.get_rename_mapper() if mapper is not None else None
    out.packed = dict(getattr(cls, "packed_modules_mapping", {}) or {})
    qc = vc.quant_config
    if qc is None:
        return out
    _init_parallel(vc)

    original = type(qc).get_quant_method

    def recording(self: Any, layer: Any, prefix: str) -> Any:
        lname = type(layer).__name__
        try:
            with kernels_requested():
                method = original(self, layer, prefix)
            kind, act, detail = classify_method(method, layer)
        except KernelRequested as req:
            kind, act, detail = classify_request(req)
        except Exception as exc:  # noqa: BLE001 - vLLM's own per-layer error is a decision
            kind, act, detail = "error", None, error_text(exc)
        if lname != "Attention" and not lname.endswith("Attention"):
            out.decisions[prefix] = LayerDecision(prefix, lname, kind, act, detail)
        # Let construction go on with plain weights: kernels are never selected.
        return UnquantizedLinearMethod() if isinstance(layer, LinearBase) else None

    with contextlib.ExitStack() as stack:
        stack.enter_context(_patched(type(qc), "get_quant_method", recording))
        stack.enter_context(set_current_vllm_config(vc))
        stack.enter_context(set_default_torch_dtype(mc.dtype))
        stack.enter_context(torch.device("meta"))
        try:
            # The loader's own entry point: configure_quant_config (hf_to_vllm_mapper, packed_modules_mapping)
            # then the model class, as DefaultModelLoader.load_model does, on the meta device.
            model = initialize_model(vllm_config=vc, prefix="")
        except Exception as exc:  # noqa: BLE001
            out.error = error_text(exc)
        else:
            out.modules = {name: type(m).__name__ for name, m in model.named_modules()}
    return out


@contextlib.contextmanager
def _patched(obj: object, attr: str, value: object) -> Iterator[None]:
    old = getattr(obj, attr)
    setattr(obj, attr, value)
    try:
        yield
    finally:
        setattr(obj, attr, old)


DROPPED = "(dropped by hf_to_vllm_mapper)"


def vllm_prefix(build: ModelBuild, hf_module: str) -> str | None:
    """The vLLM layer prefix that serves a checkpoint module (HF name), through the model's own mappings:
    `hf_to_vllm_mapper` rename, the fused-shard `packed_modules_mapping`, and per-expert names -> the experts layer.
    DROPPED when the mapper discards the module's weights (e.g. `mtp.*` in the main Qwen3.5 model); None when no
    layer of the built model has that name."""
    name = hf_module
    if build.hf_to_vllm is not None:
        # The mapper renames weight names; map the module's weight so prefix rules such as `lm_head.` apply.
        mapped = build.hf_to_vllm._map_name(f"{name}.weight")
        if mapped is None:
            return DROPPED
        name = mapped.removesuffix(".weight")
    candidates = [name]
    parent, _, last = name.rpartition(".")
    for fused, shards in build.packed.items():
        if last in shards:
            candidates.append(f"{parent}.{fused}" if parent else fused)
    parts = name.split(".")
    if "experts" in parts:
        i = len(parts) - 1 - parts[::-1].index("experts")
        candidates.append(".".join(parts[: i + 1]))
    for c in candidates:
        if c in build.decisions:
            return c
    for c in candidates:
        if c in build.modules:
            return c  # a layer built without the quant config (e.g. a router gate): vLLM never asks it
    return None


# ---- check 3: `vllm serve` argv -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServeVerdict:
    """vLLM's answer to one `vllm serve` argv: the ModelConfig's quantization, or where and why it refused."""

    quantization: str | None
    error: str | None = None
    stage: str | None = None  # "parse", "validate" (serve and API-server checks), "model-config", "quant-config"


_SERVE_PARSER: Any = None


def serve_parser() -> Any:
    """vLLM's own `vllm` CLI parser with the `serve` subcommand, built as vllm/entrypoints/cli/main.py does."""
    global _SERVE_PARSER
    if _SERVE_PARSER is None:
        from vllm.entrypoints.cli.serve import ServeSubcommand
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        parser = FlexibleArgumentParser(description="vLLM CLI", prog="vllm")
        subparsers = parser.add_subparsers(required=False, dest="subparser")
        ServeSubcommand().subparser_init(subparsers).set_defaults(dispatch_function=ServeSubcommand.cmd)
        _SERVE_PARSER = parser
    return _SERVE_PARSER


def parse_serve(argv: list[str], env: dict[str, str] | None = None) -> ServeVerdict:
    """Parse `vllm serve ...` with vLLM's parser, run the serve subcommand's validation, then build the engine's
    ModelConfig (`AsyncEngineArgs.from_cli_args(args).create_model_config()`) and its quantization config."""
    import argparse
    import io

    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.entrypoints.common.cli_args import validate_api_server_args

    if argv[:2] != ["vllm", "serve"]:
        return ServeVerdict(None, f"not a `vllm serve` command: {argv[:2]}", "parse")
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                args = serve_parser().parse_args(argv[1:])
        except SystemExit:
            lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
            return ServeVerdict(None, lines[-1] if lines else "argparse exited", "parse")
        except (argparse.ArgumentError, ValueError, TypeError) as exc:
            return ServeVerdict(None, error_text(exc), "parse")
        try:
            ServeSubcommand().validate(args)
            # What the API server checks before it starts (launcher.py): tool-call and reasoning parser names.
            validate_api_server_args(args)
            if getattr(args, "model_tag", None) is not None:
                args.model = args.model_tag
            engine_args = AsyncEngineArgs.from_cli_args(args)
        except Exception as exc:  # noqa: BLE001
            return ServeVerdict(None, error_text(exc), "validate")
        try:
            mc = engine_args.create_model_config()
        except Exception as exc:  # noqa: BLE001
            return ServeVerdict(None, error_text(exc), "model-config")
        if mc.quantization is None:
            return ServeVerdict(None)
        try:
            qc = VllmConfig.get_quantization_config(mc, engine_args.create_load_config())
        except Exception as exc:  # noqa: BLE001
            return ServeVerdict(mc.quantization, error_text(exc), "quant-config")
        return ServeVerdict(qc.get_name())
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

"""vLLM's own loader over a checkpoint's headers: the model class built on the meta device with the installed vLLM,
then its `load_weights` fed meta tensors made from the safetensors headers. No weight byte is read, no memory is
allocated for weights, no GPU kernel is launched.

This file runs in the interpreter that has vLLM (`ckpt doctor --vllm` starts it as a script, by path), so it imports
nothing from ckpt_tools: the standard library, torch and vllm only. It prints one JSON object on stdout, a
`ckpt_tools.load.accounting.LoadAccounting` as `to_dict` writes it (judge `vllm`), plus `platform` and `seconds`.
Exit codes: 0 with the accounting; 3 when torch or vLLM cannot be imported (the reason on stderr).

    python meta_load.py CHECKPOINT_FOLDER

The conformance run (bench/conformance/vllm_side.py, load_agree.py) shares the set-up pieces: `error_text`,
`import_all`, `init_parallel`, and `judge` itself.

Platform (docs/vllm-dry-run.md): on a CPU-only interpreter (no CUDA / ROCm device torch can see) the CPU platform is
selected with `VLLM_TARGET_DEVICE=cpu` before vLLM is imported, as a CPU wheel whose version string lacks "cpu" does
not select it itself. With a GPU present nothing is forced: vLLM picks its platform as `vllm serve` would, so its
capability checks on the quant config are the serving machine's. On both, the model is built under
`torch.device("meta")`, GPU kernel / MoE backend selection is replaced (a kernel is chosen for the device the
weights would run on; here there are none), and `process_weights_after_loading` is never called.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import json
import os
import pkgutil
import re
import struct
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

NO_VLLM_EXIT = 3
INDEX_NAME = "model.safetensors.index.json"
# safetensors dtype -> torch dtype attribute (torch 2.13 has float8_e8m0fnu).
_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu",
}
# Parameters a weight-only (A16) layer registers and never reads: activation input scales
# (modelopt.py / compressed_tensors W4A16 NVFP4, vLLM 0.33.0). No checkpoint of such a layer carries them.
_INPUT_SCALE = re.compile(r"(?:^|\.)(?:w13_|w2_)?input_(?:global_)?scale(?:_2)?$")
_MAX_INTERVALS = 1 << 16  # element runs recorded for one write; a write spread wider is counted as its whole span


def set_platform_env() -> None:
    """Environment vLLM reads at import: quiet, offline, and the CPU platform only where no GPU is visible."""
    for key, value in (
        ("VLLM_LOGGING_LEVEL", "ERROR"),
        ("HF_HUB_OFFLINE", "1"),
        ("TRANSFORMERS_OFFLINE", "1"),
        ("VLLM_NO_USAGE_STATS", "1"),
        ("VLLM_DO_NOT_TRACK", "1"),
        # torch asks NVML, not the CUDA runtime, whether a GPU exists: no CUDA context is created.
        ("PYTORCH_NVML_BASED_CUDA_CHECK", "1"),
    ):
        os.environ.setdefault(key, value)
    if "VLLM_TARGET_DEVICE" not in os.environ:
        import torch

        if not torch.cuda.is_available():
            os.environ["VLLM_TARGET_DEVICE"] = "cpu"


def error_text(exc: BaseException) -> str:
    """One line of vLLM's error text; pydantic wraps ModelConfig's ValueErrors as 'Value error, <text>'."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            msgs = [str(e.get("msg", "")) for e in errors()]
        except Exception:  # noqa: BLE001 - not a pydantic error after all
            msgs = []
        if msgs:
            text = "; ".join(m.removeprefix("Value error, ") for m in msgs)
            return " ".join(text.split())
    text = str(exc) or repr(exc)
    return " ".join(f"{type(exc).__name__}: {text}".split())


def import_all(package: str) -> None:
    """Import every submodule now: vLLM imports some quantization methods lazily, inside get_quant_method, and a
    module imported later would bind the real selectors."""
    pkg = importlib.import_module(package)
    for info in pkgutil.walk_packages(pkg.__path__, package + "."):
        try:
            importlib.import_module(info.name)
        except Exception:  # noqa: BLE001 - a backend-specific module (ROCm, XPU...) may not import here
            continue


def _is_selector(name: str) -> bool:
    return (name.startswith("select_") and name.endswith("_backend")) or (
        (name.startswith(("init_", "choose_"))) and name.endswith("_kernel")
    )


_SELECTORS: list[tuple[Any, str, Any]] = []


def selectors() -> list[tuple[Any, str, Any]]:
    """(module, name, original) for every GPU kernel / MoE backend selector bound in vLLM's model-executor modules
    (they are imported by name into about 20 modules, so each binding is listed)."""
    if not _SELECTORS:
        for package in (
            "vllm.model_executor.layers.quantization",
            "vllm.model_executor.layers.fused_moe",
            "vllm.model_executor.kernels",
        ):
            import_all(package)
        for name, module in list(sys.modules.items()):
            if name.startswith("vllm.model_executor.") and module is not None:
                _SELECTORS.extend(
                    (module, attr, getattr(module, attr))
                    for attr in list(vars(module))
                    if _is_selector(attr) and callable(getattr(module, attr))
                )
    return _SELECTORS


_DIST_READY = False


def init_parallel(vc: Any) -> None:
    """A one-rank gloo group on a free port, so parallel layers can be built (tensor parallel size 1). The
    model-parallel groups are rebuilt for every model: vLLM creates the expert-parallel group only for an MoE."""
    global _DIST_READY
    from vllm.config import set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.distributed.parallel_state import destroy_model_parallel
    from vllm.utils.network_utils import get_open_port

    with set_current_vllm_config(vc):
        if not _DIST_READY:
            init_distributed_environment(
                world_size=1,
                rank=0,
                local_rank=0,
                backend="gloo",
                distributed_init_method=f"tcp://127.0.0.1:{get_open_port()}",
            )
            _DIST_READY = True
        destroy_model_parallel()
        initialize_model_parallel(1, 1)


# ---- kernels: never chosen ----------------------------------------------------------------------------------------


class NoKernel:
    """Stands in for the GEMM kernel a quant method picks in `create_weights` (after its parameters exist). Nothing
    is ever computed in a dry run; computing with it raises."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    @classmethod
    def input_quant_key(cls) -> None:
        return None

    def process_weights_after_loading(self, layer: Any) -> None:
        pass

    def apply_weights(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("dry run: no kernel was selected")


def _kernel_stub(name: str) -> Any:
    # `choose_*` return a kernel class, `init_*` an instance.
    return (lambda *a, **k: NoKernel) if name.startswith("choose_") else (lambda *a, **k: NoKernel())


def _backend_fallback(original: Any) -> Any:
    """vLLM's own MoE backend choice, or, when no backend fits this platform, its emulation (else Triton) backend:
    with one rank and no expert parallelism the expert parameters' shapes do not depend on the backend."""
    module = sys.modules[original.__module__]

    def select(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        except Exception:
            enums = [v for v in vars(module).values() if isinstance(v, type) and v.__name__.endswith("MoeBackend")] or [
                v for v in vars(module).values() if isinstance(v, type) and v.__name__.endswith("MoEBackend")
            ]
            to_cls = getattr(module, "backend_to_kernel_cls", None)
            for enum in enums:
                member = getattr(enum, "EMULATION", None) or getattr(enum, "TRITON", None)
                if member is None:
                    continue
                classes = to_cls(member) if to_cls is not None else None
                cls = classes[0] if isinstance(classes, list | tuple) and classes else classes
                return member, cls
            raise

    return select


@contextlib.contextmanager
def kernels_stubbed() -> Iterator[None]:
    """While active, linear kernels are stubbed and MoE backends fall back to emulation where none fits."""
    found = selectors()
    for module, attr, original in found:
        setattr(module, attr, _backend_fallback(original) if attr.startswith("select_") else _kernel_stub(attr))
    try:
        yield
    finally:
        for module, attr, original in found:
            setattr(module, attr, original)


# ---- headers ------------------------------------------------------------------------------------------------------


def _natural(name: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def weight_files(folder: Path) -> list[Path]:
    """The files vLLM's loader reads, in its order: with an index, only the files its weight map names
    (`filter_duplicate_safetensors_files`); natural sort order."""
    files = sorted((p for p in folder.glob("*.safetensors") if p.is_file()), key=lambda p: _natural(p.name))
    index = folder / INDEX_NAME
    if index.is_file():
        try:
            listed = set(json.loads(index.read_text()).get("weight_map", {}).values())
        except (OSError, ValueError, AttributeError):
            return files
        files = [p for p in files if p.name in listed]
    return files


def read_header(path: Path) -> dict[str, Any] | None:
    """The safetensors header: 8-byte little-endian length, then JSON. None when it does not parse."""
    try:
        with path.open("rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                return None
            (n,) = struct.unpack("<Q", raw)
            if n > 512 * 1024 * 1024:
                return None
            header = json.loads(f.read(n))
    except (OSError, ValueError):
        return None
    if not isinstance(header, dict):
        return None
    header.pop("__metadata__", None)
    return header


def header_tensors(folder: Path) -> tuple[list[tuple[str, str, tuple[int, ...]]], list[str]]:
    """(name, dtype, shape) for every tensor vLLM would read, in its order (file order, names sorted within a file
    as `safe_open.keys()` gives them); and the files whose header does not parse (the catalogue's file rules own
    them; their tensors are not fed)."""
    out: list[tuple[str, str, tuple[int, ...]]] = []
    unreadable: list[str] = []
    for path in weight_files(folder):
        header = read_header(path)
        if header is None:
            unreadable.append(path.name)
            continue
        for name in sorted(header):
            info = header[name]
            if isinstance(info, dict):
                out.append((name, str(info.get("dtype")), tuple(int(d) for d in info.get("shape") or ())))
    return out, unreadable


# ---- writes into parameters ---------------------------------------------------------------------------------------


def _intervals(offset: int, shape: tuple[int, ...], stride: tuple[int, ...]) -> list[tuple[int, int]]:
    """The element runs [start, stop) of a strided view of a storage."""
    if any(s == 0 for s in shape):
        return []
    dims = [(s, st) for s, st in zip(shape, stride, strict=True) if s != 1]
    run, k = 1, len(dims)
    while k > 0 and dims[k - 1][1] == run:
        run *= dims[k - 1][0]
        k -= 1
    lead = dims[:k]
    if not lead:
        return [(offset, offset + run)]
    count = 1
    for s, _ in lead:
        count *= s
    if count > _MAX_INTERVALS:
        span = sum((s - 1) * st for s, st in lead)
        return [(offset, offset + span + run)]
    out = []
    for idx in itertools.product(*(range(s) for s, _ in lead)):
        start = offset + sum(i * st for i, (_, st) in zip(idx, lead, strict=True))
        out.append((start, start + run))
    return out


def _covered(intervals: list[tuple[int, int]], size: int) -> list[tuple[int, int]]:
    """The gaps [start, stop) of `size` elements no interval covers."""
    gaps, at = [], 0
    for start, stop in sorted(intervals):
        if start > at:
            gaps.append((at, min(start, size)))
        at = max(at, stop)
        if at >= size:
            break
    if at < size:
        gaps.append((at, size))
    return [(a, b) for a, b in gaps if a < b]


class _Tensor:
    """What the loader did with one fed tensor: the parameters it wrote, its elements read, casts seen."""

    __slots__ = ("casts", "dtype", "foreign", "name", "numel", "params", "read")

    def __init__(self, name: str, dtype: str, numel: int) -> None:
        self.name, self.dtype, self.numel = name, dtype, numel
        self.params: list[str] = []
        self.read = 0  # elements copied out of the tensor's own storage
        self.foreign = False  # a write came from a tensor derived into new storage: `read` is not the whole story
        self.casts: list[str] = []


class _Writes:
    """Every write into a parameter's storage while active (`Tensor.copy_`, `fill_`, `zero_`, item assignment, as
    vLLM's weight loaders write): which parameter, which elements, from which fed tensor, with which dtype change.
    Works on meta tensors. Only these methods are wrapped, not every tensor operation (a TorchDispatchMode sees all
    of them and tripled the load's time on the seed-size checkpoint)."""

    _METHODS = ("copy_", "fill_", "zero_", "__setitem__")

    def __init__(self, params: dict[int, tuple[str, Any]], fed: dict[int, _Tensor], current: list[_Tensor | None]):
        self.params, self.fed, self.current = params, fed, current
        self.seen: dict[str, list[tuple[int, int]]] = {}
        self._originals: dict[str, Any] = {}

    def __enter__(self) -> _Writes:
        import torch

        T = torch.Tensor
        self._originals = {m: getattr(T, m) for m in self._METHODS}
        copy, fill, zero, setitem = (self._originals[m] for m in self._METHODS)
        params, record = self.params, self.record

        def copy_(dst: Any, src: Any, *args: Any, **kwargs: Any) -> Any:
            hit = params.get(dst.untyped_storage()._cdata)
            if hit is not None:
                record(hit[0], dst, src)
            return copy(dst, src, *args, **kwargs)

        def fill_(dst: Any, value: Any) -> Any:
            hit = params.get(dst.untyped_storage()._cdata)
            if hit is not None:
                record(hit[0], dst, value)
            return fill(dst, value)

        def zero_(dst: Any) -> Any:
            hit = params.get(dst.untyped_storage()._cdata)
            if hit is not None:
                record(hit[0], dst, None)
            return zero(dst)

        def __setitem__(dst: Any, index: Any, value: Any) -> Any:
            hit = params.get(dst.untyped_storage()._cdata)
            if hit is not None:
                record(hit[0], dst[index], value)
            return setitem(dst, index, value)

        T.copy_, T.fill_, T.zero_, T.__setitem__ = copy_, fill_, zero_, __setitem__
        return self

    def __exit__(self, *exc: object) -> None:
        import torch

        for name, original in self._originals.items():
            setattr(torch.Tensor, name, original)

    def record(self, pname: str, dst: Any, src: Any) -> None:
        import torch

        runs = self.seen.setdefault(pname, [])
        runs.extend(_intervals(dst.storage_offset(), tuple(dst.shape), tuple(dst.stride())))
        if not isinstance(src, torch.Tensor):
            return
        owner = self.fed.get(src.untyped_storage()._cdata)
        tensor = owner or self.current[0]
        if tensor is None:
            return
        if pname not in tensor.params:
            tensor.params.append(pname)
        if owner is not None:
            tensor.read += src.numel()
        else:
            tensor.foreign = True
        # torch converts the numbers on a copy across kinds: a float tensor into an integer parameter, or packed
        # 8-bit codes (U8 / I8) into a float one, leaves values that mean nothing in the layer's format. Wider
        # integers into a float parameter are metadata that keeps its value (compressed-tensors' I32 `weight_shape`
        # into the MoE method's BF16 parameter), not a cast finding.
        codes = (torch.uint8, torch.int8)
        if (src.dtype.is_floating_point and not dst.dtype.is_floating_point and dst.dtype != torch.bool) or (
            src.dtype in codes and dst.dtype.is_floating_point
        ):
            cast = f"{tensor.dtype} into a {_st_dtype(dst.dtype)} parameter"
            if cast not in tensor.casts:
                tensor.casts.append(cast)


def _st_dtype(dtype: Any) -> str:
    text = str(dtype).removeprefix("torch.")
    for st, name in _DTYPES.items():
        if name == text:
            return st
    return text


# ---- the dry run --------------------------------------------------------------------------------------------------


def _architecture(folder: Path) -> str | None:
    try:
        archs = json.loads((folder / "config.json").read_text()).get("architectures")
    except (OSError, ValueError, AttributeError):
        return None
    return archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None


def _failing_layer(exc: BaseException) -> str | None:
    """`layer \\`prefix\\` (Class)`: the innermost vLLM module under construction when the build raised."""
    import torch

    found = None
    tb = exc.__traceback__
    while tb is not None:
        local = tb.tb_frame.f_locals
        obj, prefix = local.get("self"), local.get("prefix")
        if isinstance(obj, torch.nn.Module) and isinstance(prefix, str) and prefix:
            found = f"layer `{prefix}` ({type(obj).__name__})"
        tb = tb.tb_next
    return found


def _weight_only(module: Any) -> bool:
    """A layer whose quant method computes with BF16 activations (W4A16 NVFP4 and the like): its activation input
    scales are never read."""
    for obj in (getattr(module, "scheme", None), getattr(module, "quant_method", None)):
        if obj is None:
            continue
        if getattr(obj, "use_a16", False):
            return True
        spec = getattr(obj, "spec", None)
        if spec is not None and hasattr(spec, "activation") and spec.activation is None:
            return True
        name = type(obj).__name__
        if "A16" in name or "W4A16" in name or "Wna16" in name or "WNA16" in name:
            return True
        quant_config = getattr(obj, "quant_config", None)
        if quant_config is not None and "W4A16" in str(getattr(quant_config, "quant_algo", "")):
            return True
    return False


def _device_during_build(platform: Any) -> contextlib.AbstractContextManager[None]:
    """Layers that place a parameter on `current_platform.current_device()` (Qwen3.5's gated-delta-net norm) get the
    meta device instead, so nothing is allocated on a GPU."""
    import torch

    original = getattr(type(platform), "current_device", None)
    if original is None:
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def patched() -> Iterator[None]:
        type(platform).current_device = classmethod(lambda cls: torch.device("meta"))
        try:
            yield
        finally:
            type(platform).current_device = original

    return patched()


def _to_meta(model: Any) -> None:
    """Any parameter built off the meta device anyway is swapped for a meta one of the same class and attributes
    (`p.data = meta` is refused: incompatible tensor type)."""
    import torch

    for mod in model.modules():
        for pname, p in list(mod._parameters.items()):
            if p is None or p.device.type == "meta":
                continue
            new = torch.nn.Parameter.__new__(type(p), torch.empty_like(p, device="meta"), False)
            new.__dict__.update(p.__dict__)
            mod._parameters[pname] = new


def judge(folder: Path) -> dict[str, Any]:
    """The dry run of one checkpoint folder, as a LoadAccounting dict (judge `vllm`)."""
    import torch
    import vllm
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform

    version = f"vLLM {vllm.__version__}"
    arch = _architecture(folder)
    seconds: dict[str, float] = {}
    out: dict[str, Any] = {
        "judge": "vllm",
        "judged_by": version,
        "architecture": arch,
        "build_error": None,
        "tensors": [],
        "parameters": [],
        "platform": type(current_platform).__name__,
        "seconds": seconds,
    }
    t = time.perf_counter()
    try:
        vc = EngineArgs(
            model=str(folder),
            load_format="dummy",
            enforce_eager=True,
            max_model_len=256,
            skip_tokenizer_init=True,
        ).create_engine_config()
    except Exception as exc:  # noqa: BLE001 - vLLM's rejection of the config is the verdict
        out["build_error"] = f"config rejected: {error_text(exc)}"
        return out
    seconds["config"] = time.perf_counter() - t

    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype

    t = time.perf_counter()
    with kernels_stubbed():
        init_parallel(vc)
        try:
            with (
                set_current_vllm_config(vc),
                set_default_torch_dtype(vc.model_config.dtype),
                torch.device("meta"),
                _device_during_build(current_platform),
            ):
                model = initialize_model(vllm_config=vc)
        except Exception as exc:  # noqa: BLE001 - vLLM cannot build a layer: say which, in its words
            layer = _failing_layer(exc)
            out["build_error"] = f"{layer}: {error_text(exc)}" if layer else error_text(exc)
            return out
    _to_meta(model)
    seconds["build"] = time.perf_counter() - t

    t = time.perf_counter()
    with set_current_vllm_config(vc):
        tensors, fates, params, unreadable = _load(folder, model)
    seconds["load"] = time.perf_counter() - t
    out["tensors"], out["parameters"] = fates, params
    out["unreadable_files"] = unreadable
    out["tensor_count"] = len(tensors)
    return out


def _load(folder: Path, model: Any) -> tuple[list[Any], list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    import torch

    entries, unreadable = header_tensors(folder)
    named = dict(model.named_parameters())
    by_storage = {p.untyped_storage()._cdata: (n, p) for n, p in named.items()}
    records: list[_Tensor] = []
    fed: dict[int, _Tensor] = {}
    current: list[_Tensor | None] = [None]
    fatal: dict[str, str] = {}
    unknown_dtype: dict[str, str] = {}
    loaded_names: set[str] = set()
    recorder = _Writes(by_storage, fed, current)
    meta_tensors = []  # fed tensors stay alive, so their storages are not reused while the load runs
    position = 0

    def stream() -> Iterator[tuple[str, Any]]:
        nonlocal position
        while position < len(entries):
            name, dtype, shape = entries[position]
            position += 1
            torch_dtype = getattr(torch, _DTYPES.get(dtype, ""), None)
            if torch_dtype is None:
                unknown_dtype[name] = dtype
                continue
            tensor = torch.empty(shape, dtype=torch_dtype, device="meta")
            record = _Tensor(name, dtype, tensor.numel())
            records.append(record)
            meta_tensors.append(tensor)
            fed[tensor.untyped_storage()._cdata] = record
            current[0] = record
            yield name, tensor

    # One load_weights call over the whole stream, as vLLM makes it; after an exception (the tensor being fed when
    # it raised is the one named), the load goes on from the next tensor, so every failing tensor is reported.
    while position < len(entries):
        current[0] = None
        try:
            with recorder:
                loaded = model.load_weights(stream())
        except Exception as exc:  # noqa: BLE001 - vLLM's exception is the verdict on this tensor
            if current[0] is not None:
                fatal[current[0].name] = error_text(exc)
        else:
            loaded_names |= set(loaded or ())

    fates = [_fate(r, fatal.get(r.name)) for r in records]
    fates += [
        {"tensor": n, "fate": "skipped", "reason": f"dtype {d} has no torch dtype in this interpreter"}
        for n, d in unknown_dtype.items()
    ]
    fills = [_fill(name, p, recorder.seen.get(name), name in loaded_names, model) for name, p in named.items()]
    return records, fates, fills, unreadable


def _fate(r: _Tensor, error: str | None) -> dict[str, Any]:
    base = {"tensor": r.name, "parameter": r.params[0] if r.params else None, "shard": None, "owner": None}
    if error is not None:
        return {**base, "fate": "fatal", "error": error, "reason": "", "problem": None}
    if not r.params:
        return {
            **base,
            "fate": "skipped",
            "error": None,
            "reason": "vLLM's load_weights takes it and writes no parameter (the model class skips the name)",
            "problem": None,
        }
    if r.casts:
        return {**base, "fate": "loaded", "error": None, "reason": "; ".join(r.casts), "problem": "dtype-cast"}
    if not r.foreign and 0 < r.read < r.numel:
        reason = (
            f"vLLM copies {r.read} of the tensor's {r.numel} elements into `{r.params[0]}` and drops the rest silently"
        )
        return {**base, "fate": "loaded", "error": None, "reason": reason, "problem": "shape"}
    return {**base, "fate": "loaded", "error": None, "reason": "", "problem": None}


def _fill(name: str, p: Any, runs: list[tuple[int, int]] | None, returned: bool, model: Any) -> dict[str, Any]:
    size = p.numel()
    gaps = _covered(runs, size) if runs else [(0, size)]
    written = bool(runs) or returned
    filled = written and (not runs or not gaps)
    partial: list[str] = []
    if runs and gaps and size:
        partial = _gap_labels(name, tuple(p.shape), gaps)
    default = None
    if not written and _INPUT_SCALE.search(name):
        module = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
        if _weight_only(module):
            default = "unused"
    return {
        "parameter": name,
        "shape": list(p.shape),
        "dtype": _st_dtype(p.dtype),
        "filled": filled,
        "partial": partial,
        "default": default,
        "note": "" if filled else "left as `torch.empty` memory: the layer computes with garbage",
        "owner": None,
    }


def _gap_labels(name: str, shape: tuple[int, ...], gaps: list[tuple[int, int]]) -> list[str]:
    """The unwritten parts of a parameter: expert ids for a fused-experts parameter, else row ranges of dim 0."""
    rows = shape[0] if shape else 1
    per_row = max(1, (shape and int(_prod(shape[1:]))) or 1)
    hit: set[int] = set()
    for start, stop in gaps:
        hit.update(range(start // per_row, min(rows, -(-stop // per_row))))
    if ".experts." in f".{name}" and shape:
        return [f"expert {i}" for i in sorted(hit)][:64]
    ranges = []
    for _, group in itertools.groupby(enumerate(sorted(hit)), key=lambda x: x[1] - x[0]):
        members = [v for _, v in group]
        ranges.append(f"rows {members[0]}-{members[-1]}" if len(members) > 1 else f"row {members[0]}")
    return ranges[:64]


def _prod(dims: tuple[int, ...]) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: meta_load.py CHECKPOINT_FOLDER", file=sys.stderr)
        return 2
    started = time.perf_counter()
    try:
        set_platform_env()
        import vllm  # noqa: F401 - imported here so its absence is a one-line answer, not a traceback
    except ImportError as exc:
        print(f"cannot import {exc.name or 'vllm'}: {exc}", file=sys.stderr)
        return NO_VLLM_EXIT
    imported = time.perf_counter() - started
    # vLLM and its dependencies may print to stdout; the accounting alone goes there, everything else to stderr.
    sys.stdout.flush()
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    result = judge(Path(argv[1]))
    result["seconds"]["import"] = imported
    result["seconds"]["total"] = time.perf_counter() - started
    answer.write(json.dumps(result))
    answer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Check 4 of the conformance run: `ckpt plan`'s KV-cache figures against vLLM 0.33's own KV-cache specs and pool.

For every genuine and defective fixture and every config of tests/plan_configs.py (the families the fixtures do not
carry: MLA, sliding window, Qwen3-Next), at --kv-cache-dtype auto, fp8 and nvfp4: the KV dtype vLLM resolves, and
per decoder layer the spec class, the bytes per token of attention layers (page bytes / block size) and the state
bytes, shapes and dtypes of GatedDeltaNet layers, against ckpt's `ckpt_tools.plan.layers.cache_model` for the same
config. Then, on vLLM's own specs, the start-up figures: the KV-cache groups, the bytes of one block, the pool's
blocks, the bytes one request of 8k needs, and the "KV cache size: N tokens" / "Maximum concurrency" log line
(vLLM's grouping, pool and capacity functions), against ckpt's `budget.pages` / `budget.answer`. Run alone or from
run.py (side venv only):

    /work/venv-vllm/bin/python bench/conformance/plan_check.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))

import vllm_kv  # noqa: E402 - sets the CPU platform before vLLM is imported

from ckpt_tools.errors import CkptError  # noqa: E402
from ckpt_tools.plan.budget import answer, pages  # noqa: E402
from ckpt_tools.plan.layers import FULL, GDN, MLA, SLIDING, cache_model  # noqa: E402

DTYPES = ("auto", "fp8", "nvfp4")
# The start-up figures are compared at one odd-sized budget, 8k context and 2,048 batched tokens; hybrid cases also
# with prefix caching (align mode) and 3 speculative tokens.
BUDGET, LENGTH, BATCHED = 7 * (1 << 30) + 123_457, 8192, 2048
SCENARIOS = ((False, 0), (True, 3))
KIND_OF_SPEC = {"FullAttentionSpec": FULL, "SlidingWindowSpec": SLIDING, "MLAAttentionSpec": MLA, "MambaSpec": GDN}


@dataclass
class PlanRow:
    case: str
    kv_cache_dtype: str
    status: str  # ok, DIFF, n/a
    text: str
    details: list[str] = field(default_factory=list)


def _ckpt_side(folder: Path, kv: str):
    """ckpt's cache model for the folder: the detection's KV reading when the folder has weights, else the config."""
    cfg_all = json.loads((folder / "config.json").read_text())
    text = cfg_all.get("text_config") if isinstance(cfg_all.get("text_config"), dict) else cfg_all
    method = word = None
    if any(folder.glob("*.safetensors")):
        from ckpt_tools.pipeline import analyze

        det = analyze(str(folder), headers_only=True).detection
        method, word = det.quant_method or det.vllm_quantization, det.kv_cache
    return cache_model(text, cfg_all, tp=1, kv_request=kv, quant_method=method, kv_word=word)


def _vllm_dtype_word(ckpt_dtype: str, model_dtype: str) -> str:
    return "auto" if ckpt_dtype == model_dtype else ckpt_dtype


def compare(name: str, folder: Path, kv: str) -> PlanRow:
    build = vllm_kv.kv_specs(str(folder), kv)
    try:
        cache = _ckpt_side(folder, kv)
    except CkptError as exc:
        if build.error:
            return PlanRow(name, kv, "ok", "both refuse", [f"vLLM: {build.error}", f"ckpt: {exc}"])
        return PlanRow(name, kv, "DIFF", "ckpt refuses, vLLM sizes it", [str(exc)])
    if build.error:
        return PlanRow(name, kv, "n/a", f"vLLM cannot build it: {build.error[:80]}")
    diffs = []
    v_dtype = build.kv_cache_dtype or "auto"
    c_dtype = _vllm_dtype_word(cache.kv_dtype, cache.model_dtype)
    if v_dtype != c_dtype:
        diffs.append(f"KV dtype: vLLM {v_dtype}, ckpt {cache.kv_dtype}")
    v_layers, c_layers = build.layers or [], list(cache.layers)
    if len(v_layers) != len(c_layers):
        diffs.append(f"layers: vLLM {len(v_layers)}, ckpt {len(c_layers)}")
    for v, c in zip(v_layers, c_layers, strict=False):
        kind = KIND_OF_SPEC.get(v.spec_class, v.spec_class)
        got = (
            c.kind,
            c.token_bytes,
            c.state_bytes,
            c.sliding_window if c.kind == SLIDING else None,
            tuple(c.state_shapes),
            tuple(c.state_dtypes),
        )
        want = (kind, v.token_bytes, v.state_bytes, v.sliding_window if kind == SLIDING else None, v.shapes, v.dtypes)
        if got != want:
            diffs.append(f"{v.name}: vLLM {want}, ckpt {got}")
    token = sum(v.token_bytes for v in v_layers)
    state = sum(v.state_bytes for v in v_layers)
    summary = f"{token} B/token, {state} B/seq state ({len(v_layers)} layers)"
    if not diffs:
        capacity, cap_diffs = _capacity(build, cache)
        summary += f"; {capacity}"
        diffs += cap_diffs
    return PlanRow(name, kv, "DIFF" if diffs else "ok", summary, diffs)


def _capacity(build, cache) -> tuple[str, list[str]]:
    """The start-up figures (pool blocks, bytes a request needs, "KV cache size" and "Maximum concurrency") from
    vLLM's own functions against ckpt's `pages` / `answer`, for the scenarios that apply."""
    hybrid = bool(cache.of(GDN)) and len(cache.of(GDN)) < len(cache.layers)
    texts, diffs = [], []
    for prefix, spec in SCENARIOS if hybrid else SCENARIOS[:1]:
        p = pages(cache, max_num_batched_tokens=BATCHED, prefix_caching=prefix, speculative_tokens=spec)
        a = answer(p, BUDGET, context=LENGTH, max_model_len=LENGTH, max_num_seqs=None, seq_counts=())
        try:
            v = vllm_kv.capacity(
                build,
                block_size=p.block_size,
                state_page=p.state_page,
                available_memory=BUDGET,
                max_model_len=LENGTH,
                max_num_batched_tokens=BATCHED,
                prefix_caching=prefix,
                speculative_tokens=spec,
            )
        except Exception as exc:  # noqa: BLE001 - vLLM refusing a layout is a finding of the check, not a crash
            diffs.append(f"capacity (prefix caching {prefix}, {spec} speculative): vLLM raised {exc!r}"[:300])
            continue
        got = (
            len(p.groups),
            p.block_bytes,
            BUDGET // p.block_bytes,
            p.request_bytes(LENGTH),
            a.kv_cache_tokens,
            round(a.max_concurrency, 6),
        )
        want = (
            len(v.groups),
            v.bytes_per_block,
            v.num_blocks,
            v.request_bytes,
            v.kv_cache_tokens,
            round(v.max_concurrency, 6),
        )
        if got != want:
            diffs.append(
                f"capacity (prefix caching {prefix}, {spec} speculative; groups, bytes/block, blocks, "
                f"request bytes, tokens, concurrency): vLLM {want}, ckpt {got}"
            )
        texts.append(
            f"{len(v.groups)} groups, {v.num_blocks:,} blocks, {v.kv_cache_tokens:,} tokens "
            f"({v.max_concurrency:.2f}x)" + (" [prefix, 3 spec]" if prefix else "")
        )
    return "; ".join(texts), diffs


def cases(workdir: Path) -> list[tuple[str, Path]]:
    import plan_configs

    out = []
    for origin in ("genuine", "defective"):
        for folder in sorted((REPO / "fixtures" / origin).iterdir()):
            if (folder / "config.json").is_file():
                out.append((f"{origin}/{folder.name}", folder))
    for name in plan_configs.CONFIGS:
        out.append((f"config/{name}", plan_configs.write(name, workdir / name)))
    return out


def run() -> list[PlanRow]:
    with tempfile.TemporaryDirectory(prefix="ckpt-plan-conformance-") as tmp:
        return [compare(name, folder, kv) for name, folder in cases(Path(tmp)) for kv in DTYPES]


def score(rows: list[PlanRow]) -> tuple[str, bool]:
    judged = [r for r in rows if r.status != "n/a"]
    ok = sum(1 for r in judged if r.status == "ok")
    return (
        f"plan {ok}/{len(judged)} (per-layer KV bytes/token and state bytes/sequence, groups, pool blocks and "
        f"the KV cache size / concurrency line; {len(rows) - len(judged)} "
        f"n/a: vLLM cannot build the case)"
    ), ok == len(judged)


def section(rows: list[PlanRow]) -> list[str]:
    line, _clean = score(rows)
    out = [
        "## Check 4: memory plan (per-layer KV-cache specs, KV-cache groups and the start-up capacity line)",
        "",
        line,
        "",
        "| case | --kv-cache-dtype | plan | vLLM's specs |",
        "|---|---|---|---|",
    ]
    out += [f"| {r.case} | {r.kv_cache_dtype} | {r.status} | {r.text} |" for r in rows]
    diffs = [f"- **{r.case}** ({r.kv_cache_dtype}): {d}" for r in rows if r.status == "DIFF" for d in r.details]
    return [*out, "", *(diffs or ["No disagreement."]), ""]


def main() -> int:
    rows = run()
    print("\n".join(section(rows)))
    return 0 if score(rows)[1] else 1


if __name__ == "__main__":
    sys.exit(main())

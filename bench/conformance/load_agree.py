"""The load model against vLLM's own loader, both ways, on every conformance case (every genuine and defective
fixture, every rule case, every config recipe: cases.py).

Run with the side venv's python (bench/conformance/setup.sh builds it):

    /work/venv-vllm/bin/python bench/conformance/load_agree.py [--only SUBSTRING] [--out bench/conformance/load_agree.md]

Per case, two accountings of the same headers: the load model's (ckpt_tools/load/model.py, judge `model`) and vLLM's
(ckpt_tools/vllm_dry/meta_load.py, the code `ckpt doctor --vllm` runs, here in this process so vLLM is imported
once). Each goes through the one findings function (ckpt_tools/rules/_load_findings.py) with the catalogue owners removed,
so both judges are compared on everything they see, not on who reports it. The two agree on a case when they give
the same CK60x codes on the same tensors / parameters (a parameter is compared by the checkpoint names around it,
as the two judges label partial fills differently). Each disagreement is listed with its explanation (EXPLAINED
below, written from reading vLLM's code for the case); an unexplained one exits 1.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from ckpt_tools.vllm_dry import meta_load  # noqa: E402 - sets the platform before vLLM is imported

meta_load.set_platform_env()

from cases import Case, all_cases  # noqa: E402

from ckpt_tools.load.accounting import LoadAccounting  # noqa: E402
from ckpt_tools.load.model import load_accounting  # noqa: E402
from ckpt_tools.pipeline import analyze  # noqa: E402
from ckpt_tools.rules._load_findings import findings  # noqa: E402

# Why the two judges differ, by cause, with the cases where each was seen (read from this run's output and vLLM
# 0.33.0's code). A listed case still shows as a disagreement in the table and the figure; the list only says why.
CAUSES: dict[str, tuple[str, tuple[str, ...]]] = {
    "config-rule": (
        "vLLM refuses the config before building anything (CK605 `config rejected`); ckpt's verdict on such a config "
        "is a catalogue rule (unsupported-architecture CK312, invalid-header CK104, non-hf-layout CK2xx), and the "
        "load model builds no accounting for an architecture or config it does not know",
        ("unsupported-architecture#1", "unsupported-architecture#2", "unsupported-architecture#3",
         "unsupported-architecture#4", "unsupported-architecture#6", "unsupported-architecture#8",
         "invalid-header#2", "non-hf-layout#6"),
    ),
    "build-checks": (
        "vLLM's quant method refuses the layer while creating its parameters (block-FP8 output size not divisible by "
        "block_n 128 on these 2-layer fixtures; Marlin's group-size / bit-width checks; 4-bit KV cache in Attention; "
        "a fused layer with some shards excluded; a vision config without `window_size`): CK605 naming the layer. "
        "The load model has no such build checks; kernel-selection (CK405), block-fp8-tp-sizes, "
        "kv-cache-config-mismatch and ignore-list-mismatch (CK301) report these causes",
        ("llmc-llama-fp8-block", "block-fp8-tp-sizes#2", "scale-shape-mismatch#5", "kernel-selection#11", "kernel-selection#12",
         "packed-layout-mismatch#1", "kv-cache-config-mismatch#5", "ignore-list-mismatch#3", "non-hf-layout#7"),
    ),
    "router-gate": (
        "vLLM's Qwen3-MoE builds the router gate with the quant config (`GateLinear(..., quant_config=...)`, "
        "qwen3_moe.py), so under block-FP8 it registers `gate.weight_scale_inv`, which the transformers-FP8 export "
        "(router stored BF16) never fills; the load model treats the router as unquantized. Whether a GPU load then "
        "computes with an unset scale was not verified (process_weights_after_loading does not run on meta)",
        ("transformers-qwen3moe-fp8-block", "invalid-scale-value#11", "scale-shape-mismatch#18", "zero-scale-row#7"),
    ),
    "unread-shard": (
        "the tensor sits in a shard vLLM does not read (missing, an LFS pointer, or not named by the index: vLLM "
        "loads only the index's files), so vLLM leaves its parameter unfilled; the load model counts such tensors as "
        "present and leaves the cause to the shard's rule (index-missing-shard, lfs-pointer, index-tensor-mismatch, "
        "stray-shard, tied-embedding-mismatch's unindexed head). Under --vllm these stay with the shard's rule",
        ("index-missing-shard#1", "lfs-pointer#1", "index-tensor-mismatch#3", "index-tensor-mismatch#5",
         "stray-shard#2", "tied-embedding-mismatch#6"),
    ),
    "absent-module": (
        "vLLM builds modules the checkpoint has no tensor for (the vision tower, attention biases, an untied "
        "lm_head) and reports their parameters unfilled; the load model accounts only the modules the checkpoint "
        "has, and missing-component (CK306) / tied-embedding-mismatch report the absence",
        ("missing-component#1", "missing-component#3", "non-hf-layout#4", "tied-embedding-mismatch#1"),
    ),
    "outside-layout": (
        "tensor names outside the model's layout (another root prefix, `decoder.`, `feed_forward.`): vLLM's "
        "AutoWeightsLoader raises 'There is no module or parameter named ...' (CK601) and the real parameters stay "
        "unfilled; the load model accounts names it has no module for as loaded, unchecked, and leaves them to "
        "non-hf-layout / misnested-prefix",
        ("non-hf-layout#1", "non-hf-layout#2", "non-hf-layout#3", "non-hf-layout#8", "packed-layout-mismatch#8"),
    ),
    "expert-gaps": (
        "a missing or mis-shaped expert: vLLM sees the unfilled slice of the fused experts parameter (`expert N`); "
        "the load model leaves per-expert gaps to moe-expert-missing-scale (CK402) and packed-layout-mismatch "
        "(CK404) without an accounting entry",
        ("moe-expert-missing-scale#3", "moe-expert-missing-scale#7", "packed-layout-mismatch#15",
         "packed-layout-mismatch#17", "packed-layout-mismatch#18", "scale-shape-mismatch#19",
         "ignore-list-mismatch#10"),
    ),
    "config-count": (
        "a config count past any released model (`num_local_experts = 10**12`): ckpt reports it before any loop "
        "depends on it (moe-expert-missing-scale, CK402) and the load model builds no accounting from it; vLLM's "
        "meta build then sees every expert parameter unfilled or misfit",
        ("moe-expert-missing-scale#4",),
    ),
    "scale-shapes": (
        "a scale or packed tensor of the wrong shape: vLLM's weight loader raises (CK603) and leaves the parameter "
        "(or a row range of the fused one) unfilled (CK602); the load model checks only packed weights' input "
        "dimension itself and leaves scale tables to scale-shape-mismatch (CK403) / packed-layout-mismatch (CK404), "
        "which judge them against the same tables; a float weight stored where the config declares another scheme "
        "is a cast or a misfit to the model (CK604 / CK603) and a load error to vLLM",
        ("scale-shape-mismatch#1", "scale-shape-mismatch#3", "scale-shape-mismatch#6", "scale-shape-mismatch#10",
         "scale-shape-mismatch#12", "scale-shape-mismatch#13", "packed-layout-mismatch#3", "packed-layout-mismatch#5",
         "packed-layout-mismatch#7", "packed-layout-mismatch#9", "packed-layout-mismatch#16", "load-shape-mismatch#1",
         "orphan-scale#2", "quant-config-mismatch#2", "reader-dtype-support#1", "unsupported-quant-algo#10",
         "tensor-parallel-indivisible#3"),
    ),
    "model-gap": (
        "the load model is wrong here, to be fixed in rules/loader.toml: `k_proj.output_scale` has no parameter in "
        "vLLM 0.33's Llama (CK601), and with `tie_word_embeddings` a quantized `lm_head.*` has no parameter to go "
        "into (vLLM: CK601 on the packed head) while the model calls `lm_head.weight` unfilled",
        ("kv-scale-naming#2", "tied-embedding-mismatch#3"),
    ),
}  # fmt: skip
EXPLAINED: dict[str, str] = {case: f"{cause}: {why}" for cause, (why, cases) in CAUSES.items() for case in cases}


@dataclass(frozen=True)
class Verdict:
    codes: dict[str, frozenset[str]]  # CK60x code -> the tensors / parameters it names
    build_error: str | None
    seconds: float


@dataclass(frozen=True)
class Row:
    case: Case
    model: Verdict
    vllm: Verdict

    @property
    def agree(self) -> bool:
        return set(self.model.codes) == set(self.vllm.codes)

    def differences(self) -> list[str]:
        out = []
        for code in sorted(set(self.model.codes) | set(self.vllm.codes)):
            m, v = self.model.codes.get(code), self.vllm.codes.get(code)
            if m is None:
                out.append(f"{code} from vLLM only ({_names(v)})")
            elif v is None:
                out.append(f"{code} from the model only ({_names(m)})")
        return out


def _names(names: frozenset[str] | None) -> str:
    listed = sorted(names or ())
    return ", ".join(f"`{n}`" for n in listed[:2]) + (f" +{len(listed) - 2}" if len(listed) > 2 else "")


def _unowned(acc: LoadAccounting) -> LoadAccounting:
    return replace(
        acc,
        tensors=tuple(replace(t, owner=None) for t in acc.tensors),
        parameters=tuple(replace(p, owner=None) for p in acc.parameters),
    )


def verdict(acc: LoadAccounting, seconds: float) -> Verdict:
    codes: dict[str, set[str]] = {}
    for f in findings(_unowned(acc)):
        codes.setdefault(f.code, set()).update(f.all_tensors or (acc.build_error or "",))
    return Verdict({k: frozenset(v) for k, v in codes.items()}, acc.build_error, seconds)


def judge_case(case: Case, workdir: Path) -> Row:
    folder = case.materialize(workdir)
    t = time.perf_counter()
    analysis = analyze(str(folder), headers_only=True)
    model = load_accounting(analysis.checkpoint, analysis.detection)
    model_s = time.perf_counter() - t
    t = time.perf_counter()
    data = meta_load.judge(folder)
    vllm = LoadAccounting.from_dict(data)
    return Row(case, verdict(model, model_s), verdict(vllm, time.perf_counter() - t))


def explanation(name: str) -> str | None:
    return EXPLAINED.get(name)


def render(rows: list[Row], version: str) -> str:
    agree = sum(r.agree for r in rows)
    lines = [
        f"# Load model vs vLLM {version}'s own loader: {agree} / {len(rows)} cases agree",
        "",
        "Generated by bench/conformance/load_agree.py (docs/conformance.md says how to read it).",
        "",
        "Causes (each disagreement below names one):",
        "",
        *[f"- **{cause}** ({len(cases)} case(s)): {why}." for cause, (why, cases) in CAUSES.items()],
        "",
        "| case | origin | load model | vLLM | agree | why they differ |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        cause = explanation(r.case.name)
        label = cause.split(":", 1)[0] if cause else "**unexplained**"
        why = "" if r.agree else f"{label}: " + "; ".join(r.differences())
        lines.append(
            f"| {r.case.name} | {r.case.origin} | {_codes(r.model)} | {_codes(r.vllm)} | "
            f"{'yes' if r.agree else 'no'} | {why.replace('|', '/')} |"
        )
    return "\n".join(lines) + "\n"


def _codes(v: Verdict) -> str:
    return ", ".join(sorted(v.codes)) or "clean"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="judge only the cases whose name contains this")
    parser.add_argument("--out", type=Path, help="write the Markdown table here")
    args = parser.parse_args()
    import vllm

    cases = [c for c in all_cases(REPO) if not args.only or args.only in c.name]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="ckpt-load-agree-") as tmp:
        for case in cases:
            row = judge_case(case, Path(tmp))
            rows.append(row)
            mark = "ok" if row.agree else "DIFF " + "; ".join(row.differences())
            print(f"{case.name:60s} {row.vllm.seconds:6.2f}s {mark}", flush=True)
        text = render(rows, vllm.__version__).replace(tmp, "$TMP")  # the same table from run to run
    if args.out:
        args.out.write_text(text)
    unexplained = [r for r in rows if not r.agree and explanation(r.case.name) is None]
    print(text.splitlines()[0].removeprefix("# "))
    print(f"{len(unexplained)} disagreement(s) unexplained")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())

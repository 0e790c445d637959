"""`ckpt doctor --vllm`, the parent's side, with fake child interpreters (CI has neither torch nor vLLM): the child's
accounting becomes the CK60x verdict, and every way the child can fail is one line and exit 2. The real child runs
in the conformance venv (bench/conformance/load_agree.py, docs/vllm-dry-run.md)."""

from __future__ import annotations

import json
import struct
import sys
import time
from pathlib import Path

import pytest

from ckpt_tools.load.accounting import LoadAccounting, ParameterFill, TensorFate
from ckpt_tools.rules._load_findings import findings
from ckpt_tools.vllm_dry import meta_load
from ckpt_tools.vllm_dry.combine import SHARD_OWNER, combined
from tests.cli.test_output_formats import REPORT
from tests.corrupt import GENUINE
from tests.repair_helpers import run_cli

FIXTURE = GENUINE / "llmc-llama-nvfp4"
QKV = "model.layers.0.self_attn.qkv_proj.weight_packed"


def fake_python(tmp_path: Path, body: str) -> Path:
    """An executable standing in for the vLLM interpreter: called as `PY meta_load.py FOLDER`, runs `body` with
    `folder` bound to FOLDER."""
    script = tmp_path / "fake-python"
    script.write_text(f"#!{sys.executable}\nimport json, os, sys, time\nfolder = sys.argv[2]\n{body}\n")
    script.chmod(0o755)
    return script


def accounting(**overrides: object) -> dict:
    data: dict = {
        "judge": "vllm",
        "judged_by": "vLLM 9.9.9",
        "architecture": "LlamaForCausalLM",
        "build_error": None,
        "tensors": [],
        "parameters": [],
        "platform": "FakePlatform",
        "seconds": {"import": 1.5, "total": 2.0},
    }
    data.update(overrides)
    return data


def printing(tmp_path: Path, data: dict) -> Path:
    return fake_python(tmp_path, f"print(json.dumps({data!r}))")


def doctor(capsys, *args: object) -> tuple[int, str, str]:
    return run_cli(["doctor", str(FIXTURE), "--headers-only", *map(str, args)], capsys)


def test_vllm_accounting_is_the_load_verdict(tmp_path: Path, capsys) -> None:
    fatal = {"tensor": "model.embed_tokens.weight_packed", "fate": "fatal", "error": "ValueError: There is no "
             "module or parameter named 'embed_tokens.weight_packed' in LlamaModel"}  # fmt: skip
    py = printing(tmp_path, accounting(tensors=[fatal]))
    code, out, err = doctor(capsys, "--vllm", "--vllm-python", py, "--format", "json")
    assert code == 1, err
    report = json.loads(out)
    (ck601,) = [f for f in report["findings"] if f["code"] == "CK601"]
    assert ck601["slug"] == "tensor-without-parameter"
    assert "judged by vLLM 9.9.9's own loader" in ck601["message"]
    assert ck601["details"]["judge"] == {"judge": "vllm", "judged_by": "vLLM 9.9.9"}
    assert report["vllm"]["judged_by"] == "vLLM 9.9.9" and report["vllm"]["platform"] == "FakePlatform"
    assert list(REPORT.iter_errors(report)) == []


def test_text_report_names_the_judging_vllm(tmp_path: Path, capsys) -> None:
    code, out, _ = doctor(capsys, "--vllm", "--vllm-python", printing(tmp_path, accounting()))
    assert "load judged   by vLLM 9.9.9's own loader on the meta device (FakePlatform, 2.0 s)" in out
    assert code == 0


def test_vllm_wins_where_the_model_speaks(tmp_path: Path, capsys) -> None:
    """The defective fixture's missing NVFP4 input scales: vLLM (here: a fake saying all is loaded) has the last
    word on the CK60x codes; the catalogue rules still speak for themselves."""
    target = GENUINE.parent / "defective" / "llama-nvfp4-missing-input-scales"
    _code, out, _ = run_cli(["doctor", str(target), "--headers-only", "--format", "json"], capsys)
    plain = {f["code"] for f in json.loads(out)["findings"]}
    py = printing(tmp_path, accounting())
    _code, out, _ = run_cli(
        ["doctor", str(target), "--headers-only", "--format", "json", "--vllm", "--vllm-python", str(py)], capsys
    )
    judged = {f["code"] for f in json.loads(out)["findings"]}
    assert {c for c in judged if not c.startswith("CK60")} == {c for c in plain if not c.startswith("CK60")}
    assert not {c for c in judged if c.startswith("CK60")}


def test_build_failure_names_the_layer(tmp_path: Path, capsys) -> None:
    error = "layer `model.layers.0.mlp.experts` (FusedMoE): ValueError: No NvFp4 MoE backend supports it"
    py = printing(tmp_path, accounting(build_error=error))
    code, out, _ = doctor(capsys, "--vllm", "--vllm-python", py, "--format", "json")
    (ck605,) = [f for f in json.loads(out)["findings"] if f["code"] == "CK605"]
    assert "model.layers.0.mlp.experts" in ck605["message"] and "vLLM 9.9.9" in ck605["message"]
    assert code == 1


@pytest.mark.parametrize(
    ("layer", "reported"),
    [("model.layers.0.self_attn.qkv_proj", {"CK308"}), ("model.layers.0.mlp.down_proj", {"CK308", "CK605"})],
)
def test_a_block_shape_build_failure_is_left_to_block_fp8_tp_sizes(tmp_path: Path, capsys, layer, reported) -> None:
    """The genuine 128x128 block-FP8 export is too small for its blocks at any TP size: CK308 says so, with the sizes.
    vLLM's failure to build that very layer at one GPU is the same cause, not a second finding; a failure on another
    layer still is one."""
    error = (
        f"layer `{layer}` (QKVParallelLinear): ValueError: Weight output_partition_size = 64 is not divisible by "
        "weight quantization block_n = 128."
    )
    target = GENUINE / "llmc-llama-fp8-block"
    py = printing(tmp_path, accounting(build_error=error))
    code, out, _ = run_cli(
        ["doctor", str(target), "--headers-only", "-f", "json", "--vllm", "--vllm-python", str(py)], capsys
    )
    codes = {f["code"] for f in json.loads(out)["findings"] if f["severity"] == "error"}
    assert codes == reported and code == 1


def assert_one_line(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert err.startswith("ckpt: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err


def test_no_vllm_gives_the_install_hint(tmp_path: Path, capsys) -> None:
    py = fake_python(tmp_path, "print('cannot import vllm: No module named vllm', file=sys.stderr); sys.exit(3)")
    code, _, err = doctor(capsys, "--vllm", "--vllm-python", py)
    assert_one_line(code, err, "vLLM is not importable", 'pip install "ckpt-tools[vllm]"', "--vllm-python")


def test_the_real_child_without_vllm_says_so(capsys) -> None:
    """meta_load.py itself, in this interpreter (no torch, no vLLM): the install hint, not a traceback."""
    code, _, err = doctor(capsys, "--vllm", "--vllm-python", sys.executable)
    assert_one_line(code, err, "vLLM is not importable", "cannot import torch")


def test_timeout_stops_the_child_and_its_children(tmp_path: Path, capsys) -> None:
    pids = tmp_path / "pids"
    py = fake_python(
        tmp_path,
        "import subprocess\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "time.sleep(60)",
    )
    started = time.monotonic()
    code, _, err = doctor(capsys, "--vllm", "--vllm-python", py, "--vllm-timeout", "2")
    assert time.monotonic() - started < 30
    assert_one_line(code, err, "did not finish within 2 s", "--vllm-timeout")
    for pid in map(int, pids.read_text().split()):
        assert not running(pid)


def running(pid: int) -> bool:
    """Alive and not a zombie (a killed grandchild waits for its new parent to reap it)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.1)
    return True


def test_timeout_from_the_environment(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("CKPT_VLLM_TIMEOUT", "1")
    py = fake_python(tmp_path, "time.sleep(60)")
    code, _, err = doctor(capsys, "--vllm", "--vllm-python", py)
    assert_one_line(code, err, "within 1 s")


def test_crash_gives_the_last_stderr_line(tmp_path: Path, capsys) -> None:
    py = fake_python(tmp_path, "print('Traceback (most recent call last):', file=sys.stderr)\n"
                     "print('RuntimeError: gloo failed to bind', file=sys.stderr)\nsys.exit(1)")  # fmt: skip
    code, _, err = doctor(capsys, "--vllm", "--vllm-python", py)
    assert_one_line(code, err, "crashed (exit code 1): RuntimeError: gloo failed to bind")


def test_garbage_on_stdout(tmp_path: Path, capsys) -> None:
    py = fake_python(tmp_path, "print('INFO 12-04 vLLM is starting')")
    code, _, err = doctor(capsys, "--vllm", "--vllm-python", py)
    assert_one_line(code, err, "printed no accounting", "vLLM is starting")


def test_interpreter_from_the_environment(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("CKPT_VLLM_PYTHON", str(printing(tmp_path, accounting(judged_by="vLLM 7.7.7"))))
    _code, out, _ = doctor(capsys, "--vllm", "--format", "json")
    assert json.loads(out)["vllm"]["judged_by"] == "vLLM 7.7.7"


def test_missing_interpreter(tmp_path: Path, capsys) -> None:
    code, _, err = doctor(capsys, "--vllm", "--vllm-python", tmp_path / "nope")
    assert_one_line(code, err, "cannot run", "nope")


def test_vllm_options_need_vllm(capsys) -> None:
    code, _, err = doctor(capsys, "--vllm-python", sys.executable)
    assert_one_line(code, err, "apply to --vllm")


def test_single_file_target_is_staged_header_only(tmp_path: Path, capsys) -> None:
    """A target that is not a local folder reaches the child as a folder of configs and header-only shards: the
    child could not read a weight byte if it tried."""
    listing = tmp_path / "listing.json"
    py = fake_python(
        tmp_path,
        f"files = {{n: os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder)}}\n"
        f"open({str(listing)!r}, 'w').write(json.dumps(files))\n"
        f"print(json.dumps({accounting()!r}))",
    )
    shard = FIXTURE / "model.safetensors"
    _code, _, _err = run_cli(["doctor", str(shard), "--headers-only", "--vllm", "--vllm-python", str(py)], capsys)
    files = json.loads(listing.read_text())
    (header_len,) = struct.unpack("<Q", shard.read_bytes()[:8])
    assert files["model.safetensors"] == 8 + header_len < shard.stat().st_size
    assert "config.json" in files
    assert not list(tmp_path.glob("ckpt-vllm-*"))  # nothing left behind


def test_local_folder_is_read_in_place(tmp_path: Path, capsys) -> None:
    seen = tmp_path / "seen"
    py = fake_python(tmp_path, f"open({str(seen)!r}, 'w').write(folder)\nprint(json.dumps({accounting()!r}))")
    doctor(capsys, "--vllm", "--vllm-python", py)
    assert Path(seen.read_text()) == FIXTURE


# ---- one verdict from two judges -----------------------------------------------------------------------------------


def _acc(judge: str, tensors=(), parameters=(), build_error=None) -> LoadAccounting:
    return LoadAccounting(judge, "vLLM 0.33.0", "LlamaForCausalLM", tuple(tensors), tuple(parameters), build_error)  # type: ignore[arg-type]


def test_combined_carries_the_models_owners() -> None:
    model = _acc(
        "model",
        [TensorFate(QKV, "fatal", problem="no-parameter", owner="ignore-list-mismatch")],
        [ParameterFill("model.layers.0.mlp.down_proj.weight_scale", None, None, False, owner="scale-shape-mismatch")],
    )
    vllm = _acc(
        "vllm",
        [TensorFate(QKV, "fatal", error="AssertionError"), TensorFate("lm_head.weight", "fatal", error="KeyError: x")],
        [
            ParameterFill("model.layers.0.mlp.down_proj.weight_scale", (4,), "F32", False),
            ParameterFill("model.layers.1.mlp.down_proj.weight", (4,), "U8", False),
        ],
    )
    both = combined(model, vllm)
    codes = {f.code: f.all_tensors for f in findings(both)}
    assert codes == {"CK601": ("lm_head.weight",), "CK602": ("model.layers.1.mlp.down_proj.weight",)}


def test_combined_owner_reaches_vllms_routed_experts() -> None:
    """vLLM names fused expert parameters under `routed_experts`; the model's owner (moe-expert-missing-scale) still
    reaches them, so a missing expert is reported once, by CK402."""
    model = _acc("model", parameters=[ParameterFill("model.layers.1.mlp.experts.w13_input_scale", None, None, False,
                                                    partial=("3:w1",), owner="moe-expert-missing-scale")])  # fmt: skip
    vllm = _acc("vllm", parameters=[ParameterFill("model.layers.1.mlp.experts.routed_experts.w13_input_scale", (4, 2),
                                                  "F32", False, partial=("expert 3",))])  # fmt: skip
    assert [f.code for f in findings(vllm)] == ["CK602"]
    assert findings(combined(model, vllm)) == []


def test_combined_leaves_misnested_tensors_to_misnested_prefix() -> None:
    """A vision tower under the language model's root: vLLM raises on the tensors and leaves the tower's parameters
    unfilled; misnested-prefix (CK201) names both, with its fix."""
    stored, belongs = "model.language_model.visual.blocks.0.attn.proj.weight", "model.visual.blocks.0.attn.proj.weight"
    vllm = _acc(
        "vllm",
        [TensorFate(stored, "fatal", error="ValueError: There is no module or parameter named 'visual' in X")],
        [ParameterFill("visual.blocks.0.attn.proj.weight", (8, 8), "BF16", False),
         ParameterFill("visual.blocks.0.attn.proj.bias", (8,), "BF16", False)],
    )  # fmt: skip
    assert [f.code for f in findings(vllm)] == ["CK601", "CK602"]
    left = findings(combined(_acc("model"), vllm, moved={stored: belongs}))
    assert [(f.code, f.all_tensors) for f in left] == [("CK602", ("visual.blocks.0.attn.proj.bias",))]


def test_combined_drops_what_only_the_model_says() -> None:
    model = _acc("model", [TensorFate(QKV, "fatal", problem="no-parameter")])
    assert [f.code for f in findings(model)] == ["CK601"]
    assert findings(combined(model, _acc("vllm", [TensorFate(QKV, "loaded", "p")]))) == []


def test_combined_leaves_unreadable_shards_to_their_rule() -> None:
    param = "model.layers.1.mlp.down_proj.weight"
    model = _acc("model", parameters=[ParameterFill(param, None, None, True)])
    vllm = _acc("vllm", parameters=[ParameterFill(param, (4,), "BF16", False)])
    assert [f.code for f in findings(combined(model, vllm))] == ["CK602"]
    (fill,) = combined(model, vllm, frozenset({"model.layers.1.mlp.down_proj.weight"})).parameters
    assert fill.owner == SHARD_OWNER


def test_combined_build_error_is_vllms() -> None:
    vllm = _acc("vllm", build_error="config rejected: ValueError: ModelOpt currently only supports: [...]")
    (f,) = findings(combined(_acc("model", [TensorFate(QKV, "fatal", problem="no-parameter")]), vllm))
    assert f.code == "CK605" and "ModelOpt currently only supports" in f.message


# ---- the child's header and coverage arithmetic (standard library only) --------------------------------------------


def test_weight_files_follow_the_index_in_natural_order(tmp_path: Path) -> None:
    for name in ("model-00010-of-00010.safetensors", "model-00002-of-00010.safetensors", "stray.safetensors"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model-00010-of-00010.safetensors", "b": "model-00002-of-00010.safetensors"}})
    )
    assert [p.name for p in meta_load.weight_files(tmp_path)] == [
        "model-00002-of-00010.safetensors",
        "model-00010-of-00010.safetensors",
    ]


def test_header_tensors_sorted_and_unreadable_files_named(tmp_path: Path) -> None:
    header = json.dumps({"__metadata__": {}, "b.weight": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]},
                         "a.weight": {"dtype": "U8", "shape": [4], "data_offsets": [12, 16]}}).encode()  # fmt: skip
    (tmp_path / "model-1.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    (tmp_path / "model-2.safetensors").write_bytes(b"version https://git-lfs.github.com/spec/v1\n")
    tensors, unreadable = meta_load.header_tensors(tmp_path)
    assert tensors == [("a.weight", "U8", (4,)), ("b.weight", "BF16", (2, 3))]
    assert unreadable == ["model-2.safetensors"]


def test_intervals_of_views() -> None:
    # rows 2..3 of a [4, 8] parameter: one run
    assert meta_load._intervals(16, (2, 8), (8, 1)) == [(16, 32)]
    # columns 4..7 of a [3, 8] parameter: one run per row
    assert meta_load._intervals(4, (3, 4), (8, 1)) == [(4, 8), (12, 16), (20, 24)]
    assert meta_load._intervals(5, (), ()) == [(5, 6)]


def test_gaps_become_experts_or_rows() -> None:
    gaps = meta_load._covered([(0, 16), (32, 64)], 64)
    assert gaps == [(16, 32)]
    assert meta_load._gap_labels("model.layers.0.mlp.experts.w2_input_scale", (4, 16), gaps) == ["expert 1"]
    assert meta_load._gap_labels("model.layers.0.self_attn.qkv_proj.weight", (8, 8), gaps) == ["rows 2-3"]


def test_hub_like_source_is_staged_from_its_ranges(tmp_path: Path) -> None:
    """A remote source: the staged folder holds its JSON files and each shard's header, read as ranges (what a Hub
    repo serves), so a Hub target reaches vLLM with headers only."""
    from ckpt_tools.read.loader import load_checkpoint
    from ckpt_tools.read.local import LocalSource
    from ckpt_tools.vllm_dry.run import stage

    class Remote(LocalSource):
        is_remote = True

        def __init__(self, target: Path) -> None:
            super().__init__(target)
            self.reads: list[tuple[str, int, int]] = []

        def read_range(self, name: str, start: int, length: int) -> bytes:
            self.reads.append((name, start, length))
            return super().read_range(name, start, length)

    source = Remote(GENUINE / "llmc-qwen3moe-nvfp4-sharded")
    ckpt = load_checkpoint(source)
    source.reads.clear()
    into = tmp_path / "staged"
    into.mkdir()
    stage(source, ckpt, into)
    staged = {p.name: p.read_bytes() for p in into.iterdir()}
    assert {n for n in staged if n.endswith(".json")} == {n for n in source.list_files() if n.endswith(".json")}
    for shard in ckpt.shards:
        assert staged[shard.name] == (source.root / shard.name).read_bytes()[: shard.data_start]
    assert all(start == 0 for _, start, _ in source.reads)  # headers only, never a tensor's bytes

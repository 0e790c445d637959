"""Where the memory plan plugs in: serve-flags' --max-model-len is the largest that fits and a checkpoint that cannot
fit exits 1 with the plan's numbers on stderr; check-serve rates settings that cannot fit as an error with the
largest values that fit; inspect shows the weight and KV figures; doctor stays a defect check. On header-only
checkpoints the size of real ones (tests/memory_models.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ckpt_tools.memory_plan import Settings, memory_plan
from ckpt_tools.serve import check_serve, serve_flags
from tests.memory_models import dense_70b_bf16, qwen36_35b_a3b_nvfp4

GENUINE = Path(__file__).resolve().parents[2] / "fixtures" / "genuine"


def ckpt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ckpt_tools.cli.main", *args], capture_output=True, text=True, timeout=300
    )


def check_serve_json(model: Path, hardware: str, *serve_args: str, served: str = "") -> tuple[int, list[dict]]:
    """`ckpt check-serve MODEL --hardware HW -f json -- vllm serve SERVED ARGS...`: the exit code and the findings."""
    command = ["vllm", "serve", served or str(model), *serve_args]
    out = ckpt("check-serve", str(model), "--hardware", hardware, "-f", "json", "--", *command)
    return out.returncode, json.loads(out.stdout)["findings"]


def memory_findings(findings: list[dict]) -> list[dict]:
    return [f for f in findings if f["slug"] == "memory-does-not-fit"]


@pytest.fixture(scope="module")
def dense(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("dense") / "llama-70b-bf16"
    dense_70b_bf16(folder)
    return folder


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The seed's layers, attention and vision tower with 16 of its 256 experts: the KV figures are the seed's, the
    # header 16x smaller (bench/seed_plan.py plans the full one for docs/plan.md).
    folder = tmp_path_factory.mktemp("seed") / "qwen36-35b-a3b-nvfp4-16x"
    qwen36_35b_a3b_nvfp4(folder, experts=16)
    return folder


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


# ---- serve-flags ----------------------------------------------------------------------------------------------------
def test_serve_flags_caps_max_model_len_at_what_fits(dense: Path) -> None:
    out = ckpt("serve-flags", str(dense), "--hardware", "b200", "--format", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    plan = memory_plan(str(dense), Settings(hardware="b200"))
    assert 0 < plan.answers.max_model_len < 131072
    assert _flag(doc["argv"], "--max-model-len") == str(plan.answers.max_model_len)
    flag = next(f for f in doc["flags"] if f["flag"] == "--max-model-len")
    assert "largest context that fits one sequence on B200" in flag["why"] and "131,072" in flag["why"]
    assert doc["memory"]["max_model_len"] == plan.answers.max_model_len and doc["blocked"] is None
    # The emitted length fits one sequence and one block more does not.
    assert plan.request_bytes(plan.answers.max_model_len) <= plan.kv_budget_bytes - plan.pages.null_block_bytes
    assert plan.request_bytes(plan.answers.max_model_len + 16) > plan.kv_budget_bytes - plan.pages.null_block_bytes


def test_serve_flags_keeps_the_context_when_it_fits(seed: Path) -> None:
    # --headers-only: the synthetic's scale bytes are holes (zeros), which the value rules rightly refuse.
    out = ckpt("serve-flags", str(seed), "--hardware", "gb10", "--explain", "--headers-only")
    assert out.returncode == 0, out.stderr
    assert "--max-model-len 262144" in out.stdout
    assert "memory plan on DGX Spark (GB10):" in out.stdout
    assert "full attention: 10 attention layers x 2,048 B per token" in out.stdout
    assert "linear attention: 30 GatedDeltaNet layers x 1,097,728 B state" in out.stdout


def test_serve_flags_refuses_a_checkpoint_that_cannot_fit(dense: Path) -> None:
    out = ckpt("serve-flags", str(dense), "--hardware", "gb10")
    assert out.returncode == 1 and out.stdout == ""  # no command; the reasons on stderr
    err = out.stderr
    assert "warning: does not fit on DGX Spark (GB10): the weights and the reserve leave no memory" in err
    assert "error: CS172 memory-does-not-fit" in err and "ckpt: the checkpoint does not fit:" in err
    assert "weights      131.42 GiB" in err and "-34.22 GiB for the KV cache" in err
    asked = ckpt("serve-flags", str(dense), "--hardware", "b200", "--max-model-len", "131072")
    assert asked.returncode == 1 and "--max-model-len 131072 does not fit on B200" in asked.stderr
    assert "largest that fits one sequence: --max-model-len" in asked.stderr


def test_serve_flags_without_hardware_has_no_memory_plan() -> None:
    out = ckpt("serve-flags", str(GENUINE / "base-llama-bf16"), "--format", "json")
    assert out.returncode == 0 and json.loads(out.stdout)["memory"] is None


# ---- check-serve ----------------------------------------------------------------------------------------------------
def test_check_serve_rates_settings_that_cannot_fit(dense: Path) -> None:
    plan = memory_plan(str(dense), Settings(hardware="b200", max_num_seqs=4, max_model_len=131072))
    code, findings = check_serve_json(dense, "b200", "--max-model-len", "131072", "--max-num-seqs", "4")
    assert code == 1, findings
    [finding] = memory_findings(findings)
    assert finding["code"] == "CS172" and finding["severity"] == "error"
    assert "one sequence of 131,072 tokens does not fit" in finding["message"]
    assert finding["fix"] == f"--max-model-len {dict(plan.answers.context_at_seqs)[4]} for 4 sequences"

    [finding] = memory_findings(check_serve_json(dense, "b200", "--max-model-len", "32k", "--max-num-seqs", "8")[1])
    fits = memory_plan(str(dense), Settings(hardware="b200", max_model_len=32000))
    assert "8 sequences of 32,000 tokens do not fit" in finding["message"]
    assert f"--max-num-seqs {fits.answers.max_num_seqs} at 32,000 tokens" in finding["fix"]

    # Split over two GPUs the same settings fit; and a command without --max-num-seqs is judged at one sequence.
    for extra in (["-tp", "2"], []):
        args = ["--max-model-len", "32768", "--max-num-seqs", "8"] if extra else ["--max-model-len", "32768"]
        assert not memory_findings(check_serve_json(dense, "b200", *args, *extra)[1]), extra


def test_check_serve_on_the_seed_command_has_no_memory_finding(seed: Path) -> None:
    settings = ["--max-model-len", "262144", "--max-num-seqs", "64", "--gpu-memory-utilization", "0.85"]
    _, findings = check_serve_json(seed, "gb10", *settings, "--enable-prefix-caching")
    plan = memory_plan(str(seed), Settings(hardware="gb10", max_model_len=262144, max_num_seqs=64, prefix_caching=True))
    # 64 sequences of the full 262,144 tokens need more than GB10 holds: the finding says how many do fit.
    assert not plan.fits and plan.answers.max_num_seqs < 64
    [finding] = memory_findings(findings)
    assert f"--max-num-seqs {plan.answers.max_num_seqs} at 262,144 tokens" in finding["fix"]


def test_check_serve_counts_the_speculative_tokens_state_pages(seed: Path) -> None:
    """Each draft token of --speculative-config keeps one more recurrent-state page per sequence (what `ckpt plan
    --num-speculative-tokens` sizes): sequences that fit without speculative decoding do not fit with it."""
    at_len = Settings(hardware="gb10", max_model_len=32768, prefix_caching=True)
    plain = memory_plan(str(seed), at_len).answers.max_num_seqs
    drafting = memory_plan(str(seed), replace(at_len, num_speculative_tokens=3)).answers.max_num_seqs
    assert 1 <= drafting < plain
    base = f"vllm serve {seed} --max-model-len 32768 --max-num-seqs {plain} --enable-prefix-caching"
    spec = " --speculative-config '{\"method\":\"mtp\",\"num_speculative_tokens\":3}'"
    assert not [f for f in check_serve(str(seed), base, hardware="gb10").findings if f.slug == "memory-does-not-fit"]
    [finding] = [f for f in check_serve(str(seed), base + spec, hardware="gb10").findings if f.code == "CS172"]
    assert f"{plain} sequences of 32,768 tokens do not fit (at most {drafting})" in finding.message
    assert finding.details["max_num_seqs"] == drafting
    # Dotted overrides are the same config; a config without the key drafts no extra state.
    dotted = " --speculative-config.method mtp --speculative-config.num_speculative_tokens 3"
    assert [
        f.message for f in check_serve(str(seed), base + dotted, hardware="gb10").findings if f.code == "CS172"
    ] == [finding.message]


def test_serve_flags_fits_its_drafter_tokens(seed: Path, tmp_path: Path) -> None:
    """serve-flags sizes memory with the draft tokens of the speculative config it plans, as check-serve then judges
    that command."""
    from tests.serve.test_serve_flags_and_check_serve import make_drafter

    plan = serve_flags(str(seed), hardware="gb10", drafter=str(make_drafter(tmp_path)), headers_only=True)
    spec = json.loads(dict(zip(plan.argv, plan.argv[1:], strict=False))["--speculative-config"])
    assert spec["num_speculative_tokens"] == 11
    assert plan.memory is not None and plan.memory.settings.num_speculative_tokens == 11
    assert not [f for f in plan.findings if f.code == "CS172"]


# ---- inspect and doctor ---------------------------------------------------------------------------------------------
def test_inspect_shows_weight_and_kv_figures_and_doctor_stays_a_defect_check(dense: Path) -> None:
    out = ckpt("inspect", str(GENUINE / "modelopt-qwen35moe-nvfp4"), "-f", "json")
    memory = json.loads(out.stdout)["memory"]
    assert memory["weights"]["bytes"] == 1157240
    assert memory["kv_cache"] == {
        "dtype": "bfloat16",
        "bytes_per_token": 256,
        "attention_layers": 1,
        "sliding_window_layers": 0,
    }
    assert memory["state"] == {"bytes_per_sequence": 9728, "layers": 1}
    text = ckpt("inspect", str(GENUINE / "modelopt-qwen35moe-nvfp4")).stdout
    assert "KV cache  256 B per token (bfloat16, 1 attention layer)" in text
    assert "state     9,728 B per sequence (1 linear-attention layer)" in text
    # A checkpoint too big for any GPU profile is still a clean checkpoint: doctor judges defects, not fit.
    doctor = ckpt("doctor", str(dense), "--headers-only", "-f", "json")
    assert all("memory" not in f["slug"] for f in json.loads(doctor.stdout)["findings"])


def test_a_length_above_the_context_is_not_a_memory_finding(dense: Path) -> None:
    """--max-model-len past the model's context is the context check's business; memory is judged at that length."""
    _, findings = check_serve_json(GENUINE / "base-llama-bf16", "gb10", "--max-model-len", "8192", served="x")
    assert not memory_findings(findings)
    flags = ckpt("serve-flags", str(GENUINE / "base-llama-bf16"), "--hardware", "gb10", "--max-model-len", "8192")
    assert flags.returncode == 1 and "error: CS120 max-model-len-exceeded" in flags.stderr  # the context, not memory
    assert "memory-does-not-fit" not in flags.stderr and "does not fit" not in flags.stderr

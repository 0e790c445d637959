"""`ckpt plan` and the memory-plan API on the genuine fixtures: exact weight bytes, the JSON contract
(docs/plan.schema.json), exit codes, options, the budget arithmetic, tensor parallelism, drafters and Hub targets."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from ckpt_tools.errors import CkptError, UsageError
from ckpt_tools.memory_plan import Settings, memory_plan
from ckpt_tools.plan.facts import GIB
from tests.corrupt import GENUINE, genuine_entries

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = jsonschema.Draft202012Validator(json.loads((ROOT / "docs" / "plan.schema.json").read_text()))
LLAMA, MOE, HYBRID = "base-llama-bf16", "llmc-qwen3moe-nvfp4-sharded", "modelopt-qwen35moe-nvfp4"
pytestmark = pytest.mark.skipif(not genuine_entries(), reason="fixtures/genuine is not present")


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ckpt_tools.cli.main", "plan", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def plan(name: str, **settings):
    settings.setdefault("hardware", "gb10")
    return memory_plan(str(GENUINE / name), Settings(**settings))


def data_bytes(folder: Path) -> int:
    """Every tensor's data span, read straight from the safetensors headers (the shards an index names, else all)."""
    index = folder / "model.safetensors.index.json"
    shards = (
        sorted(set(json.loads(index.read_text())["weight_map"].values()))
        if index.is_file()
        else sorted(p.name for p in folder.glob("*.safetensors"))
    )
    total = 0
    for name in shards:
        raw = (folder / name).read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8 : 8 + n])
        total += sum(e["data_offsets"][1] - e["data_offsets"][0] for k, e in header.items() if k != "__metadata__")
    return total


# ---- weights: exact ------------------------------------------------------------------------------------------------
def test_weight_bytes_are_the_tensor_data_bytes(genuine: str) -> None:
    folder = GENUINE / genuine
    p = memory_plan(str(folder), Settings(hardware="gb10"))
    doc = p.to_json()
    SCHEMA.validate(doc)
    assert doc["weights"]["bytes"] == data_bytes(folder)
    assert sum(doc["weights"]["by_component"].values()) == doc["weights"]["bytes"]
    assert doc["weights"]["per_device_bytes"] == doc["weights"]["bytes"]  # tensor parallel 1
    assert doc["fits"] is True and doc["max_model_len"] == doc["model_max_model_len"] == 4096


def test_components_split_text_and_vision() -> None:
    doc = plan(HYBRID).to_json()
    comps = doc["weights"]["by_component"]
    assert set(comps) == {"text", "vision"} and comps["vision"] > 0
    vision = sum(t for name, t in _tensor_bytes(GENUINE / HYBRID).items() if ".visual." in f".{name}")
    assert comps["vision"] == vision


def _tensor_bytes(folder: Path) -> dict[str, int]:
    raw = (folder / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    return {k: e["data_offsets"][1] - e["data_offsets"][0] for k, e in header.items() if k != "__metadata__"}


# ---- the budget arithmetic -----------------------------------------------------------------------------------------
def test_gb10_budget_uses_the_unified_memory_figures() -> None:
    p = plan(LLAMA)
    mem = p.to_json()["memory"]
    assert mem["device_bytes"] == 121 * GIB and mem["device_source"] == "measured"
    assert mem["gpu_memory_utilization"] == 0.85  # GB10's recommended value (cap 0.88)
    assert mem["usable_bytes"] == int(121 * GIB * 0.85)
    assert mem["reserved_bytes"] == int(5.5 * GIB) + int(0.15 * GIB)  # dense model, TP 1
    assert mem["kv_budget_bytes"] == mem["usable_bytes"] - p.weights.per_device_bytes - mem["reserved_bytes"]
    assert not any("cap" in n for n in p.notes)
    above = plan(LLAMA, gpu_memory_utilization=0.9)
    assert above.utilization == 0.9 and any("above DGX Spark (GB10)'s cap of 0.88" in n for n in above.notes)


def test_moe_reserve_and_sequence_arithmetic() -> None:
    p = plan(MOE)
    doc = p.to_json()
    assert doc["memory"]["reserve"]["model"] == "moe"
    assert doc["memory"]["reserve"]["activation_bytes"] == 8 * GIB
    available = doc["memory"]["kv_budget_bytes"] - p.pages.null_block_bytes
    # Two full-attention layers, 2 KV heads x (32 + 32) dims x 2 bytes each: 512 B per token, 16-token pages.
    assert doc["kv_cache"]["bytes_per_token"] == 512 and doc["kv_cache"]["block_size"] == 16
    assert p.request_bytes(4096) == 4096 * 512
    assert doc["max_num_seqs"] == available // (4096 * 512)
    # vllm/v1/core/kv_cache_utils.py (0.33.0) get_kv_cache_capacity: one group of both layers, so a block id is
    # 2 layers x 16 tokens x 256 B = 8,192 B; the pool is the whole budget // that (null block included); a
    # 4,096-token request takes 256 blocks; tokens = int(concurrency x max_model_len).
    num_blocks = doc["memory"]["kv_budget_bytes"] // 8_192
    assert doc["kv_cache_max_concurrency"] == round(num_blocks / 256, 4)
    assert doc["kv_cache_tokens"] == int(num_blocks / 256 * 4096)
    # 1000 tokens still take whole 16-token pages: 63 pages of 8 KiB.
    assert p.request_bytes(1000) == 63 * 16 * 512


def test_hybrid_pages_are_aligned_and_padded() -> None:
    p = plan(HYBRID)
    doc = p.to_json()
    # One GatedDeltaNet state (3x256 conv + 4x32x32 SSM, bf16) = 9,728 B; one attention token = 256 B.
    # Block = 16 * cdiv(9728, 16 * 256) = 48 tokens; the state page is padded to 48 * 256 = 12,288 B.
    assert doc["state"]["bytes_per_sequence"] == 9728 and doc["state"]["layers"] == 1
    assert doc["kv_cache"]["block_size"] == 48
    assert doc["state"]["padded_per_device_bytes_per_sequence"] == 12288
    assert p.request_bytes(4096) == 86 * 12288 + 12288  # cdiv(4096, 48) attention pages + one state page
    prefix = plan(HYBRID, prefix_caching=True)
    assert prefix.request_bytes(4096) == p.request_bytes(4096) + 12288


def test_speculative_tokens_flag_adds_state_pages_and_lowers_the_capacity_line() -> None:
    """--num-speculative-tokens 3 on the hybrid fixture (1 full-attention + 1 GatedDeltaNet layer: two groups of one,
    12,288 B blocks): a 4,096-token request takes 86 + (1 + 3) blocks (MambaSpec.max_memory_usage_bytes, vLLM 0.33)."""
    base = run(str(GENUINE / HYBRID), "--hardware", "gb10", "--max-model-len", "4096", "--format", "json")
    spec = run(
        str(GENUINE / HYBRID),
        "--hardware",
        "gb10",
        "--max-model-len",
        "4096",
        "--format",
        "json",
        "--num-speculative-tokens",
        "3",
    )
    assert base.returncode == spec.returncode == 0, spec.stderr
    b, s = json.loads(base.stdout), json.loads(spec.stdout)
    SCHEMA.validate(s)
    assert s["requested"]["num_speculative_tokens"] == 3 and "num_speculative_tokens" not in b["requested"]
    assert s["state"]["padded_per_device_bytes_per_sequence"] == 4 * 12288
    blocks = b["memory"]["kv_budget_bytes"] // 12288
    assert b["kv_cache_max_concurrency"] == round(blocks / 87, 4) and b["kv_cache_tokens"] == int(blocks / 87 * 4096)
    assert s["kv_cache_max_concurrency"] == round(blocks / 90, 4) and s["kv_cache_tokens"] == int(blocks / 90 * 4096)
    assert s["max_num_seqs"] == (blocks - 1) // 90
    bad = run(str(GENUINE / HYBRID), "--hardware", "gb10", "--num-speculative-tokens", "-1")
    assert bad.returncode == 2 and "--num-speculative-tokens" in bad.stderr and "Traceback" not in bad.stderr


def test_tight_budgets_find_the_largest_length_and_count() -> None:
    # 17.78% of an RTX 5090 leaves ~40 MiB for the KV cache after the dense reserve: 2 MiB per 4,096-token
    # sequence, so 1 and 8 sequences get the whole context and 32 do not.
    p = plan(LLAMA, hardware="rtx5090", gpu_memory_utilization=0.1778)
    available = p.kv_budget_bytes - p.pages.null_block_bytes
    assert 32 * (2 << 20) > available > 8 * (2 << 20)
    by_seqs = dict(p.answers.context_at_seqs)
    assert by_seqs[1] == by_seqs[8] == 4096
    assert 0 < by_seqs[32] < 4096 and by_seqs[32] % 16 == 0  # whole pages
    for n, length in by_seqs.items():
        assert n * p.request_bytes(length) <= available
        if length < 4096:
            assert n * p.request_bytes(length + 16) > available
    many = plan(LLAMA, hardware="rtx5090", gpu_memory_utilization=0.1778, max_num_seqs=32, max_model_len=4096)
    assert not many.fits and "32 sequences of 4,096 tokens do not fit (at most 19)" in many.answers.reason
    assert dict(many.answers.context_at_seqs)[32] == by_seqs[32]
    assert plan(LLAMA, hardware="rtx5090", gpu_memory_utilization=0.1778, max_num_seqs=19, max_model_len=4096).fits
    assert 32 * many.request_bytes(4096) > available >= many.answers.max_num_seqs * many.request_bytes(4096)


def test_no_room_for_the_kv_cache_does_not_fit() -> None:
    p = plan(LLAMA, hardware="rtx5090", gpu_memory_utilization=0.1)
    assert p.kv_budget_bytes < 0
    assert not p.fits and p.answers.max_model_len == 0 and p.answers.max_num_seqs == 0
    SCHEMA.validate(p.to_json())


# ---- KV dtype from the checkpoint or the flag ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        ("modelopt-llama-nvfp4-fp8kv", "fp8_e4m3"),  # hf_quant_config kv_cache_quant_algo FP8
        ("llmc-llama-fp8-dynamic-fp8kv", "fp8"),  # compressed-tensors kv_cache_scheme
        ("modelopt-llama-nvfp4", "bfloat16"),
        ("llmc-llama-nvfp4", "bfloat16"),
    ],
)
def test_auto_kv_dtype_follows_the_checkpoint(name: str, dtype: str) -> None:
    doc = plan(name).to_json()
    assert doc["kv_cache"]["dtype"] == dtype
    assert doc["kv_cache"]["bytes_per_token"] == (256 if dtype.startswith("fp8") else 512)


@pytest.mark.parametrize(
    ("dtype", "per_token"),
    [("bfloat16", 512), ("fp8", 256), ("nvfp4", 144), ("fp8_per_token_head", 288), ("int4_per_token_head", 160)],
)
def test_kv_dtype_flag(dtype: str, per_token: int) -> None:
    assert plan(LLAMA, kv_cache_dtype=dtype).to_json()["kv_cache"]["bytes_per_token"] == per_token


# ---- tensor parallelism -------------------------------------------------------------------------------------------
def test_tensor_parallel_splits_weights_and_kv_heads() -> None:
    one, two, four = (plan(LLAMA, tensor_parallel_size=n) for n in (1, 2, 4))
    w = one.weights.bytes
    assert two.weights.bytes == four.weights.bytes == w
    # Norms stay whole on every rank; every 2-D weight is split.
    norms = sum(b for name, b in _tensor_bytes(GENUINE / LLAMA).items() if "norm" in name)
    assert two.weights.per_device_bytes == norms + -(-(w - norms) // 2)
    assert four.weights.per_device_bytes == norms + -(-(w - norms) // 4)
    # 2 KV heads: split over 2 ranks (one each), replicated over 4 (one each, the whole model stores 4).
    assert two.token_bytes_per_device == 256 and two.to_json()["kv_cache"]["bytes_per_token"] == 512
    assert four.token_bytes_per_device == 256 and four.to_json()["kv_cache"]["bytes_per_token"] == 1024
    assert two.reserve.non_torch_bytes == int(0.6 * GIB)
    hybrid = plan(HYBRID, tensor_parallel_size=2)
    assert hybrid.state_bytes_per_device == (3 * 128 + 2 * 32 * 32) * 2  # conv_dim and value heads halved
    # Router gates are replicated: a rank holds them whole.
    moe = plan(MOE, tensor_parallel_size=2)
    gates = sum(b for name, b in _shard_tensor_bytes(GENUINE / MOE).items() if name.endswith("mlp.gate.weight"))
    assert gates and moe.weights.replicated_bytes >= gates


def _shard_tensor_bytes(folder: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for shard in folder.glob("*.safetensors"):
        raw = shard.read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8 : 8 + n])
        out.update({k: e["data_offsets"][1] - e["data_offsets"][0] for k, e in header.items() if k != "__metadata__"})
    return out


def test_a_tensor_parallel_size_vllm_refuses_is_a_finding_not_bad_input() -> None:
    refused = plan(LLAMA, tensor_parallel_size=3)
    assert not refused.fits and refused.answers.refused
    assert [f.code for f in refused.findings] == ["CS173"] and refused.answers.reason == refused.findings[0].message
    assert (refused.exit_code(), refused.exit_code("none")) == (1, 0)
    SCHEMA.validate(refused.to_json())
    assert plan(LLAMA, tensor_parallel_size=2).findings == ()


def test_bad_dtype_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="not modelled by the memory plan"):
        plan(LLAMA, kv_cache_dtype="turboquant_k8v4")
    with pytest.raises(UsageError, match="for MLA models only"):
        plan(LLAMA, kv_cache_dtype="fp8_ds_mla")
    with pytest.raises(UsageError, match="unknown hardware profile"):
        plan(LLAMA, hardware="a100")


# ---- drafter --------------------------------------------------------------------------------------------------------
def test_drafter_weights_and_kv_are_added() -> None:
    body = plan(HYBRID)
    both = memory_plan(str(GENUINE / HYBRID), Settings(hardware="gb10"), drafter=str(GENUINE / LLAMA))
    doc = both.to_json()
    SCHEMA.validate(doc)
    assert doc["drafter"] == str(GENUINE / LLAMA)
    assert doc["weights"]["by_component"]["drafter"] == data_bytes(GENUINE / LLAMA)
    assert doc["weights"]["bytes"] == body.weights.bytes + data_bytes(GENUINE / LLAMA)
    assert doc["kv_cache"]["attention_layers"] == 1 + 2
    assert both.token_bytes_per_device == body.token_bytes_per_device + 512


# ---- the command ----------------------------------------------------------------------------------------------------
def test_cli_json_and_exit_codes(tmp_path: Path) -> None:
    ok = run(str(GENUINE / HYBRID), "--hardware", "gb10", "--format", "json")
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    SCHEMA.validate(doc)
    assert doc["fits"] is True and doc["hardware"] == "gb10" and doc["tensor_parallel_size"] == 1
    assert [r["num_seqs"] for r in doc["max_context_by_num_seqs"]] == [1, 8, 32]

    too_long = run(str(GENUINE / LLAMA), "--hardware", "h100", "--max-model-len", "8192", "-f", "json")
    assert too_long.returncode == 1
    doc = json.loads(too_long.stdout)
    SCHEMA.validate(doc)
    # check-serve's max-model-len-exceeded, word for word (issue 28 item 3)
    assert doc["fits"] is False and "exceeds the checkpoint's max_position_embeddings=4096" in doc["reason"]
    assert doc["requested"] == {"max_model_len": 8192}

    starved = run(str(GENUINE / LLAMA), "--hardware", "rtx5090", "--gpu-memory-utilization", "0.1")
    assert starved.returncode == 1 and "fits         NO: the weights and the reserve leave no memory" in starved.stdout

    for args, message in (
        ([str(GENUINE / LLAMA)], "--hardware is required"),
        ([str(tmp_path / "missing"), "--hardware", "gb10"], "no such folder"),
        ([str(GENUINE / LLAMA), "--hardware", "gb10", "--kv-cache-dtype", "fp4"], "not modelled"),
        ([str(GENUINE / LLAMA), "--hardware", "gb10", "-tp", "0"], "at least 1"),
        ([str(GENUINE / LLAMA), "--hardware", "gb10", "--gpu-memory-utilization", "1.5"], "outside (0, 1]"),
        ([str(GENUINE / LLAMA), "--hardware", "gb10", "--max-num-seqs", "0"], "at least 1"),
    ):
        bad = run(*args)
        assert bad.returncode == 2, (args, bad.stdout, bad.stderr)
        assert message in bad.stderr and "Traceback" not in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1


def test_runtime_image_names_its_hardware_and_explain_shows_the_arithmetic() -> None:
    out = run(str(GENUINE / HYBRID), "--runtime", "aeon-v0.26.0", "--explain")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.startswith(f"ckpt plan {GENUINE / HYBRID} on DGX Spark (GB10), tensor parallel 1, aeon-v0.26.0")
    assert "arithmetic:" in text and "page padded to 12,288 B" in text
    assert "KV budget = " in text and "one request of 4,096 tokens holds 1,069,056 B" in text


def test_single_file_target_reads_the_config_beside_it() -> None:
    p = memory_plan(str(GENUINE / LLAMA / "model.safetensors"), Settings(hardware="gb10"))
    assert p.weights.bytes == data_bytes(GENUINE / LLAMA) and p.attention_layers == 2


def test_one_shard_of_a_sharded_checkpoint_is_refused() -> None:
    shard = sorted((GENUINE / MOE).glob("*.safetensors"))[0]
    with pytest.raises(CkptError, match="one shard of the sharded checkpoint"):
        memory_plan(str(shard), Settings(hardware="gb10"))


# ---- Hub targets ----------------------------------------------------------------------------------------------------
def test_hub_target_plans_like_the_local_folder(tmp_path: Path) -> None:
    from tests.fake_hub import HubServer
    from tests.hub_repos import link_repo
    from tests.read.test_hub import ckpt

    root = tmp_path / "hub"
    link_repo(GENUINE / HYBRID, root / "acme" / "hybrid")
    with HubServer(root) as srv:
        out = ckpt(srv, tmp_path / "home", "plan", "acme/hybrid", "--hardware", "gb10", "-f", "json")
    assert out.returncode == 0, out.stderr
    remote = json.loads(out.stdout)
    SCHEMA.validate(remote)
    local = plan(HYBRID).to_json()
    assert remote["target"] == "acme/hybrid"
    for key in ("weights", "kv_cache", "state", "memory", "max_model_len", "max_num_seqs", "fits"):
        assert remote[key] == local[key], key


def test_missing_shard_is_noted_not_counted(fixture_copy) -> None:
    folder = fixture_copy(MOE)
    shards = sorted(folder.glob("*.safetensors"))
    gone = data_bytes(folder) - sum(_tensor_bytes_of(s) for s in shards[1:])
    shards[0].unlink()
    p = memory_plan(str(folder), Settings(hardware="gb10"))
    assert p.weights.bytes == data_bytes(GENUINE / MOE) - gone
    assert any(n.startswith("weights are incomplete:") and "missing or unreadable shards" in n for n in p.notes)
    assert not any("incomplete" in n for n in plan(MOE).notes)


def _tensor_bytes_of(shard: Path) -> int:
    raw = shard.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    return sum(e["data_offsets"][1] - e["data_offsets"][0] for k, e in header.items() if k != "__metadata__")


def test_the_flags_it_names_are_spelled_as_vllm_takes_them() -> None:
    """`--max-model-len 4,096` is no value vLLM parses: a flag in the answer is copied as typed, without separators."""
    fits = run(str(GENUINE / LLAMA), "--hardware", "h100", "-q")
    past = run(str(GENUINE / LLAMA), "--hardware", "h100", "--max-model-len", "100000", "-q")
    assert fits.returncode == 0 and past.returncode == 1
    for out in (fits.stdout, past.stdout):
        flags = re.findall(r"--max-model-len (\S+)", out)
        assert flags and all(value.rstrip(";:,").isdigit() for value in flags), out

"""The seed rules on corrupted copies of genuine fixtures: each fires on its defect and stays quiet without it."""

from __future__ import annotations

from pathlib import Path

from ckpt_tools import analyze
from tests.corrupt import drop, edit_json, patch_tensor_bytes, read_file, rename, shards


def findings(folder: Path, slug: str, **options):
    report = analyze(str(folder), **options).report
    return [f for f in report.findings if f.slug == slug]


def first_tensor(folder: Path, suffix: str) -> str:
    for shard in shards(folder):
        header, _m, _d = read_file(shard)
        for name in sorted(header):
            if name.endswith(suffix):
                return name
    raise AssertionError(suffix)


# ---- CK101 lfs-pointer -----------------------------------------------------------------------------------------------

POINTER = b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"0" * 64 + b"\nsize 123456789\n"


def test_lfs_pointer(fixture_copy) -> None:
    folder = fixture_copy("llmc-qwen3moe-nvfp4-sharded")
    victim = shards(folder)[1]
    victim.write_bytes(POINTER)
    [f] = findings(folder, "lfs-pointer")
    assert f.severity == "error" and f.files == (victim.name,) and "git lfs pull" in f.message
    # The pointer is not also reported as a broken header.
    assert not findings(folder, "invalid-header")


def test_no_lfs_pointer_on_genuine(fixture_copy) -> None:
    assert not findings(fixture_copy("llmc-qwen3moe-nvfp4-sharded"), "lfs-pointer")


# ---- CK104 invalid-header --------------------------------------------------------------------------------------------


def test_truncated_shard(fixture_copy) -> None:
    folder = fixture_copy("modelopt-llama-nvfp4")
    shard = folder / "model.safetensors"
    shard.write_bytes(shard.read_bytes()[:-100])
    [f] = findings(folder, "invalid-header")
    assert f.details["kind"] == "incomplete-buffer" and "short" in f.message


def test_trailing_bytes(fixture_copy) -> None:
    folder = fixture_copy("modelopt-llama-nvfp4")
    with open(folder / "model.safetensors", "ab") as fh:
        fh.write(b"\0" * 16)
    [f] = findings(folder, "invalid-header")
    assert "16 trailing bytes" in f.message


def test_nul_padded_header(fixture_copy) -> None:
    folder = fixture_copy("llmc-llama-nvfp4")
    shard = folder / "model.safetensors"
    raw = bytearray(shard.read_bytes())
    n = int.from_bytes(raw[:8], "little")
    raw[8 + n - 1] = 0  # the last padding space becomes NUL: the reader rejects "trailing characters"
    shard.write_bytes(bytes(raw))
    [f] = findings(folder, "invalid-header")
    assert f.details["kind"] == "invalid-json"


def test_invalid_config_json(fixture_copy) -> None:
    folder = fixture_copy("llmc-llama-nvfp4")
    (folder / "config.json").write_text("{ not json")
    [f] = findings(folder, "invalid-header")
    assert f.files == ("config.json",) and f.details["kind"] == "invalid-config"


def test_valid_headers_on_genuine(fixture_copy) -> None:
    assert not findings(fixture_copy("modelopt-llama-nvfp4-awq-sharded"), "invalid-header")


# ---- CK102 index-missing-shard ---------------------------------------------------------------------------------------


def test_index_missing_shard(fixture_copy) -> None:
    folder = fixture_copy("modelopt-llama-nvfp4-awq-sharded")
    gone = shards(folder)[-1]
    gone.unlink()
    [f] = findings(folder, "index-missing-shard")
    assert f.details["missing_shards"] == [gone.name] and f.count > 0
    # The tensors of the missing shard are not reported again as index/shard disagreements.
    assert not findings(folder, "index-tensor-mismatch")


# ---- CK103 index-tensor-mismatch -------------------------------------------------------------------------------------


def test_index_lists_absent_tensor(fixture_copy) -> None:
    folder = fixture_copy("llmc-qwen3moe-nvfp4-sharded")
    first_shard = shards(folder)[0].name
    edit_json(
        folder / "model.safetensors.index.json",
        lambda j: j["weight_map"].__setitem__("model.layers.0.self_attn.q_proj.stale_scale", first_shard),
    )
    [f] = findings(folder, "index-tensor-mismatch")
    assert f.details["absent"] == ["model.layers.0.self_attn.q_proj.stale_scale"]


def test_index_missing_entry_and_wrong_shard(fixture_copy) -> None:
    folder = fixture_copy("llmc-qwen3moe-nvfp4-sharded")
    index = folder / "model.safetensors.index.json"
    names = sorted(read_file(index.parent / shards(folder)[0].name)[0])
    other = shards(folder)[1].name

    def edit(j: dict) -> None:
        del j["weight_map"][names[0]]
        j["weight_map"][names[1]] = other

    edit_json(index, edit)
    [f] = findings(folder, "index-tensor-mismatch")
    assert f.details["unlisted"] == [names[0]] and f.details["misplaced"] == [names[1]]


def test_index_consistent_on_genuine(fixture_copy) -> None:
    assert not findings(fixture_copy("llmc-qwen3moe-nvfp4-sharded"), "index-tensor-mismatch")


# ---- CK201 misnested-prefix ------------------------------------------------------------------------------------------


def test_misnested_vision_tower_both_producers(fixture_copy) -> None:
    for name in ("llmc-qwen35moe-nvfp4", "modelopt-qwen35moe-nvfp4"):
        folder = fixture_copy(name)
        moved = rename(folder, lambda n: n.replace("model.visual.", "model.language_model.visual.", 1))
        [f] = findings(folder, "misnested-prefix")
        assert f.details["rename"] == [{"from": "model.language_model.visual.", "to": "model.visual.", "count": moved}]
        assert f.count == moved and f.fix == f"ckpt fix-prefix {folder}"


def test_doubled_language_model_prefix(fixture_copy) -> None:
    folder = fixture_copy("llmc-qwen35moe-nvfp4a16")
    moved = rename(folder, lambda n: n.replace("model.language_model.", "model.language_model.language_model.", 1))
    [f] = findings(folder, "misnested-prefix")
    assert f.details["rename"] == [
        {"from": "model.language_model.language_model.", "to": "model.language_model.", "count": moved}
    ]


def test_misnested_with_collision_has_no_auto_fix(fixture_copy) -> None:
    folder = fixture_copy("llmc-qwen35moe-nvfp4")
    # Keep the genuine tower and add a mis-nested duplicate of it: renaming would collide.
    from tests.corrupt import rewrite

    shard = shards(folder)[0]
    rewrite(
        shard,
        lambda ts: (
            ts
            + [
                (n.replace("model.visual.", "model.language_model.visual.", 1), d, s, b)
                for n, d, s, b in ts
                if n.startswith("model.visual.")
            ]
        ),
    )
    [f] = findings(folder, "misnested-prefix")
    assert f.fix is None and f.details["collisions"]


def test_no_misnesting_on_genuine(genuine: str) -> None:
    from tests.corrupt import GENUINE

    assert not findings(GENUINE / genuine, "misnested-prefix", headers_only=True)


# ---- CK304 quant-config-mismatch -------------------------------------------------------------------------------------


def test_configs_disagree_on_algo(fixture_copy) -> None:
    folder = fixture_copy("modelopt-llama-nvfp4")
    edit_json(folder / "hf_quant_config.json", lambda j: j["quantization"].__setitem__("quant_algo", "FP8"))
    [f] = findings(folder, "quant-config-mismatch")
    assert f.severity == "error" and f.details == {
        "field": "quant_algo",
        "config.json": "NVFP4",
        "hf_quant_config.json": "FP8",
    }


def test_quantized_tensors_without_declaration(fixture_copy) -> None:
    folder = fixture_copy("llmc-llama-nvfp4")
    edit_json(folder / "config.json", lambda c: c.pop("quantization_config"))
    [f] = findings(folder, "quant-config-mismatch")
    assert "neither config.json nor hf_quant_config.json declares" in f.message and f.count == 14


def config_of(name: str) -> dict:
    import json

    from tests.corrupt import GENUINE

    return json.loads((GENUINE / name / "config.json").read_text())["quantization_config"]


def test_declared_scheme_differs_from_tensors(fixture_copy) -> None:
    """An FP8 config on NVFP4 tensors (a config copied from a sibling checkpoint)."""
    folder = fixture_copy("llmc-llama-nvfp4")
    donor = config_of("llmc-llama-fp8-dynamic")
    edit_json(folder / "config.json", lambda c: c.__setitem__("quantization_config", donor))
    [f] = findings(folder, "quant-config-mismatch")
    assert "declared W8A8 FP8" in f.message and "W4A4 NVFP4" in f.message and f.count == 14


def test_producer_naming_mismatch(fixture_copy) -> None:
    folder = fixture_copy("llmc-llama-nvfp4")
    rename(folder, lambda n: n.replace(".weight_packed", ".weight").replace(".weight_global_scale", ".weight_scale_2"))
    fs = findings(folder, "quant-config-mismatch")
    assert any("ModelOpt tensor names under a compressed-tensors config" in f.message for f in fs)


def test_nvfp4a16_config_on_linears_with_input_scales(fixture_copy) -> None:
    """An NVFP4A16 config on W4A4 tensors: vLLM's weight-only layer has no input_global_scale parameter."""
    folder = fixture_copy("llmc-llama-nvfp4")
    donor = config_of("llmc-llama-nvfp4a16")
    edit_json(folder / "config.json", lambda c: c.__setitem__("quantization_config", donor))
    fs = findings(folder, "quant-config-mismatch")
    assert [f.count for f in fs if "carry `input_global_scale`" in f.message] == [14]


def test_no_config_mismatch_on_genuine(genuine: str) -> None:
    from tests.corrupt import GENUINE

    assert not findings(GENUINE / genuine, "quant-config-mismatch", headers_only=True)


# ---- CK310 unsupported-quant-algo ------------------------------------------------------------------------------------


def test_awq_rejected_by_upstream(fixture_copy) -> None:
    folder = fixture_copy("modelopt-llama-nvfp4-awq")
    [f] = findings(folder, "unsupported-quant-algo")
    assert "ModelOpt currently only supports" in f.message and "NVFP4_DEFAULT_CFG" in f.message


def test_pre_quant_scale_under_nvfp4_label(fixture_copy) -> None:
    """An AWQ export relabelled NVFP4 still carries pre_quant_scale tensors vLLM cannot load."""
    folder = fixture_copy("modelopt-llama-nvfp4-awq")
    for name in ("config.json",):
        edit_json(folder / name, lambda c: c["quantization_config"].__setitem__("quant_algo", "NVFP4"))
    edit_json(folder / "hf_quant_config.json", lambda j: j["quantization"].__setitem__("quant_algo", "NVFP4"))
    [f] = findings(folder, "unsupported-quant-algo")
    assert "pre_quant_scale" in f.message and f.count > 0


def test_mixed_precision_without_layers(fixture_copy) -> None:
    folder = fixture_copy("modelopt-llama-nvfp4")
    edit_json(folder / "config.json", lambda c: c["quantization_config"].__setitem__("quant_algo", "MIXED_PRECISION"))
    [f] = findings(folder, "unsupported-quant-algo")
    assert "non-empty 'quantized_layers'" in f.message


# ---- CK401 nvfp4-weight-only -----------------------------------------------------------------------------------------


def test_modelopt_missing_input_scales_is_error(fixture_copy) -> None:
    folder = fixture_copy("modelopt-qwen3moe-nvfp4")
    removed = drop(folder, lambda n: n.endswith(".input_scale"))
    [f] = findings(folder, "nvfp4-weight-only")
    assert f.severity == "error" and f.count == len(removed) and "uninitialised" in f.message
    assert "expert projection(s) in 2 MoE layer(s)" in f.message and "vLLM builds W4A4" in f.message
    checkpoint = analyze(str(folder)).report.checkpoint
    assert (checkpoint["activation_mode"], checkpoint["disk_activation_mode"]) == ("W4A4", "W4A16")


def test_ct_missing_input_global_scales_is_error(fixture_copy) -> None:
    folder = fixture_copy("llmc-llama-nvfp4")
    drop(folder, lambda n: n.endswith(".input_global_scale") and ".layers.1." in n)
    [f] = findings(folder, "nvfp4-weight-only")
    assert f.severity == "error" and f.count == 7
    checkpoint = analyze(str(folder)).report.checkpoint
    assert (checkpoint["activation_mode"], checkpoint["disk_activation_mode"]) == ("W4A4", "mixed")


def test_weight_only_by_design_is_warning(fixture_copy) -> None:
    for name in ("llmc-qwen3moe-nvfp4a16", "modelopt-qwen3moe-w4a16-nvfp4"):
        [f] = findings(fixture_copy(name), "nvfp4-weight-only")
        assert f.severity == "warning" and "W4A16" in f.message and "Marlin" in f.message


def test_hardware_profile_narrows_consequence(fixture_copy) -> None:
    folder = fixture_copy("llmc-llama-nvfp4a16")
    [f] = findings(folder, "nvfp4-weight-only", hardware_ids=["b200"])
    assert "b200: FlashInfer CuTe-DSL W4A16" in f.message and "gb10" not in f.message


def test_w4a4_fixtures_are_not_weight_only(fixture_copy) -> None:
    for name in ("llmc-qwen35moe-nvfp4", "modelopt-qwen35moe-nvfp4"):
        assert not findings(fixture_copy(name), "nvfp4-weight-only")


# ---- CK501 nan-fp8-scale ---------------------------------------------------------------------------------------------


def test_nan_block_scale(fixture_copy) -> None:
    folder = fixture_copy("modelopt-qwen3moe-nvfp4")
    tensor = first_tensor(folder, "mlp.experts.2.down_proj.weight_scale")
    patch_tensor_bytes(folder, tensor, {0: 0x7F, 3: 0xFF, 4: 0x7E, 5: 0x80})  # two NaNs, max and -0 are fine
    [f] = findings(folder, "nan-fp8-scale")
    assert f.tensors == (tensor,) and f.details["nan_bytes"] == {tensor: 2}
    assert f.fix == f"ckpt scrub-nan {folder}"


def test_nan_scan_skipped_with_headers_only(fixture_copy) -> None:
    folder = fixture_copy("llmc-llama-fp8-dynamic")
    tensor = first_tensor(folder, "q_proj.weight")  # an FP8 weight, not a scale: never scanned
    patch_tensor_bytes(folder, tensor, {0: 0x7F})
    assert not findings(folder, "nan-fp8-scale")
    folder2 = fixture_copy("llmc-llama-nvfp4")
    patch_tensor_bytes(folder2, first_tensor(folder2, "weight_scale"), {1: 0xFF})
    report = analyze(str(folder2), headers_only=True).report
    assert not [f for f in report.findings if f.slug == "nan-fp8-scale"]
    assert any(s["slug"] == "nan-fp8-scale" for s in report.skipped)
    assert findings(folder2, "nan-fp8-scale")


def test_absent_experts_held_by_missing_shards_are_found_in_one_pass() -> None:
    """The per-expert gap check asks, for each absent expert of each layer, whether a missing shard holds it; the
    one-pass index answers exactly as testing every missing tensor's name for the `<layer>.<id>.` prefix."""
    from ckpt_tools.rules._experts import _experts_touched

    names = frozenset(
        [
            "a.experts.3.up.weight",
            "b.experts.07.x",
            "c.experts.1.d.experts.2.e",
            "d.experts.5",
            "m.experts.12.gate.weight",
            "n.experts.x.w",
        ]
    )
    layers = ("a.experts", "b.experts", "c.experts", "c.experts.1.d.experts", "d.experts", "m.experts", "n.experts")
    brute = {(layer, e) for layer in layers for e in range(20) if any(n.startswith(f"{layer}.{e}.") for n in names)}
    assert (
        _experts_touched(names)
        == brute
        == {("a.experts", 3), ("c.experts", 1), ("c.experts.1.d.experts", 2), ("m.experts", 12)}
    )

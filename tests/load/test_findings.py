"""load.findings: one accounting (from the load model or from vLLM's own loader) -> CK60x findings."""

from __future__ import annotations

from ckpt_tools.load.accounting import LoadAccounting, ParameterFill, TensorFate, is_exempt
from ckpt_tools.rules._load_findings import findings

NO_PARAM = (
    "ValueError: There is no module or parameter named 'embed_tokens.weight_packed' in LlamaModel. The available "
    "parameters belonging to embed_tokens (VocabParallelEmbedding) are: {'embed_tokens.weight'}"
)


def _acc(tensors=(), parameters=(), build_error=None, judge="vllm") -> LoadAccounting:
    return LoadAccounting(judge, "vLLM 0.33.0", "LlamaForCausalLM", tuple(tensors), tuple(parameters), build_error)


def test_clean_accounting_gives_nothing() -> None:
    acc = _acc(
        [TensorFate("model.norm.weight", "loaded", "model.norm.weight")],
        [ParameterFill("model.norm.weight", (128,), "bfloat16", True)],
    )
    assert findings(acc) == []


def test_vllm_error_text_decides_the_code_when_no_problem_is_given() -> None:
    acc = _acc(
        [
            TensorFate("model.embed_tokens.weight_packed", "fatal", error=NO_PARAM),
            TensorFate(
                "model.layers.0.mlp.down_proj.weight_packed",
                "fatal",
                error="RuntimeError: start (0) + length (128) exceeds dimension size (64).",
            ),
            TensorFate(
                "model.layers.0.self_attn.k_proj.weight_scale",
                "fatal",
                error="AttributeError: 'QKVParallelLinear' object has no attribute 'data'",
            ),
        ]
    )
    out = findings(acc)
    assert [f.code for f in out] == ["CK601", "CK601", "CK603"]  # two distinct errors: two findings
    got = {f.code: f for f in out}
    assert "exceeds dimension size" in got["CK603"].message
    assert all(f.severity == "error" for f in got.values())
    assert "vLLM 0.33.0" in got["CK601"].message


def test_unfilled_parameters_except_defaults_and_kv_scales() -> None:
    acc = _acc(
        parameters=[
            ParameterFill("lm_head.weight", (512, 128), "bfloat16", False),
            ParameterFill("model.layers.0.self_attn.attn.k_scale", (), "float32", False),
            ParameterFill("model.layers.0.mlp.gate_up_proj.input_scale", (2,), "float32", False, default="unused"),
            ParameterFill("model.layers.0.self_attn.qkv_proj.weight", (256, 128), "bfloat16", True, partial=("v",)),
        ]
    )
    (f,) = findings(acc)
    assert f.code == "CK602" and f.slug == "parameter-unfilled"
    assert f.all_tensors == ("lm_head.weight", "model.layers.0.self_attn.qkv_proj.weight [v]")
    assert is_exempt(acc.parameters[1]) and is_exempt(acc.parameters[2]) and not is_exempt(acc.parameters[0])


def test_build_error_is_the_only_finding() -> None:
    acc = _acc(build_error="ValueError: Unsupported quantization config: bits=4, sym=False")
    (f,) = findings(acc)
    assert (f.code, f.slug) == ("CK605", "model-build-failed")
    assert "bits=4, sym=False" in f.message


def test_problems_set_by_the_judge_and_files() -> None:
    acc = _acc(
        [
            TensorFate("a.weight_scale", "loaded", "a.weight_scale", reason="F32 into uint8", problem="dtype-cast"),
            TensorFate("b.weight", "loaded", "b.weight", reason="narrowed from 256 to 128 columns", problem="shape"),
        ]
    )
    got = findings(acc, files=lambda names: ["model.safetensors"] * len(tuple(names)))
    assert [(f.code, f.files) for f in got] == [("CK603", ("model.safetensors",)), ("CK604", ("model.safetensors",))]


def test_same_cause_on_many_layers_is_one_finding() -> None:
    fates = [
        TensorFate(
            f"model.layers.{i}.self_attn.o_proj.weight_scale",
            "fatal",
            reason="stored as weight_scale",
            problem="no-parameter",
        )
        for i in range(30)
    ]
    (f,) = findings(_acc(fates))
    assert f.count == 30 and len(f.tensors) == 20


def test_round_trip_through_json_keeps_the_problem() -> None:
    acc = _acc([TensorFate("x.weight", "loaded", "x.weight", problem="shape")])
    assert LoadAccounting.from_dict(acc.to_dict()) == acc


def test_vllm_accounting_takes_the_model_owners() -> None:
    """A defect the load model leaves to a catalogue rule is left to it under `--vllm` too."""
    vllm = _acc(
        [TensorFate("model.layers.1.self_attn.o_proj.weight", "fatal", error=NO_PARAM)],
        [ParameterFill("model.layers.1.self_attn.o_proj.weight_scale", (128, 8), "float8_e4m3fn", False)],
    )
    model = _acc(
        [
            TensorFate(
                "model.layers.1.self_attn.o_proj.weight", "fatal", problem="no-parameter", owner="ignore-list-mismatch"
            )
        ],
        [
            ParameterFill(
                "model.layers.1.self_attn.o_proj.weight_scale", None, "F8_E4M3", False, owner="ignore-list-mismatch"
            )
        ],
        judge="model",
    )
    assert [f.code for f in findings(vllm)] == ["CK601", "CK602"]
    assert findings(vllm.with_owners_of(model)) == []


def test_every_owner_the_load_model_names_is_a_registered_rule() -> None:
    """The load model names the catalogue rules that own a defect by slug (it sits below the rules): each slug must
    be a rule's, or the defect would be silently dropped from the report."""
    from ckpt_tools.load import model as load_model
    from ckpt_tools.rules.base import all_rules

    owners = {v for k, v in vars(load_model).items() if k.isupper() and isinstance(v, str) and "-" in v}
    assert len(owners) == 9
    assert owners <= {rule.slug for rule in all_rules()}

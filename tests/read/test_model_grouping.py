"""`group_checkpoint` (one pass: modules, layouts, experts) gives exactly what `group_modules`, `group_layouts` and
`group_experts` give one after the other: the same modules in the same order with the same tensors in the same order,
the same layout ids, layouts and members, the same expert groups, on every genuine fixture and on their tensors in a
shuffled load order (a module's tensors spread over shards and dtype runs, as real exports store them)."""

from __future__ import annotations

import random
from types import MappingProxyType

import pytest

from ckpt_tools.model.layouts import Layout, Layouts, group_checkpoint
from ckpt_tools.model.modules import Module, expert_of, group_experts, tensor_buckets
from ckpt_tools.model.tensors import TensorInfo
from ckpt_tools.read import open_source
from ckpt_tools.read.loader import load_checkpoint
from tests.corrupt import GENUINE, genuine_entries

FIXTURES = genuine_entries()


def group_modules(tensors: list[TensorInfo]) -> dict[str, Module]:
    """The modules of tensors in load order, the plain way: one per name prefix."""
    return {p: Module(p, MappingProxyType(ts), expert_of(p)) for p, ts in tensor_buckets(tensors).items()}


def group_layouts(modules: dict[str, Module]) -> Layouts:
    """The layouts of modules, the plain way: numbered in order of first appearance."""
    ids: dict[Layout, int] = {}
    of: dict[str, int] = {}
    members: list[list[str]] = []
    for name, module in modules.items():
        layout = tuple([(s, t.dtype, t.shape) for s, t in module.tensors.items()])
        lid = ids.setdefault(layout, len(ids))
        if lid == len(members):
            members.append([])
        of[name] = lid
        members[lid].append(name)
    return Layouts(MappingProxyType(of), tuple(ids), tuple(map(tuple, members)))


def _same(tensors: list[TensorInfo]) -> None:
    modules, layouts, experts = group_checkpoint(tensors)
    want = group_modules(tensors)
    assert list(modules) == list(want)
    for name, module in modules.items():
        assert type(module) is Module and module == want[name]
        assert list(module.tensors.items()) == list(want[name].tensors.items())
    assert layouts == group_layouts(want)
    assert experts == group_experts(want)
    assert list(experts) == list(group_experts(want))


@pytest.mark.parametrize("fixture", FIXTURES)
def test_one_pass_equals_the_three_passes(fixture: str) -> None:
    tensors = list(load_checkpoint(open_source(str(GENUINE / fixture))).tensors.values())
    _same(tensors)
    shuffled = tensors[:]
    random.Random(fixture).shuffle(shuffled)
    _same(shuffled)


def test_one_pass_on_a_small_moe_module() -> None:
    t = TensorInfo("model.layers.0.mlp.experts.3.down_proj.weight", "BF16", (4, 4), "a.safetensors", 0, 32)
    s = TensorInfo("model.layers.0.mlp.experts.3.down_proj.weight_scale", "F32", (1,), "a.safetensors", 32, 36)
    modules, layouts, experts = group_checkpoint([t, s])
    module = modules["model.layers.0.mlp.experts.3.down_proj"]
    assert module == Module(module.name, module.tensors, module.expert) and repr(module) == repr(
        Module(module.name, module.tensors, module.expert)
    )
    assert module.weight is t and module.expert == ("model.layers.0.mlp.experts", 3, "down_proj")
    with pytest.raises(AttributeError):
        module.name = "x"  # type: ignore[misc]  # still frozen
    assert layouts.layouts == ((("weight", "BF16", (4, 4)), ("weight_scale", "F32", (1,))),)
    assert experts["model.layers.0.mlp.experts"].experts[3]["down_proj"] is module


def _by_pattern(name: str):
    from ckpt_tools.model.modules import _EXPERT

    if ".experts." not in name:
        return None
    m = _EXPERT.match(name)
    return (m["layer"], int(m["expert"]), m["proj"]) if m else None


TRICKY = [
    "model.layers.0.mlp.experts.3.down_proj",
    "model.layers.0.mlp.experts.٣.down_proj",  # an Arabic-Indic digit: `\d` and int() read it
    ".experts.1.p",
    "x.experts.1.p",
    "a\n.experts.1.p",
    "a.experts.1.p\n",
    "a.experts.1.\n",
    "a.experts.1.",
    "a.experts..p",
    "a.experts.1a.p",
    "a.experts.1.p.q",
    "a.b.experts.1.p",
    "a.experts.experts.2.p",
    "experts.1.p",
    "a.xexperts.1.p",
    "a.experts.1",
    "a.experts.-1.p",
    "a.experts. 1.p",
]


def test_expert_of_reads_names_as_the_pattern_does() -> None:
    from ckpt_tools.model.modules import expert_of

    rng = random.Random(11)
    pieces = ["a", ".", "experts", "1", "٣", "\n", "p", "x", ".experts."]

    def word() -> str:
        return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 4)))

    names = TRICKY + [word() + word() + word() for _ in range(10000)]
    names += [f"{word()}.experts.{rng.choice(['1', '٣', '12', '', 'a', '1.2'])}.{word()}" for _ in range(10000)]
    assert sum(_by_pattern(n) is not None for n in names) > 1000  # the sample holds many matches
    for name in names:
        assert expert_of(name) == _by_pattern(name), repr(name)


def _expert_tensors(names: list[str]) -> list[TensorInfo]:
    out: list[TensorInfo] = []
    for name in names:
        begin = 4 * len(out)
        out.append(TensorInfo(f"{name}.weight", "F32", (1,), "a.safetensors", begin, begin + 4))
    return out


def test_experts_read_against_the_previous_prefix_as_expert_of_reads_them() -> None:
    """`group_checkpoint` reads an expert module's coordinates against the previous expert module's prefix. Here the
    modules after a prefix differ in every way that matters: another id spelling (`01` beside `1`, a non-ASCII
    digit), a rest that is not `<digits>.<projection>` (more dots, no id, letters, an empty projection), a deeper
    experts prefix that starts with the previous one, a non-expert module between, and a return to an earlier
    prefix. Every module's `expert` must be `expert_of` of its name, and the groups those of `group_experts`."""
    from ckpt_tools.model.modules import expert_of

    a, b, c = "model.layers.0.mlp.experts", "model.layers.1.mlp.experts", "m.experts.x.experts"
    names = [
        f"{a}.0.gate_proj",
        f"{a}.1.gate_proj",
        f"{a}.01.gate_proj",  # the same id as `1`: the later module wins the slot, as in group_experts
        f"{a}.٣.up_proj",
        f"{a}.2.up_proj.extra",
        f"{a}.x.up_proj",
        f"{a}.3.",
        f"{a}..up_proj",
        f"{a}.4",
        f"{a}.5.experts.6.down_proj",  # a deeper experts prefix below `a`
        f"{a}.5.experts.7.down_proj",
        f"{a}.6.down_proj",  # back to `a` after the deeper prefix
        "model.layers.0.mlp.gate",
        f"{b}.0.down_proj",
        f"{a}.7.down_proj",  # back to an earlier prefix: filed in its bank
        f"{b}.1.down_proj",
        f"{a}x.8.down_proj",  # starts with `a` but not with `a.`
        f"{a}.9.down\n_proj",
        f"{c}.1.p",
        f"{c}Z5.p",  # starts with `c` but not with `c.`: no expert (its last dots split `x.expertsZ5`)
    ]
    tensors = _expert_tensors(names)
    _same(tensors)
    modules, _, experts = group_checkpoint(tensors)
    for name, module in modules.items():
        assert module.expert == expert_of(name), name
    assert experts[a].experts[1]["gate_proj"].name == f"{a}.01.gate_proj"
    assert list(experts) == [a, f"{a}.5.experts", b, c]

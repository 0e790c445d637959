"""The knowledge layer (ckpt_tools/knowledge/): every rules/ file loads into frozen, typed objects once per process,
and a file that breaks its schema is a one-line error naming the file and the line of the offending key."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from types import MappingProxyType

import pytest

from ckpt_tools.errors import CkptError
from ckpt_tools.knowledge import (
    architectures,
    dtypes,
    hardware,
    kernels,
    kv_scales,
    layouts,
    loader,
    memory,
    modules,
    quant_formats,
    runtimes,
    scales,
    serving,
    transformers,
)
from ckpt_tools.knowledge._load import KnowledgeError, build_table, parse, rules_dir, toml_module

tomllib = toml_module()

LOADERS = {
    "architectures.toml": architectures.architectures,
    "dtypes.toml": dtypes.dtype_support,
    "formats.toml": quant_formats.knowledge,
    "hardware.toml": hardware.profiles,
    "kernels.toml": kernels.kernel_table,
    "kv_scales.toml": kv_scales.kv_scales,
    "layouts.toml": layouts.layouts,
    "loader.toml": loader.loader,
    "memory.toml": memory.memory,
    "modules.toml": modules.modules,
    "scales.toml": scales.scales,
    "serving.toml": serving.serving,
    "transformers.toml": transformers.transformers_classes,
}


def test_every_data_file_has_a_loader() -> None:
    shipped = {p.name for p in rules_dir().glob("*.toml")}
    assert shipped == set(LOADERS)


def _walk(obj, seen):
    """Every dataclass and container reachable from a loaded object."""
    if id(obj) in seen:
        return
    seen.add(id(obj))
    yield obj
    if dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            if not f.name.startswith("_"):
                yield from _walk(getattr(obj, f.name), seen)
    elif isinstance(obj, (tuple, frozenset)):
        for item in obj:
            yield from _walk(item, seen)
    elif isinstance(obj, MappingProxyType):
        for item in obj.values():
            yield from _walk(item, seen)


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_loaded_knowledge_is_frozen_and_cached(name: str) -> None:
    loaded = LOADERS[name]()
    assert LOADERS[name]() is loaded  # parsed once per process
    for obj in _walk(loaded, set()):
        assert not isinstance(obj, (list, dict, set)), f"{name}: mutable {type(obj).__name__} {obj!r:.80}"
        if dataclasses.is_dataclass(obj):
            field = dataclasses.fields(obj)[0].name
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(obj, field, None)


def test_every_runtime_release_has_one_kv_scale_renaming() -> None:
    releases = [v for r in kv_scales.kv_scales().releases for v in r.vllm]
    assert len(releases) == len(set(releases))
    wanted = {runtimes.runtime(rid).vllm_version for rid in runtimes.runtime_ids()} | {loader.loader().release}
    assert wanted <= set(releases)
    assert kv_scales.release_mapping("0.23.0") is not kv_scales.release_mapping("0.33.0")


def test_kv_scale_release_naming_an_unknown_spelling_is_refused() -> None:
    text = (
        (rules_dir() / "kv_scales.toml")
        .read_text(encoding="utf-8")
        .replace('spellings = ["vllm-native"', 'spellings = ["vllm-natve"', 1)
    )
    with pytest.raises(KnowledgeError, match=r"release 0.23.0 names unknown spellings: vllm-natve"):
        build_table(parse("rules/kv_scales.toml", text), kv_scales.parse, "kv-scales/1")


def test_every_runtime_profile_loads_frozen_and_cached() -> None:
    for rid in runtimes.runtime_ids():
        rt = runtimes.runtime(rid)
        assert runtimes.runtime(rid) is rt
        for obj in _walk(rt, set()):
            assert not isinstance(obj, (list, dict, set)), f"{rid}: mutable {type(obj).__name__}"
    assert runtimes.runtime() is runtimes.runtime(runtimes.default_runtime_id())


def test_the_default_runtime_is_the_profile_marked_default() -> None:
    marked = [
        tomllib.loads(p.read_text(encoding="utf-8"))
        for p in sorted((rules_dir() / "runtimes").glob("*.toml"))
        if tomllib.loads(p.read_text(encoding="utf-8")).get("default") is True
    ]
    assert [m["id"] for m in marked] == [runtimes.default_runtime_id()]
    assert runtimes.runtime().default


def test_moved_tables_load() -> None:
    assert kv_scales.attention().blocks == ("self_attn", "attention", "attn")
    assert modules.model_config().is_embedding("embed_tokens") and modules.model_config().is_embedding("wte")
    assert not modules.model_config().is_embedding("q_proj")
    assert scales.global_scales().input == ("input_scale", "input_global_scale")
    assert serving.serving().context.max_len_keys[0] == "max_position_embeddings"
    assert 0 < memory.memory().utilization_default <= 1


# ---- schema errors: one per kind, each naming the file and the line ---------------------------------------------

HARDWARE = """schema = "hardware/1"

[[profile]]
id = "a"
name = "A"
family = "hopper"
compute_capability = "9.0"
memory = "dedicated"
memory_gb = 80
native_fp4 = false
nvfp4_w4a4 = "x"
nvfp4_w4a16 = "y"
source = "s"

[[profile]]
id = "b"
name = "B"
family = "hopper"
compute_capability = "9.0"
memory = "dedicated"
native_fp4 = false
nvfp4_w4a4 = "x"
nvfp4_w4a16 = "y"
source = "s"
"""


def _hardware(text: str):
    return build_table(parse("rules/hardware.toml", text), hardware.parse, "hardware/1")


def _line(text: str, needle: str, after: int = 0) -> int:
    lines = text.splitlines()
    return next(i + 1 for i in range(after, len(lines)) if lines[i].startswith(needle))


def test_valid_text_parses() -> None:
    profiles = _hardware(HARDWARE)
    assert [p.id for p in profiles] == ["a", "b"] and profiles[1].memory_gb is None


def test_unknown_key_names_file_and_line() -> None:
    text = HARDWARE.replace('nvfp4_w4a16 = "y"\nsource = "s"\n', 'nvfp4_w4a16 = "y"\ncolour = "red"\nsource = "s"\n')
    with pytest.raises(KnowledgeError) as err:
        _hardware(text)
    assert str(err.value).startswith(f"rules/hardware.toml:{_line(text, 'colour')}: unknown key 'colour'")
    assert "[[profile]] #1" in str(err.value)


def test_unknown_key_in_a_later_table_is_placed_in_that_table() -> None:
    text = HARDWARE.rstrip("\n") + '\nmemory_gb = 80\ncolour = "red"\n'
    with pytest.raises(KnowledgeError, match=rf"^rules/hardware.toml:{_line(text, 'colour')}: .*#2"):
        _hardware(text)


def test_wrong_type_names_file_line_and_types() -> None:
    second = _line(HARDWARE, 'id = "b"')
    text = HARDWARE.replace("native_fp4 = false", 'native_fp4 = "no"', 2).replace(
        'native_fp4 = "no"', "native_fp4 = false", 1
    )
    with pytest.raises(KnowledgeError) as err:
        _hardware(text)
    line = _line(text, "native_fp4", after=second)
    assert str(err.value) == (
        f"rules/hardware.toml:{line}: 'native_fp4' in [[profile]] #2 must be a boolean, not a string"
    )


def test_wrong_type_inside_a_list() -> None:
    text = HARDWARE.replace(
        'source = "s"\n\n[[profile]]', 'source = "s"\n\n  [[profile.env_trap]]\n  name = 1\n\n[[profile]]', 1
    )
    with pytest.raises(
        KnowledgeError,
        match=rf"^rules/hardware.toml:{_line(text, '  name = 1')}: 'name' .* must be a string, not an integer",
    ):
        _hardware(text)


def test_integer_where_a_boolean_is_expected_and_back() -> None:
    with pytest.raises(KnowledgeError, match="must be an integer, not a boolean"):
        _hardware(HARDWARE.replace("memory_gb = 80", "memory_gb = true"))


def test_missing_required_key() -> None:
    text = HARDWARE.replace('nvfp4_w4a4 = "x"\n', "", 1)
    with pytest.raises(
        KnowledgeError, match=r"^rules/hardware.toml:3: \[\[profile\]\] #1 lacks the required key 'nvfp4_w4a4'"
    ):
        _hardware(text)


def test_value_outside_its_vocabulary() -> None:
    text = HARDWARE.replace('family = "hopper"', 'family = "volta"', 1)
    with pytest.raises(
        KnowledgeError, match=rf"^rules/hardware.toml:{_line(text, 'family')}: 'family' .* must be one of hopper, "
    ):
        _hardware(text)


def test_schema_version_mismatch() -> None:
    with pytest.raises(
        KnowledgeError, match=r"^rules/hardware.toml:1: schema is 'hardware/2'; this release reads 'hardware/1'"
    ):
        _hardware(HARDWARE.replace("hardware/1", "hardware/2"))


def test_not_toml() -> None:
    with pytest.raises(KnowledgeError, match=r"^rules/hardware.toml: not valid TOML: .*line 4"):
        _hardware(HARDWARE.replace('id = "a"', "id = a b"))


def test_invalid_regex() -> None:
    text = (rules_dir() / "kv_scales.toml").read_text(encoding="utf-8").replace("pattern = '", "pattern = '(", 1)
    line = _line(text, "pattern = '(")
    with pytest.raises(KnowledgeError, match=rf"^rules/kv_scales.toml:{line}: 'pattern' .* is not a valid regex"):
        build_table(parse("rules/kv_scales.toml", text), kv_scales.parse, "kv-scales/1")


def test_unknown_key_in_an_inline_table_of_a_list() -> None:
    text = (rules_dir() / "scales.toml").read_text(encoding="utf-8")
    marked = '{ suffix = "weight_scale", size = 3, dtypes = ["F8_E4M3"]'
    text = text.replace('{ suffix = "weight_scale", dtypes = ["F8_E4M3"]', marked, 1)
    line = _line(text, "  " + marked)
    with pytest.raises(KnowledgeError) as err:
        build_table(parse("rules/scales.toml", text), scales.parse, "scales/1")
    assert str(err.value).startswith(f"rules/scales.toml:{line}: unknown key 'size'")


def test_unknown_key_in_a_nested_table_of_a_runtime_profile() -> None:
    name = sorted((rules_dir() / "runtimes").glob("*.toml"))[-1]
    text = name.read_text(encoding="utf-8").replace("[serve.behaviour]\n", "[serve.behaviour]\nexplodes = true\n", 1)
    with pytest.raises(KnowledgeError) as err:
        build_table(parse(f"rules/runtimes/{name.name}", text), runtimes.parse, "runtime/1")
    assert str(err.value).startswith(
        f"rules/runtimes/{name.name}:{_line(text, 'explodes')}: unknown key 'explodes' in [serve.behaviour]"
    )


def test_a_knowledge_error_is_a_one_line_usage_error() -> None:
    assert issubclass(KnowledgeError, CkptError)


# ---- laziness ------------------------------------------------------------------------------------------------


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    probe = (
        "import runpy, sys\n"
        "sys.argv = ['ckpt', *sys.argv[1:]]\n"
        "try:\n"
        "    runpy.run_module('ckpt_tools.cli.main', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('ckpt_tools.knowledge')), file=sys.stderr)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", probe, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )


def test_top_level_help_imports_no_knowledge() -> None:
    proc = _run(["--help"])
    assert proc.stderr.strip().splitlines()[-1] == "[]", proc.stderr


def test_option_help_shows_the_default_runtime_from_the_data() -> None:
    proc = _run(["doctor", "--help"])
    assert f"(default {runtimes.default_runtime_id()})" in " ".join(proc.stdout.split()), proc.stdout
    assert "{default_runtime}" not in proc.stdout
    serve = _run(["serve-flags", "--help"])
    others = [r for r in runtimes.runtime_ids() if r != runtimes.default_runtime_id()]
    assert all(r in serve.stdout for r in others), serve.stdout


@pytest.fixture
def runtime_folder(tmp_path, monkeypatch):
    """A rules folder of our own for the runtime-profile index (the caches are emptied before and after)."""
    from ckpt_tools.knowledge import _load

    (tmp_path / "runtimes").mkdir()
    monkeypatch.setattr(_load, "rules_dir", lambda: tmp_path)
    monkeypatch.setattr(runtimes, "rules_dir", lambda: tmp_path)
    caches = (_load.top_level, runtimes._files, runtimes.default_runtime_id, runtimes._runtime)
    for c in caches:
        c.cache_clear()
    yield tmp_path / "runtimes"
    for c in caches:
        c.cache_clear()


def test_exactly_one_runtime_profile_is_the_default(runtime_folder) -> None:
    (runtime_folder / "a.toml").write_text('schema = "runtime/1"\nid = "a"\ndefault = true\n')
    (runtime_folder / "b.toml").write_text('schema = "runtime/1"\nid = "b"\ndefault = true\n')
    with pytest.raises(KnowledgeError, match=r"^rules/runtimes: exactly one profile must set `default = true`"):
        runtimes.default_runtime_id()


def test_runtime_profile_ids_are_unique(runtime_folder) -> None:
    (runtime_folder / "a.toml").write_text('schema = "runtime/1"\nid = "same"\n')
    (runtime_folder / "b.toml").write_text('schema = "runtime/1"\nid = "same"\n')
    with pytest.raises(KnowledgeError, match=r"^rules/runtimes/b.toml: runtime profile id 'same' is also declared"):
        runtimes.runtime_ids()

"""ckpt never executes checkpoint content: remote code a config points at (`auto_map`, `trust_remote_code`), pickle
files beside the shards, and a `.ckpt.toml` are read as data or not at all, by every command and the API. And no
module of the package can load a pickle or evaluate text."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from tests.corrupt import copy_fixture
from tests.repair_helpers import run_cli

PACKAGE = Path(__file__).resolve().parents[2] / "ckpt_tools"
PAYLOAD = "import pathlib; pathlib.Path({marker!r}).write_text('ran')\n"


class _Pickle:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (PAYLOAD.format(marker=self.marker),))


def booby_trapped(tmp_path: Path) -> tuple[Path, Path]:
    folder = copy_fixture("modelopt-llama-nvfp4", tmp_path)
    marker = tmp_path / "executed"
    (folder / "modeling_evil.py").write_text(PAYLOAD.format(marker=str(marker)))
    (folder / "configuration_evil.py").write_text(PAYLOAD.format(marker=str(marker)))
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig", "AutoModelForCausalLM": "modeling_evil.Evil"}
    (folder / "config.json").write_text(json.dumps(config))
    import pickle

    for name in ("pytorch_model.bin", "training_args.bin", "optimizer.pt"):
        (folder / name).write_bytes(pickle.dumps(_Pickle(str(marker))))
    return folder, marker


@pytest.mark.parametrize(
    "argv",
    [
        ["doctor"],
        ["doctor", "--format", "sarif"],
        ["inspect"],
        ["serve-flags", "--fail-on", "none"],
        ["check-serve", "--", "vllm", "serve", "m"],
        ["fix", "--dry-run"],
    ],
    ids=lambda a: a[0] + (" " + a[1] if len(a) > 1 else ""),
)
def test_no_command_runs_code_shipped_with_the_checkpoint(tmp_path, capsys, argv):
    folder, marker = booby_trapped(tmp_path)
    _code, _out, err = run_cli([argv[0], folder, *argv[1:]], capsys)
    assert "internal error" not in err, err
    assert not marker.exists(), f"`ckpt {' '.join(argv)}` executed checkpoint content"


FORBIDDEN_MODULES = {"pickle", "cPickle", "dill", "joblib", "marshal", "shelve", "runpy"}
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}


def test_no_module_can_unpickle_or_evaluate_text():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module.split(".")[0]]
            offenders += [f"{path.name}:{node.lineno} imports {n}" for n in names if n in FORBIDDEN_MODULES]
            if isinstance(node, ast.Call):
                func = node.func
                builtin = func.id if isinstance(func, ast.Name) else ""  # re.compile is fine, compile() is not
                torch_load = (
                    isinstance(func, ast.Attribute)
                    and func.attr == "load"
                    and isinstance(func.value, ast.Name)
                    and func.value.id == "torch"
                )
                if builtin in FORBIDDEN_CALLS or torch_load:
                    offenders.append(f"{path.name}:{node.lineno} calls {builtin or 'torch.load'}")

                if any(
                    k.arg == "trust_remote_code" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
                    for k in node.keywords
                ):
                    offenders.append(f"{path.name}:{node.lineno} passes trust_remote_code")
    assert not offenders, offenders

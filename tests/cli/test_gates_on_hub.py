"""Gates on Hub repos (the fake Hub on 127.0.0.1): SARIF locates findings at the commit that was read, JSON carries
the `hub` object the schema describes, and the Python API takes a repo id."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from ckpt_tools.rules.base import all_rules
from tests.corrupt import GENUINE, copy_fixture, patch_tensor_bytes
from tests.fake_hub import HubServer
from tests.read.test_hub import hub_env

ROOT = Path(__file__).resolve().parents[2]
SARIF = jsonschema.Draft4Validator(json.loads((ROOT / "tests" / "schemas" / "sarif-schema-2.1.0.json").read_text()))
REPORT = jsonschema.Draft202012Validator(json.loads((ROOT / "docs" / "report.schema.json").read_text()))
TENSOR = "model.layers.1.self_attn.k_proj.weight_scale"

pytestmark = pytest.mark.skipif(not GENUINE.is_dir(), reason="genuine fixtures are not present")


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("hub")
    (root / "acme").mkdir()
    nan = copy_fixture("modelopt-llama-nvfp4", root / "acme")
    patch_tensor_bytes(nan, TENSOR, {2: 0x7F})
    nan.rename(root / "acme" / "llama-nvfp4")
    with HubServer(root) as srv:
        yield srv


def run(hub: HubServer, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cwd = home / "cwd"  # empty: no local folder named acme/llama-nvfp4
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=hub_env(hub, home), capture_output=True, text=True, timeout=120
    )


def test_sarif_and_json_for_a_hub_repo(hub: HubServer, tmp_path: Path) -> None:
    done = run(hub, tmp_path, "-m", "ckpt_tools.cli.main", "doctor", "acme/llama-nvfp4", "--deep", "-f", "json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert list(REPORT.iter_errors(report)) == []
    commit = report["hub"]["commit"]

    done = run(hub, tmp_path, "-m", "ckpt_tools.cli.main", "doctor", "acme/llama-nvfp4", "--deep", "-f", "sarif")
    log = json.loads(done.stdout)
    assert list(SARIF.iter_errors(log)) == []
    (result,) = log["runs"][0]["results"]  # the defect alone: the kernels are header facts, not findings
    assert result["ruleId"] == "CK501"
    location = result["locations"][0]
    assert location["physicalLocation"]["artifactLocation"] == {
        "uri": f"{hub.url}/acme/llama-nvfp4/blob/{commit}/model.safetensors"
    }
    assert location["logicalLocations"][0]["fullyQualifiedName"] == TENSOR


def test_the_python_api_takes_a_repo_id(hub: HubServer, tmp_path: Path) -> None:
    script = (
        "import ckpt_tools\n"
        "plain = ckpt_tools.doctor('acme/llama-nvfp4')\n"
        "deep = ckpt_tools.doctor('acme/llama-nvfp4', deep=True)\n"
        "print(plain.exit_code('error'), [s['slug'] for s in plain.skipped], deep.exit_code('error'),"
        " [f.slug for f in deep.findings])\n"
    )
    done = run(hub, tmp_path, "-c", script)
    assert done.returncode == 0, done.stderr
    value_rules = [r.slug for r in all_rules() if r.needs_values]  # nan-fp8-scale and the catalogue's value rules
    assert done.stdout.split("\n")[0] == f"0 {value_rules} 1 ['nan-fp8-scale']"

"""The Python API accepts what the CLI accepts and raises only CkptError subclasses on bad input (issue 12)."""

from __future__ import annotations

from pathlib import Path

import pytest

import ckpt_tools
from ckpt_tools.errors import CkptError, UsageError
from tests.corrupt import GENUINE

CLEAN = GENUINE / "modelopt-llama-nvfp4"


def test_accepts_paths_strings_one_or_many_hardware_ids_any_case() -> None:
    assert (
        ckpt_tools.doctor(CLEAN, hardware="GB10").findings == ckpt_tools.doctor(str(CLEAN), hardware=["gb10"]).findings
    )
    plan = ckpt_tools.serve_flags(Path(CLEAN), hardware="H100")
    assert plan.hardware.id == "h100"
    as_string = ckpt_tools.check_serve(CLEAN, f"vllm serve {CLEAN}")
    as_argv = ckpt_tools.check_serve(Path(CLEAN), ["vllm", "serve", str(CLEAN)])
    assert as_string.findings == as_argv.findings and isinstance(as_argv, ckpt_tools.CheckServeResult)
    assert isinstance(ckpt_tools.doctor(CLEAN), ckpt_tools.Report) and isinstance(plan, ckpt_tools.ServePlan)


@pytest.mark.parametrize(
    "call",
    [
        lambda: ckpt_tools.doctor(123),
        lambda: ckpt_tools.doctor(None),
        lambda: ckpt_tools.doctor(""),
        lambda: ckpt_tools.doctor(CLEAN, hardware=[1]),
        lambda: ckpt_tools.doctor(CLEAN, runtime=3),
        lambda: ckpt_tools.doctor(CLEAN).render("yaml"),
        lambda: ckpt_tools.doctor(CLEAN).exit_code("fatal"),
        lambda: ckpt_tools.serve_flags(CLEAN, max_model_len="abc"),
        lambda: ckpt_tools.serve_flags(CLEAN, hardware=["gb10"]),
        lambda: ckpt_tools.check_serve(CLEAN, None),
        lambda: ckpt_tools.check_serve(CLEAN, []),
        lambda: ckpt_tools.check_serve(CLEAN, "vllm serve 'x"),
        lambda: ckpt_tools.analyze("/nonexistent/model"),
    ],
    ids=[
        "int",
        "none",
        "empty",
        "hw-int",
        "runtime-int",
        "render",
        "exit-code",
        "mml-str",
        "hw-list-serve",
        "cmd-none",
        "cmd-empty",
        "cmd-quote",
        "missing",
    ],
)
def test_bad_input_raises_only_ckpt_errors(call) -> None:
    with pytest.raises(CkptError):
        call()


def test_errors_are_exported() -> None:
    assert ckpt_tools.UsageError is UsageError and issubclass(ckpt_tools.TargetError, ckpt_tools.CkptError)

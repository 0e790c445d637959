"""Output people can script and the CLI polish of issue 12: stdout carries only the product, global --quiet /
--no-progress, --version, completion, one-line errors for -o and full disks, read-only dry runs, help text, case,
explain suggestions, aligned `ckpt rules`, inspect JSON's contract header, Ctrl-C."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.cli.test_cli import FIXTURES, ckpt
from tests.corrupt import GENUINE

CLEAN = str(GENUINE / "modelopt-llama-nvfp4")
MISNESTED = FIXTURES / "defective" / "qwen35moe-nvfp4-misnested-vision"
COMMANDS = (
    "doctor",
    "inspect",
    "serve-flags",
    "check-serve",
    "fix-prefix",
    "scrub-nan",
    "drop-orphans",
    "fix",
    "rules",
    "explain",
)


def test_serve_flags_stdout_is_only_the_command() -> None:
    # A length past the context: the verdict (CS120, an error) goes to stderr, the command printed anyway
    # (--fail-on none) is the only thing on stdout, and it never opts into VLLM_ALLOW_LONG_MAX_MODEL_LEN itself.
    proc = ckpt("serve-flags", CLEAN, "--max-model-len", "9999", "--fail-on", "none")
    assert proc.returncode == 0 and proc.stdout.count("\n") == 1
    assert proc.stdout.startswith("vllm serve ")
    assert "error: CS120 max-model-len-exceeded" in proc.stderr
    # `cmd=$(ckpt serve-flags ...)` then `$cmd`: word splitting gives the argument vector.
    script = 'cmd=$("$@") && set -- $cmd && echo "$1|$2|$3|$4"'
    out = subprocess.run(
        [
            "bash",
            "-c",
            script,
            "_",
            sys.executable,
            "-m",
            "ckpt_tools.cli.main",
            "serve-flags",
            CLEAN,
            "--max-model-len",
            "9999",
            "--fail-on",
            "none",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "CKPT_NO_PROGRESS": "1"},
    ).stdout
    assert out.strip() == f"vllm|serve|{CLEAN}|--quantization"


@pytest.mark.parametrize("flag", ["-q", "--quiet"])
def test_quiet_after_the_command_silences_warnings(flag) -> None:
    proc = ckpt("serve-flags", CLEAN, "--max-model-len", "9999", "--fail-on", "none", flag)
    assert proc.returncode == 0 and proc.stderr == "" and proc.stdout.startswith("vllm serve ")


@pytest.mark.parametrize("command", COMMANDS)
def test_no_progress_and_quiet_accepted_by_every_command(command) -> None:
    proc = ckpt(command, "--no-progress", "-q", "--help")
    assert proc.returncode == 0, proc.stderr


def test_version() -> None:
    for flag in ("--version", "-V"):
        proc = ckpt(flag)
        assert proc.returncode == 0 and re.fullmatch(r"ckpt \d+\.\d+\.\d+\n", proc.stdout)


def test_shell_completion_is_offered() -> None:
    assert "--install-completion" in ckpt("--help").stdout


def test_first_line_echoes_every_option() -> None:
    proc = ckpt("doctor", CLEAN, "--hardware", "GB10", "--runtime", "vllm-0.33", "--headers-only")
    assert proc.stdout.splitlines()[0] == f"ckpt doctor {CLEAN} --hardware GB10 --runtime vllm-0.33 --headers-only"


def test_output_into_a_missing_folder_is_one_line(tmp_path) -> None:
    proc = ckpt("doctor", CLEAN, "-o", str(tmp_path / "nope" / "r.json"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "does not exist" in proc.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_full_disk_is_one_line() -> None:
    proc = ckpt("doctor", CLEAN, "-o", "/dev/full")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "internal error" not in proc.stderr
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "ckpt_tools.cli.main", "doctor", CLEAN],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "CKPT_NO_PROGRESS": "1"},
        )
    assert proc.returncode == 2 and proc.stderr == "ckpt: cannot write the output: the disk is full\n"


def test_dry_run_on_a_read_only_copy(tmp_path) -> None:
    folder = tmp_path / "ro"
    shutil.copytree(MISNESTED, folder)
    for p in [*folder.iterdir(), folder]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    try:
        proc = ckpt("fix-prefix", str(folder), "--dry-run")
        assert proc.returncode == 0, proc.stderr
        assert "doctor after: 0 error(s)" in proc.stdout and "read-only" in proc.stdout
    finally:
        folder.chmod(0o755)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_has_no_type_labels_and_lists_choices(command) -> None:
    text = ckpt(command, "--help", env={"COLUMNS": "200"}).stdout
    assert not re.search(r"<(bool|str|int|list\[str\])>", text), text
    assert "{" not in text.split("\n", 3)[1]  # usage line: TARGET..., not {TARGET}...


def test_help_specifics() -> None:
    doctor = ckpt("doctor", "--help", env={"COLUMNS": "200"}).stdout
    assert "Usage: ckpt doctor [OPTIONS] TARGET..." in doctor and "--format [text|json|" in doctor
    serve = ckpt("serve-flags", "--help", env={"COLUMNS": "200"}).stdout
    assert "[argv|docker|compose|model-card]" in serve and "Hub repo" in serve
    check = ckpt("check-serve", "--help", env={"COLUMNS": "200"}).stdout
    assert "Usage: ckpt check-serve [OPTIONS] TARGET [COMMAND]..." in check and "Hub repo" in check


def test_hardware_is_case_insensitive() -> None:
    assert ckpt("serve-flags", CLEAN, "--hardware", "GB10").returncode == 0
    assert ckpt("doctor", CLEAN, "--hardware", "H100").returncode == 0


def test_explain_suggests_close_matches() -> None:
    proc = ckpt("explain", "nvfp4-weight")
    assert proc.returncode == 2 and "did you mean CK401 (nvfp4-weight-only)?" in proc.stderr
    assert "CK201 (misnested-prefix)" in ckpt("explain", "ck21").stderr + ckpt("explain", "misnested").stderr


def test_rules_columns_are_aligned() -> None:
    lines = ckpt("rules").stdout.splitlines()
    starts = {len(re.match(r"^(\S+\s+){3}(fixable\s+|\s+)", line).group(0)) for line in lines}
    assert len(starts) == 1, starts


def test_inspect_json_carries_the_contract_header() -> None:
    data = json.loads(ckpt("inspect", CLEAN, "-f", "json").stdout)
    assert data["schema_version"] == 1 and data["tool"]["name"] == "ckpt"


def _silent_server() -> tuple[socket.socket, int, list, threading.Thread]:
    """A 127.0.0.1 endpoint that accepts connections and never answers: a Hub read that hangs until Ctrl-C. Its
    accepting thread ends when the socket is shut down (a thread left running would keep later tests' value scans
    from forking)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held: list = []

    def hold() -> None:
        with contextlib.suppress(OSError):  # shutdown() makes the waiting accept() fail
            for _ in range(8):
                held.append(srv.accept())

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    return srv, srv.getsockname()[1], held, thread


def _wait_for(condition, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "the child never got there"
        time.sleep(0.002)


def _maps(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/maps") as fh:
            return fh.read()
    except OSError:
        return ""


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
@pytest.mark.parametrize("moment", ["app-import", "start-up", "reading"])
def test_ctrl_c_prints_one_line_and_exits_130(moment) -> None:
    srv, port, held, accepting = _silent_server()
    env = {
        **os.environ,
        "HF_ENDPOINT": f"http://127.0.0.1:{port}",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "CKPT_NO_PROGRESS": "1",
        "HF_HUB_ETAG_TIMEOUT": "60",
        "HF_HUB_DOWNLOAD_TIMEOUT": "60",
    }
    env.pop("HF_HUB_OFFLINE", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ckpt_tools.cli.main", "doctor", "org/model"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if moment == "app-import":
        # While the typer app itself is being imported, before `main()` runs: the console entry's first statement
        # installed the handler (the app's import maps `_bz2`; the interpreter's own start-up does not).
        _wait_for(lambda: "lib-dynload/_bz2" in _maps(proc.pid))
    elif moment == "start-up":
        # While the commands are being imported: orjson's extension is mapped by then, typer's app not yet run.
        _wait_for(lambda: "orjson" in _maps(proc.pid))
    else:
        _wait_for(lambda: bool(held))  # the Hub request is on the wire
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    srv.shutdown(socket.SHUT_RDWR)
    srv.close()
    accepting.join(timeout=10)
    assert not accepting.is_alive()
    assert (proc.returncode, err, out) == (130, "ckpt: interrupted\n", "")


def test_doctor_judges_many_targets_with_one_summary() -> None:
    bad = str(FIXTURES / "defective" / "llama-nvfp4-missing-input-scales")
    weight_only = str(GENUINE / "llmc-llama-nvfp4a16")
    proc = ckpt("doctor", CLEAN, bad, weight_only)
    assert proc.returncode == 1  # the worst of them
    table = proc.stdout.split("\n\ntarget ")[-1].splitlines()
    assert table[0].split()[:4] == ["errors", "warnings", "info", "--fail-on"]
    assert [line.split()[0] for line in table[1:]] == [CLEAN, bad, weight_only]
    assert [line.split()[-1] for line in table[1:]] == ["ok", "FAIL", "ok"]
    assert ckpt("doctor", CLEAN, weight_only, "--fail-on", "warning").returncode == 1
    assert ckpt("doctor", CLEAN, weight_only).returncode == 0
    reports = json.loads(ckpt("doctor", CLEAN, bad, "-f", "json").stdout)
    assert [r["target"] for r in reports] == [CLEAN, bad] and all(r["schema_version"] == 1 for r in reports)
    missing = ckpt("doctor", CLEAN, "/nonexistent/model")
    assert missing.returncode == 2 and "/nonexistent/model" in missing.stderr and missing.stderr.count("\n") == 1


def test_progress_bars_only_on_a_terminal(tmp_path) -> None:
    """A scan big enough for a progress bar (64 MiB of FP8 scales, sparse on disk) shows none when stderr is not a
    terminal, even without CKPT_NO_PROGRESS."""
    import struct

    from ckpt_tools.write.header import encode_header

    folder = tmp_path / "big"
    folder.mkdir()
    rows, cols = 16384, 65536  # 64 MiB of weight_scale
    n = rows * cols // 16
    entries = {
        "model.layers.0.mlp.down_proj.weight": {
            "dtype": "U8",
            "shape": [rows, cols // 2],
            "data_offsets": [0, rows * cols // 2],
        },
        "model.layers.0.mlp.down_proj.weight_scale": {
            "dtype": "F8_E4M3",
            "shape": [rows, cols // 16],
            "data_offsets": [rows * cols // 2, rows * cols // 2 + n],
        },
    }
    header = encode_header(entries, {"format": "pt"})
    with open(folder / "model.safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", len(header)) + header)
        fh.truncate(8 + len(header) + rows * cols // 2 + n)
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}')
    env = {k: v for k, v in os.environ.items() if k != "CKPT_NO_PROGRESS"}
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt_tools.cli.main", "doctor", str(folder)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode in (0, 1) and "scale scan" not in proc.stderr and "\r" not in proc.stderr

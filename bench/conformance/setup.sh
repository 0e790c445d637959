#!/usr/bin/env bash
# The side virtual environment of the vLLM conformance run (bench/conformance/run.py): vLLM 0.33.0's own Python
# code on CPU torch, without any GPU package. Not part of CI (the install is ~2 GB); run before each release and
# whenever detection rules change:
#
#   bash bench/conformance/setup.sh [VENV]            # default VENV: /work/venv-vllm
#   VENV/bin/python bench/conformance/run.py
#
# What it does, in this order (the order matters):
#   1. torch==2.13.0 first: pip takes the local CPU wheel; anything that later asked for torch would otherwise pull a
#      CUDA build of several GB.
#   2. vllm==0.33.0 with --no-deps: its declared dependencies include torch 2.14 (CUDA), flashinfer, triton, cutlass...
#   3. requirements.txt with --no-deps: the exact pure-Python packages vLLM's config layer (ModelConfig, the quant
#      config classes), model registry, model classes and `vllm serve` parser import on CPU, found by import errors.
#      xgrammar is there without its triton dependency; nothing in it is called. The same file carries ckpt-tools'
#      own pure-Python dependencies (typer, orjson, safetensors...), so run.py imports ckpt_tools from the checkout.
#   4. A torchvision import stub (cpu_stubs.py, see its docstring): PyPI's torchvision wheels need libtorch_cuda.so,
#      and transformers' Qwen2-VL image processor, imported by vLLM's Qwen3-VL / Qwen3.5 model modules, imports
#      torchvision at module level. A .pth line installs the stub in every interpreter of this venv, including the
#      subprocess vLLM's model registry spawns. Calling any stubbed object raises.
#   5. Checks: no nvidia-*/triton package, and the vLLM modules the run needs import.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
VENV="${1:-/work/venv-vllm}"
PY="$VENV/bin/python"

python3 -m venv "$VENV"
"$PY" -m pip install -q torch==2.13.0
"$PY" -c 'import torch, sys; v = torch.__version__; sys.exit(0 if v.startswith("2.13.0") and "cpu" in v else f"torch {v} is not the 2.13.0 CPU build")'
"$PY" -m pip install -q --no-deps vllm==0.33.0
"$PY" -m pip install -q --no-deps -r "$HERE/requirements.txt"

SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cp "$HERE/cpu_stubs.py" "$SITE/ckpt_conformance_cpu_stubs.py"
echo "import ckpt_conformance_cpu_stubs; ckpt_conformance_cpu_stubs.install()" > "$SITE/ckpt_conformance_cpu_stubs.pth"

if "$PY" -m pip list 2>/dev/null | grep -iE '^(nvidia-|triton)' ; then
  echo "setup.sh: a GPU package is installed in $VENV; remove it (see above)" >&2
  exit 1
fi
VLLM_TARGET_DEVICE=cpu "$PY" - <<'EOF'
import vllm
import vllm.config
import vllm.engine.arg_utils
import vllm.entrypoints.cli.serve
import vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors
import vllm.model_executor.layers.quantization.modelopt
import vllm.model_executor.model_loader.utils
assert vllm.__version__ == "0.33.0", vllm.__version__
print(f"vLLM {vllm.__version__} config layer imports on CPU")
EOF
echo "ready: $PY $HERE/run.py"

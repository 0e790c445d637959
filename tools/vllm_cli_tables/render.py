import json
import sys
from pathlib import Path


def arr(xs, indent="  "):
    out = []
    line = indent
    for x in xs:
        s = json.dumps(x) + ", "
        if len(line) + len(s) > 118:
            out.append(line.rstrip())
            line = indent
        line += s
    out.append(line.rstrip().rstrip(','))
    return "[\n" + "\n".join(out) + "\n]"


def block(ver, wheel):
    c = json.loads(Path(f"choices-{ver}.json").read_text())
    cli = Path(f"cli-{ver}.toml").read_text()
    src = f"read from the vllm-{wheel} wheel (PyPI)"
    o = [
        f"# ---- serve CLI: generated from the vllm-{wheel} wheel by tools/vllm_cli_tables/ (see its README); do not edit by hand ----",
        "# [cli]: every option `vllm serve` registers (engine/arg_utils.py EngineArgs.add_cli_args, the frontend",
        "# arguments and make_arg_parser); `boolean` options also accept `--no-<name>`; [env] `known`: vllm/envs.py.",
        cli.replace(
            "[cli]\n",
            f'[cli]\nsource = "{src}: engine/arg_utils.py, entrypoints/*/cli_args.py, utils/argparse_utils.py"\n',
            1,
        ).replace(
            "[env]\n",
            f'[env]\nsource = "{src}: vllm/envs.py environment_variables; platforms/interface.py validate_environ warns on any other VLLM_* variable"\n',
            1,
        ),
        "",
        "[choices]",
        f'source = "{src}: the Literal / registry each flag is parsed against"',
    ]
    names = {
        "kv_cache_dtype": "--kv-cache-dtype",
        "moe_backend": "--moe-backend",
        "linear_backend": "--linear-backend",
        "attention_backend": "--attention-backend",
        "reasoning_parser": "--reasoning-parser",
        "tool_call_parser": "--tool-call-parser",
        "speculative_method": "speculative_config.method",
        "quantization": "--quantization",
        "dtype": "--dtype",
        "mm_encoder_tp_mode": "--mm-encoder-tp-mode",
        "mamba_dtype": "--mamba-cache-dtype / --mamba-ssm-cache-dtype",
        "mtp_model_types": "MTP method aliases",
    }
    for k, v in c.items():
        o.append(f"# {names[k]}")
        o.append(f"{k} = {arr(v)}")
    return "\n".join(o) + "\n"


if __name__ == "__main__":
    print(block(sys.argv[1], sys.argv[2]))

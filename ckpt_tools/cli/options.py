"""Options several commands share, defined once: the target argument, --hardware, --runtime, --fail-on, and the shell
completions of their values (from rules/, so a new profile or rule completes without a code change)."""

from __future__ import annotations

from typing import Any

import typer

from ..errors import UsageError

TARGET_HELP = "Checkpoint folder, .safetensors file, or Hub repo (org/name, org/name@revision, hf://org/name)."
LOCAL_TARGET_HELP = "Local checkpoint folder or .safetensors file."


def target_argument(help: str = TARGET_HELP) -> Any:
    """The positional checkpoint of a command, named TARGET in usage and in the help's argument list alike."""
    return typer.Argument(..., metavar="TARGET", help=help)


# ---- completions ----------------------------------------------------------------------------------------------------
def complete_hardware(incomplete: str) -> list[str]:
    from ..knowledge.hardware import profiles

    done, _, last = incomplete.rpartition(",")  # `--hardware gb10,h<TAB>` completes the last id of the list
    prefix = f"{done}," if done else ""
    return [prefix + p.id for p in profiles() if p.id.startswith(last.lower())]


def complete_runtime(incomplete: str) -> list[str]:
    from ..knowledge.runtimes import runtime_ids

    return [rid for rid in runtime_ids() if rid.startswith(incomplete)]


def complete_rule(incomplete: str) -> list[str]:
    from ..docs import every_check

    key = incomplete.lower()
    codes = [r.code for r in every_check() if r.code.lower().startswith(key)]
    return codes + [r.slug for r in every_check() if key and r.slug.startswith(key)]


# ---- --hardware -----------------------------------------------------------------------------------------------------
HARDWARE_HELP = "Hardware profile(s) {hardware_ids}, any case; repeatable or comma-separated (--hardware gb10,h100)."


def hardware_option(default: str) -> Any:
    """`--hardware`, parsed the same way by every command: repeatable and comma-separated. `default` says what the
    command does without it."""
    return typer.Option(
        None, "--hardware", help=f"{HARDWARE_HELP} {default}", autocompletion=complete_hardware, metavar="ID"
    )


def hardware_ids(values: list[str] | None) -> tuple[str, ...]:
    """`--hardware GB10,h100 --hardware b200` -> ("gb10", "h100", "b200"): split, trimmed, any case, each once."""
    ids = [part.strip().lower() for value in values or () for part in value.split(",")]
    return tuple(dict.fromkeys(i for i in ids if i))


def one_hardware(values: list[str] | None, command: str) -> str | None:
    """The one profile of a command that plans or serves on one kind of GPU; several are a usage error."""
    ids = hardware_ids(values)
    if len(ids) > 1:
        raise UsageError(f"{command} runs on one hardware profile; --hardware got {', '.join(ids)}: give one")
    return ids[0] if ids else None


# ---- --runtime ------------------------------------------------------------------------------------------------------
def runtime_option(help: str = "Runtime profile from rules/runtimes/ (default {default_runtime}).") -> Any:
    return typer.Option(None, "--runtime", help=help, autocompletion=complete_runtime)


# ---- --fail-on ------------------------------------------------------------------------------------------------------
FAIL_ON_CHOICES = ("error", "warning", "info", "none")
FAIL_ON_ALIASES = {"warn": "warning"}  # what people type (pre-commit, ruff and others spell it so)


def fail_on_value(value: str) -> str:
    """The --fail-on level, any case, `warn` for `warning`; anything else is a one-line usage error listing them."""
    key = value.strip().lower()
    key = FAIL_ON_ALIASES.get(key, key)
    if key not in FAIL_ON_CHOICES:
        raise UsageError(f"--fail-on {value!r} is not a level; choose one of: error, warning (or warn), info, none")
    return key


def fail_on_option(default: str, help: str) -> Any:
    return typer.Option(
        default,
        "--fail-on",
        help=help,
        metavar="[error|warning|info|none]",
        callback=fail_on_value,
        autocompletion=complete_fail_on,
    )


def complete_fail_on(incomplete: str) -> list[str]:
    return [c for c in FAIL_ON_CHOICES if c.startswith(incomplete.lower())]

"""Parse an existing serve command — `vllm serve MODEL ...`, `VAR=x vllm serve ...`, `python -m
vllm.entrypoints.openai.api_server --model ...` or `docker run [opts] IMAGE [serve] MODEL ...` (also
`--entrypoint bash IMAGE -lc 'vllm serve ...'`) — into the model, the options as vLLM's parser sees them, the
environment and the image. Option arity comes from the runtime profile's flag table."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from ..knowledge.runtimes import FlagInfo, Runtime
from ..knowledge.serving import serving


@dataclass(frozen=True)
class ParsedFlag:
    spelled: str  # as typed, e.g. `-tp` or `--max_model_len`
    name: str  # canonical, e.g. `--tensor-parallel-size`; the spelling itself when unknown
    value: str | None
    known: bool
    negated: bool = False  # --no-<flag>
    json_path: tuple[str, ...] = ()  # --speculative-config.method -> ("method",)


@dataclass(frozen=True)
class ParsedCommand:
    kind: str  # "vllm" or "docker"
    model: str | None
    flags: tuple[ParsedFlag, ...]
    env: Mapping[str, str | None]  # None: passed through from the host (`-e VAR`)
    image: str | None = None
    mounts: tuple[tuple[str, str], ...] = ()  # (host, container)
    problems: tuple[str, ...] = field(default=())

    def get(self, name: str) -> list[ParsedFlag]:
        return [f for f in self.flags if f.name == name]

    def last(self, name: str) -> ParsedFlag | None:
        found = self.get(name)
        return found[-1] if found else None

    def json_value(self, name: str) -> Any:
        """A JSON-typed option with dotted overrides merged (FlexibleArgumentParser semantics); None if absent."""
        value: Any = None
        for f in self.get(name):
            if f.json_path:
                value = value if isinstance(value, dict) else {}
                node = value
                for key in f.json_path[:-1]:
                    node = node.setdefault(key, {})
                node[f.json_path[-1]] = _scalar(f.value or "")
            elif f.value is not None:
                value = json.loads(f.value)  # callers validate the JSON first (invalid-flag-value)
        return value


def _scalar(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def split_command(words: Sequence[str]) -> list[str]:
    """One quoted string (or a pasted script with backslash-newlines) becomes an argv; an argv stays as it is."""
    if len(words) == 1 and (" " in words[0] or "\n" in words[0]):
        try:
            return shlex.split(words[0].replace("\\\n", " "))
        except ValueError as exc:
            raise UsageError(f"cannot split the command: {exc}") from None
    return list(words)


def parse_command(words: Sequence[str], rt: Runtime) -> ParsedCommand:
    argv = split_command(words)
    if not argv:
        raise UsageError("no command to check: pass it after `--`, e.g. `ckpt check-serve MODEL -- vllm serve ...`")
    env: dict[str, str | None] = {}
    i = 0
    if argv[0] == "env":
        i = 1
    while i < len(argv) and "=" in argv[i] and not argv[i].startswith("-") and argv[i].split("=", 1)[0].isidentifier():
        key, value = argv[i].split("=", 1)
        env[key] = value
        i += 1
    rest = argv[i:]
    if rest[:2] == ["docker", "run"] or rest[:3] == ["docker", "container", "run"]:
        return _docker(rest[3:] if rest[1] == "container" else rest[2:], rt, env)
    return _serve(rest, rt, env, kind="vllm")


def _serve(
    argv: list[str],
    rt: Runtime,
    env: dict[str, str | None],
    *,
    kind: str,
    image: str | None = None,
    mounts: tuple[tuple[str, str], ...] = (),
) -> ParsedCommand:
    if argv and argv[0] == "exec":
        argv = argv[1:]
    if argv[:2] == ["vllm", "serve"]:
        args = argv[2:]
    elif argv[:1] == ["serve"]:
        args = argv[1:]
    elif len(argv) >= 3 and argv[0].startswith("python") and argv[1] == "-m" and argv[2].startswith("vllm.entrypoints"):
        args = argv[3:]
    elif kind == "docker":
        args = argv  # the upstream image's entrypoint is already `vllm serve`
    else:
        raise UsageError(
            "not a `vllm serve` or `docker run` command: it must start with `vllm serve`, "
            "`python -m vllm.entrypoints...` or `docker run`"
        )
    flags, model, problems = _options(args, rt)
    return ParsedCommand(kind, model, tuple(flags), env, image, mounts, tuple(problems))


def _options(args: list[str], rt: Runtime) -> tuple[list[ParsedFlag], str | None, list[str]]:
    flags: list[ParsedFlag] = []
    model = None
    problems: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if not word.startswith("-") or word == "-":
            if model is None:
                model = word
            else:
                problems.append(f"unexpected argument {word!r}")
            continue
        if word.startswith("-O") and not word.startswith("--"):
            # -O3 / -O=3 / -O 3 are --optimization-level (FlexibleArgumentParser.parse_args).
            if word == "-O" and i < len(args):
                level, i = args[i], i + 1
            else:
                level = word[3:] if word[2:3] == "=" else word[2:]
            flags.append(ParsedFlag(word, "--optimization-level", level, True))
            continue
        spelled, eq, rest = word.partition("=")
        value = rest if eq else None
        base, _, path = spelled.partition(".") if spelled.startswith("-") and "." in spelled else (spelled, "", "")
        info, negated = rt.lookup(base)
        if info is None:
            # Unknown: guess the arity so the rest still parses (a following non-option word is its value).
            if value is None and i < len(args) and not args[i].startswith("-") and model is not None:
                value, i = args[i], i + 1
            flags.append(ParsedFlag(spelled, base, value, False))
            continue
        if path:
            if value is None and i < len(args):
                value, i = args[i], i + 1
            flags.append(ParsedFlag(spelled, info.name, value, True, json_path=tuple(path.split("."))))
            continue
        if value is None and _takes_value(info, negated) and i < len(args):
            if info.arity == "optional_value" and args[i].startswith("-"):
                pass
            else:
                value, i = args[i], i + 1
        if info.name == "--model" and value is not None and model is None:
            model = value
        if info.name == "--served-model-name" and value is not None:
            # nargs="+": every following non-option word is another name.
            while i < len(args) and not args[i].startswith("-"):
                value += " " + args[i]
                i += 1
        flags.append(ParsedFlag(spelled, info.name, value, True, negated=negated))
    return flags, model, problems


def _takes_value(info: FlagInfo, negated: bool) -> bool:
    return info.arity in ("value", "optional_value") and not negated


def _docker(args: list[str], rt: Runtime, env: dict[str, str | None]) -> ParsedCommand:
    value_opts = serving().docker_value_options
    mounts: list[tuple[str, str]] = []
    entrypoint = None
    i = 0
    while i < len(args) and args[i].startswith("-"):
        word = args[i]
        i += 1
        name, value = word.split("=", 1) if "=" in word else (word, None)
        if name in value_opts and value is None:
            if i >= len(args):
                raise UsageError(f"docker option {name} has no value")
            value, i = args[i], i + 1
        if name in ("-e", "--env") and value is not None:
            key, sep, val = value.partition("=")
            env[key] = val if sep else None
        elif name in ("-v", "--volume") and value is not None:
            parts = value.split(":")
            if len(parts) >= 2:
                mounts.append((parts[0], parts[1]))
        elif name == "--entrypoint":
            entrypoint = value
    if i >= len(args):
        raise UsageError("docker run command without an image")
    image, rest = args[i], args[i + 1 :]
    if entrypoint in ("bash", "sh", "/bin/bash", "/bin/sh") and rest and rest[0] in ("-c", "-lc", "-ec"):
        rest = split_command([rest[1]]) if len(rest) > 1 else []
    elif entrypoint and entrypoint != "vllm" and not entrypoint.endswith("/vllm"):
        rest = [entrypoint, *rest]
    elif entrypoint:
        rest = ["vllm", *rest]
    return _serve(rest, rt, env, kind="docker", image=image, mounts=tuple(mounts))

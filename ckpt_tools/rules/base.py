"""The rule contract: a rule is a small class with a stable code and slug, a default severity, documentation in its
docstring, and a pure `check(ctx)` that yields findings. Rules never do I/O; everything they need is in `Context`.

Docstrings have four sections, in this order, each introduced by its heading on a line of its own:
`What it catches`, `Why it matters`, `Anti-pattern`, `Fix`, optionally followed by `Source`. `ckpt explain` and
docs/rules.md print them. The check-serve checks (ckpt_tools/serve/checks/) follow the same contract through
`Check`; they judge a serve command instead of a checkpoint.
"""

from __future__ import annotations

import importlib
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Generic, TypeVar

from ..detect.resolve import Detection
from ..knowledge.hardware import Hardware
from ..model.checkpoint import Checkpoint
from ..model.tensors import TensorInfo

SEVERITIES = ("info", "warning", "error")
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}
MAX_LISTED_TENSORS = 20


@dataclass(frozen=True)
class RuleFamily:
    """A block of rule codes (docs/architecture.md, Conventions): `tag` labels it in SARIF, `title` in docs/rules.md."""

    prefix: str  # `CK1`: codes CK100-CK199
    tag: str
    title: str

    @property
    def heading(self) -> str:
        return f"{self.prefix}xx: {self.title}"


RULE_FAMILIES = (
    RuleFamily("CK1", "integrity", "file and shard integrity"),
    RuleFamily("CK2", "naming", "naming and prefixes"),
    RuleFamily("CK3", "config", "config vs tensors"),
    RuleFamily("CK4", "scales", "scale presence and shape"),
    RuleFamily("CK5", "scale-values", "scale values"),
    RuleFamily("CK6", "load", "what vLLM's loader does with each tensor"),
    RuleFamily(
        "CS1", "serve", "serve commands (`ckpt check-serve`, and the verdict of `ckpt serve-flags` on its own command)"
    ),
)


def rule_family(code: str) -> RuleFamily | None:
    return next((f for f in RULE_FAMILIES if code.startswith(f.prefix)), None)


@dataclass(frozen=True)
class Finding:
    code: str
    slug: str
    severity: str
    message: str
    files: tuple[str, ...] = ()
    tensors: tuple[str, ...] = ()
    count: int = 0
    fix: str | None = None
    details: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    # Every tensor involved (`tensors` is truncated for display); not serialised. Suppression by tensor glob uses it.
    all_tensors: tuple[str, ...] = field(default=(), repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "code": self.code,
            "slug": self.slug,
            "severity": self.severity,
            "message": self.message,
            "files": list(self.files),
            "tensors": list(self.tensors),
            "count": self.count,
            "fix": self.fix,
        }
        if self.details:
            out["details"] = dict(self.details)
        return out


@dataclass(frozen=True)
class Context:
    """Everything a rule may look at."""

    ckpt: Checkpoint
    det: Detection
    hardware: tuple[Hardware, ...]
    target: str  # how the user named the target, for fix commands
    producer_schema: Any = None  # detect.producer_schema.SchemaCheck when --producer-schema ran
    vllm: Any = None  # vllm_dry.run.Pending when --vllm runs: vLLM's own dry-run load, awaited by the CK60x rules

    def command(self, *words: str) -> str | None:
        """The repair command for this target; None on a Hub target, which can only be repaired as a local copy."""
        if self.ckpt.remote:
            return None
        return " ".join(["ckpt", *words, shlex.quote(self.target)])


DOC_SECTIONS = ("What it catches", "Why it matters", "Anti-pattern", "Fix", "Source")


class Check:
    """What every check shares, CK rule or CS serve check: a stable code and slug, a default severity, a title, and
    its documentation in the docstring (`doc_sections`)."""

    code: ClassVar[str]
    slug: ClassVar[str]
    severity: ClassVar[str]
    title: ClassVar[str]
    fixable: ClassVar[bool] = False
    # Judges value statistics (skipped with --headers-only / remote without --deep).
    needs_values: ClassVar[bool] = False
    reported_by: ClassVar[str | None] = None  # the command whose findings these are, when it is not doctor's

    @classmethod
    def doc_sections(cls) -> dict[str, str]:
        """The docstring split into its sections: summary, What it catches, Why it matters, Anti-pattern, Fix, and
        Source where the docstring has one."""
        import inspect

        text = inspect.cleandoc(cls.__doc__ or "")
        sections: dict[str, list[str]] = {"summary": []}
        current = "summary"
        for line in text.splitlines():
            heading = line.strip().rstrip(":")
            if heading in DOC_SECTIONS:
                current = heading
                sections[current] = []
            else:
                sections[current].append(line)
        return {k: "\n".join(v).strip() for k, v in sections.items()}


class Rule(Check):
    @classmethod
    def wants_values(cls, tensor: TensorInfo) -> bool:
        """Whether this rule judges `tensor`'s value statistics (`ctx.ckpt.values`). A rule with `needs_values`
        overrides it; the pipeline scans the union over the rules that run, so a rule never sees statistics it did
        not ask for unless another rule asked for them too. The answer may depend only on the tensor's dtype, shape
        and last name segment (its suffix): the pipeline asks once per such triple, not once per tensor."""
        return False

    def check(self, ctx: Context) -> Iterable[Finding]:
        raise NotImplementedError

    def finding(
        self,
        message: str,
        *,
        tensors: Sequence[str] = (),
        files: Iterable[str] = (),
        count: int | None = None,
        severity: str | None = None,
        fix: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> Finding:
        listed = tuple(tensors)
        return Finding(
            code=self.code,
            slug=self.slug,
            severity=severity or self.severity,
            message=message,
            files=tuple(sorted(set(files))),
            tensors=listed[:MAX_LISTED_TENSORS],
            count=len(listed) if count is None else count,
            fix=fix,
            details=MappingProxyType(dict(details or {})),
            all_tensors=listed,
        )


D = TypeVar("D", bound=Check)


class Registry(Generic[D]):
    """The checks of one kind by code: CK rules here, CS serve checks in serve/checks/. `register` is the class
    decorator each check module applies; `all()` imports the package's `_load_all` (every check module) once and lists
    them in code order. `registered_check(code)` looks in every registry, so a renderer can describe any reported
    code without importing the layer that reports it."""

    _every: ClassVar[list[Registry[Any]]] = []

    def __init__(self, kind: str, package: str) -> None:
        self.kind = kind
        self.package = package
        self.by_code: dict[str, type[D]] = {}
        Registry._every.append(self)

    def register(self, cls: type[D]) -> type[D]:
        for other in self.by_code.values():
            if other.code == cls.code or other.slug == cls.slug:
                clash = f"{cls.code}/{cls.slug} vs {other.code}/{other.slug}"
                raise ValueError(f"duplicate {self.kind} code or slug: {clash}")
        self.by_code[cls.code] = cls
        return cls

    def all(self) -> list[type[D]]:
        importlib.import_module(f"{self.package}._load_all")
        return [self.by_code[c] for c in sorted(self.by_code)]

    def find(self, code_or_slug: str) -> type[D] | None:
        return find_among(self.all(), code_or_slug)


def find_among(checks: Iterable[type[D]], code_or_slug: str) -> type[D] | None:
    """The check among `checks` with this code (any case) or slug."""
    key = code_or_slug.strip()
    return next((c for c in checks if key.upper() == c.code or key.lower() == c.slug), None)


def registered_check(code: str) -> type[Check] | None:
    """The registered check with this code, whichever registry holds it; None for a code no imported module
    registered (a serve check is registered once check-serve has run)."""
    return next((r.by_code[code] for r in Registry._every if code in r.by_code), None)


_RULES: Registry[Rule] = Registry("rule", "ckpt_tools.rules")
register = _RULES.register


def all_rules() -> list[type[Rule]]:
    return _RULES.all()


def find_rule(code_or_slug: str) -> type[Rule] | None:
    return _RULES.find(code_or_slug)


def module_files(ckpt: Checkpoint, modules: Iterable[str]) -> set[str]:
    """The shards holding any tensor of these modules."""
    lookup = ckpt.modules
    return {t.shard for name in modules if name in lookup for t in lookup[name].tensors.values()}


def files_of(ckpt: Checkpoint, tensors: Iterable[str]) -> set[str]:
    lookup = ckpt.tensors
    return {lookup[t].shard for t in tensors if t in lookup}

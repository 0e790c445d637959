"""Turn huggingface_hub's exceptions into one-line `TargetError`s (exit 2) that say what to do next.

The order matters, as huggingface_hub's exception classes nest: `GatedRepoError` is a subclass of
`RepositoryNotFoundError`, every Hub HTTP error is an `HfHubHTTPError`, and that in turn is the HTTP library's
`HTTPError` (httpx in huggingface_hub 1.x, httpx2 in 2.x), as are the transport errors of a network failure. So: offline, gated, not found, revision, disabled,
missing file, any other HTTP status, then network.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ..errors import CkptError, TargetError
from .hub_target import hub_reading


@dataclass(frozen=True)
class HubContext:
    """What an error message needs to name: the repo, where it was looked up, and how it was asked for."""

    repo_id: str
    revision: str | None
    endpoint: str
    has_token: bool
    bare_target: bool  # typed as `org/name` (could have been a mistyped local path), not `hf://org/name`


def _one_line(text: object) -> str:
    return re.sub(r"\s+", " ", str(text)).strip()


def http_library_errors() -> tuple[type[BaseException], type[BaseException]]:
    """(transport error, any HTTP error) of the HTTP library huggingface_hub is built on."""
    from huggingface_hub.errors import HfHubHTTPError

    for base in HfHubHTTPError.__mro__[1:]:
        library = sys.modules.get(base.__module__.split(".")[0])
        transport = getattr(library, "TransportError", None)
        if transport is not None:
            return transport, base
    return OSError, OSError


def describe(exc: BaseException, ctx: HubContext) -> str:
    """The one-line message for an exception raised while talking to the Hub."""
    from huggingface_hub import errors

    repo, page = ctx.repo_id, f"{ctx.endpoint}/{ctx.repo_id}"
    login = "log in with `hf auth login` or set HF_TOKEN"
    transport, http_error = http_library_errors()
    if isinstance(exc, errors.OfflineModeIsEnabled):
        return (
            f"{repo}: huggingface_hub is in offline mode (HF_HUB_OFFLINE is set); unset it to inspect a Hub repo, "
            "or inspect a local copy"
        )
    if isinstance(exc, errors.GatedRepoError):
        if ctx.has_token:
            return f"{repo}: gated repo and your token has not been granted access; request access at {page}"
        return f"{repo}: gated repo; request access at {page}, then {login}"
    if isinstance(exc, errors.RepositoryNotFoundError):
        if ctx.has_token:
            return f"{repo}: repository not found on {ctx.endpoint}, or it is private and your token cannot see it"
        return f"{repo}: repository not found on {ctx.endpoint}; if it is private, {login}"
    if isinstance(exc, errors.RevisionNotFoundError):
        return f"{repo}: revision {ctx.revision!r} not found; give a branch, tag or commit sha of {page}"
    if isinstance(exc, errors.DisabledRepoError):
        return f"{repo}: the repository has been disabled on {ctx.endpoint}"
    if isinstance(exc, errors.HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else "?"
        detail = _one_line(exc.server_message or getattr(exc.response, "reason_phrase", "") or "")
        return f"{repo}: the Hub answered HTTP {status}" + (f" ({detail})" if detail else "") + f" at {ctx.endpoint}"
    if isinstance(exc, (transport, http_error, ConnectionError, TimeoutError)):
        return (
            f"{repo}: cannot reach the Hub at {ctx.endpoint} ({type(exc).__name__}: {_one_line(exc)}); "
            "check the network, HF_ENDPOINT and proxy settings"
        )
    return f"{repo}: Hub request failed ({type(exc).__name__}: {_one_line(exc)})"


@contextmanager
def hub_errors(ctx: HubContext) -> Iterator[None]:
    """Re-raise anything huggingface_hub or its HTTP library raises as a one-line `TargetError`."""
    try:
        yield
    except CkptError:
        raise
    except Exception as exc:
        if not _from_hub_stack(exc):
            raise
        reading = f"; {hub_reading(ctx.repo_id)}" if ctx.bare_target and not _repo_answered(exc) else ""
        raise TargetError(describe(exc, ctx) + reading) from None


def _repo_answered(exc: BaseException) -> bool:
    """The Hub knows the repo (gated, disabled, no such revision): reading the target as a repo id was right, so the
    message does not need to say how it was read."""
    from huggingface_hub import errors

    return isinstance(exc, (errors.GatedRepoError, errors.DisabledRepoError, errors.RevisionNotFoundError))


def _from_hub_stack(exc: BaseException) -> bool:
    """True for exceptions of huggingface_hub, its HTTP library, or the socket layer below it."""
    transport, http_error = http_library_errors()
    module = type(exc).__module__.split(".")[0]
    return isinstance(exc, (OSError, transport, http_error)) or module in {"huggingface_hub", "httpx", "httpx2"}

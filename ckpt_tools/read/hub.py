"""Checkpoints on the Hugging Face Hub, read with HTTP range requests: configs, the index and shard headers, never
weight bytes (unless `--deep` asks for the scale tensors).

Every Hub call goes through huggingface_hub's HTTP layer: `build_hf_headers`, `hf_hub_url`, `get_session` and
`hf_raise_for_status`, so HF_ENDPOINT, HF_TOKEN, the stored login, proxies, offline mode and error classification
behave exactly as they do for huggingface_hub itself. The requests themselves go through `hub_http.get`, which bounds
each one in time (a per-request and a per-command deadline) and in bytes, and the model-info answer is checked by
`hub_info` before anything uses it: the server is not trusted to be a Hub (SECURITY.md).

Cost of one cold run: one model-info request with file sizes (the same `GET /api/models/{repo}?blobs=true` as
`HfApi.model_info(files_metadata=True)`; it pins the commit sha and gives every file's size), then one GET per
config file read and, with the index's help, one range GET per shard (`header_estimate.py`). All reads use the
pinned sha, so a branch moving mid-run cannot mix two commits. Ranges read by `read_range` and `read_file` are kept
per commit sha under the huggingface_hub assets cache, so a repeat run costs the one model-info request. The `--deep`
scale reads (`read_ranges`) are not cached: they can be large.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

from .._version import __version__
from ..errors import TargetError
from . import hub_http
from .hub_errors import HubContext, http_library_errors, hub_errors
from .hub_http import Budget, Deadlines, Reply, TooLarge
from .hub_info import parse_model_info
from .hub_target import HubTarget
from .range_cache import RangeCache

LIBRARY = "ckpt-tools"
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
ATTEMPTS = 3  # a range read is retried twice on a transport error or a retryable status
BACKOFF = 0.5  # seconds before the first retry, doubled for the next
SKIP_LIMIT = 64 * 1024 * 1024  # a server without Range support is read from the start only this far
INFO_LIMIT = 64 * 1024 * 1024  # the model-info JSON; a repo of 100,000 files lists in about 25 MB
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.IGNORECASE)
_UNSAFE_IN_NAME = re.compile(r"[^A-Za-z0-9._-]")


class HubSource:
    """One model repo at one commit on the Hub, seen through the `Source` protocol."""

    is_remote = True

    def __init__(
        self,
        target: HubTarget,
        *,
        endpoint: str | None = None,
        token: str | bool | None = None,
        cache_dir: Path | bool | None = True,
        bare_target: bool = False,
        deadlines: Deadlines | None = None,
    ) -> None:
        """`token=None` uses HF_TOKEN or the stored login, as huggingface_hub does. `cache_dir=True` keeps read
        ranges under the huggingface_hub assets cache, a path keeps them there, False keeps them in memory only.
        `deadlines=None` takes them from CKPT_HUB_REQUEST_TIMEOUT and CKPT_HUB_DEADLINE (or the defaults); the
        command's deadline counts from here."""
        from huggingface_hub import constants
        from huggingface_hub.utils import HFValidationError, build_hf_headers, validate_repo_id

        self.target = target
        self.endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
        self._token = token
        self._budget = Budget(deadlines or Deadlines.from_env(), target.label, self.endpoint)
        has_token = "authorization" in build_hf_headers(token=token)  # what will be sent, implicit login included
        self._ctx = HubContext(target.repo_id, target.revision, self.endpoint, has_token, bare_target)
        try:
            validate_repo_id(target.repo_id)
        except HFValidationError as exc:
            raise TargetError(f"{target.repo_id}: not a valid Hub repo id ({exc})") from None
        listing = parse_model_info(self._model_info(), target.repo_id, target.label, target.revision, self.endpoint)
        self.sha: str = listing.sha
        self._sizes = listing.sizes
        self._cache = RangeCache(self._cache_folder(cache_dir), f"{self.sha}.ranges")
        self._ignores_range = False  # learnt from a 200 answer to a range request

    def _model_info(self) -> bytes:
        """The body of `GET /api/models/{repo}[/revision/{rev}]?blobs=true`, as `HfApi.model_info(...,
        files_metadata=True)` sends it, capped at INFO_LIMIT bytes."""
        url = f"{self.endpoint}/api/models/{self.target.repo_id}"
        if self.target.revision is not None:
            url += f"/revision/{quote(self.target.revision, safe='')}"

        def consume(reply: Reply) -> bytes:
            reply.raise_for_status()
            return reply.body(INFO_LIMIT, "the model info")

        with hub_errors(self._ctx):
            try:
                return hub_http.get(url + "?blobs=true", self._headers(), self._budget, "the model info", consume)
            except TooLarge as exc:
                raise TargetError(f"{self.label}: {exc} (check HF_ENDPOINT)") from None

    def _headers(self) -> dict[str, str]:
        from huggingface_hub.utils import build_hf_headers

        return build_hf_headers(token=self._token, library_name=LIBRARY, library_version=__version__)

    # ---- Source protocol ----------------------------------------------------------------------------------------
    @property
    def label(self) -> str:
        return self.target.label

    def list_files(self) -> Sequence[str]:
        return sorted(self._sizes)

    def size(self, name: str) -> int:
        try:
            return self._sizes[name]
        except KeyError:
            raise FileNotFoundError(2, "not in the repo", name) from None

    def read_range(self, name: str, start: int, length: int) -> bytes:
        length = max(0, min(length, self.size(name) - start))
        cached = self._cache.get(name, start, length)
        if cached is not None:
            return cached
        data = self._fetch(name, start, length)
        self._cache.put(name, start, data)
        return data

    def read_ranges(self, name: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        size = self.size(name)
        return [self._fetch(name, start, max(0, min(length, size - start))) for start, length in ranges]

    def read_file(self, name: str, limit: int) -> bytes:
        if self.size(name) > limit:
            raise ValueError(f"{name} is larger than {limit} bytes")
        return self.read_range(name, 0, self.size(name))

    # ---- extras -------------------------------------------------------------------------------------------------
    @property
    def provenance(self) -> dict[str, Any]:
        """Where the bytes came from, for the report: the repo, the revision asked for and the commit it resolved to."""
        return {
            "repo_id": self.target.repo_id,
            "revision": self.target.revision,
            "commit": self.sha,
            "endpoint": self.endpoint,
        }

    def _cache_folder(self, cache_dir: Path | bool | None) -> Path | None:
        """Where this repo's cache files live: named by the repo id (validated) and the endpoint's host, never by
        anything the server says. The file in it is named by the commit sha, checked to be 40 hex digits."""
        if cache_dir is False or cache_dir is None:
            return None
        host = _UNSAFE_IN_NAME.sub("_", urlparse(self.endpoint).netloc).strip(".") or "hub"
        namespace = "models--" + self.target.repo_id.replace("/", "--")
        if cache_dir is True:
            from huggingface_hub import cached_assets_path

            try:
                folder = cached_assets_path(library_name=LIBRARY, namespace=namespace, subfolder=host)
            except (OSError, ValueError):
                return None  # an unwritable cache only costs requests
        else:
            folder = Path(cache_dir) / namespace / host
        return folder

    def _fetch(self, name: str, start: int, length: int) -> bytes:
        """Bytes [start, start + length) of `name` at the pinned commit, in one range request (plus retries)."""
        if length <= 0:
            return b""
        from huggingface_hub import hf_hub_url

        if start > SKIP_LIMIT and self._ignores_range:
            raise self._no_ranges(name, start)
        url = hf_hub_url(self.target.repo_id, name, revision=self.sha, endpoint=self.endpoint)
        headers = {**self._headers(), "range": f"bytes={start}-{start + length - 1}"}
        what = f"{name} (bytes {start}-{start + length - 1})"
        transport, _ = http_library_errors()
        with hub_errors(self._ctx):
            for attempt in range(ATTEMPTS):
                try:
                    data = hub_http.get(
                        url, headers, self._budget, what, lambda reply: self._range_reply(reply, name, start, length)
                    )
                except _Retryable as retry:
                    if attempt == ATTEMPTS - 1:
                        raise retry.error from None
                except transport:
                    if attempt == ATTEMPTS - 1:
                        raise
                else:
                    break
                self._budget.sleep(BACKOFF * 2**attempt)
        return data

    def _no_ranges(self, name: str, start: int) -> TargetError:
        return TargetError(
            f"{self.label}: {name}: the server ignores HTTP range requests, so reading byte {start:,} "
            f"would download the file up to there; use a server (or HF_ENDPOINT) that supports ranges, "
            f"or a local copy"
        )

    def _range_reply(self, reply: Reply, name: str, start: int, length: int) -> bytes:
        """The bytes of one reply to a range request. Never holds more than `length` bytes of the body: a 206 that
        declares or sends more than was asked for, or whose Content-Range is not the one asked for, is refused (the
        bytes would come from the wrong place); a body cut short is retried."""
        asked = f"bytes {start}-{start + length - 1}"
        if reply.status >= 400:
            try:
                reply.raise_for_status()
            except Exception as exc:
                if reply.status in RETRY_STATUSES:
                    raise _Retryable(exc) from None
                raise
        if reply.status not in (200, 206):
            raise TargetError(f"{self.label}: {name}: the server answered HTTP {reply.status} to a request for {asked}")
        if reply.status == 206:
            wrong = _wrong_content_range(reply.headers.get("content-range"), start, length, self.size(name))
            declared = reply.content_length
            if not wrong and declared is not None and declared > length:
                wrong = f"with a {declared:,}-byte body"
            if wrong:
                raise TargetError(
                    f"{self.label}: {name}: asked for {asked}, the server answered {wrong}; refusing bytes from "
                    f"the wrong place (a proxy or mirror that rewrites ranges?)"
                )
            return self._read_exactly(reply, name, start, length)
        # A server that ignores Range answers 200 with the whole file: skip to `start` and stop after `length`
        # bytes, closing the connection, rather than download the weights.
        self._ignores_range = True
        if start > SKIP_LIMIT:
            raise self._no_ranges(name, start)
        return self._read_exactly(reply, name, start, length, skip=start)

    def _read_exactly(self, reply: Reply, name: str, start: int, length: int, *, skip: int = 0) -> bytes:
        """`length` bytes of the body after the first `skip`. A 206 (skip 0) must end there: more is an error, not a
        buffer; a whole file (a 200) is cut off there."""
        parts: list[bytes] = []
        got = 0
        for chunk in reply.chunks():
            if skip:
                if len(chunk) <= skip:
                    skip -= len(chunk)
                    continue
                chunk, skip = chunk[skip:], 0
            if got + len(chunk) > length and reply.status == 206:
                raise TargetError(
                    f"{self.label}: {name}: asked for {length:,} bytes (bytes {start}-{start + length - 1}), the "
                    f"server sent more; refusing a reply longer than the range (a proxy or mirror that rewrites "
                    f"ranges?)"
                )
            parts.append(chunk[: length - got])
            got += len(parts[-1])
            if got >= length and reply.status != 206:
                break
        if got < length:
            raise _Retryable(
                TargetError(
                    f"{self.label}: {name}: the server sent {got:,} of the {length:,} bytes "
                    f"asked for (bytes {start}-{start + length - 1}), {ATTEMPTS} times; "
                    f"the connection keeps closing early, try again later"
                )
            )
        return b"".join(parts)


def _wrong_content_range(value: str | None, start: int, length: int, total: int) -> str | None:
    """What is wrong with a 206's Content-Range for the request [start, start + length), or None if it fits. A
    server may send less than asked only at the end of the file."""
    m = _CONTENT_RANGE.match(value or "")
    if m is None:
        return f"with Content-Range {value!r}" if value else "206 without a Content-Range"
    first, last, size = int(m.group(1)), int(m.group(2)), m.group(3)
    if size != "*" and int(size) != total:
        return f"`Content-Range: {value}` (the file is {total:,} bytes)"
    if first != start or last < first or last > start + length - 1:
        return f"`Content-Range: {value}`"
    return None


class _Retryable(Exception):
    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error

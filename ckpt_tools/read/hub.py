"""Checkpoints on the Hugging Face Hub, read with HTTP range requests: configs, the index and shard headers, never
weight bytes (unless `--deep` asks for the scale tensors).

Every Hub call goes through huggingface_hub: `HfApi.model_info` to resolve the revision, `hf_hub_url`,
`build_hf_headers` and `get_session` for the range reads, `hf_raise_for_status` to classify errors. So HF_ENDPOINT,
HF_TOKEN, the stored login, proxies and offline mode behave exactly as they do for huggingface_hub itself.

Cost of one cold run: `model_info(files_metadata=True)` once (it pins the commit sha and gives every file's size),
then one GET per config file read and, with the index's help, one range GET per shard (`header_estimate.py`).
All reads use the pinned sha, so a branch moving mid-run cannot mix two commits. Ranges read by `read_range` and
`read_file` are kept per commit sha under the huggingface_hub assets cache, so a repeat run costs the one
`model_info` request. The `--deep` scale reads (`read_ranges`) are not cached: they can be large.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from .._version import __version__
from ..errors import TargetError
from .hub_errors import HubContext, http_library_errors, hub_errors
from .hub_target import HubTarget
from .range_cache import RangeCache

LIBRARY = "ckpt-tools"
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
ATTEMPTS = 3  # a range read is retried twice on a transport error or a retryable status
BACKOFF = 0.5  # seconds before the first retry, doubled for the next
CHUNK = 64 * 1024
SKIP_LIMIT = 64 * 1024 * 1024  # a server without Range support is read from the start only this far
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.IGNORECASE)


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
    ) -> None:
        """`token=None` uses HF_TOKEN or the stored login, as huggingface_hub does. `cache_dir=True` keeps read
        ranges under the huggingface_hub assets cache, a path keeps them there, False keeps them in memory only."""
        from huggingface_hub import HfApi, constants
        from huggingface_hub.utils import HFValidationError, build_hf_headers, validate_repo_id

        self.target = target
        self.endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
        self._token = token
        has_token = "authorization" in build_hf_headers(token=token)  # what will be sent, implicit login included
        self._ctx = HubContext(target.repo_id, target.revision, self.endpoint, has_token, bare_target)
        try:
            validate_repo_id(target.repo_id)
        except HFValidationError as exc:
            raise TargetError(f"{target.repo_id}: not a valid Hub repo id ({exc})") from None
        api = HfApi(endpoint=self.endpoint, token=token, library_name=LIBRARY, library_version=__version__)
        try:
            with hub_errors(self._ctx):
                info = api.model_info(target.repo_id, revision=target.revision, files_metadata=True)
        except (ValueError, KeyError, TypeError) as exc:  # a 200 that is not a Hub's JSON (wrong HF_ENDPOINT)
            raise TargetError(
                f"{target.repo_id}: {self.endpoint} did not answer like a Hugging Face Hub "
                f"({type(exc).__name__}); check HF_ENDPOINT"
            ) from None
        if not info.sha:
            raise TargetError(f"{target.label}: the Hub did not say which commit {target.revision or 'main'} is")
        self.sha: str = info.sha
        # Only the repo root, as LocalSource sees a folder: files in subfolders are not part of the checkpoint.
        self._sizes: dict[str, int] = {}
        for sibling in info.siblings or ():
            if "/" in sibling.rfilename:
                continue
            size = sibling.lfs.size if sibling.lfs is not None else sibling.size
            if size is None:
                raise TargetError(f"{target.label}: the Hub did not report the size of {sibling.rfilename}")
            self._sizes[sibling.rfilename] = size
        self.gated = info.gated
        self.private = info.private
        self._cache = RangeCache(self._cache_file(cache_dir))
        self._timeout = constants.HF_HUB_DOWNLOAD_TIMEOUT
        self._ignores_range = False  # learnt from a 200 answer to a range request

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

    def _cache_file(self, cache_dir: Path | bool | None) -> Path | None:
        if cache_dir is False or cache_dir is None:
            return None
        host = (urlparse(self.endpoint).netloc or "hub").replace(":", "_")
        namespace = "models--" + self.target.repo_id.replace("/", "--")
        if cache_dir is True:
            from huggingface_hub import cached_assets_path

            try:
                folder = cached_assets_path(library_name=LIBRARY, namespace=namespace, subfolder=host)
            except (OSError, ValueError):
                return None  # an unwritable cache only costs requests
        else:
            folder = Path(cache_dir) / namespace / host
        return folder / f"{self.sha}.ranges"

    def _fetch(self, name: str, start: int, length: int) -> bytes:
        """Bytes [start, start + length) of `name` at the pinned commit, in one range request (plus retries)."""
        if length <= 0:
            return b""
        from huggingface_hub import hf_hub_url
        from huggingface_hub.utils import build_hf_headers

        if start > SKIP_LIMIT and self._ignores_range:
            raise self._no_ranges(name, start)
        url = hf_hub_url(self.target.repo_id, name, revision=self.sha, endpoint=self.endpoint)
        headers = build_hf_headers(token=self._token, library_name=LIBRARY, library_version=__version__)
        headers["range"] = f"bytes={start}-{start + length - 1}"
        headers["accept-encoding"] = "identity"  # byte offsets are into the file, not into a compressed stream
        transport, _ = http_library_errors()
        with hub_errors(self._ctx):
            for attempt in range(ATTEMPTS):
                try:
                    data = self._get(url, headers, name, start, length)
                except _Retryable as retry:
                    if attempt == ATTEMPTS - 1:
                        raise retry.error from None
                except transport:
                    if attempt == ATTEMPTS - 1:
                        raise
                else:
                    break
                time.sleep(BACKOFF * 2**attempt)
        return data

    def _no_ranges(self, name: str, start: int) -> TargetError:
        return TargetError(
            f"{self.label}: {name}: the server ignores HTTP range requests, so reading byte {start:,} "
            f"would download the file up to there; use a server (or HF_ENDPOINT) that supports ranges, "
            f"or a local copy"
        )

    def _get(self, url: str, headers: dict[str, str], name: str, start: int, length: int) -> bytes:
        """One range request. Never holds more than `length` bytes of the body, whatever the server sends; a
        Content-Range that is not the one asked for is refused (the bytes would come from the wrong place), and a
        body cut short is retried."""
        from huggingface_hub.utils import get_session, hf_raise_for_status

        with get_session().stream("GET", url, headers=headers, timeout=self._timeout) as response:
            if response.status_code >= 400:
                response.read()  # the error classifier reads the body
                try:
                    hf_raise_for_status(response)
                except Exception as exc:
                    if response.status_code in RETRY_STATUSES:
                        raise _Retryable(exc) from None
                    raise
            hf_raise_for_status(response)
            if response.status_code == 206:
                wrong = _wrong_content_range(response.headers.get("content-range"), start, length, self.size(name))
                if wrong:
                    raise TargetError(
                        f"{self.label}: {name}: asked for bytes {start}-{start + length - 1}, the "
                        f"server answered {wrong}; refusing bytes from the wrong place (a proxy or "
                        f"mirror that rewrites ranges?)"
                    )
            # A server that ignores Range answers 200 with the whole file: skip to `start` and stop after `length`
            # bytes, closing the connection, rather than download the weights.
            skip = start if response.status_code != 206 else 0
            if response.status_code != 206:
                self._ignores_range = True
                if start > SKIP_LIMIT:
                    raise self._no_ranges(name, start)
            parts: list[bytes] = []
            got = 0
            for chunk in response.iter_bytes(CHUNK):
                if skip:
                    if len(chunk) <= skip:
                        skip -= len(chunk)
                        continue
                    chunk, skip = chunk[skip:], 0
                parts.append(chunk[: length - got])
                got += len(parts[-1])
                if got >= length:
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

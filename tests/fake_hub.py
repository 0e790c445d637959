"""A small Hugging Face Hub on 127.0.0.1 for tests: serves `<root>/<org>/<name>/...` to the real huggingface_hub
client, with the headers that client relies on (hub-offline.md sections 1, 3 and 4).

What it implements, and nothing more:
- `GET /api/models/{repo}[/revision/{rev}][?blobs=true]`: model info with `sha` and `siblings` (sizes, blob ids and
  LFS info with blobs=true).
- `GET|HEAD /{repo}/resolve/{rev}/{path}`: the file, honouring one `Range: bytes=a-b | a- | -n` (206 with
  `Content-Range`, 416 when unsatisfiable), with `X-Repo-Commit`, `ETag`, and `X-Linked-Size` / `X-Linked-Etag` for
  LFS-like files. With `lfs_redirect=True`, LFS files answer 302 to `http://localhost:PORT/__cdn/<sha256>`: another
  origin than 127.0.0.1, as the real CDN is, so the client drops the token on the hop.
- `GET /__cdn/<sha256>`: the CDN side of that redirect, with Range.
- Bookkeeping for tests and benchmarks: `/__mark/<label>` (a separator in the log), `/__stats?since=N` (the log as
  JSON, for a client in another process), `/__config?delay_ms=N` (wait N ms before each reply: a round trip).
- Errors as the Hub sends them, always with `X-Error-Code` (a plain-http client cannot classify a 401 without it):
  401 RepoNotFound (missing repo, private repo without its token), 401/403 GatedRepo (gated file without / with a
  wrong token; model info still succeeds, as on the Hub), 404 RevisionNotFound, 404 EntryNotFound.

Per-repo settings in an optional `<repo>/.hub.json`: `{"private": true, "gated": "auto", "token": "hf_x",
"branches": {"v1": "/abs/folder"}, "fail": {"file": [503, 2]}, "mangle": {"file": ["truncate", 2]}}`. `branches` maps
a branch name to another folder holding that branch's files; `fail` makes the first n requests for a file answer that
status; `mangle` makes the first n range replies for a file misbehave as a broken server or proxy does:
`content-range` (206 with the bytes and Content-Range of a range one byte later), `truncate` (the connection closes
halfway through the declared body), `short` (a well-formed 206 with half the bytes asked for), `oversize` (the bytes
asked for followed by 1 MiB more, all declared in Content-Length: a reply longer than the range); `info` is merged over the model-info
answer (a server that lies about the commit sha or the file list); `lie` makes every reply for `"info"` (model info)
or a file misbehave as a hostile server does, `{"config.json": ["drip", 0.5]}`: `stall` (headers, then silence for
arg seconds), `silent` (no answer at all for arg seconds), `drip` (the body one byte every arg seconds),
`drip-headers` (the status line and headers one byte every arg seconds), `flood` (an undeclared body of arg bytes),
`huge-length` (a Content-Length of arg bytes over the real body), `chunked-more` (a chunked 206 carrying the range
twice), `encoding` (the body labelled with Content-Encoding arg), `redirect` (302 to the URL arg; `self` loops).
Every wait ends when the server stops, so no handler outlives a test. Revisions are
`main`, the branches, and each branch's commit sha (sha1 over paths and blob ids). Every request is logged *before*
the reply is written, so a test reading `log` after a client call never races it. Build the repos before serving
them: a folder's commit sha is computed once, so files changed while the server runs would keep the old sha.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".onnx")
LFS_MIN_SIZE = 10 * 1024 * 1024
SETTINGS = ".hub.json"
_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
CONTROL = ("/__mark", "/__stats", "/__config")  # test bookkeeping, not Hub traffic


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    range: str | None
    status: int
    bytes: int  # body bytes of the reply
    host: str  # the Host header: 127.0.0.1:PORT for the Hub, localhost:PORT for the CDN
    auth: bool  # whether an Authorization header came with it


@dataclass(frozen=True)
class Blob:
    path: Path
    size: int
    lfs: bool
    sha256: str
    git_oid: str


class HubServer:
    """`with HubServer(root) as srv:` serves `root` on an ephemeral port of 127.0.0.1 until the block ends."""

    def __init__(
        self, root: Path, *, lfs_redirect: bool = False, ignore_range: bool = False, delay: float = 0.0
    ) -> None:
        self.root = Path(root)
        self.lfs_redirect = lfs_redirect
        self.ignore_range = ignore_range  # answer every GET with the whole file, as a server without Range support
        self.delay = delay  # seconds to wait before each reply: a network round trip, for benchmarks
        self.log: list[Request] = []
        self._failures: dict[tuple[str, str, str], int] = {}
        self._blobs: dict[tuple[str, int, int], Blob] = {}
        self._by_sha256: dict[str, Path] = {}
        self._commits: dict[str, str] = {}
        self._lock = threading.Lock()
        self.stopping = threading.Event()  # ends every `lie` wait when the server stops
        self.lie_bytes: dict[str, int] = {}  # request path -> body bytes a `lie` reply got onto the wire
        handler = type("Handler", (_Handler,), {"hub": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True  # pooled keep-alive connections outlive shutdown()
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    # ---- what tests read ----------------------------------------------------------------------------------------
    def requests(self, since: int = 0) -> list[Request]:
        """Logged requests from position `since` on, without the `/__mark`, `/__stats`, `/__config` bookkeeping."""
        return [r for r in self.log[since:] if not r.path.startswith(CONTROL)]

    def commit(self, repo: str, revision: str = "main") -> str:
        folder = self._folder(self.root / repo, self._settings(self.root / repo), revision)
        assert folder is not None, (repo, revision)
        return self._commit(folder)

    def warm(self) -> None:
        """Hash every served file now, so that a timed run does not pay for it."""
        for path in sorted(p for p in self.root.rglob("*") if p.is_file()):
            self._blob(path)

    # ---- repo model ---------------------------------------------------------------------------------------------
    def _settings(self, repo_dir: Path) -> dict[str, Any]:
        path = repo_dir / SETTINGS
        return json.loads(path.read_text()) if path.is_file() else {}

    def _folder(self, repo_dir: Path, settings: dict[str, Any], revision: str) -> Path | None:
        branches = {"main": repo_dir}
        for name, folder in (settings.get("branches") or {}).items():
            branches[name] = Path(folder)
        if revision in branches:
            return branches[revision]
        for folder in branches.values():
            if self._commit(folder) == revision:
                return folder
        return None

    def _files(self, folder: Path) -> list[str]:
        out = []
        for dirpath, _dirs, files in os.walk(folder, followlinks=True):
            for name in files:
                rel = os.path.relpath(os.path.join(dirpath, name), folder).replace(os.sep, "/")
                if rel != SETTINGS:
                    out.append(rel)
        return sorted(out)

    def _blob(self, path: Path) -> Blob:
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns)
        with self._lock:
            if key in self._blobs:
                return self._blobs[key]
        sha256, git = hashlib.sha256(), hashlib.sha1(f"blob {st.st_size}\0".encode())
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                sha256.update(chunk)
                git.update(chunk)
        lfs = path.name.endswith(LFS_SUFFIXES) or st.st_size >= LFS_MIN_SIZE
        blob = Blob(path, st.st_size, lfs, sha256.hexdigest(), git.hexdigest())
        with self._lock:
            self._blobs[key] = blob
            self._by_sha256[blob.sha256] = path
        return blob

    def _commit(self, folder: Path) -> str:
        """The folder's commit sha, computed once: served files must not change while the server runs."""
        key = str(folder)
        with self._lock:
            if key in self._commits:
                return self._commits[key]
        digest = hashlib.sha1()
        for rel in self._files(folder):
            digest.update(f"{rel}\0{self._blob(folder / rel).git_oid}\n".encode())
        with self._lock:
            self._commits[key] = digest.hexdigest()
        return digest.hexdigest()

    def _should_fail(self, repo: str, settings: dict[str, Any], rel: str) -> int | None:
        rule = (settings.get("fail") or {}).get(rel)
        return int(rule[0]) if rule and self._count(("fail", repo, rel), rule[1]) else None

    def _mangling(self, repo: str, settings: dict[str, Any], rel: str) -> str | None:
        rule = (settings.get("mangle") or {}).get(rel)
        return str(rule[0]) if rule and self._count(("mangle", repo, rel), rule[1]) else None

    def _count(self, key: tuple[str, str, str], times: int) -> bool:
        """Whether this is one of the first `times` requests counted under `key`."""
        with self._lock:
            done = self._failures.get(key, 0)
            if done >= times:
                return False
            self._failures[key] = done + 1
        return True


class _Handler(BaseHTTPRequestHandler):
    hub: HubServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    # ---- replies ------------------------------------------------------------------------------------------------
    def _reply(
        self,
        status: int,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        *,
        head: bool = False,
        content_length: int | None = None,
    ) -> None:
        length = len(body) if content_length is None else content_length
        self._log(status, 0 if head else len(body))
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        if not head and body:
            # A client may stop reading early (it had the bytes it wanted).
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)

    def _error(self, status: int, code: str, message: str, head: bool, extra: dict[str, str] | None = None) -> None:
        body = json.dumps({"error": message}).encode()
        headers = {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"}
        self._reply(status, body, {**headers, **(extra or {})}, head=head)

    def _json(self, data: Any, head: bool, lie: list[Any] | None = None) -> None:
        body, headers = json.dumps(data).encode(), {"Content-Type": "application/json"}
        if lie and not head:
            return self._lie(lie, 200, body, headers)
        self._reply(200, body, headers, head=head)

    def _log(self, status: int, size: int) -> None:
        """Record this request and the answer it gets (status, body bytes)."""
        self.hub.log.append(
            Request(
                self.command,
                self.path,
                self.headers.get("range"),
                status,
                size,
                self.headers.get("host", ""),
                "authorization" in self.headers,
            )
        )

    def _lie(self, rule: list[Any], status: int, body: bytes, headers: dict[str, str]) -> None:
        """Answer as the hostile server of `rule` ([behaviour, arg]) would, then close the connection."""
        kind, arg = rule[0], rule[1] if len(rule) > 1 else None
        self._log(status, len(body))
        self.close_connection = True
        if kind == "redirect":
            location = self.path if arg == "self" else str(arg)
            return self._send_raw(f"HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n".encode())
        if kind == "silent":
            self.hub.stopping.wait(float(arg))
            return
        fields = {**headers, "Content-Length": str(len(body))}
        if kind == "flood":
            fields = {**headers, "Connection": "close"}
            fields.pop("Content-Length", None)
        elif kind == "huge-length":
            fields["Content-Length"] = str(int(arg))
        elif kind == "chunked-more":
            fields.pop("Content-Length")
            fields["Transfer-Encoding"] = "chunked"
        elif kind == "encoding":
            fields["Content-Encoding"] = str(arg)
        phrase = {200: "OK", 206: "Partial Content"}.get(status, "Whatever")
        head = f"HTTP/1.1 {status} {phrase}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
        if kind == "drip-headers":
            for i in range(len(head)):
                if not self._send_raw(head[i : i + 1].encode()) or self.hub.stopping.wait(float(arg)):
                    return
            self._send_raw(body, count=True)
        elif kind == "stall":
            if self._send_raw(head.encode()):
                self.hub.stopping.wait(float(arg))
        elif kind == "drip":
            if self._send_raw(head.encode()):
                for i in range(len(body)):
                    if not self._send_raw(body[i : i + 1], count=True) or self.hub.stopping.wait(float(arg)):
                        return
        elif kind == "flood":
            filler, sent = b" " * (1024 * 1024), 0
            if self._send_raw(head.encode()):
                while sent < int(arg) and not self.hub.stopping.is_set() and self._send_raw(filler, count=True):
                    sent += len(filler)
        elif kind == "chunked-more":
            twice = b"".join(f"{len(body):x}\r\n".encode() + body + b"\r\n" for _ in range(2)) + b"0\r\n\r\n"
            if self._send_raw(head.encode()):
                self._send_raw(twice, count=True)
        else:  # huge-length, encoding
            if self._send_raw(head.encode()):
                self._send_raw(body, count=True)

    def _send_raw(self, data: bytes, *, count: bool = False) -> bool:
        """Write bytes as they are (flushed); False once the client has gone."""
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            return False
        if count:
            with self.hub._lock:
                self.hub.lie_bytes[self.path] = self.hub.lie_bytes.get(self.path, 0) + len(data)
        return True

    # ---- routing ------------------------------------------------------------------------------------------------
    def _route(self, head: bool) -> None:
        if self.hub.delay:
            time.sleep(self.hub.delay)
        raw_path, _, query = self.path.partition("?")
        # Split before unquoting: a revision such as refs/pr/1 arrives as one segment, refs%2Fpr%2F1.
        parts = [unquote(p) for p in raw_path.split("/")[1:]]
        if parts[:1] == ["__mark"]:
            return self._reply(200, b"ok", head=head)
        if parts[:1] == ["__stats"]:  # the log, for a client in another process
            since = int(parse_qs(query).get("since", ["0"])[0])
            return self._json([r.__dict__ for r in self.hub.requests(since)] + [{"log_size": len(self.hub.log)}], head)
        if parts[:1] == ["__config"]:
            self.hub.delay = float(parse_qs(query).get("delay_ms", ["0"])[0]) / 1000
            return self._reply(200, b"ok", head=head)
        if parts[:1] == ["__cdn"] and len(parts) == 2:
            return self._cdn(parts[1], head)
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            repo = f"{parts[2]}/{parts[3]}"
            if len(parts) == 4:
                return self._model_info(repo, "main", query, head)
            if len(parts) == 6 and parts[4] == "revision":
                return self._model_info(repo, parts[5], query, head)
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve(f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]), head)
        return self._error(404, "EntryNotFound", "no such endpoint", head)

    def _repo(self, repo: str, head: bool) -> tuple[Path, dict[str, Any]] | None:
        """The repo folder and settings, or None after answering as the Hub does for a missing or hidden repo."""
        repo_dir = self.hub.root / repo
        settings = self.hub._settings(repo_dir) if repo_dir.is_dir() else {}
        token = self.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if not repo_dir.is_dir() or (settings.get("private") and token != settings.get("token")):
            self._error(401, "RepoNotFound", "Repository not found", head)
            return None
        return repo_dir, settings

    def _model_info(self, repo: str, revision: str, query: str, head: bool) -> None:
        found = self._repo(repo, head)
        if found is None:
            return
        repo_dir, settings = found
        folder = self.hub._folder(repo_dir, settings, revision)
        if folder is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head)
        blobs = parse_qs(query).get("blobs") == ["true"]
        siblings = []
        for rel in self.hub._files(folder):
            entry: dict[str, Any] = {"rfilename": rel}
            if blobs:
                blob = self.hub._blob(folder / rel)
                entry.update(size=blob.size, blobId=blob.git_oid)
                if blob.lfs:
                    entry["lfs"] = {"size": blob.size, "sha256": blob.sha256, "pointerSize": 134}
            siblings.append(entry)
        self._json(
            {
                "_id": hashlib.md5(repo.encode()).hexdigest()[:24],
                "id": repo,
                "modelId": repo,
                "sha": self.hub._commit(folder),
                "private": bool(settings.get("private")),
                "gated": settings.get("gated", False),
                "disabled": False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "lastModified": "2025-01-01T00:00:00.000Z",
                "createdAt": "2025-01-01T00:00:00.000Z",
                "siblings": siblings,
                **(settings.get("info") or {}),
            },
            head,
            (settings.get("lie") or {}).get("info"),
        )

    def _resolve(self, repo: str, revision: str, rel: str, head: bool) -> None:
        found = self._repo(repo, head)
        if found is None:
            return
        repo_dir, settings = found
        token = self.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if settings.get("gated") and token != settings.get("token"):
            return self._error(403 if token else 401, "GatedRepo", "Access to this repo is restricted", head)
        folder = self.hub._folder(repo_dir, settings, revision)
        if folder is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head)
        commit = self.hub._commit(folder)
        path = folder / rel
        if rel == SETTINGS or not path.is_file():
            return self._error(404, "EntryNotFound", f"{rel} does not exist", head, {"X-Repo-Commit": commit})
        status = self.hub._should_fail(repo, settings, rel)
        if status is not None:
            return self._error(status, "ServiceUnavailable", "try again", head)
        blob = self.hub._blob(path)
        headers = {"X-Repo-Commit": commit, "Accept-Ranges": "bytes"}
        if blob.lfs:
            headers.update(
                {"ETag": f'"{blob.sha256}"', "X-Linked-Size": str(blob.size), "X-Linked-Etag": f'"{blob.sha256}"'}
            )
            if self.hub.lfs_redirect:
                headers["Location"] = f"http://localhost:{self.hub.port}/__cdn/{blob.sha256}"
                return self._reply(302, b"", headers, head=head)
        else:
            headers["ETag"] = f'"{blob.git_oid}"'
        lie = (settings.get("lie") or {}).get(rel)
        self._send_file(blob.path, blob.size, headers, head, self.hub._mangling(repo, settings, rel), lie)

    def _cdn(self, sha256: str, head: bool) -> None:
        path = self.hub._by_sha256.get(sha256)
        if path is None:
            return self._reply(404, b"no such object", head=head)
        self._send_file(path, path.stat().st_size, {"ETag": f'"{sha256}"', "Accept-Ranges": "bytes"}, head)

    def _send_file(
        self,
        path: Path,
        size: int,
        headers: dict[str, str],
        head: bool,
        mangle: str | None = None,
        lie: list[Any] | None = None,
    ) -> None:
        wanted = self.headers.get("range")
        start, end = 0, size - 1
        status = 200
        if wanted and not self.hub.ignore_range:
            m = _RANGE.match(wanted.strip())
            if not m or (not m.group(1) and not m.group(2)):
                return self._reply(416, b"", {"Content-Range": f"bytes */{size}"}, head=head)
            if m.group(1):
                start = int(m.group(1))
                end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
            else:
                start = max(0, size - int(m.group(2)))
            if start >= size or start > end:
                return self._reply(416, b"", {"Content-Range": f"bytes */{size}"}, head=head)
            status = 206
            headers = {**headers, "Content-Range": f"bytes {start}-{end}/{size}"}
        length = end - start + 1
        if head:
            return self._reply(status, b"", headers, head=True, content_length=length)
        if mangle == "content-range" and status == 206 and end + 1 < size:
            start, end = start + 1, end + 1
            headers = {**headers, "Content-Range": f"bytes {start}-{end}/{size}"}
        with open(path, "rb") as fh:
            fh.seek(start)
            body = fh.read(length)
        if mangle == "truncate":
            return self._reply_cut(status, body, headers)
        if mangle == "short":
            body = body[: len(body) // 2]
            if status == 206:
                headers = {**headers, "Content-Range": f"bytes {start}-{start + len(body) - 1}/{size}"}
        if mangle == "oversize":
            body += b"\0" * (1024 * 1024)
        if lie:
            return self._lie(lie, status, body, headers)
        self._reply(status, body, headers)

    def _reply_cut(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        """Declare the whole body, send half of it, and close the connection."""
        self._log(status, len(body) // 2)
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True


def main() -> None:
    """`python -m tests.fake_hub ROOT [--lfs-redirect]`: serve ROOT, print the URL, stop when stdin closes."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("root", type=Path)
    parser.add_argument("--lfs-redirect", action="store_true")
    args = parser.parse_args()
    with HubServer(args.root, lfs_redirect=args.lfs_redirect) as srv:
        srv.warm()
        print(srv.url, flush=True)
        sys.stdin.read()


def write_settings(repo_dir: Path, **settings: Any) -> None:
    """Write a repo's `.hub.json` (private, gated, token, branches, fail)."""
    (repo_dir / SETTINGS).write_text(json.dumps(settings))


if __name__ == "__main__":
    main()

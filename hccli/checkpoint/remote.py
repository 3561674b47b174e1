"""Checkpoints on a model hub, read over HTTP range requests without downloading a shard.

A repository is named `hf://org/name[@revision][/subfolder]` (or a bare `org/name`
when no local path of that name exists). huggingface_hub resolves it: the endpoint
(HF_ENDPOINT), the token, and the revision, pinned to a commit so that every read
of one run sees the same files. Reads are byte-exact and bounded: the 8-byte
length, the header, then only the tensors asked for. A server must answer a range
with `206 Partial Content` and a matching `Content-Range`; one that ignores ranges
is refused after at most the asked-for bytes, never read to the end of a shard.

Headers, the index and config.json are cached per commit (immutable), so a second
run is fast and works offline (HF_HUB_OFFLINE=1, or when the hub cannot be reached).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hccli.checkpoint.header import Header, parse_header, read_header
from hccli.checkpoint.source import ByteSource, SourceError, one_line
from hccli.errors import HcError

SPEC = re.compile(r"^(?:hf://)?(?P<repo>[A-Za-z0-9][\w.\-]*/[\w.\-]+)(?:@(?P<rev>[^/]+))?(?P<sub>(?:/[^/]+)*)/?$")
SMALL_FILE_CAP = 64 * 1024 * 1024  # the index and config.json are read whole, up to this
CHUNK = 1 << 16


@dataclass(frozen=True)
class RepoRef:
    repo_id: str
    revision: str | None
    subfolder: str  # "" or "a/b"

    @property
    def label(self) -> str:
        rev = f"@{self.revision}" if self.revision else ""
        sub = f"/{self.subfolder}" if self.subfolder else ""
        return f"hf://{self.repo_id}{rev}{sub}"


def parse_repo_spec(text: str, *, bare_allowed: bool) -> RepoRef | None:
    """A hub repository named by `text`, or None when it names none.

    `hf://...` always names one; a bare `org/name` only when bare_allowed (the
    caller found no local path of that name)."""
    if not text.startswith("hf://") and not bare_allowed:
        return None
    if not text.startswith("hf://") and (text.startswith((".", "/", "~")) or text.count("/") != 1):
        return None
    m = SPEC.match(text)
    if not m:
        if text.startswith("hf://"):
            raise HcError(f"{one_line(text)}: not a hub repository; expected hf://org/name[@revision][/subfolder]")
        return None
    return RepoRef(m["repo"], m["rev"], (m["sub"] or "").strip("/"))


@dataclass
class Transfer:
    """Bytes and requests actually sent over the network (thread-safe)."""

    bytes: int = 0
    requests: int = 0
    cached_files: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, n: int) -> None:
        with self._lock:
            self.bytes += n
            self.requests += 1

    def add_cached(self) -> None:
        with self._lock:
            self.cached_files += 1


def _cache_root() -> Path:
    base = os.environ.get("HC_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache"), "hccli")
    return Path(base)


_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


class HttpRangeSource(ByteSource):
    """One file on the hub, read by HTTP range requests of exactly the asked-for bytes."""

    def __init__(self, client: Any, url: str, name: str, transfer: Transfer, headers: dict[str, str],
                 size: int | None = None, on_redirect: Callable[[str], None] | None = None):
        self._client = client
        self._url = url
        self._on_redirect = on_redirect
        self._name = name
        self._transfer = transfer
        self._headers = headers
        self._size = size
        self._first: bytes | None = None  # the bytes of the probe that told the size

    @property
    def name(self) -> str:
        return self._name

    def size(self) -> int:
        if self._size is None:
            data, total = self._get(0, 8, probe=True)
            self._first = data
            self._size = total
        return self._size

    def read(self, offset: int, length: int) -> bytes:
        self._check_range(offset, length, self.size())
        if length == 0:
            return b""
        if self._first is not None and offset == 0 and length <= len(self._first):
            return self._first[:length]
        return self._get(offset, length)[0]

    def _get(self, offset: int, length: int, probe: bool = False) -> tuple[bytes, int]:
        last = offset + length - 1
        headers = {**self._headers, "Range": f"bytes={offset}-{last}", "Accept-Encoding": "identity"}
        where = one_line(self._name)
        try:
            with self._client.stream("GET", self._url, headers=headers, follow_redirects=True) as r:
                status = r.status_code
                final = str(r.url)
                if final != self._url and status == 206:
                    # the hub redirects resolve URLs to where the bytes are: go there directly next time
                    self._url = final
                    if self._on_redirect:
                        self._on_redirect(final)
                if status == 416 and probe:
                    raise SourceError(f"{where}: the server says the file is shorter than 8 bytes (HTTP 416); "
                                      "expected a .safetensors file", "short_read")
                if status != 206:
                    if status == 200:
                        msg = (f"{where}: the server ignored the Range header (HTTP 200 for bytes {offset}-{last}); "
                               "refusing to read a whole shard")
                    elif status in (401, 403):
                        msg = f"{where}: access denied (HTTP {status}); set HF_TOKEN or log in for a gated repository"
                    elif status == 404:
                        msg = f"{where}: not found on the hub (HTTP 404)"
                    else:
                        msg = f"{where}: the hub answered HTTP {status} for bytes {offset}-{last}; expected 206"
                    raise SourceError(msg, "http_status")
                m = _CONTENT_RANGE.match(r.headers.get("content-range", ""))
                if not m or int(m[1]) != offset or (int(m[2]) != last and not probe):
                    raise SourceError(f"{where}: Content-Range {r.headers.get('content-range')!r} does not match "
                                      f"the bytes asked for ({offset}-{last})", "bad_range")
                total = int(m[3]) if m[3] != "*" else None
                want = int(m[2]) - offset + 1
                chunks, got = [], 0
                try:
                    for chunk in r.iter_bytes(CHUNK):
                        got += len(chunk)
                        if got > want:
                            raise SourceError(f"{where}: the server sent more than the {want} bytes asked for",
                                              "bad_range")
                        chunks.append(chunk)
                except SourceError:
                    raise
                except Exception:  # noqa: BLE001 - the connection ended inside the body
                    self._transfer.add(got)
                    raise SourceError(f"{where}: truncated response: expected {want} bytes at offset {offset}, "
                                      f"got {got} before the connection closed", "short_read") from None
        except SourceError:
            raise
        except Exception as exc:  # noqa: BLE001 - transport errors of any HTTP stack
            raise SourceError(f"{where}: network error reading bytes {offset}-{last} "
                              f"({one_line(type(exc).__name__ + ': ' + str(exc), 160)})", "network") from None
        self._transfer.add(got)
        if got != want:
            raise SourceError(f"{where}: truncated response: expected {want} bytes at offset {offset}, got {got}",
                              "short_read")
        if total is None:
            raise SourceError(f"{where}: Content-Range gives no total size", "bad_range")
        return b"".join(chunks), total


@dataclass
class RemoteRepo:
    ref: RepoRef
    endpoint: str
    sha: str
    files: list[str]  # paths inside the subfolder
    transfer: Transfer
    client: Any
    headers: dict[str, str]
    cache_dir: Path
    offline: bool
    resolved: dict[str, str] = field(default_factory=dict)  # file -> where its resolve URL redirected

    def url(self, filename: str) -> str:
        from huggingface_hub import hf_hub_url

        path = f"{self.ref.subfolder}/{filename}" if self.ref.subfolder else filename
        return hf_hub_url(self.ref.repo_id, path, revision=self.sha, endpoint=self.endpoint)

    def display(self, filename: str) -> str:
        return f"{self.ref.label}/{filename}" if not self.ref.subfolder else \
            f"hf://{self.ref.repo_id}@{self.ref.revision or self.sha[:12]}/{self.ref.subfolder}/{filename}"

    def source(self, filename: str, size: int | None = None) -> ByteSource:
        """Range reads of one file; small reads (HC base/scale values) go through the cache."""
        return _CachedRanges(self, filename, size)

    def http(self, filename: str, size: int | None = None) -> HttpRangeSource:
        if self.offline:
            raise HcError(f"{self.display(filename)}: not in the cache and the hub is offline; "
                          "run once online to read these bytes")
        return HttpRangeSource(self.client, self.resolved.get(filename) or self.url(filename),
                               self.display(filename), self.transfer, self.headers, size,
                               lambda url: self.resolved.__setitem__(filename, url))

    def _cached(self, kind: str, filename: str) -> Path:
        return self.cache_dir / kind / (filename.replace("/", "%2F"))

    def small_file(self, filename: str) -> bytes | None:
        """A small file read whole (index, config.json), through the cache; None when absent."""
        path = self._cached("files", filename)
        if path.is_file():
            self.transfer.add_cached()
            return path.read_bytes()
        if filename not in self.files:
            return None
        src = self.http(filename)
        size = src.size()
        if size > SMALL_FILE_CAP:
            raise HcError(f"{src.name}: {size:,} bytes; expected a small JSON file (at most {SMALL_FILE_CAP:,})")
        data = src.read(0, size)
        _atomic_write(path, data)
        return data

    def header(self, filename: str) -> tuple[Header, int]:
        """(header, file size) of one shard, through the cache."""
        path = self._cached("headers", filename)
        name = self.display(filename)
        if path.is_file():
            raw = path.read_bytes()
            size = int.from_bytes(raw[:8], "little")
            self.transfer.add_cached()
            return parse_header(raw[8:], size, name), size
        src = _Recording(self.http(filename))
        h = read_header(src)
        _atomic_write(path, h.file_size.to_bytes(8, "little") + src.prefix(h.data_start))
        return h, h.file_size


class _CachedRanges(ByteSource):
    """A hub file whose small reads are kept in the cache (by commit, so never stale)."""

    SMALL = 1 << 20

    def __init__(self, repo: "RemoteRepo", filename: str, size: int | None):
        self._repo = repo
        self._file = filename
        self._size = size
        self._http: HttpRangeSource | None = None

    @property
    def name(self) -> str:
        return self._repo.display(self._file)

    def _inner(self) -> HttpRangeSource:
        if self._http is None:
            self._http = self._repo.http(self._file, self._size)
        return self._http

    def size(self) -> int:
        if self._size is None:
            self._size = self._inner().size()
        return self._size

    def read(self, offset: int, length: int) -> bytes:
        if length > self.SMALL:
            return self._inner().read(offset, length)
        path = self._repo._cached("ranges", f"{self._file}@{offset}+{length}")
        if path.is_file():
            self._repo.transfer.add_cached()
            return path.read_bytes()
        data = self._inner().read(offset, length)
        _atomic_write(path, data)
        return data


class _Recording(ByteSource):
    """Keeps the bytes read through it, so that a header read once can be cached as read."""

    def __init__(self, inner: ByteSource):
        self._inner = inner
        self._parts: dict[int, bytes] = {}

    @property
    def name(self) -> str:
        return self._inner.name

    def size(self) -> int:
        return self._inner.size()

    def read(self, offset: int, length: int) -> bytes:
        data = self._inner.read(offset, length)
        self._parts[offset] = data
        return data

    def prefix(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            part = self._parts.get(len(out))
            if part is None:  # not read contiguously: read what is missing
                part = self._inner.read(len(out), n - len(out))
            out += part
        return out[:n]


def _atomic_write(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".{os.getpid()}.partial")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:
        pass  # a cache that cannot be written only costs speed


def resolve(ref: RepoRef, *, token: str | None = None, endpoint: str | None = None) -> RemoteRepo:
    """Pin the revision to a commit and list the files, through huggingface_hub; offline from the cache."""
    from huggingface_hub import HfApi, constants, get_session
    from huggingface_hub.utils import build_hf_headers

    endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
    key = hashlib.sha256(f"{endpoint}|{ref.repo_id}".encode()).hexdigest()[:16]
    root = _cache_root() / key
    revision = ref.revision or "main"
    refs_file = root / "refs" / revision.replace("/", "%2F")
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes") or constants.HF_HUB_OFFLINE
    info = None
    error = None
    if not offline:
        try:
            info = HfApi(endpoint=endpoint, token=token).model_info(ref.repo_id, revision=revision)
        except Exception as exc:  # noqa: BLE001 - mapped to one line below
            error = exc
    if info is not None:
        sha = info.sha
        files = [s.rfilename for s in info.siblings or []]
        _atomic_write(refs_file, json.dumps({"sha": sha, "files": files}).encode())
    elif refs_file.is_file():
        doc = json.loads(refs_file.read_text())
        sha, files = doc["sha"], doc["files"]
        offline = True
    else:
        raise _resolve_error(ref, endpoint, error, offline)
    if ref.subfolder:
        prefix = ref.subfolder + "/"
        files = [f[len(prefix):] for f in files if f.startswith(prefix)]
    client = get_session()
    headers = build_hf_headers(token=token, library_name="hccli")
    return RemoteRepo(ref, endpoint, sha, files, Transfer(), client, headers, root / sha / (ref.subfolder or "."),
                      offline)


def _resolve_error(ref: RepoRef, endpoint: str, exc: BaseException | None, offline: bool) -> HcError:
    if offline:
        return HcError(f"{ref.label}: HF_HUB_OFFLINE is set and this repository is not in the cache "
                       f"({_cache_root()})")
    name = type(exc).__name__ if exc else "error"
    text = one_line(str(exc), 160) if exc else ""
    if "RepositoryNotFound" in name:
        return HcError(f"{ref.label}: no such repository at {endpoint} (or it is private: set HF_TOKEN)")
    if "RevisionNotFound" in name:
        return HcError(f"{ref.label}: no revision {ref.revision!r} in {ref.repo_id}")
    if "GatedRepo" in name:
        return HcError(f"{ref.label}: a gated repository; accept its terms on the hub and set HF_TOKEN")
    return HcError(f"{ref.label}: cannot reach {endpoint} ({name}: {text})")


WORKERS = 16  # concurrent range requests; each is small, latency is what they hide


def fetch_headers(repo: RemoteRepo, names: list[str], *, workers: int = WORKERS,
                  progress: Callable[[int, int], None] | None = None) -> dict[str, tuple[Header | None, str | None]]:
    """Every shard's header, concurrently: name -> (header, None) or (None, why)."""
    out: dict[str, tuple[Header | None, str | None]] = {}
    done = 0
    lock = threading.Lock()

    def one(name: str) -> None:
        nonlocal done
        try:
            h, _ = repo.header(name)
            result = (h, None)
        except HcError as exc:
            result = (None, exc.message)
        with lock:
            out[name] = result
            done += 1
            if progress:
                progress(done, len(names))

    if progress:
        progress(0, len(names))
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(names) or 1))) as pool:
        list(pool.map(one, names))
    return out

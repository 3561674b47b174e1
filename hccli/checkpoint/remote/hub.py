"""Checkpoints on a model hub: resolving a repository, and the store that reads it.

A repository is named `hf://org/name[@revision][/subfolder]` (or a bare `org/name`
when no local path of that name exists). The endpoint (HF_ENDPOINT) and the token
come from huggingface_hub's settings; the revision is pinned to the commit the API
names, so every read of one run sees the same files. The API answer is read with a
size cap and its errors are mapped by huggingface_hub's exception types. Reads are
byte-exact and bounded (http_range.py); headers, the index, config.json and small
ranges are cached per commit (cache.py), so a second run is fast and works offline
(HF_HUB_OFFLINE=1, or when the hub cannot be reached).
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from hccli.base.bounded import SourceError, one_line, read_json
from hccli.checkpoint.remote.cache import COMMIT, Cache
from hccli.checkpoint.safetensors.header import parse_header, read_header
from hccli.checkpoint.safetensors.header_types import Header
from hccli.checkpoint.remote.http_range import Http, HttpRangeSource, Transfer, httpx
from hccli.checkpoint.source import ByteSource
from hccli.checkpoint.store_protocol import Store
from hccli.base.errors import HcError

_PART = r"[A-Za-z0-9_][\w.\-]{0,95}"
SPEC = re.compile(rf"^(?:hf://)?(?P<repo>{_PART}/{_PART})(?:@(?P<rev>[\w.\-]{{1,200}}))?(?P<sub>(?:/[\w.\-]+)*)/?$",
                  re.ASCII)
API_CAP = 32 * 1024 * 1024  # a model's API answer with 100k file names is ~10 MB
ERROR_BODY_CAP = 64 * 1024
MAX_FILES = 200_000
WORKERS = 16  # concurrent range requests; each is small, latency is what they hide


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
    caller found no local path of that name). Only names the hub itself allows get
    through: they end up in URLs and (digested) in cache paths."""
    hub = text.startswith("hf://")
    if not hub and (not bare_allowed or text.startswith((".", "/", "~")) or text.count("/") != 1):
        return None
    m = SPEC.match(text)
    parts = [*(m["repo"].split("/") if m else ()), *((m["sub"] or "").split("/") if m else ()), m["rev"] if m else ""]
    if not m or any(p in (".", "..") or ".." in p for p in parts if p):
        if hub:
            raise HcError(f"{one_line(text)}: not a hub repository; expected hf://org/name[@revision][/subfolder] "
                          "(letters, digits, '-', '_', '.')")
        return None
    return RepoRef(m["repo"], m["rev"], (m["sub"] or "").strip("/"))


class HubStore(Store):
    """A hub repository at one commit, read over HTTP ranges through the cache."""

    workers = WORKERS
    bulk_reads_cheap = False  # the 2 MB hc_*_fn projections are not fetched for --verify

    def __init__(self, ref: RepoRef, endpoint: str, sha: str, files: list[str], http: Http | None, cache: Cache,
                 offline: bool):
        self.ref, self.endpoint, self.sha, self.offline = ref, endpoint, sha, offline
        self.label = ref.label
        self._files = files
        self._present = set(files)
        self._http = http
        self.transfer = http.transfer if http is not None else Transfer()
        self.cache = cache
        self.resolved: dict[str, str] = {}  # file -> where its resolve URL redirected
        self.hub = self

    def files(self) -> list[str]:
        return list(self._files)

    def exists(self, name: str) -> bool:
        return name in self._present

    def display(self, name: str) -> str:
        return f"{self.ref.label}/{name}" if not self.ref.subfolder else \
            f"hf://{self.ref.repo_id}@{self.ref.revision or self.sha[:12]}/{self.ref.subfolder}/{name}"

    def url(self, name: str) -> str:
        path = f"{self.ref.subfolder}/{name}" if self.ref.subfolder else name
        return f"{self.endpoint}/{self.ref.repo_id}/resolve/{self.sha}/{quote(path)}"

    def http(self, name: str, size: int | None = None) -> HttpRangeSource:
        if self._http is None:
            raise HcError(f"{one_line(self.display(name))}: not in the cache and the hub is offline; "
                          "run once online to read these bytes")
        return HttpRangeSource(self._http, self.resolved.get(name) or self.url(name), self.display(name), size,
                               lambda url: self.resolved.__setitem__(name, url))

    def source(self, name: str, size: int | None = None) -> ByteSource:
        return _CachedRanges(self, name, size)

    def read_small(self, name: str, cap: int, expected: str) -> bytes | None:
        asked = {"file": name, "subfolder": self.ref.subfolder}
        path = self.cache.entry_path(self.sha, "files", asked)
        data = self.cache.get(path, asked)
        if data is not None:
            self.transfer.add_cached()
            return data
        if name not in self._present:
            return None
        src = self.http(name)
        size = src.size()
        if size > cap:
            raise SourceError(f"{one_line(src.name)}: {size:,} bytes; expected {expected} of at most {cap:,} bytes",
                              "too_large")
        data = src.read(0, size)
        self.cache.put(path, asked, data)
        return data

    def header(self, name: str) -> Header:
        if name.endswith(".gguf"):  # its header comes in cached ranges (gguf_store)
            from hccli.checkpoint.gguf.store import hub_gguf_header

            return hub_gguf_header(self, name)
        asked = {"file": name, "subfolder": self.ref.subfolder}
        path = self.cache.entry_path(self.sha, "headers", asked)
        raw = self.cache.get(path, asked)
        if raw is not None and len(raw) >= 8:
            self.transfer.add_cached()
            return parse_header(raw[8:], int.from_bytes(raw[:8], "little"), self.display(name))
        src = _Recording(self.http(name))
        h = read_header(src)
        self.cache.put(path, asked, h.file_size.to_bytes(8, "little") + src.prefix(h.data_start))
        return h


class _CachedRanges(ByteSource):
    """A hub file whose small reads (HC base/scale values) are kept in the cache, by commit."""

    SMALL = 1 << 20

    def __init__(self, store: HubStore, name: str, size: int | None):
        self._store, self._file, self._size = store, name, size
        self._http: HttpRangeSource | None = None

    @property
    def name(self) -> str:
        return self._store.display(self._file)

    def _inner(self) -> HttpRangeSource:
        if self._http is None:
            self._http = self._store.http(self._file, self._size)
        return self._http

    def size(self) -> int:
        if self._size is None:
            self._size = self._inner().size()
        return self._size

    def read(self, offset: int, length: int) -> bytes:
        if length > self.SMALL:
            return self._inner().read(offset, length)
        asked = {"file": self._file, "subfolder": self._store.ref.subfolder, "offset": offset, "length": length}
        path = self._store.cache.entry_path(self._store.sha, "ranges", asked)
        data = self._store.cache.get(path, asked)
        if data is not None:
            self._store.transfer.add_cached()
            return data
        data = self._inner().read(offset, length)
        self._store.cache.put(path, asked, data)
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


@dataclass
class _Listing:
    sha: str
    files: list[str] = field(default_factory=list)


def _listing(doc: Any, where: str) -> _Listing:
    """The commit and file names of an API answer (or a cached one), validated."""
    if not isinstance(doc, dict):
        raise HcError(f"{where}: the API answer is not a JSON object; expected a model's info")
    sha = doc.get("sha")
    if not isinstance(sha, str) or not COMMIT.match(sha):
        raise HcError(f"{where}: the API names commit {one_line(repr(sha), 60)}; expected 40 hex digits")
    sibs = doc.get("siblings") or []
    if not isinstance(sibs, list) or len(sibs) > MAX_FILES:
        raise HcError(f"{where}: 'siblings' is not a list of at most {MAX_FILES:,} files")
    files = []
    for s in sibs:
        name = s.get("rfilename") if isinstance(s, dict) else s
        if not isinstance(name, str) or not 0 < len(name) <= 1000:
            raise HcError(f"{where}: a file name in 'siblings' is not a string of 1-1000 characters")
        files.append(name)
    return _Listing(sha, files)


def _api(http: Http, ref: RepoRef, revision: str) -> _Listing:
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError
    from huggingface_hub.utils import hf_raise_for_status

    url = f"{http.endpoint}/api/models/{ref.repo_id}/revision/{quote(revision, safe='')}"
    where = f"{ref.label}: {one_line(http.endpoint, 80)}"
    deadline = time.monotonic() + http.deadline

    def handle(r: Any, final: str) -> tuple[int, Any, bytes]:
        host = one_line(final.split("/")[2] if "//" in final else final, 80)
        ok = r.status_code == 200
        body = http.body(r, API_CAP if ok else ERROR_BODY_CAP, host=host, what=f"the API answer for {ref.label}",
                         deadline=deadline, exact=False) if ok or r.status_code < 500 else b""
        return r.status_code, r, body

    status, r, body = http.exchange(url, {"Accept-Encoding": "identity", "Accept": "application/json"},
                                    what=f"the API answer for {ref.label}", deadline=deadline, handle=handle)
    if status != 200:
        # huggingface_hub classifies the answer (X-Error-Code, status): from the capped body, never a re-read
        done = httpx.Response(status, headers=r.headers, content=body, request=r.request)
        try:
            hf_raise_for_status(done)
        except RepositoryNotFoundError:
            raise HcError(f"{ref.label}: no such repository at {one_line(http.endpoint, 80)} "
                          "(or it is private: set HF_TOKEN)") from None
        except RevisionNotFoundError:
            raise HcError(f"{ref.label}: no revision {one_line(revision, 80)!r} in {ref.repo_id}") from None
        except GatedRepoError:
            raise HcError(f"{ref.label}: a gated repository; accept its terms on the hub and set HF_TOKEN") from None
        except HfHubHTTPError:
            pass
        raise SourceError(f"{where} answered HTTP {status}; expected the model's info", "http_status")
    return _listing(read_json(body, f"{where}: the API answer", "a model's info"), where)


def _offline_env() -> bool:
    # read at each call (huggingface_hub's constant is fixed when it is first imported)
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def open_hub(ref: RepoRef, *, endpoint: str | None = None) -> HubStore:
    """Pin the revision to a commit and list the files; offline (or unreachable) from the cache."""
    from huggingface_hub import constants
    from huggingface_hub.utils import build_hf_headers

    endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
    cache = Cache(endpoint, ref.repo_id)
    revision = ref.revision or "main"
    ref_path = cache.ref_path(revision)
    asked = {"revision": revision}
    offline = _offline_env()
    http, listing, error = None, None, None
    if not offline:
        headers = build_hf_headers(library_name="hccli")
        auth = {k: v for k, v in headers.items() if k.lower() == "authorization"}
        http = Http(endpoint, auth, {k: v for k, v in headers.items() if k.lower() != "authorization"})
        try:
            listing = _api(http, ref, revision)
        except SourceError as exc:  # the hub cannot be reached or failed: the cache may still serve
            error = exc
    if listing is not None:
        cache.put(ref_path, asked, json.dumps({"sha": listing.sha, "siblings": listing.files}).encode())
    else:
        raw = cache.get(ref_path, asked)
        if raw is None:
            if offline:
                raise HcError(f"{ref.label}: HF_HUB_OFFLINE is set and this repository is not in the cache "
                              f"({cache.root})")
            raise HcError(f"{ref.label}: cannot reach {one_line(endpoint, 80)} ({error.message if error else ''})")
        where = f"{ref.label}: the cached listing"
        try:
            doc = read_json(raw, where, "a model's info")
        except HcError:
            raise HcError(f"{ref.label}: the cached listing is damaged; remove {cache.root}") from None
        listing = _listing(doc, where)
        offline, http = True, None
    files = listing.files
    if ref.subfolder:
        prefix = ref.subfolder + "/"
        files = [f[len(prefix):] for f in files if f.startswith(prefix)]
    return HubStore(ref, endpoint, listing.sha, files, http, cache, offline)

"""Bounded HTTP for the hub: range reads of exactly the asked-for bytes, and small answers.

Nothing a server sends is trusted to be small or quick. Every body is counted as it
arrives on the wire (content encodings are refused, so a gzip bomb cannot grow after
counting) and cut off past what was asked; every socket wait has a timeout and every
file an overall deadline (HC_HTTP_TIMEOUT, HC_HTTP_DEADLINE). The token goes only to
the hub endpoint's own origin: after a redirect to a CDN or any other host, requests
carry no Authorization (as huggingface_hub does).
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import urljoin, urlsplit

from hccli.base.bounded import SourceError, one_line
from hccli.checkpoint.source import ByteSource
from hccli.base.errors import HcError

try:  # huggingface_hub >= 1.x ships its HTTP stack as httpx2; older ones as httpx (same API)
    import httpx2 as httpx
except ImportError:  # pragma: no cover - depends on the installed huggingface_hub
    import httpx  # type: ignore[no-redef]

TIMEOUT_ENV, DEADLINE_ENV = "HC_HTTP_TIMEOUT", "HC_HTTP_DEADLINE"
# A slow or distant link still moves a byte a minute; a header (at most 100 MB) at 1 MB/s takes 100 s.
DEFAULT_TIMEOUT, DEFAULT_DEADLINE = 60.0, 900.0
MAX_REDIRECTS = 5
CHUNK = 1 << 16
_CONTENT_RANGE = re.compile(r"^bytes (\d{1,20})-(\d{1,20})/(\d{1,20}|\*)$")


def _seconds(env: str, default: float) -> float:
    text = os.environ.get(env)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 86_400:
        raise HcError(f"{env}={one_line(text, 40)}: expected seconds, a number above 0 and at most 86400")
    return value


def limits() -> tuple[float, float]:
    """(socket timeout, per-file deadline) in seconds, from the environment."""
    return _seconds(TIMEOUT_ENV, DEFAULT_TIMEOUT), _seconds(DEADLINE_ENV, DEFAULT_DEADLINE)


def origin(url: str) -> tuple[str, str, int | None]:
    u = urlsplit(url)
    port = u.port or {"http": 80, "https": 443}.get(u.scheme)
    return u.scheme, (u.hostname or "").lower(), port


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


class Http:
    """One client for one hub endpoint: its token for its origin only, timeouts, counting."""

    def __init__(self, endpoint: str, auth: dict[str, str], base_headers: dict[str, str]):
        self.endpoint = endpoint
        self._origin = origin(endpoint)
        self._auth = auth  # {"authorization": ...} or {}
        self._headers = base_headers
        self.timeout, self.deadline = limits()
        self.transfer = Transfer()
        self.client = httpx.Client(follow_redirects=False, trust_env=True,
                                   limits=httpx.Limits(max_connections=64, max_keepalive_connections=32))

    def headers_for(self, url: str) -> dict[str, str]:
        return {**self._headers, **(self._auth if origin(url) == self._origin else {})}

    def exchange(self, url: str, extra: dict[str, str], *, what: str, deadline: float,
                 handle: Callable[[Any, str], Any]) -> Any:
        """GET `url`, following at most MAX_REDIRECTS redirects; `handle(response, final_url)` reads
        the answer inside the stream. Transport failures become one-line SourceErrors."""
        for _ in range(MAX_REDIRECTS + 1):
            host = one_line(urlsplit(url).netloc or url, 80)
            left = deadline - time.monotonic()
            if left <= 0:
                raise self.late(host, what)
            t = min(self.timeout, left)
            try:
                with self.client.stream("GET", url, headers={**self.headers_for(url), **extra},
                                        timeout=httpx.Timeout(t, connect=t)) as r:
                    location = r.headers.get("location")
                    if r.status_code in (301, 302, 303, 307, 308) and location:
                        url = urljoin(url, location)
                        continue
                    return handle(r, url)
            except SourceError:
                raise
            except httpx.TimeoutException:
                if time.monotonic() >= deadline:
                    raise self.late(host, what) from None
                raise SourceError(f"{host}: no answer within {t:g} s while waiting for {what} "
                                  f"({TIMEOUT_ENV} sets the wait)", "timeout") from None
            except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:  # InvalidURL: a hostile Location
                raise SourceError(f"{host}: network error while waiting for {what} "
                                  f"({one_line(type(exc).__name__ + ': ' + str(exc), 160)})", "network") from None
        raise SourceError(f"{one_line(url, 120)}: more than {MAX_REDIRECTS} redirects for {what}", "network")

    def late(self, host: str, what: str) -> SourceError:
        return SourceError(f"{host}: {what} did not complete within {self.deadline:g} s "
                           f"({DEADLINE_ENV} sets the limit per file)", "timeout")

    def body(self, r: Any, cap: int, *, host: str, what: str, deadline: float, exact: bool) -> bytes:
        """The answer's body as sent on the wire, at most `cap` bytes (exactly `cap` when exact).
        Only exact (range) reads count as transferred: the report's figure is of file bytes."""
        count = self.transfer.add if exact else (lambda n: None)
        encoding = r.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise SourceError(f"{host}: the answer for {what} is {one_line(encoding, 20)}-encoded although "
                              "identity was asked for; refusing to decompress it", "bad_range")
        declared = r.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > cap:
            raise SourceError(f"{host}: the answer for {what} is {int(declared):,} bytes; expected at most "
                              f"{cap:,}", "bad_range")
        chunks, got = [], 0
        try:
            for chunk in r.iter_raw(CHUNK):
                got += len(chunk)
                if got > cap:
                    raise SourceError(f"{host}: the server sent more than the {cap:,} bytes asked for "
                                      f"({what})", "bad_range")
                if time.monotonic() > deadline:
                    raise self.late(host, what)
                chunks.append(chunk)
        except httpx.TimeoutException:
            count(got)
            raise self.late(host, what) if time.monotonic() >= deadline else SourceError(
                f"{host}: the answer for {what} stalled after {got:,} bytes (no byte within "
                f"{self.timeout:g} s; {TIMEOUT_ENV} sets the wait)", "timeout") from None
        except httpx.HTTPError:  # the connection ended inside the body
            count(got)
            raise SourceError(f"truncated response: expected {cap:,} bytes for {what}, got {got:,} before the "
                              "connection closed", "short_read") from None
        count(got)
        if exact and got != cap:
            raise SourceError(f"truncated response: expected {cap:,} bytes for {what}, got {got:,}", "short_read")
        return b"".join(chunks)


class HttpRangeSource(ByteSource):
    """One file on the hub, read by HTTP range requests of exactly the asked-for bytes."""

    def __init__(self, http: Http, url: str, name: str, size: int | None = None,
                 on_redirect: Callable[[str], None] | None = None):
        self._http = http
        self._url = url
        self._name = name
        self._size = size
        self._on_redirect = on_redirect
        self._first: bytes | None = None  # the bytes of the probe that told the size
        self._deadline = time.monotonic() + http.deadline  # one budget for every read of this file

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
        where = one_line(self._name)
        what = f"bytes {offset}-{last} of {where}"

        def handle(r: Any, final: str) -> tuple[bytes, int]:
            status = r.status_code
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
            total = int(m[3]) if m and m[3] != "*" else None
            # the probe may get fewer bytes than asked, only when the file is that short
            end = min(last, total - 1) if probe and total is not None else last
            if not m or int(m[1]) != offset or int(m[2]) != end:
                raise SourceError(f"{where}: Content-Range {one_line(r.headers.get('content-range') or '', 80)!r} "
                                  f"does not match the bytes asked for ({offset}-{last})", "bad_range")
            if total is None:
                raise SourceError(f"{where}: Content-Range gives no total size", "bad_range")
            data = self._http.body(r, end - offset + 1, host=one_line(urlsplit(final).netloc, 80), what=what,
                                   deadline=self._deadline, exact=True)
            if final != self._url:  # the hub redirects resolve URLs to where the bytes are: go there next time
                self._url = final
                if self._on_redirect:
                    self._on_redirect(final)
            return data, total

        try:
            return self._http.exchange(self._url, {"Range": f"bytes={offset}-{last}", "Accept-Encoding": "identity"},
                                       what=what, deadline=self._deadline, handle=handle)
        except SourceError as exc:
            if exc.message.startswith("truncated response"):
                raise SourceError(f"{where}: {exc.message} at offset {offset}", exc.code) from None
            raise

"""A model-hub stand-in on 127.0.0.1 for the remote tests: the API's revision
endpoint, `resolve` URLs (with a redirect, as the hub's CDN does), and HTTP range
requests over files in a local folder. Faults can be switched on per test, hostile
ones included; every loop that sends or waits is bounded, so a test cannot hang."""

from __future__ import annotations

import gzip
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse


SHA = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Faults:
    ignore_range: bool = False  # answer 200 with the whole file
    truncate: set[str] = field(default_factory=set)  # files whose range answers stop short
    missing: set[str] = field(default_factory=set)  # files that answer 404
    error500: set[str] = field(default_factory=set)  # files that answer 500
    latency: float = 0.0  # seconds before each answer
    down: bool = False  # the API answers 503
    sha: str | None = None  # the commit id the API names (hostile: "../x", "/abs", escape codes)
    extra_siblings: list[str] = field(default_factory=list)  # file names the API lists beyond the folder's
    cdn: str | None = None  # redirect resolve URLs to this other origin ("http://127.0.0.1:port")
    overlong: bool = False  # answer a range with the rest of the file (Content-Range says so)
    gzip_ranges: bool = False  # answer ranges gzip-encoded (a small body that inflates)
    api_gzip: bool = False  # the API answer gzip-encoded
    api_endless: int = 0  # the API sends this many bytes of JSON-ish padding, no Content-Length
    api_stall: float = 0.0  # seconds the API waits before answering
    body_stall: float = 0.0  # seconds a range answer waits after its headers
    drip: float = 0.0  # seconds between the bytes of a range answer


@dataclass
class Stats:
    requests: int = 0
    range_requests: int = 0
    body_bytes: int = 0
    server_errors: int = 0  # handler exceptions (a client that hung up), kept out of stderr
    auth: list[tuple[str, bool]] = field(default_factory=list)  # (path, whether Authorization came)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, n: int, ranged: bool) -> None:
        with self.lock:
            self.requests += 1
            self.range_requests += ranged
            self.body_bytes += n


class Hub:
    def __init__(self, repos: dict[str, Path]):
        self.repos = repos  # "org/name" -> folder
        self.faults = Faults()
        self.stats = Stats()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def do_HEAD(self):
                self.do_GET(head=True)

            def do_GET(self, head: bool = False):
                if hub.faults.latency:
                    time.sleep(hub.faults.latency)
                path = unquote(urlparse(self.path).path)
                with hub.stats.lock:
                    hub.stats.auth.append((path, "authorization" in {k.lower() for k in self.headers}))
                m = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path)
                if m:
                    return self.api(m[1], m[2] or "main")
                m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
                if m:  # like the hub: a redirect to where the bytes are
                    if m[2] not in ("main", SHA):
                        return self.send(404, b"revision not found", {"X-Error-Code": "RevisionNotFound"})
                    return self.send(302, b"", {"Location": f"{hub.faults.cdn or ''}/cdn/{m[1]}/{m[3]}"})
                m = re.fullmatch(r"/cdn/([^/]+/[^/]+)/(.+)", path)
                if m:
                    return self.file(m[1], m[2], head)
                self.send(404, b"no route")

            def send(self, code, body=b"", headers=None):
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if body and self.command != "HEAD":
                    self.wfile.write(body)

            def api(self, repo, rev):
                if hub.faults.api_stall:
                    time.sleep(hub.faults.api_stall)
                if hub.faults.down:
                    return self.send(503, b"down")
                if hub.faults.api_endless:
                    return self.endless(hub.faults.api_endless)
                root = hub.repos.get(repo)
                if root is None:
                    return self.send(404, b'{"error": "Repository not found"}',
                                     {"X-Error-Code": "RepoNotFound", "Content-Type": "application/json"})
                if rev not in ("main", SHA):
                    return self.send(404, b'{"error": "Invalid rev id"}',
                                     {"X-Error-Code": "RevisionNotFound", "Content-Type": "application/json"})
                files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
                files += hub.faults.extra_siblings
                doc = {"id": repo, "modelId": repo, "sha": hub.faults.sha or SHA, "private": False,
                       "siblings": [{"rfilename": f} for f in files]}
                body = json.dumps(doc).encode()
                if hub.faults.api_gzip:
                    return self.send(200, gzip.compress(body), {"Content-Type": "application/json",
                                                                "Content-Encoding": "gzip"})
                self.send(200, body, {"Content-Type": "application/json"})

            def endless(self, n):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.close_connection = True
                try:
                    self.wfile.write(b'{"pad": "')
                    for _ in range(n // (1 << 16)):
                        self.wfile.write(b"x" * (1 << 16))
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def file(self, repo, name, head):
                root = hub.repos.get(repo)
                f = (root / name) if root else None
                if name in hub.faults.missing or f is None or not f.is_file():
                    return self.send(404, b"Entry not found", {"X-Error-Code": "EntryNotFound"})
                if name in hub.faults.error500:
                    return self.send(500, b"internal error")
                size = f.stat().st_size
                rng = self.headers.get("Range")
                m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng or "")
                if not m or hub.faults.ignore_range:
                    return self.stream(f, 0, size, 200, {}, head, ranged=False)
                a = int(m[1])
                b = min(int(m[2]) if m[2] else size - 1, size - 1)
                if a >= size:
                    return self.send(416, b"", {"Content-Range": f"bytes */{size}"})
                if hub.faults.overlong:
                    b = size - 1
                if hub.faults.gzip_ranges:
                    with open(f, "rb") as fh:
                        fh.seek(a)
                        body = gzip.compress(fh.read(b - a + 1) + bytes(1 << 24))  # inflates to 16 MB more
                    return self.send(206, body, {"Content-Range": f"bytes {a}-{b}/{size}", "Content-Encoding": "gzip"})
                cut = name in hub.faults.truncate
                return self.stream(f, a, b - a + 1, 206, {"Content-Range": f"bytes {a}-{b}/{size}"}, head,
                                   ranged=True, short=cut)

            def stream(self, f, start, length, code, headers, head, ranged, short=False):
                self.send_response(code)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(length))
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                sent = 0
                if not head:
                    todo = length // 2 if short else length
                    try:
                        self.wfile.flush()
                        if hub.faults.body_stall:
                            time.sleep(hub.faults.body_stall)
                        with open(f, "rb") as fh:
                            fh.seek(start)
                            while sent < todo:
                                if hub.faults.drip:  # one byte at a time; the client's deadline ends it
                                    time.sleep(hub.faults.drip)
                                chunk = fh.read(1 if hub.faults.drip else min(1 << 16, todo - sent))
                                if not chunk:
                                    break
                                self.wfile.write(chunk)
                                sent += len(chunk)
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                    if short:
                        self.close_connection = True
                hub.stats.add(sent, ranged)

        class _Server(ThreadingHTTPServer):
            # A client that hangs up mid-answer (what hc does when it refuses one) is normal
            # here; socketserver would print its traceback into the stderr a test is reading.
            def handle_error(self, request, client_address):
                hub.stats.server_errors += 1

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

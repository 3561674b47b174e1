"""The on-disk cache of hub reads: headers, small files and small ranges, kept per commit.

A server is not trusted to name cache paths: every path is built from validated parts
(a digest of endpoint and repo id, a 40-hex commit, a digest of what was asked) and
checked to stay under the cache root. Every entry records what was asked, its length
and a SHA-256 of its bytes; an entry that disagrees with any of them is not used, so a
planted or damaged file costs a refetch, never wrong values.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from hccli.bounded import SourceError, read_json, read_small_file
from hccli.errors import HcError
from hccli.safe_write import write_file

COMMIT = re.compile(r"^[0-9a-f]{40}$")
_MAGIC = b"hccli-cache-1\n"
# The largest entry: a 100 MB header (the parser's own cap) with its meta line.
ENTRY_CAP = 100_000_000 + 8 + (1 << 16)


def cache_root() -> Path:
    base = os.environ.get("HC_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache"), "hccli")
    return Path(base)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class Cache:
    """One repository's entries at one endpoint."""

    def __init__(self, endpoint: str, repo_id: str):
        self.root = cache_root().absolute()
        self.repo_id = repo_id
        self._repo_dir = self.root / _digest(f"{endpoint}|{repo_id}")[:32]

    def _path(self, *parts: str) -> Path:
        path = self._repo_dir.joinpath(*parts)
        # parts are digests or a validated commit; this check keeps it so if that ever changes
        if not os.path.normpath(path).startswith(os.path.normpath(self.root) + os.sep):
            raise HcError(f"cache path {path} would leave the cache root {self.root}")
        return path

    def ref_path(self, revision: str) -> Path:
        return self._path("refs", _digest(revision))

    def entry_path(self, commit: str, kind: str, asked: dict[str, Any]) -> Path:
        if not COMMIT.match(commit):
            raise HcError(f"commit {commit!r} is not 40 hex digits; refusing to use it in a cache path")
        return self._path(commit, kind, _digest(json.dumps(asked, sort_keys=True)))

    def get(self, path: Path, asked: dict[str, Any]) -> bytes | None:
        """The entry's bytes when it exists and holds what was asked, intact; else None."""
        try:
            raw = read_small_file(path, ENTRY_CAP, "a cache entry")
        except SourceError:
            return None
        if raw is None or not raw.startswith(_MAGIC):
            return None
        end = raw.find(b"\n", len(_MAGIC))
        if end < 0:
            return None
        try:
            meta = read_json(raw[len(_MAGIC):end], str(path), "a cache entry's line")
        except HcError:
            return None
        data = raw[end + 1:]
        if not isinstance(meta, dict) or meta.get("asked") != {**asked, "repo": self.repo_id}:
            return None
        if meta.get("length") != len(data) or meta.get("sha256") != hashlib.sha256(data).hexdigest():
            return None
        return data

    def put(self, path: Path, asked: dict[str, Any], data: bytes) -> None:
        meta = {"asked": {**asked, "repo": self.repo_id}, "length": len(data),
                "sha256": hashlib.sha256(data).hexdigest()}
        line = json.dumps(meta, sort_keys=True).encode()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # an entry is checked when read, so it needs no fsync; a link planted at its name is refused
            write_file(path, lambda fh: fh.write(_MAGIC + line + b"\n" + data), overwrite=True, sync=False)
        except (OSError, HcError):
            pass  # a cache that cannot be written only costs speed

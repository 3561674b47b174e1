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
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hccli.base.bounded import SourceError, read_json, read_small_file
from hccli.base.errors import HcError
from hccli.base.safe_write import write_file

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


# --- what the cache holds, and clearing it (`hc cache list|clear`) -------------------------------

# Entries looked at by one list or clear: a hub checkpoint leaves a few hundred per commit
# (its headers, small files and HC value ranges), so this is thousands of runs' worth.
MAX_CACHE_ENTRIES = 200_000
META_PREFIX = 1 << 16  # an entry's magic and meta line: what was asked is a few names
REF_CAP = 32 * 1024 * 1024  # a revision's entry holds the file listing: remote.API_CAP's answer at most
_REPO_DIR = re.compile(r"^[0-9a-f]{32}$")
_ENTRY_KINDS = ("files", "headers", "ranges")
_NOFOLLOW = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


@dataclass(frozen=True)
class CachedFile:
    """One hub file's entries at one commit ("" for file: the revision's file listing)."""

    repo: str
    revisions: tuple[str, ...]  # the revisions seen pointing at this commit ("main", a tag)
    commit: str
    file: str  # subfolder/name as asked
    entries: int
    bytes: int


@dataclass(frozen=True)
class CacheListing:
    root: str
    files: tuple[CachedFile, ...]
    unrecognised_entries: int  # damaged entries, temporaries, links: inside hc's folders, removed by clear
    unrecognised_bytes: int
    left_alone: tuple[str, ...]  # names under the root that hc did not make: clear never touches them
    entries: int  # every entry, unrecognised ones included
    bytes: int
    truncated: bool  # the walk stopped at MAX_CACHE_ENTRIES


@dataclass(frozen=True)
class ClearedRepo:
    repos: tuple[str, ...]  # the repositories its entries name; () when none could be read
    folder: str
    entries: int
    bytes: int


@dataclass(frozen=True)
class CacheCleared:
    root: str
    removed: tuple[ClearedRepo, ...]  # with dry_run: what would be removed
    entries: int
    bytes: int
    left_alone: tuple[str, ...]
    truncated: bool  # more entries than MAX_CACHE_ENTRIES were removed than counted
    dry_run: bool = False  # nothing was removed: `removed` is the plan (`hc cache clear --dry-run`, or a "no")


def _read_prefix(path: str, cap: int) -> bytes | None:
    """Up to cap bytes of a regular file, never through a link; None for anything else."""
    try:
        fd = os.open(path, _NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        return os.read(fd, min(cap, st.st_size)) if stat.S_ISREG(st.st_mode) else None
    except OSError:
        return None
    finally:
        os.close(fd)


def _meta(raw: bytes | None) -> tuple[dict[str, Any], bytes] | None:
    if raw is None or not raw.startswith(_MAGIC):
        return None
    end = raw.find(b"\n", len(_MAGIC))
    try:
        meta = json.loads(raw[len(_MAGIC):end]) if end > 0 else None
    except (ValueError, RecursionError):
        return None
    asked = meta.get("asked") if isinstance(meta, dict) else None
    if not isinstance(asked, dict) or not isinstance(asked.get("repo"), str):
        return None
    return asked, raw[end + 1:]


class _Walk:
    """Every entry under the root, by repository folder, bounded by MAX_CACHE_ENTRIES."""

    def __init__(self, root: Path):
        self.root = root
        self.seen = 0
        self.truncated = False

    def _scan(self, path: str) -> list[os.DirEntry]:
        try:
            with os.scandir(path) as it:
                return sorted(it, key=lambda e: e.name)
        except OSError:
            return []

    def _size(self, entry: os.DirEntry) -> int:
        try:
            return entry.stat(follow_symlinks=False).st_size
        except OSError:
            return 0

    def _count(self) -> bool:
        self.seen += 1
        if self.seen > MAX_CACHE_ENTRIES:
            self.truncated = True
        return not self.truncated

    def repo_folders(self) -> tuple[list[os.DirEntry], list[str]]:
        """(hc's repository folders, the names under the root that are not one)."""
        ours, foreign = [], []
        for e in self._scan(str(self.root)):
            made = _REPO_DIR.match(e.name) and e.is_dir(follow_symlinks=False) and all(
                c.name == "refs" or COMMIT.match(c.name) for c in self._scan(e.path))
            (ours if made else foreign).append(e if made else e.name)
        return ours, foreign

    def folder(self, repo_dir: os.DirEntry) -> tuple[dict[tuple[str, str, str], list[int]], dict[str, set[str]],
                                                      list[int]]:
        """(repo, commit, file) -> [entries, bytes]; commit -> revisions; [unrecognised entries, bytes]."""
        rows: dict[tuple[str, str, str], list[int]] = {}
        revisions: dict[str, set[str]] = {}
        other = [0, 0]

        def add(key: tuple[str, str, str] | None, size: int) -> None:
            row = other if key is None else rows.setdefault(key, [0, 0])
            row[0] += 1
            row[1] += size

        for sub in self._scan(repo_dir.path):
            refs = sub.name == "refs"
            kinds = [sub] if refs or not sub.is_dir(follow_symlinks=False) else self._scan(sub.path)
            for kind in kinds:
                ours = kind.is_dir(follow_symlinks=False) and (refs or kind.name in _ENTRY_KINDS)
                for e in self._scan(kind.path) if ours else [kind]:
                    if not self._count():
                        return rows, revisions, other
                    got = _meta(_read_prefix(e.path, REF_CAP if refs else META_PREFIX)) if ours else None
                    if got is None:
                        add(None, self._size(e))
                    elif refs:
                        sha = _listing_commit(got[1])
                        if sha is not None:
                            revisions.setdefault(sha, set()).add(str(got[0].get("revision")))
                        add((got[0]["repo"], sha, "") if sha else None, self._size(e))
                    else:
                        asked = got[0]
                        folder, name = asked.get("subfolder") or "", str(asked.get("file"))
                        add((asked["repo"], sub.name, f"{folder}/{name}" if folder else name), self._size(e))
        return rows, revisions, other


def _listing_commit(data: bytes) -> str | None:
    """The commit a revision's entry names (remote.open_hub writes {"sha", "siblings"})."""
    try:
        sha = json.loads(data).get("sha")
    except (ValueError, RecursionError, AttributeError):
        return None
    return sha if isinstance(sha, str) and COMMIT.match(sha) else None


def list_cache() -> CacheListing:
    """Every cached hub file, by repository, commit and file, with the bytes its entries take."""
    walk = _Walk(cache_root().absolute())
    folders, foreign = walk.repo_folders()
    files: list[CachedFile] = []
    other = [0, 0]
    for folder in folders:
        rows, revisions, unknown = walk.folder(folder)
        other = [other[0] + unknown[0], other[1] + unknown[1]]
        files += [CachedFile(repo, tuple(sorted(revisions.get(commit, ()))), commit, file, n, size)
                  for (repo, commit, file), (n, size) in rows.items()]
    files.sort(key=lambda f: (f.repo, f.commit, f.file))
    return CacheListing(str(walk.root), tuple(files), other[0], other[1], tuple(foreign),
                        sum(f.entries for f in files) + other[0], sum(f.bytes for f in files) + other[1],
                        walk.truncated)


def clear_cache(repo: str | None = None, *, dry_run: bool = False,
                only: frozenset[str] | None = None) -> CacheCleared:
    """Remove every entry (repo None) or one repository's: only the folders hc made under the
    cache root, each removed without following a link in it (a link is removed, not its target).

    dry_run: remove nothing, and say what would be removed (the plan a confirmation shows).
    only: the folders of such a plan: what was confirmed is all that is removed, whatever
    appeared in the cache since (a folder gone since is skipped)."""
    if not shutil.rmtree.avoids_symlink_attacks:  # pragma: no cover - every platform hc runs on has it
        raise HcError("this platform's shutil.rmtree may follow links; remove the cache folder by hand")
    root = cache_root().absolute()
    walk = _Walk(root)
    folders, foreign = walk.repo_folders()
    removed = []
    for folder in folders:
        if only is not None and folder.name not in only:
            continue
        rows, _, other = walk.folder(folder)
        names = tuple(sorted({r for r, _, _ in rows}))
        if repo is not None and repo not in names:
            continue
        path = os.path.join(root, folder.name)
        if os.path.dirname(os.path.normpath(path)) != os.path.normpath(root):
            raise HcError(f"cache path {path} would leave the cache root {root}")  # pragma: no cover
        if not dry_run:
            shutil.rmtree(path)
        removed.append(ClearedRepo(names, folder.name, sum(n for n, _ in rows.values()) + other[0],
                                   sum(b for _, b in rows.values()) + other[1]))
    return CacheCleared(str(root), tuple(removed), sum(r.entries for r in removed), sum(r.bytes for r in removed),
                        tuple(foreign), walk.truncated, dry_run)

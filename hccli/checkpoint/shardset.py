"""A checkpoint as a set of shards: a directory (with or without an index), an
index file, or one .safetensors file; config.json beside it when present.

Opening reads the index and every shard's header (never tensor data) and keeps
what went wrong per shard, so that --verify can report it; a checkpoint that
cannot be read at all raises HcError (exit 2).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from hccli.checkpoint.header import Header, TensorInfo, gc_paused, read_header
from hccli.checkpoint.source import ByteSource, LocalFile, one_line
from hccli.config import ModelConfig, load_config
from hccli.errors import HcError

INDEX_NAME = "model.safetensors.index.json"


@dataclass(frozen=True)
class Shard:
    file: str  # as the index names it (or the file name)
    path: Path | None  # None when the name is unsafe and was not opened
    header: Header | None
    error: str | None  # why it could not be read
    error_code: str | None = None
    indexed: bool = True


@dataclass(frozen=True)
class Index:
    path: Path | str
    weight_map: dict[str, str]
    total_size: int | None
    metadata: dict


@dataclass
class Checkpoint:
    path: Path  # what the user named
    root: Path  # the directory the shards live in
    kind: str  # "directory" | "index" | "file" | "hub"
    index: Index | None
    shards: list[Shard]
    config: ModelConfig | None
    config_error: str | None
    unsafe: list[str] = field(default_factory=list)  # index shard names that were not opened
    missing: list[str] = field(default_factory=list)  # index shard names with no file
    remote: Any = None  # a RemoteRepo for a hub repository
    _tensors: dict | None = field(default=None, repr=False)

    def readable(self) -> list[Shard]:
        return [s for s in self.shards if s.header is not None]

    def tensors(self) -> dict[str, tuple[Shard, TensorInfo]]:
        """Every tensor, first occurrence in shard order (duplicates are a finding). Cached."""
        if self._tensors is None:
            out: dict[str, tuple[Shard, TensorInfo]] = {}
            # ~100k entries for a full checkpoint: built by C iterators, with the cyclic GC held
            # off (it would walk the growing dict again and again; nothing here forms a cycle).
            with gc_paused():
                for s in self.readable():
                    h = s.header
                    if out.keys().isdisjoint(h.by_name):  # by_name is in h.tensors' order
                        out.update(zip(h.by_name, zip(repeat(s), h.tensors)))
                    else:  # a name already seen in an earlier shard keeps that shard
                        for t in h.tensors:
                            out.setdefault(t.name, (s, t))
            self._tensors = out
        return self._tensors

    def occurrences(self) -> dict[str, list[Shard]]:
        out: dict[str, list[Shard]] = {}
        for s in self.readable():
            for t in s.header.tensors:
                out.setdefault(t.name, []).append(s)
        return out

    @property
    def label(self) -> str:
        return self.remote.ref.label if self.remote is not None else str(self.path)

    def source(self, shard: Shard) -> ByteSource:
        if self.remote is not None:
            return self.remote.source(shard.file, shard.header.file_size if shard.header else None)
        assert shard.path is not None
        return LocalFile(shard.path)


def _safe_name(name: str) -> bool:
    p = PurePosixPath(name.replace("\\", "/"))
    return bool(name) and not p.is_absolute() and ".." not in p.parts and not (len(name) > 1 and name[1] == ":")


def _read_index(path: Path) -> Index:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise HcError(f"{one_line(str(path))}: no such file; expected a model.safetensors.index.json") from None
    except OSError as exc:
        raise HcError(f"{one_line(str(path))}: cannot read ({exc.strerror or exc})") from None
    return parse_index(raw, path)


def parse_index(raw: bytes, path: Path | str) -> Index:
    where = one_line(str(path))
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HcError(f"{where}: not valid JSON ({one_line(str(exc), 80)}); expected a safetensors index") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("weight_map"), dict):
        raise HcError(f"{where}: key 'weight_map': expected an object of tensor name -> shard file")
    wm = doc["weight_map"]
    for k, v in wm.items():
        if not isinstance(v, str):
            raise HcError(f"{where}: key 'weight_map.{one_line(k, 80)}': expected a shard file name, got "
                          f"{type(v).__name__}")
    meta = doc.get("metadata") or {}
    if not isinstance(meta, dict):
        raise HcError(f"{where}: key 'metadata': expected an object")
    total = meta.get("total_size")
    if total is not None and (not isinstance(total, int) or isinstance(total, bool) or total < 0):
        raise HcError(f"{where}: key 'metadata.total_size': expected a non-negative integer, got {total!r}")
    return Index(path, wm, total, meta)


def _plan(index: Index | None, present: Callable[[str], bool], others: list[str], where: str
          ) -> tuple[list[tuple[str, bool]], list[str], list[str]]:
    """(shard names to read with whether the index names them, unsafe names, missing names)."""
    if index is None:
        if not others:
            raise HcError(f"{where}: no {INDEX_NAME} and no .safetensors files here")
        return [(f, False) for f in others], [], []
    unsafe, missing, seen = [], [], []
    for shard in dict.fromkeys(index.weight_map.values()):
        if not _safe_name(shard):
            unsafe.append(shard)
        elif not present(shard):
            missing.append(shard)
        else:
            seen.append(shard)
    named = {str(PurePosixPath(s)) for s in seen}
    names = [(s, True) for s in sorted(seen)] + [(f, False) for f in others if f not in named]
    return names, unsafe, missing


def _finish(where: str, shards: list[Shard], unsafe: list[str], missing: list[str]) -> None:
    if not shards:
        raise HcError(f"{where}: the index names {len(missing) + len(unsafe)} shard files and none "
                      "of them is here" + (f" (first: {one_line(missing[0], 80)})" if missing else ""))
    if not any(s.header is not None for s in shards):
        first = shards[0]
        raise HcError(first.error or f"{first.file}: unreadable")


def _open_shard(root: Path, name: str, indexed: bool) -> Shard:
    path = root / name
    try:
        with LocalFile(path) as src:
            return Shard(name, path, read_header(src), None, None, indexed)
    except HcError as exc:
        return Shard(name, path, None, exc.message, getattr(exc, "code", "unreadable"), indexed)


def open_checkpoint(
    path: str | Path,
    *,
    config: str | Path | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Checkpoint:
    """A local checkpoint, or a hub repository (hf://org/name..., or a bare org/name
    where no local path of that name exists)."""
    text = str(path)
    p = Path(path)
    if text.startswith("hf://") or not p.exists():
        from hccli.checkpoint.remote import parse_repo_spec

        ref = parse_repo_spec(text, bare_allowed=not p.exists())
        if ref is not None:
            return _open_remote(ref, config=config, progress=progress)
        raise HcError(f"{one_line(text)}: no such file or directory; expected a checkpoint directory, "
                      "an index .json, a .safetensors file, or a hub repository hf://org/name")
    index = None
    if p.is_dir():
        root, kind = p, "directory"
        if (p / INDEX_NAME).is_file():
            index = _read_index(p / INDEX_NAME)
    elif p.suffix == ".json":
        root, kind = p.parent, "index"
        index = _read_index(p)
    else:
        root, kind = p.parent, "file"

    if kind == "file":
        names, unsafe, missing = [(p.name, False)], [], []
    else:
        on_disk = sorted(f.name for f in root.glob("*.safetensors") if f.is_file())
        names, unsafe, missing = _plan(index, lambda s: (root / s).is_file(), on_disk, one_line(str(p)))

    shards = []
    with gc_paused():  # the headers' ~100k entries: see gc_paused
        for k, (name, indexed) in enumerate(names):
            if progress:
                progress(k, len(names))
            shards.append(_open_shard(root, name, indexed))
    if progress:
        progress(len(names), len(names))
    _finish(one_line(str(p)), shards, unsafe, missing)

    cfg, cfg_error = None, None
    cfg_path = Path(config) if config is not None else root / "config.json"
    if config is not None or cfg_path.is_file():
        try:
            cfg = load_config(cfg_path)
        except HcError as exc:
            if config is not None:
                raise
            cfg_error = exc.message
    return Checkpoint(p, root, kind, index, shards, cfg, cfg_error, unsafe, missing)


def _open_remote(ref, *, config, progress) -> Checkpoint:
    from hccli.checkpoint.remote import fetch_headers, resolve
    from hccli.config import parse_config

    from concurrent.futures import ThreadPoolExecutor

    repo = resolve(ref)
    present = set(repo.files)
    index = None
    with ThreadPoolExecutor(2) as pool:  # two round trips at once
        wanted = (INDEX_NAME, "config.json") if config is None else (INDEX_NAME,)
        futures = {name: pool.submit(repo.small_file, name) for name in wanted}
    raw = futures[INDEX_NAME].result()
    if raw is not None:
        index = parse_index(raw, repo.display(INDEX_NAME))
    others = sorted(f for f in repo.files if f.endswith(".safetensors") and "/" not in f)
    names, unsafe, missing = _plan(index, lambda s: s in present, others, ref.label)
    headers = fetch_headers(repo, [n for n, _ in names], progress=progress)
    shards = [Shard(n, None, headers[n][0], headers[n][1], None if headers[n][0] else "remote", indexed)
              for n, indexed in names]
    _finish(ref.label, shards, unsafe, missing)
    cfg, cfg_error = None, None
    if config is not None:
        cfg = load_config(config)
    else:
        try:
            raw_cfg = futures["config.json"].result()
            if raw_cfg is not None:
                cfg = parse_config(raw_cfg, repo.display("config.json"))
        except HcError as exc:
            cfg_error = exc.message
    return Checkpoint(Path(ref.label), Path(ref.label), "hub", index, shards, cfg, cfg_error, unsafe, missing,
                      remote=repo)

"""A checkpoint as a set of shards in a store (store.py): a directory (with or without
an index), an index file, one .safetensors file, or a hub repository; config.json
beside it when present.

Opening reads the index and every shard's header (never tensor data) and keeps
what went wrong per shard, so that --verify can report it; a checkpoint that
cannot be read at all raises HcError (exit 2). The same steps serve every store.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from itertools import chain, repeat
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from hccli.checkpoint.header import Header, TensorInfo, gc_paused
from hccli.checkpoint.source import ByteSource, one_line
from hccli.checkpoint.store import CONFIG_CAP, MAX_SHARDS, Store, open_store, read_index_bytes
from hccli.config import ModelConfig, load_config, parse_config
from hccli.errors import HcError
from hccli.vocab import INDEX_NAME

# transformers' and the releases' shard names: model-00003-of-00014.safetensors
SHARD_OF = re.compile(r"^(?P<prefix>.*?[-_])(?P<k>\d{5,6})-of-(?P<n>\d{5,6})\.safetensors$")


@dataclass(frozen=True, slots=True)
class Shard:
    file: str  # as the index names it (or the file name)
    path: Path | None  # None when the name is unsafe and was not opened
    header: Header | None
    error: str | None  # why it could not be read
    error_code: str | None = None
    indexed: bool = True


@dataclass(frozen=True, slots=True)
class Index:
    """A parsed model.safetensors.index.json: the weight_map, metadata.total_size, the metadata,
    and the shard files it names (in first-named order)."""

    path: Path | str
    weight_map: dict[str, str]
    total_size: int | None
    metadata: dict
    files: list[str]


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
    missing: list[str] = field(default_factory=list)  # shard names (from the index, or implied by -of-N) with no file
    store: Store | None = None
    label: str = ""
    partial: list[str] = field(default_factory=list)  # *.partial files: an interrupted download or write
    _tensors: dict | None = field(default=None, repr=False)
    _dialect: Any = field(default=None, repr=False)  # hc.dialect_of's cache
    _unique: bool | None = field(default=None, repr=False)
    memo: dict = field(default_factory=dict, repr=False, compare=False)  # checks' results (agree.py)

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

    def names_unique(self) -> bool:
        """Whether no tensor name is in two readable shards: then every shard's entries are the
        checkpoint's, and totals can be taken per header without the merged table. Cached."""
        if self._unique is None:
            headers = [s.header for s in self.readable()]
            total = sum(len(h.names) for h in headers)
            self._unique = len(headers) <= 1 or len(set(chain.from_iterable(h.names for h in headers))) == total
        return self._unique

    def all_names(self) -> list[str]:
        """Every tensor name in shard order, each once (the merged table's keys, in its order)."""
        if self.names_unique():
            return list(chain.from_iterable(s.header.names for s in self.readable()))
        return list(self.tensors())

    def occurrences(self) -> dict[str, tuple[Shard, ...]]:
        """The shards holding each tensor name, in shard order."""
        out: dict[str, tuple[Shard, ...]] = {}
        with gc_paused():
            for s in self.readable():
                by_name = s.header.by_name
                one = (s,)  # shared by every name only this shard holds: no container per tensor
                if out.keys().isdisjoint(by_name):
                    out.update(dict.fromkeys(by_name, one))
                else:
                    for name in by_name:
                        seen = out.get(name)
                        out[name] = one if seen is None else seen + one
        return out

    @property
    def remote(self) -> Any:
        """The hub repository's particulars (endpoint, commit, transfer) for reports, else None."""
        return self.store.hub if self.store is not None else None

    def source(self, shard: Shard) -> ByteSource:
        assert self.store is not None
        return self.store.source(shard.file, shard.header.file_size if shard.header else None)



def _safe_name(name: str) -> bool:
    p = PurePosixPath(name.replace("\\", "/"))
    return bool(name) and not p.is_absolute() and ".." not in p.parts and not (len(name) > 1 and name[1] == ":")


MAX_INT_DIGITS = 30  # total_size is a u64 (20 digits); anything longer is not a size


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text.lstrip('-')):,} digits; expected at most {MAX_INT_DIGITS}")
    return int(text)


def parse_index(raw: bytes, path: Path | str, shard_files: list[str] | None = None) -> Index:
    """`shard_files`, the .safetensors files beside the index, speed up the usual index whose
    every shard is among them (see _parse_index_fast)."""
    where = one_line(str(path))
    fast = _parse_index_fast(raw, shard_files)
    if fast is not None:
        wm, meta = fast
    else:
        wm, meta = _parse_index_careful(raw, where)
    if not isinstance(meta, dict):
        raise HcError(f"{where}: key 'metadata': expected an object")
    total = meta.get("total_size")
    if total is not None and (not isinstance(total, int) or isinstance(total, bool) or not 0 <= total < 2**64):
        raise HcError(f"{where}: key 'metadata.total_size': expected a non-negative integer below 2**64, got "
                      f"{one_line(repr(total), 40)}")
    return Index(path, wm, total, meta, list(dict.fromkeys(wm.values())))


def _parse_index_careful(raw: bytes, where: str) -> tuple[dict[str, str], Any]:
    """weight_map and metadata (or {}) by the standard library, each rejection worded."""
    try:
        doc = json.loads(raw.decode("utf-8"), parse_int=_int)
    except UnicodeDecodeError as exc:
        raise HcError(f"{where}: not UTF-8 text (byte {exc.start}); expected a safetensors index") from None
    except RecursionError:
        raise HcError(f"{where}: JSON nested too deeply; expected a safetensors index (an object of "
                      "weight_map and metadata)") from None
    except ValueError as exc:  # JSONDecodeError, or an over-long integer
        raise HcError(f"{where}: not valid JSON ({one_line(str(exc), 80)}); expected a safetensors index") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("weight_map"), dict):
        raise HcError(f"{where}: key 'weight_map': expected an object of tensor name -> shard file")
    wm = doc["weight_map"]
    for k, v in wm.items():
        if not isinstance(v, str):
            raise HcError(f"{where}: key 'weight_map.{one_line(k, 80)}': expected a shard file name, got "
                          f"{type(v).__name__}")
    return wm, doc.get("metadata") or {}


def _parse_index_fast(raw: bytes, shard_files: list[str] | None = None) -> tuple[dict[str, str], Any] | None:
    """The ordinary index (weight_map of strings, metadata, nothing else) decoded by msgspec in
    C, ~2x the standard library's speed on a 100k-tensor index; None for anything else, or
    without msgspec, and the careful path judges it. msgspec keeps the last of repeated keys
    and refuses invalid UTF-8 as json does; metadata, small, goes through the careful path's
    json.loads for its integer rule."""
    decode = _index_decoder()
    if decode is None or _metadata_may_repeat(raw):
        return None
    if shard_files and len(shard_files) <= MAX_SHARDS:
        # Values checked in C against the files present, and each one the listing's own string
        # rather than a new one per tensor (~100k): about a third of the decode. An index naming
        # any other file (a missing shard, an unsafe name) is decoded the general way.
        try:
            doc = _index_decoder(tuple(shard_files))(raw)
            return doc.weight_map, json.loads(bytes(doc.metadata).decode("utf-8"), parse_int=_int) or {}
        except (ValueError, RecursionError):
            pass
    try:
        doc = decode(raw)
        meta = json.loads(bytes(doc.metadata).decode("utf-8"), parse_int=_int)
    except (ValueError, RecursionError):  # msgspec's DecodeError and ValidationError are ValueErrors
        return None
    return doc.weight_map, meta or {}


# An escape of a printable ASCII character (json.dumps never writes one): it could spell a key.
_ESCAPED_ASCII = re.compile(rb"\\u00[2-7]")


def _metadata_may_repeat(raw: bytes) -> bool:
    """Whether "metadata" may be a key more than once. msgspec keeps the last one unread, while the
    careful path reads every one (and refuses an integer of more than MAX_INT_DIGITS digits in any
    of them): such an index goes to the careful path. Each weight_map msgspec reads is checked in
    full, so a repeated weight_map or name needs no test."""
    return raw.count(b'"metadata"') > 1 or (b"\\u00" in raw and _ESCAPED_ASCII.search(raw) is not None)


_INDEX_DECODERS: dict[tuple[str, ...] | None, Callable[[bytes], Any] | None] = {}


def _index_decoder(shard_files: tuple[str, ...] | None = None) -> Callable[[bytes], Any] | None:
    """msgspec's index decoder: weight_map values any string, or (shard_files) one of those."""
    if shard_files not in _INDEX_DECODERS:
        try:
            import msgspec
        except ImportError:
            _INDEX_DECODERS[shard_files] = None
        else:
            from typing import Literal

            value = str if shard_files is None else Literal[shard_files]  # type: ignore[valid-type]
            # defstruct: this module's annotations are strings that msgspec would resolve here
            doc = msgspec.defstruct("IndexDoc", [("weight_map", dict[str, value]),
                                                 ("metadata", msgspec.Raw, msgspec.Raw(b"null"))],
                                    forbid_unknown_fields=True, gc=False)
            _INDEX_DECODERS[shard_files] = msgspec.json.Decoder(doc).decode
    return _INDEX_DECODERS[shard_files]


def _implied_missing(names: list[str], where: str) -> list[str]:
    """Shard files that `-of-N` names imply and that are not among `names`."""
    groups: dict[tuple[str, str, int], set[int]] = {}
    for name in names:
        m = SHARD_OF.match(name)
        if m:
            groups.setdefault((m["prefix"], m["n"], len(m["k"])), set()).add(int(m["k"]))
    out = []
    for (prefix, n_text, width), have in sorted(groups.items()):
        n = int(n_text)
        if n > MAX_SHARDS:
            raise HcError(f"{where}: shard names say -of-{n_text}; hc reads at most {MAX_SHARDS:,} shards")
        out += [f"{prefix}{k:0{width}d}-of-{n_text}.safetensors" for k in range(1, n + 1) if k not in have]
    return out


def _plan(index: Index | None, present: Callable[[str], bool], others: list[str], where: str
          ) -> tuple[list[tuple[str, bool]], list[str], list[str]]:
    """(shard names to read with whether the index names them, unsafe names, missing names)."""
    if index is None:
        if not others:
            raise HcError(f"{where}: no {INDEX_NAME} and no .safetensors files here")
        if len(others) > MAX_SHARDS:
            raise HcError(f"{where}: {len(others):,} .safetensors files; hc reads at most {MAX_SHARDS:,} shards")
        return [(f, False) for f in others], [], _implied_missing(others, where)
    unsafe, missing, seen = [], [], []
    named = index.files
    if len(named) > MAX_SHARDS or len(others) > MAX_SHARDS:
        raise HcError(f"{where}: {max(len(named), len(others)):,} shard files; hc reads at most {MAX_SHARDS:,}")
    for shard in named:
        if not _safe_name(shard):
            unsafe.append(shard)
        elif not present(shard):
            missing.append(shard)
        else:
            seen.append(shard)
    norm = {str(PurePosixPath(s)) for s in seen}
    names = [(s, True) for s in sorted(seen)] + [(f, False) for f in others if f not in norm]
    return names, unsafe, missing


def _finish(where: str, shards: list[Shard], unsafe: list[str], missing: list[str]) -> None:
    if not shards:
        raise HcError(f"{where}: the index names {len(missing) + len(unsafe)} shard files and none "
                      "of them is here" + (f" (first: {one_line(missing[0], 80)})" if missing else ""))
    if not any(s.header is not None for s in shards):
        first = shards[0]
        raise HcError(first.error or f"{one_line(first.file)}: unreadable")


def _read_one(store: Store, name: str, indexed: bool) -> Shard:
    try:
        return Shard(name, Path(store.display(name)), store.header(name), None, None, indexed)
    except HcError as exc:
        return Shard(name, Path(store.display(name)), None, exc.message, getattr(exc, "code", "unreadable"), indexed)


def _read_headers(store: Store, names: list[tuple[str, bool]],
                  progress: Callable[[int, int], None] | None) -> list[Shard]:
    def one(item: tuple[str, bool]) -> Shard:
        return _read_one(store, *item)

    done, lock = 0, threading.Lock()

    def counted(item: tuple[str, bool]) -> Shard:
        nonlocal done
        shard = one(item)
        with lock:
            done += 1
            if progress:
                progress(done, len(names))
        return shard

    if progress:
        progress(0, len(names))
    with gc_paused():  # the headers' ~100k entries: see gc_paused
        if store.workers <= 1 or len(names) <= 1:
            return [counted(item) for item in names]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(store.workers, len(names))) as pool:
            return list(pool.map(counted, names))


class _Now:
    """A call made at once, kept as a future's result() is: a local store reads in this thread."""

    def __init__(self, fn: Callable[..., Any], *args: Any):
        try:
            self._value, self._error = fn(*args), None
        except Exception as exc:  # raised where the result is asked for, as from a future
            self._value, self._error = None, exc

    def result(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value


def open_checkpoint(
    path: str | Path,
    *,
    config: str | Path | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Checkpoint:
    """A local checkpoint, or a hub repository (hf://org/name..., or a bare org/name
    where no local path of that name exists): the same steps for every store."""
    text = str(path)
    store, kind, entry, label = open_store(text)
    index, unsafe, missing, partial = None, [], [], []
    if kind == "file":
        names: list[tuple[str, bool]] = [(entry, False)]  # type: ignore[list-item]
        if entry.endswith(".gguf"):  # with the rest of its split set
            from hccli.checkpoint.gguf_store import gguf_parts

            found, missing = gguf_parts(store.files(), entry, one_line(label))
            names = [(f, False) for f in found]
    else:
        # the index and config.json are two round trips on a hub: let them overlap
        run: Callable[..., Any] = _Now
        if store.workers > 1:
            # here: with logging, ~7 ms of imports that a local store never needs
            from concurrent.futures import ThreadPoolExecutor

            pool = ThreadPoolExecutor(2)
            run = pool.submit
        idx_future = run(read_index_bytes, store, entry, kind == "index")
        cfg_future = run(store.read_small, "config.json", CONFIG_CAP, "a model config.json") \
            if config is None else None
        if run is not _Now:
            pool.shutdown(wait=True)
        raw = idx_future.result()
        listing = store.files()
        others = sorted(f for f in listing if f.endswith(".safetensors") and "/" not in f)
        if raw is not None:
            index = parse_index(raw, store.display(entry), others)  # type: ignore[arg-type]
        partial = sorted(f for f in listing if f.endswith(".partial"))
        gguf = None
        if index is None and not others and any(f.endswith(".gguf") for f in listing):
            from hccli.checkpoint import gguf_store as gguf  # its import only where a GGUF may be
        if gguf is not None and gguf.holds_gguf(listing):
            gguf_parts = gguf.gguf_parts

            found, missing = gguf_parts(listing, None, one_line(label))
            names = [(f, False) for f in found]
        else:
            names, unsafe, missing = _plan(index, store.exists, others, one_line(label))
    shards = _read_headers(store, names, progress)
    _finish(one_line(label), shards, unsafe, missing)

    cfg, cfg_error = None, None
    try:
        if config is not None:
            cfg = load_config(config)
        elif kind != "file" and (raw_cfg := cfg_future.result()) is not None:
            cfg = parse_config(raw_cfg, store.display("config.json"))
        elif kind == "file" and store.exists("config.json"):
            raw_cfg = store.read_small("config.json", CONFIG_CAP, "a model config.json")
            cfg = parse_config(raw_cfg or b"", store.display("config.json"))
    except HcError as exc:
        if config is not None:
            raise
        cfg_error = exc.message
    root = Path(store.label)
    return Checkpoint(Path(label), root, kind, index, shards, cfg, cfg_error, unsafe, missing, store, label, partial)

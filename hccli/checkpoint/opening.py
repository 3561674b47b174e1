"""Opening a checkpoint: a directory (with or without an index), an index file, one
.safetensors file, a GGUF (or its split set), or a hub repository, with config.json beside it
when present. The same steps serve every store (store.py).

Opening reads the index and every shard's header (never tensor data) and keeps what went wrong
per shard, so that --verify can report it; a checkpoint that cannot be read at all raises
HcError (exit 2). What the names say is worked out here, once: the dialect and the HC sites.
"""

from __future__ import annotations

import re
import threading
from itertools import chain
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from hccli.base.words import plural
from hccli.base.bounded import one_line
from hccli.checkpoint.verify.config_fit import fits
from hccli.checkpoint.hc import detect, find_sites
from hccli.checkpoint.safetensors.header import gc_paused
from hccli.checkpoint.index import parse_index
from hccli.checkpoint.shardset import Checkpoint, Index, Shard, first_occurrences, names_unique
from hccli.checkpoint.store import MAX_CONFIG_BYTES, MAX_SHARDS, open_store, read_index_bytes
from hccli.checkpoint.store_protocol import Store
from hccli.model.config.model import ConfigUnusable, ModelConfig, load_config_data, read_checkpoint_config
from hccli.base.errors import HcError
from hccli.base.vocab import INDEX_NAME

# transformers' and the releases' shard names: model-00003-of-00014.safetensors; ASCII digits only
# (`\d` and int() would read a fullwidth "００００１" as shard 1, standing in for the real one)
SHARD_OF = re.compile(r"^(?P<prefix>.*?[-_])(?P<k>[0-9]{5,6})-of-(?P<n>[0-9]{5,6})\.safetensors$")


def open_checkpoint(
    path: str | Path,
    *,
    config: str | Path | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Checkpoint:
    """A local checkpoint, or a hub repository (hf://org/name..., or a bare org/name
    where no local path of that name exists): the same steps for every store. config: a
    config.json to use instead of the one beside the checkpoint."""
    text = str(path)
    store, kind, entry, label = open_store(text)
    index, unsafe, missing, partial = None, [], [], []
    cfg_future = None
    if kind == "file":
        names: list[tuple[str, bool]] = [(entry, False)]
        if entry.endswith(".gguf"):  # with the rest of its split set
            from hccli.checkpoint.gguf.store import gguf_parts

            found, missing = gguf_parts(store.files(), entry, one_line(label), store)
            names = [(f, False) for f in found]
    else:
        # the index and config.json are two round trips on a hub: let them overlap
        run: Callable[..., Any] = _Now
        if store.workers > 1:
            # here: it imports logging and more, which a local store never needs
            from concurrent.futures import ThreadPoolExecutor

            pool = ThreadPoolExecutor(2)
            run = pool.submit
        idx_future = run(read_index_bytes, store, entry, kind == "index")
        cfg_future = run(store.read_small, "config.json", MAX_CONFIG_BYTES, "a model config.json") \
            if config is None else None
        if run is not _Now:
            pool.shutdown(wait=True)
        raw = idx_future.result()
        listing = store.files()
        others = sorted(f for f in listing if f.endswith(".safetensors") and "/" not in f)
        if raw is not None:
            index = parse_index(raw, store.display(entry), others)
        partial = sorted(f for f in listing if f.endswith(".partial"))
        gguf = None
        if index is None and not others and any(f.endswith(".gguf") for f in listing):
            from hccli.checkpoint.gguf import store as gguf  # its import only where a GGUF may be
        if gguf is not None and gguf.holds_gguf(listing):
            found, missing = gguf.gguf_parts(listing, None, one_line(label), store)
            names = [(f, False) for f in found]
        else:
            names, unsafe, missing = _plan(index, store.exists, others, one_line(label))
    shards = _read_headers(store, names, progress)
    _finish(one_line(label), shards, unsafe, missing)
    cfg, cfg_note, raw_cfg = _config(store, kind, config, cfg_future)

    readable = [s for s in shards if s.header is not None]
    unique = names_unique(readable)
    merged = None if unique else first_occurrences(readable)
    all_names = list(merged) if merged is not None else list(chain.from_iterable(s.header.names for s in readable))
    dialect = detect(shards, all_names, raw_cfg, cfg.quantisation.kind if cfg and cfg.quantisation else None)
    n_layers, n_stages, sites = find_sites(readable, merged, dialect.dialect, cfg, label)
    ckpt = Checkpoint(Path(label), Path(store.label), kind, index, shards, cfg, cfg_note, unsafe, missing, store,
                      label, partial, unique, dialect, n_layers, n_stages, tuple(sites), merged, raw_cfg)
    if cfg is None or fits(ckpt):
        return ckpt
    return _held_to_config(ckpt, named=config is not None)


def _held_to_config(ckpt: Checkpoint, named: bool) -> Checkpoint:
    """The checkpoint, told whether its config describes another model (damage.config_clash). A
    config the user named is used as given, and so is one that only names layers or stages the
    checkpoint lacks; a config.json found beside the checkpoint that contradicts its headers is
    set aside, as one that cannot be read is, and the layers are numbered by the checkpoint's own."""
    from dataclasses import replace

    from hccli.checkpoint.verify import damage
    from hccli.checkpoint.verify.causes import mismatch_of, words_of

    diffs = damage.config_clash(ckpt)
    if not diffs:
        return ckpt
    words = words_of(diffs)
    if named or not damage.contradicts(diffs):
        return replace(ckpt, config_clash=mismatch_of(ckpt, words))
    note, clash = damage.set_aside(ckpt.config, words)
    n_layers, n_stages, sites = find_sites(ckpt.readable(), ckpt.merged, ckpt.dialect.dialect, None, ckpt.label)
    return replace(ckpt, config=None, config_note=note, n_layers=n_layers, n_stages=n_stages, hc_sites=tuple(sites),
                   config_clash=clash)


def _config(store: Store, kind: str, config: str | Path | None, beside: Any
            ) -> tuple[ModelConfig | None, ConfigUnusable | None, dict | None]:
    """(the config, the note that sets config.json beside the checkpoint aside, the JSON the config
    was read from): config.read_checkpoint_config's one reading. A config named by the caller that
    cannot be used is an error."""
    if config is not None:
        cfg, data = load_config_data(config)
        return cfg, None, data if isinstance(data, dict) else None

    def read() -> bytes | None:
        if kind != "file":
            return beside.result() if beside is not None else None
        return store.read_small("config.json", MAX_CONFIG_BYTES, "a model config.json") \
            if store.exists("config.json") else None

    return read_checkpoint_config(read, store.display("config.json"))


def _safe_name(name: str) -> bool:
    p = PurePosixPath(name.replace("\\", "/"))
    return bool(name) and not p.is_absolute() and ".." not in p.parts and not (len(name) > 1 and name[1] == ":")


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
        raise HcError(f"{where}: the index names {plural(len(missing) + len(unsafe), 'shard file')} and none "
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
    done, lock = 0, threading.Lock()

    def counted(item: tuple[str, bool]) -> Shard:
        nonlocal done
        shard = _read_one(store, *item)
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

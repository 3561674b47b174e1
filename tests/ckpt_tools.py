"""Helpers that build and damage checkpoints in tmp_path (no downloads)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from hccli.checkpoint.safetensors.header import read_header
from hccli.checkpoint.source import LocalFile
from hccli.checkpoint.synth import INDEX_NAME, header_bytes, make_checkpoint

from conftest import SAMPLES


def tiny(dst: Path, config: str = "tiny-v4.1.json", **kw) -> Path:
    make_checkpoint(SAMPLES / config, dst, **kw)
    return dst


def copy(src: Path, dst: Path) -> Path:
    """A copy of a checkpoint directory that keeps a phantom's holes: only the data regions are
    written, so copying a 500 GB phantom costs its few MB."""
    shutil.copytree(src, dst, copy_function=_sparse_copy)
    return dst


def _sparse_copy(src: str, dst: str) -> None:
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        size = os.fstat(fi.fileno()).st_size
        at = 0
        while at < size:
            try:
                at = os.lseek(fi.fileno(), at, os.SEEK_DATA)
            except OSError:  # ENXIO: nothing but a hole from here to the end
                break
            end = os.lseek(fi.fileno(), at, os.SEEK_HOLE)
            fi.seek(at)
            fo.seek(at)
            while at < end:
                chunk = fi.read(min(end - at, 1 << 20))
                fo.write(chunk)
                at += len(chunk)
        fo.truncate(size)
    shutil.copystat(src, dst)


def shard_of(ckpt: Path, tensor: str) -> Path:
    index = json.loads((ckpt / INDEX_NAME).read_text())
    return ckpt / index["weight_map"][tensor]


def read_entries(path: Path) -> list[tuple[str, str, tuple[int, ...], bytes]]:
    with LocalFile(path) as src:
        h = read_header(src)
        return [(t.name, t.dtype, t.shape, src.read(t.abs_begin, t.nbytes)) for t in h.tensors]


def write_shard(path: Path, entries: list[tuple[str, str, tuple[int, ...], bytes]]) -> None:
    head = header_bytes([(n, d, s, len(b)) for n, d, s, b in entries], {"format": "pt"})
    path.write_bytes(head + b"".join(b for *_, b in entries))


def rewrite(path: Path, drop=(), replace=None, add=()) -> None:
    """Rewrite a shard: drop tensors, replace some (name -> (dtype, shape, bytes)), append others."""
    replace = replace or {}
    entries = []
    for n, d, s, b in read_entries(path):
        if n in drop:
            continue
        if n in replace:
            d, s, b = replace[n]
        entries.append((n, d, s, b))
    entries += list(add)
    write_shard(path, entries)


def edit_index(ckpt: Path, fn) -> None:
    p = ckpt / INDEX_NAME
    doc = json.loads(p.read_text())
    fn(doc)
    p.write_text(json.dumps(doc))


def snapshot(root: Path) -> dict[str, tuple[int, float, str]]:
    out = {}
    for f in sorted(root.rglob("*")):
        if f.is_file():
            st = f.stat()
            out[str(f.relative_to(root))] = (st.st_size, st.st_mtime_ns, hashlib.sha256(f.read_bytes()).hexdigest())
        else:
            out[str(f.relative_to(root))] = (0, 0, "dir")
    return out


def tree_by_name(entries):
    """The collapsed tree of (name, dtype, shape) entries taken one name at a time: the reference
    for the tree by blocks (inspect_tree.build_tree_columns)."""
    from hccli.inspecting.tree import _Acc

    acc = _Acc()
    for name, dtype, shape in entries:
        acc.add(name, dtype, shape)
    return acc.nodes()

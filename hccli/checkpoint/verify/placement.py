"""`--verify` with the config of a published release: is each tensor in the shard
the release put it in, and is each shard the size of the published file?

A re-sharded mirror is a legal checkpoint, so this is information (severity
"info", no effect on the exit code), but a user comparing files, sizes or
download manifests with the release should know.
"""

from __future__ import annotations

import json
from collections import Counter
from itertools import accumulate, chain, groupby, repeat
from math import prod
from operator import attrgetter, gt, lt, mul
from pathlib import PurePosixPath

from hccli.base.words import plural
from hccli.checkpoint.verify import agree
from hccli.checkpoint.verify.findings import Finding, finding
from hccli.checkpoint.safetensors.header_types import ColumnHeader
from hccli.checkpoint.shardset import Checkpoint
from hccli.base.errors import HcError
from hccli.checkpoint.safetensors.layout import DTYPE_RANK

CODE = "shard_placement"
_NAME, _DTYPE, _SHAPE = attrgetter("name"), attrgetter("dtype"), attrgetter("shape")


def _base(file: str) -> str:
    return PurePosixPath(file.replace("\\", "/")).name


# What one entry adds to the compact JSON besides its name, dtype, shape and offsets:
# "name":{"dtype":"F32","shape":[4],"data_offsets":[0,16]} less "name", F32, [4] and [0,16].
_PER_ENTRY = len(':{"dtype":"","shape":,"data_offsets":}')
_COMPACT = {"separators": (",", ":"), "ensure_ascii": False}


def _items(values: list) -> int:
    """The JSON length of a list's items alone: json.dumps gives "[" + items joined by "," + "]"."""
    return len(json.dumps(values, **_COMPACT).encode("utf-8")) - 1 - len(values)


def _header_size(plan, sizes: list[int]) -> int:
    """len(synth.shard_header(plan)), padding and length field included, from C-encoded columns
    instead of a dict per tensor: each distinct shape encoded once, an offset pair [b,e] counted as
    its digits and 3 characters."""
    tensors = plan.tensors
    body = 2  # {}
    if tensors:
        ends = list(accumulate(sizes))
        n = len(tensors)
        shapes = sum(len(json.dumps(list(shape), **_COMPACT)) * k for shape, k in Counter(map(_SHAPE, tensors)).items())
        offsets = _items([0, *ends[:-1]]) + _items(ends) + 3 * n
        body += (n - 1) + n * _PER_ENTRY + _items(list(map(_NAME, tensors))) + sum(map(len, map(_DTYPE, tensors))) \
            + shapes + offsets
    return 8 + body + (-body % 8)


def _moved(ckpt: Checkpoint, plans: list, have: dict) -> dict[str, str]:
    """name -> published file, of the tensors the checkpoint holds in another shard than the
    release. Per shard when names are unique and file names distinct: a published file's
    planned names that its namesake shard holds (one C-level superset test) are in place."""
    readable = ckpt.readable()
    actual = {_base(s.file): s for s in readable}
    if not ckpt.unique or len(actual) != len(readable):
        return _moved_each(ckpt, plans, have)
    out: dict[str, str] = {}
    for plan in plans:
        names = list(map(_NAME, plan.tensors))
        shard = actual.get(plan.file)
        held = set(shard.header.names) if shard is not None else set()
        if not held.issuperset(names):
            out.update((n, plan.file) for n in names if n not in held and n in have)
    return out


def _moved_each(ckpt: Checkpoint, plans: list, have: dict) -> dict[str, str]:
    """The same, tensor by tensor, by each name's first occurrence."""
    base = {s.file: _base(s.file) for s in ckpt.shards}  # a PurePosixPath per shard, not per tensor
    out: dict[str, str] = {}
    for plan in plans:
        for t in plan.tensors:
            found = have.get(t.name)
            if found is not None and base[found[0].file] != plan.file:
                out[t.name] = plan.file
    return out


def _published_as_is(ckpt: Checkpoint, inv, at: list[int] | None) -> bool:
    """Whether there is nothing to report, shown by whole columns for a checkpoint that agrees with
    the inventory (`at`, agree.positions): every tensor in the shard the release put it in, and every
    shard's header the published one, which then holds this shard's own entries, in its order,
    at its offsets: the entries in the serializer's order, back to back, and the header text
    already in compact form (so its length is the published header's). False: look closer (the
    per-tensor path below, which finds and words what differs)."""
    release = inv.release
    shards = ckpt.shards
    if at is None or len(shards) != release.shards or not agree.all_readable(ckpt) \
            or not ckpt.store.bulk_reads_cheap:
        return False
    files = [_base(s.file) for s in shards]
    ordinal = {f: j for j, f in enumerate(files)}
    if len(ordinal) != len(files):
        return False
    want = {k: ordinal.get(inv.layout.file(k)) for k in set(inv.columns.shard)}
    held = list(chain.from_iterable(repeat(j, len(s.header.columns.names)) for j, s in enumerate(shards)))
    if list(map(held.__getitem__, at)) != list(map(want.__getitem__, inv.columns.shard)):
        return False  # a tensor in another shard (or a planned file not here)
    return all(_as_published(ckpt, s) for s in shards)


def _as_published(ckpt: Checkpoint, shard) -> bool:
    """Whether a shard's header is what safetensors writes for its entries (see _published_as_is)."""
    h = shard.header
    c = h.columns
    if not c.names or h.metadata is not None or not isinstance(h, ColumnHeader):
        return False  # the fast parser's checks (no extra field, no float) are what the text test needs
    runs = [(dtype, len(list(run))) for dtype, run in groupby(c.dtypes)]
    ranks = [DTYPE_RANK.get(dtype, -1) for dtype, _ in runs]
    if -1 in ranks or not all(map(gt, ranks, ranks[1:])):
        return False  # dtypes descending, each in one run
    start = 0
    for _, n in runs:
        names = c.names[start:start + n]
        if not all(map(lt, names, names[1:])):  # str order is UTF-8 byte order
            return False
        start += n
    try:  # (a ColumnHeader's entries tile the data from 0 in their order: no gap to look for)
        with ckpt.source(shard) as src:
            text = src.read(8, h.header_len)
    except HcError:
        return False
    body = text.rstrip(b" \t\n\r")
    if any(b in body for b in (b" ", b"\t", b"\n", b"\r", b"\\", b"__metadata__")):
        return False  # whitespace between tokens, escapes, or a __metadata__ (null too): not that text
    return h.header_len == len(body) + (-len(body) % 8)


def placement_findings(ckpt: Checkpoint, inv, at: list[int] | None) -> list[Finding]:
    """inv: the config's inventory; at: where its tensors are among the shards' entries, when the
    shards agree with it (agree.positions), else None."""
    from hccli.model.inventory_types import DTYPE_BYTES

    release = inv.release
    if release is None or _published_as_is(ckpt, inv, at):
        return []
    from hccli.checkpoint.synth import plan_shards  # (numpy with it)

    have = ckpt.tensors()
    plans = plan_shards(inv)
    published = _moved(ckpt, plans, have)  # of the moved tensors only: no second table of ~100k names
    moved = [n for n in have if n in published] if published else []  # in the checkpoint's order
    out: list[Finding] = []
    if moved or len(ckpt.shards) != release.shards:
        n = moved[0] if moved else None
        example = f", e.g. '{n}' in {have[n][0].file}, published in {published[n]}" if n else ""
        out.append(finding(CODE,
            f"{ckpt.label}: the shards differ from the published {release.name} layout "
            f"({plural(len(ckpt.shards), 'shard')}, published {release.shards}; {plural(len(moved), 'tensor')} in another shard"
            f"{example}); a re-sharded copy is legal, but its files are not the release's"))
    by_file = {_base(s.file): s for s in ckpt.readable()}
    for plan in plans:
        shard = by_file.get(plan.file)
        if shard is None or shard.header is None:
            continue
        ts = plan.tensors  # each t.nbytes, by C-level maps
        sizes = list(map(mul, map(prod, map(_SHAPE, ts)), map(DTYPE_BYTES.__getitem__, map(_DTYPE, ts))))
        expected = _header_size(plan, sizes) + sum(sizes)
        actual = shard.header.file_size
        if actual != expected:
            out.append(finding(CODE, f"{shard.file} is {actual:,} bytes; the published {release.name} file is "
                                f"{expected:,} bytes ({actual - expected:+,})"))
    return out

"""`--verify` with the config of a published release: is each tensor in the shard
the release put it in, and is each shard the size of the published file?

A re-sharded mirror is a legal checkpoint, so this is information (severity
"info", no effect on the exit code), but a user comparing files, sizes or
download manifests with the release should know.
"""

from __future__ import annotations

import json
from collections import Counter
from itertools import accumulate
from math import prod
from operator import attrgetter
from pathlib import PurePosixPath

from hccli.checkpoint.shardset import Checkpoint
from hccli.checkpoint.source import one_line
from hccli.checkpoint.verify import CODES, Finding
from hccli.inventory import DTYPE_BYTES

CODE = "shard_placement"


def _finding(message: str) -> Finding:
    return Finding(CODE, CODES[CODE][0], one_line(message, 400))


def _base(file: str) -> str:
    return PurePosixPath(file.replace("\\", "/")).name


# What one entry adds to the compact JSON besides its name, dtype, shape and offsets:
# "name":{"dtype":"F32","shape":[4],"data_offsets":[0,16]} less "name", F32, [4] and [0,16].
_PER_ENTRY = len(':{"dtype":"","shape":,"data_offsets":}')
_COMPACT = {"separators": (",", ":"), "ensure_ascii": False}


def _kinds(tensors) -> tuple[list[int], Counter]:
    """Each tensor's byte size, and how many tensors there are of each (shape, dtype): a
    release's shard holds thousands of tensors of a few dozen kinds."""
    keys = list(zip(map(attrgetter("shape"), tensors), map(attrgetter("dtype"), tensors)))
    kinds = Counter(keys)
    nbytes = {k: prod(k[0]) * DTYPE_BYTES[k[1]] for k in kinds}
    return list(map(nbytes.__getitem__, keys)), kinds


def _header_size(plan, sizes: list[int], kinds: Counter | None = None) -> int:
    """len(synth.shard_header(plan)), padding and length field included, by adding up the
    lengths of its parts instead of encoding a dict per tensor (~10x faster on a 2,000-tensor
    shard; verify does this for every shard of a release)."""
    tensors = plan.tensors
    body = 2  # {}
    if tensors:
        n = len(tensors)
        names = [t.name for t in tensors]
        joined = "".join(names)
        # nothing JSON escapes (quote, backslash, control characters): each name is its UTF-8
        # bytes in quotes; isprintable also refuses some harmless characters, which take the slow way
        if joined.isprintable() and '"' not in joined and "\\" not in joined:
            name_len = len(joined.encode("utf-8")) + 2 * n
        else:
            name_len = len(json.dumps(names, **_COMPACT).encode("utf-8")) - 1 - n
        if kinds is None:
            kinds = _kinds(tensors)[1]
        kind_len = sum((len(json.dumps(list(shape), **_COMPACT)) + len(dtype)) * k
                       for (shape, dtype), k in kinds.items())
        # [start,end] per tensor: each start is the end before it, so each end's digits count
        # twice but the last's, and the first start is "0"
        ends = list(accumulate(sizes))
        digits = len(json.dumps(ends)) - 2 - 2 * (n - 1)  # json.dumps(list of ints) puts ", " between
        offsets_len = n * 3 + 1 + 2 * digits - len(str(ends[-1]))
        body += (n - 1) + n * _PER_ENTRY + name_len + kind_len + offsets_len
    return 8 + body + (-body % 8)


def placement_findings(ckpt: Checkpoint) -> list[Finding]:
    if ckpt.config is None:
        return []
    from hccli.inventory import build_inventory
    from hccli.synth import plan_shards

    inv = build_inventory(ckpt.config)
    release = inv.release
    if release is None:
        return []
    have = ckpt.tensors()
    base = {s.file: _base(s.file) for s in ckpt.shards}  # a PurePosixPath per shard, not per tensor
    shard_nos = list(map(attrgetter("shard"), inv.tensors))
    files = {k: inv.layout.file(k) for k in set(shard_nos)}  # a published file name per shard, not per tensor
    published = dict(zip(map(attrgetter("name"), inv.tensors), map(files.__getitem__, shard_nos)))
    moved = [n for n, (shard, _) in have.items()  # in the checkpoint's order
             if (p := published.get(n)) is not None and p != base[shard.file]]
    out: list[Finding] = []
    if moved or len(ckpt.shards) != release.shards:
        n = moved[0] if moved else None
        example = f", e.g. '{n}' in {have[n][0].file}, published in {published[n]}" if n else ""
        out.append(_finding(
            f"{ckpt.label}: the shards differ from the published {release.name} layout "
            f"({len(ckpt.shards)} shards, published {release.shards}; {len(moved):,} tensors in another shard"
            f"{example}); a re-sharded copy is legal, but its files are not the release's"))
    by_file = {_base(s.file): s for s in ckpt.readable()}
    for plan in plan_shards(inv):
        shard = by_file.get(plan.file)
        if shard is None or shard.header is None:
            continue
        sizes, kinds = _kinds(plan.tensors)
        expected = _header_size(plan, sizes, kinds) + sum(sizes)
        actual = shard.header.file_size
        if actual != expected:
            out.append(_finding(f"{shard.file} is {actual:,} bytes; the published {release.name} file is "
                                f"{expected:,} bytes ({actual - expected:+,})"))
    return out

"""`--verify` with the config of a published release: is each tensor in the shard
the release put it in, and is each shard the size of the published file?

A re-sharded mirror is a legal checkpoint, so this is information (severity
"info", no effect on the exit code), but a user comparing files, sizes or
download manifests with the release should know.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from pathlib import PurePosixPath

from hccli.checkpoint.shardset import Checkpoint
from hccli.checkpoint.source import one_line
from hccli.checkpoint.verify import CODES, Finding

CODE = "shard_placement"


def _finding(message: str) -> Finding:
    return Finding(CODE, CODES[CODE][0], one_line(message, 400))


def _base(file: str) -> str:
    return PurePosixPath(file.replace("\\", "/")).name


# What one entry adds to the compact JSON besides its name, dtype, shape and offsets:
# "name":{"dtype":"F32","shape":[4],"data_offsets":[0,16]} less "name", F32, [4] and [0,16].
_PER_ENTRY = len(':{"dtype":"","shape":,"data_offsets":}')
_COMPACT = {"separators": (",", ":"), "ensure_ascii": False}
_PLAIN_NAME = re.compile(r'[^"\\\x00-\x1f]*')


def _header_size(plan, sizes: list[int]) -> int:
    """len(synth.shard_header(plan)), padding and length field included, by adding up the
    lengths of its parts instead of encoding a dict per tensor (~10x faster on a 2,000-tensor
    shard; verify does this for every shard of a release)."""
    tensors = plan.tensors
    body = 2  # {}
    if tensors:
        n = len(tensors)
        names = [t.name for t in tensors]
        joined = "".join(names)
        if _PLAIN_NAME.fullmatch(joined):  # nothing JSON escapes: each name is its UTF-8 bytes in quotes
            name_len = len(joined.encode("utf-8")) + 2 * n
        else:
            name_len = len(json.dumps(names, **_COMPACT).encode("utf-8")) - 1 - n
        shape_len = 0
        seen: dict[tuple[int, ...], int] = {}  # a release has a few dozen distinct shapes
        for t in tensors:
            k = seen.get(t.shape)
            if k is None:
                k = seen[t.shape] = len(json.dumps(list(t.shape), **_COMPACT))
            shape_len += k
        # [start,end] per tensor: each start is the end before it, so each end's digits count
        # twice but the last's, and the first start is "0"
        ends = list(accumulate(sizes))
        digits = len(json.dumps(ends)) - 2 - 2 * (n - 1)  # json.dumps(list of ints) puts ", " between
        offsets_len = n * 3 + 1 + 2 * digits - len(str(ends[-1]))
        body += (n - 1) + n * _PER_ENTRY + name_len + sum(len(t.dtype) for t in tensors) + shape_len + offsets_len
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
    files: dict[int, str] = {}  # a published file name per shard, not per tensor
    published: dict[str, str] = {}  # of the moved tensors only: no second table of ~100k names
    for t in inv.tensors:
        found = have.get(t.name)
        if found is not None:
            file = files.get(t.shard) or files.setdefault(t.shard, inv.shard_file(t))
            if base[found[0].file] != file:
                published[t.name] = file
    moved = [n for n in have if n in published] if published else []  # in the checkpoint's order
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
        sizes = [t.nbytes for t in plan.tensors]
        expected = _header_size(plan, sizes) + sum(sizes)
        actual = shard.header.file_size
        if actual != expected:
            out.append(_finding(f"{shard.file} is {actual:,} bytes; the published {release.name} file is "
                                f"{expected:,} bytes ({actual - expected:+,})"))
    return out

"""`--verify`'s short answers for the usual checkpoint: one that agrees with its index and with
its config's inventory. Each test answers only "nothing to report here" (True) or "look closer"
(False); on False, verify.py's per-name comparisons find and word every finding, so the findings
are always theirs. The tests are a few C-level passes over whole columns (~100k names for
V4.1-Flash) instead of a merged table with a record per tensor.
"""

from __future__ import annotations

from itertools import chain, repeat
from operator import eq
from typing import Any

from hccli.checkpoint.shardset import Checkpoint


def all_readable(ckpt: Checkpoint) -> bool:
    return not ckpt.unsafe and not ckpt.missing and all(s.header is not None for s in ckpt.shards)


def index_agrees(ckpt: Checkpoint, wm: dict[str, str]) -> bool:
    """Whether the index names exactly the shards' tensors, each in the shard that holds it: then
    there is no index_missing_tensor, unindexed_tensor, wrong_shard or duplicate_tensor to report.
    Every shard readable and no name in two shards; then the index's names are the shards' names
    when each shard's names map to that shard and the counts are equal."""
    if not all_readable(ckpt) or not ckpt.unique:
        return False
    if len(wm) != sum(len(s.header.names) for s in ckpt.shards):
        return False
    return each_shard_named(ckpt, wm)


def each_shard_named(ckpt: Checkpoint, wm: dict[str, str]) -> bool:
    """Whether the index names each readable shard for every tensor it holds, by one C-level
    comparison per shard (then no tensor is in the wrong shard)."""
    # eq: a name the index lacks maps to None, which equals no file name
    return all(all(map(eq, repeat(s.file), map(wm.get, s.header.names))) for s in ckpt.readable())


def inventory_agrees(ckpt: Checkpoint, inv: Any) -> bool:
    """Whether the shards hold exactly the tensors the inventory's columns (`inv`, in the release's
    own names) list, with its shapes and dtypes, and nothing else: then there is no missing_tensor,
    unexpected_tensor, wrong_shape or wrong_dtype to report. Names must be unique across shards."""
    return positions(ckpt, inv) is not None


def positions(ckpt: Checkpoint, inv: Any) -> list[int] | None:
    """Where each tensor of the inventory's columns `inv` is among the shards' entries (their
    columns end to end) when the shards agree with it (inventory_agrees), else None. Worked out
    once by verify, which hands it to the placement check."""
    if not ckpt.unique:
        return None
    columns = [s.header.columns for s in ckpt.readable()]
    names = list(chain.from_iterable(c.names for c in columns))
    if len(names) != len(inv.name):
        return None
    where = dict(zip(names, range(len(names))))
    at = list(map(where.get, inv.name))
    if None in at:
        return None
    # both parsers keep a shape as a tuple, as the inventory does
    shapes = list(chain.from_iterable(c.shapes for c in columns))
    if list(map(shapes.__getitem__, at)) != inv.shape:
        return None
    dtypes = list(chain.from_iterable(c.dtypes for c in columns))
    return at if list(map(dtypes.__getitem__, at)) == inv.dtype else None

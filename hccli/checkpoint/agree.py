"""`--verify`'s short answers for the usual checkpoint: one that agrees with its index and with
its config's inventory. Each test answers only "nothing to report here" (True) or "look closer"
(False); on False, verify.py's per-name comparisons find and word every finding, so the findings
are always theirs. The tests are a few C-level passes over whole columns (~100k names for
V4.1-Flash) instead of a merged table with a record per tensor.
"""

from __future__ import annotations

from itertools import chain, repeat
from operator import attrgetter, eq
from typing import Any

from hccli.checkpoint.shardset import Checkpoint

_NAME, _SHAPE, _DTYPE = attrgetter("name"), attrgetter("shape"), attrgetter("dtype")


def all_readable(ckpt: Checkpoint) -> bool:
    return not ckpt.unsafe and not ckpt.missing and all(s.header is not None for s in ckpt.shards)


def index_agrees(ckpt: Checkpoint, wm: dict[str, str]) -> bool:
    """Whether the index names exactly the shards' tensors, each in the shard that holds it: then
    there is no index_missing_tensor, unindexed_tensor, wrong_shard or duplicate_tensor to report.
    Every shard readable and no name in two shards; then the index's names are the shards' names
    when each shard's names map to that shard and the counts are equal."""
    if not all_readable(ckpt) or not ckpt.names_unique():
        return False
    shards = ckpt.shards
    if len(wm) != sum(len(s.header.names) for s in shards):
        return False
    # eq: a name the index lacks maps to None, which equals no file name
    return all(all(map(eq, repeat(s.file), map(wm.get, s.header.names))) for s in shards)


def inventory_agrees(ckpt: Checkpoint, specs: Any) -> bool:
    """Whether the shards hold exactly the tensors `specs` (the inventory in the release's own
    names) lists, with its shapes and dtypes, and nothing else: then there is no missing_tensor,
    unexpected_tensor, wrong_shape or wrong_dtype to report. Names must be unique across shards."""
    return positions(ckpt, specs) is not None


def positions(ckpt: Checkpoint, specs: Any) -> list[int] | None:
    """Where each of `specs` is among the shards' entries (their columns end to end) when the
    shards agree with them (inventory_agrees), else None. Kept on the checkpoint for the next
    check that asks about the same specs (verify, then placement)."""
    memo = ckpt.memo.get("positions")
    if memo is not None and memo[0] is specs:
        return memo[1]
    at = _positions(ckpt, specs)
    ckpt.memo["positions"] = (specs, at)
    return at


def _positions(ckpt: Checkpoint, specs: Any) -> list[int] | None:
    if not ckpt.names_unique():
        return None
    columns = [s.header.columns for s in ckpt.readable()]
    names = list(chain.from_iterable(c.names for c in columns))
    if len(names) != len(specs):
        return None
    where = dict(zip(names, range(len(names))))
    at = list(map(where.get, map(_NAME, specs)))
    if None in at:
        return None
    shapes = list(chain.from_iterable(c.shapes for c in columns))
    dtypes = list(chain.from_iterable(c.dtypes for c in columns))
    # tuple(): a careful-path header's shape is a tuple too, but say what is compared
    if (list(map(tuple, map(shapes.__getitem__, at))) == list(map(_SHAPE, specs))
            and list(map(dtypes.__getitem__, at)) == list(map(_DTYPE, specs))):
        return at
    return None

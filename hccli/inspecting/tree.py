"""Totals and the collapsed tree of `hc inspect`, from headers alone (no values read)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from bisect import bisect_left
from itertools import compress
from typing import Iterable
from operator import attrgetter, ge, itemgetter, ne

from hccli.checkpoint.safetensors.header_types import DTYPES, Columns
from hccli.model.packing import FP4_PER_BYTE, fp4_scale_shape

_INFO = itemgetter(1)
_DTYPE, _SHAPE, _BEGIN, _END = attrgetter("dtype"), attrgetter("shape"), attrgetter("begin"), attrgetter("end")


def merged_columns(tensors: dict) -> Columns:
    """The merged table (name -> (shard, entry)) as one set of columns, for the same totals and
    tree as headers give when names repeat across shards (first occurrence wins)."""
    infos = list(map(_INFO, tensors.values()))
    return Columns(list(tensors), list(map(_DTYPE, infos)), list(map(_SHAPE, infos)), list(map(_BEGIN, infos)),
                   list(map(_END, infos)))


def totals_from_columns(columns: Iterable[Columns]) -> tuple[int, dict[str, tuple[int, int]], int]:
    """(tensors, {dtype: (tensors, bytes)} by dtype name, logical parameters) of entries in sets
    of columns that share no tensor name (each header's, or the merged table's), in C-level passes
    over runs of one dtype (writers group a shard's tensors by dtype: a 2,000-tensor shard is a
    handful of runs).

    Logical parameters come from headers alone: a dtype's elements are its bytes x 8 / bits
    (a validated entry's bytes are exactly that); a GGML block type holds one parameter per
    element; the rest is model/packing.py's release_params, over runs instead of tensor by tensor:
    F8_E8M0 scales count 0, an I8 weight whose sibling F8_E8M0 scale has `fp4_scale_shape` is
    packed fp4, FP4_PER_BYTE parameters a byte."""
    per: dict[str, list[int]] = {}
    n = 0
    runs: dict[str, tuple[list[str], list[tuple[int, ...]]]] = {"I8": ([], []), "F8_E8M0": ([], [])}
    all_runs: dict[str, tuple[list[str], list[tuple[int, ...]]]] = {"I8": ([], []), "F8_E8M0": ([], [])}
    shard_fp4: int | None = 0  # None once a shard's weights do not pair up with its own scales
    elements = 0  # of dtypes no DTYPES width converts (GGML block types)
    for names, dtypes, shapes, begins, ends in columns:
        k = len(dtypes)
        n += k
        cuts = [0, *compress(range(1, k), map(ne, dtypes[1:], dtypes[:-1])), k] if k else []
        for a, b in zip(cuts, cuts[1:]):
            d = dtypes[a]
            acc = per.get(d)
            if acc is None:
                acc = per[d] = [0, 0]
            acc[0] += b - a
            acc[1] += sum(ends[a:b]) - sum(begins[a:b])
            if d not in DTYPES:
                elements += sum(map(math.prod, shapes[a:b]))
            elif d in runs:
                runs[d][0].extend(names[a:b])
                runs[d][1].extend(shapes[a:b])
        if runs["I8"][0] and shard_fp4 is not None:
            here = _fp4_in_shard(*runs["I8"], *runs["F8_E8M0"])
            shard_fp4 = None if here is None else shard_fp4 + here
        for d in runs:
            all_runs[d][0].extend(runs[d][0])
            all_runs[d][1].extend(runs[d][1])
            runs[d] = ([], [])
    logical = elements + sum(v[1] * 8 // DTYPES[d] for d, v in per.items() if d != "F8_E8M0" and d in DTYPES)
    logical += shard_fp4 if shard_fp4 is not None else _fp4_elements(*all_runs["I8"], *all_runs["F8_E8M0"])
    return n, {d: (v[0], v[1]) for d, v in sorted(per.items())}, logical


def _fp4_in_shard(weights: list[str], weight_shapes: list, scales: list[str], scale_shapes: list) -> int | None:
    """`_fp4_elements` of one shard as releases write it, or None when it is not so written: the I8
    weights in name order and the F8_E8M0 scales of the weights' `fp4_scale_shape`s in name order
    (the shard's other scales, an F8_E4M3 weight's, set aside) are the same names (".weight" for
    ".scale"), compared as two joined strings, and each weight's scale has its weight's
    `fp4_scale_shape`, compared as two lists; no per-tensor string or lookup is made. A weight
    whose scale is elsewhere, or any other layout (another order among them): None."""
    sep = "\0"
    want = {shape: fp4_scale_shape(shape) for shape in set(weight_shapes)}
    if None in want.values():
        return None
    kept = list(map(set(want.values()).__contains__, scale_shapes))
    theirs = list(compress(scales, kept))
    joined = sep.join(weights) + sep
    if not (len(theirs) == len(weights) and joined.count(sep) == len(weights)
            and joined.count(".weight" + sep) == len(weights)
            and joined.replace(".weight" + sep, ".scale" + sep) == sep.join(theirs) + sep
            and list(map(want.__getitem__, weight_shapes)) == list(compress(scale_shapes, kept))):
        return None
    return sum((FP4_PER_BYTE - 1) * shape[0] * shape[1] * weight_shapes.count(shape) for shape in want)


def _fp4_elements(weights: list[str], weight_shapes: list, scales: list[str], scale_shapes: list) -> int:
    """What packed fp4 weights add to their elements (see totals_from_columns): I8 `X.weight`
    whose F8_E8M0 `X.scale` has its `fp4_scale_shape`, counted FP4_PER_BYTE - 1 times more."""
    if not weights or not scales:
        return 0
    # The sibling names are made for all weights at once by one replace over the joined names
    # (no name holds the separator; each ends in ".weight" exactly once), looked up by a C-level
    # map, and only the distinct (weight shape, scale shape) pairs are judged.
    sep = "\0"
    joined = sep.join(weights) + sep
    if joined.count(sep) == len(weights) and joined.count(".weight" + sep) == len(weights):
        siblings = joined.replace(".weight" + sep, ".scale" + sep).split(sep)[:-1]
        sibling_shapes = list(map(dict(zip(scales, scale_shapes)).get, siblings))
        # counted by identity (a header holds one tuple per distinct shape): no tuple hashed per tensor
        pairs = Counter(zip(map(id, weight_shapes), map(id, sibling_shapes)))
        shape_of = dict(zip(map(id, weight_shapes), weight_shapes))
        shape_of.update(zip(map(id, sibling_shapes), sibling_shapes))
        return sum(_fp4_size(shape_of[ws], shape_of[ss]) * k for (ws, ss), k in pairs.items())
    scale_shape = dict(zip(scales, scale_shapes))
    get = scale_shape.get
    return sum(_fp4_size(ws, get(name[:-7] + ".scale"))
               for name, ws in zip(weights, weight_shapes) if name.endswith(".weight"))


def _fp4_size(weight: tuple[int, ...], scale: tuple[int, ...] | None) -> int:
    if scale is None or scale != fp4_scale_shape(weight):
        return 0
    return (FP4_PER_BYTE - 1) * weight[0] * weight[1]


@dataclass
class TreeNode:
    label: str
    count: int
    detail: str = ""
    children: list["TreeNode"] = field(default_factory=list)


def _number(part: str) -> bool:
    """A member or inner number as canonical names write it (vocab.NUMBER): ASCII digits only
    (str.isdigit() also takes '²' and '٣', which are names here, and int() refuses the first), no
    leading zero (`layers.01` is a name of its own, not layer 1 folded into `layers.[0-5]`)."""
    return part.isdigit() and part.isascii() and (part[0] != "0" or part == "0")


def build_tree_columns(columns: Iterable[Columns]) -> list[TreeNode]:
    """Collapse repeated layers: `layers.[0-39] x40` with the tensors every member holds, and the
    exceptions (`in 2,8,14,20`); inner numbers (experts) collapse too. The entries of `columns`
    (no name in two of them) are taken by blocks: in a stretch of names in sorted order (a
    header's dtype runs, as safetensors writes them), the names of one member (layers.7.*) lie
    together and are found by bisection; a block whose rests, dtypes and shapes repeat an earlier
    block of the same root (the same layer kind) only adds its member and counts. The entries
    are met in their order, so the tree, its order included, is the tree of adding them one name
    at a time (_Acc.add)."""
    acc = _Acc()
    for c in columns:
        names, dtypes, shapes = c.names, c.dtypes, c.shapes
        breaks = list(compress(range(1, len(names)), map(ge, names, names[1:])))  # where order restarts
        for a, b in zip([0, *breaks], [*breaks, len(names)]):
            acc.stretch(names, dtypes, shapes, a, b)
    return acc.nodes()


def _member(name: str) -> tuple[str, str, int] | None:
    """(root, member number, length of `root.number.`) of a member's tensor name, else None. The
    root is everything before the name's first number that has a rest after it: `layers.3.`,
    `model.layers.3.`, `vision.blocks.3.`, `language_model.model.layers.3.` (every repeated
    numbered block collapses, whatever sits above it)."""
    key, _, tail = name.partition(".")
    num, dot, rest = tail.partition(".")
    if not dot:
        return None
    if _number(num):
        return key, num, len(key) + len(num) + 2
    # deeper roots: rarer, so split only here
    parts = rest.split(".")
    at = len(key) + len(num) + 2
    for i, part in enumerate(parts[:-1]):
        if _number(part):
            return name[:at - 1], part, at + len(part) + 1
        at += len(part) + 1
    return None


class _Acc:
    """What the tree gathers: roots in first-met order, each with its members and its rest
    templates (members, inner numbers, count, (dtype, shape) pairs) in first-met order."""

    def __init__(self) -> None:
        self.tops: dict[str, list] = {}  # key -> [members, templates, (dtype, shape) of the first]
        # A name's rest after the member number repeats in every member: its template once per rest.
        self.rests: dict[str, tuple[str, list[int]]] = {}
        self.blocks: dict[tuple, list] = {}  # (root, rests, dtypes, shapes) -> [(template entry, count)]

    def add(self, name: str, dtype: str, shape: tuple[int, ...]) -> None:
        m = _member(name)
        if m is None:
            self.tops.setdefault(name, [set(), {}, (dtype, shape)])
            return
        key, num, n = m
        top = self.tops.get(key)
        if top is None:
            top = self.tops[key] = [set(), {}, (dtype, shape)]
        member = int(num)
        top[0].add(member)
        entry = self._entry(top, name[n:])
        entry[0].add(member)
        entry[2] += 1
        entry[3].add((dtype, shape))

    def _entry(self, top: list, rest: str) -> list:
        known = self.rests.get(rest)
        if known is None:
            parts = rest.split(".")
            inner = [int(p) for p in parts if _number(p)]
            known = self.rests[rest] = (".".join(["#" if _number(p) else p for p in parts]) if inner else rest, inner)
        tpl, inner = known
        entry = top[1].get(tpl)
        if entry is None:
            entry = top[1][tpl] = [set(), set(), 0, set()]
        if inner:
            entry[1].update(inner)
        return entry

    def stretch(self, names: list[str], dtypes: list[str], shapes: list, a: int, b: int) -> None:
        """The entries a..b-1, their names in sorted order."""
        i = a
        while i < b:
            name = names[i]
            m = _member(name)
            if m is None:
                self.add(name, dtypes[i], shapes[i])
                i += 1
                continue
            key, num, n = m
            j = bisect_left(names, name[:n - 1] + "/", i + 1, b)  # past every name that starts `key.num.`
            self._block(key, int(num), [x[n:] for x in names[i:j]], dtypes[i:j], shapes[i:j])
            i = j

    def _block(self, key: str, member: int, rests: list[str], dtypes: list[str], shapes: list) -> None:
        top = self.tops.get(key)
        if top is None:
            top = self.tops[key] = [set(), {}, (dtypes[0], shapes[0])]
        top[0].add(member)
        pattern = (key, tuple(rests), tuple(dtypes), tuple(shapes))
        counts = self.blocks.get(pattern)
        if counts is None:
            met: dict[int, list] = {}
            for rest, dtype, shape in zip(rests, dtypes, shapes):
                entry = self._entry(top, rest)
                entry[3].add((dtype, shape))
                met.setdefault(id(entry), [entry, 0])[1] += 1
            counts = self.blocks[pattern] = list(met.values())
        for entry, k in counts:
            entry[0].add(member)
            entry[2] += k

    def nodes(self) -> list[TreeNode]:
        from hccli.model.layers import format_ranges  # (the layer plan's module: loaded for the tree only)

        nodes = []
        for key, (members, templates, (dtype, shape)) in self.tops.items():
            if not members:
                nodes.append(TreeNode(key, 1, f"{dtype} {list(shape)}"))
                continue
            node = TreeNode(f"{key}.[{format_ranges(sorted(members))}]", len(members), f"x{len(members)}")
            for tpl, (where_set, inner, count, sigs) in templates.items():
                label = tpl.replace("#", f"[{format_ranges(sorted(inner))}]", 1) if inner else tpl
                sig = "; ".join(f"{d} {list(s)}" for d, s in sorted(sigs)) if len(sigs) <= 2 else f"{len(sigs)} shapes"
                where = "" if where_set == members else f" in {format_ranges(sorted(where_set))}"
                node.children.append(TreeNode(label, count, f"{sig} x{count}{where}"))
            nodes.append(node)
        return nodes

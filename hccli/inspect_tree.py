"""Totals and the collapsed tree of `hc inspect`, from headers alone (no values read)."""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter

from hccli.checkpoint.header import DTYPES, TensorInfo
from hccli.layers import format_ranges

_BEGIN, _END = attrgetter("begin"), attrgetter("end")
_PREFIXES = ("model", "decoder")  # transformers' and Megatron's roots above the layers


def by_dtype(tensors: dict) -> dict[str, list[TensorInfo]]:
    """The tensors grouped by dtype, dtypes by name: the same order whatever the shard layout."""
    groups: dict[str, list[TensorInfo]] = {}
    for _, t in tensors.values():
        group = groups.get(t.dtype)
        if group is None:
            group = groups[t.dtype] = []
        group.append(t)
    return dict(sorted(groups.items()))


def stored_bytes(group: list[TensorInfo]) -> int:
    return sum(map(_END, group)) - sum(map(_BEGIN, group))  # the sum of nbytes, without a call per tensor


def logical_params(tensors: dict, groups: dict[str, list[TensorInfo]] | None = None) -> int:
    """Parameters from headers alone: an I8 weight whose sibling F8_E8M0 scale has one
    value per 32 inputs is packed fp4 (two parameters a byte); scales count 0.
    `groups` is by_dtype(tensors) when the caller has it already."""
    groups = by_dtype(tensors) if groups is None else groups
    # A validated entry's bytes are exactly its elements x bits / 8, so a dtype's elements are
    # its bytes x 8 / bits: no product of dims per tensor.
    total = sum(stored_bytes(g) * 8 // DTYPES[d] for d, g in groups.items() if d != "F8_E8M0" and d in DTYPES)
    # a GGML block type (Q8_0, Q4_K, ...) holds one parameter per element, whatever its bytes
    total += sum(t.n_elements for d, g in groups.items() if d not in DTYPES for t in g)
    get = tensors.get
    for t in groups.get("I8", ()):
        shape = t.shape
        if len(shape) == 2 and t.name.endswith(".weight"):
            sib = get(t.name[:-7] + ".scale")
            if sib is not None:
                # One scale per 32 fp4 values, two values a byte: [rows, cols] beside [rows, cols / 16].
                s = sib[1]
                if s.dtype == "F8_E8M0" and s.shape == (shape[0], shape[1] // 16) and shape[1] % 16 == 0:
                    total += shape[0] * shape[1]  # packed fp4: its elements count a second time
    return total


@dataclass
class TreeNode:
    label: str
    count: int
    detail: str = ""
    children: list["TreeNode"] = field(default_factory=list)


_DTYPE, _SHAPE, _SIG = attrgetter("dtype"), attrgetter("shape"), attrgetter("dtype", "shape")


def _number(part: str) -> bool:
    # ASCII digits only: str.isdigit() also accepts '²' and '٣', which int() refuses
    return part.isdigit() and part.isascii()


def _member_split(name: str) -> tuple[str, str, str] | None:
    """(root, member number, rest) of a member's tensor name, or None for a top-level tensor.

    The member number follows the root (layers.3, blk.3) or a prefixed root (model.layers.3)."""
    head, _, tail = name.partition(".")
    mem, dot, rest = tail.partition(".")
    if dot and _number(mem):
        return head, mem, rest
    if head in _PREFIXES:
        sub, _, tail = tail.partition(".")
        mem, dot, rest = tail.partition(".")
        if dot and _number(mem):
            return f"{head}.{sub}", mem, rest
    return None


def build_tree(tensors: dict) -> list[TreeNode]:
    """Collapse repeated layers: `layers.[0-39] x40` with the tensors every member
    holds, and the exceptions (`in 2,8,14,20`); inner numbers (experts) collapse too."""
    # One pass of cheap string work per name groups the names by (root, rest); the sets,
    # templates and signatures are then built once per group (~2k groups for ~96k names).
    groups: dict[tuple[str, str | None], list] = {}  # (root, rest) -> [member numbers, infos]
    member_split = _member_split
    for name, (_, t) in tensors.items():
        parts = name.split(".", 2)
        # _member_split's common case (root.N.rest), inline: one C call per name
        if not (len(parts) == 3 and parts[1].isdigit() and parts[1].isascii()):
            parts = member_split(name)
            if parts is None:
                groups.setdefault((name, None), [None, t])  # a top-level tensor
                continue
        head, mem, rest = parts
        group = groups.get((head, rest))
        if group is None:
            groups[(head, rest)] = [[mem], [t]]
        else:
            group[0].append(mem)
            group[1].append(t)
    tops: dict[str, list] = {}  # key -> [members, templates, first info]
    # A name's rest after the member number repeats in every member: its template once per rest.
    rests: dict[str, tuple[str, list[int]]] = {}
    member_sets: dict[str, set[int]] = {}  # most groups share their member list: one set for all
    for (key, rest), (mems, ts) in groups.items():
        if rest is None:
            tops.setdefault(key, [set(), {}, ts])
            continue
        top = tops.get(key)
        if top is None:
            top = tops[key] = [set(), {}, ts[0]]
        joined = " ".join(mems)
        members = member_sets.get(joined)
        if members is None:
            members = member_sets[joined] = set(map(int, mems))
        top[0] |= members
        known = rests.get(rest)
        if known is None:
            parts = rest.split(".")
            inner = [int(p) for p in parts if _number(p)]
            known = rests[rest] = (".".join(["#" if _number(p) else p for p in parts]) if inner else rest, inner)
        tpl, inner = known
        entry = top[1].get(tpl)
        if entry is None:
            entry = top[1][tpl] = [set(), set(), 0, set()]
        entry[0] |= members
        if inner:
            entry[1].update(inner)
        entry[2] += len(ts)
        dtypes = set(map(_DTYPE, ts))
        if len(dtypes) == 1:  # the common case: hash the shapes alone, pair them once
            (dtype,) = dtypes
            entry[3].update([(dtype, shape) for shape in set(map(_SHAPE, ts))])
        else:
            entry[3].update(map(_SIG, ts))
    nodes = []
    for key, (members, templates, info) in tops.items():
        if not members:
            nodes.append(TreeNode(key, 1, f"{info.dtype} {list(info.shape)}"))
            continue
        node = TreeNode(f"{key}.[{format_ranges(sorted(members))}]", len(members), f"x{len(members)}")
        for tpl, (where_set, inner, count, sigs) in templates.items():
            label = tpl.replace("#", f"[{format_ranges(sorted(inner))}]", 1) if inner else tpl
            sig = "; ".join(f"{d} {list(s)}" for d, s in sorted(sigs)) if len(sigs) <= 2 else f"{len(sigs)} shapes"
            where = "" if where_set == members else f" in {format_ranges(sorted(where_set))}"
            node.children.append(TreeNode(label, count, f"{sig} x{count}{where}"))
        nodes.append(node)
    return nodes

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


def build_tree(tensors: dict) -> list[TreeNode]:
    """Collapse repeated layers: `layers.[0-39] x40` with the tensors every member
    holds, and the exceptions (`in 2,8,14,20`); inner numbers (experts) collapse too."""
    tops: dict[str, list] = {}  # key -> [members, templates, first info]
    # A name's rest after the member number repeats in every member: its template once per rest.
    rests: dict[str, tuple[str, list[int]]] = {}
    for name, (_, t) in tensors.items():
        parts = name.split(".")
        # the member number follows the root (layers.3, blk.3) or a prefixed root (model.layers.3)
        i = 1 if len(parts) > 2 and parts[1].isdigit() else \
            2 if len(parts) > 3 and parts[2].isdigit() and parts[0] in _PREFIXES else 0
        if i:
            key = ".".join(parts[:i])
            top = tops.get(key)
            if top is None:
                top = tops[key] = [set(), {}, t]
            member = int(parts[i])
            top[0].add(member)
            known = rests.get(".".join(parts[i + 1:]))
            if known is None:
                rest = parts[i + 1:]
                inner = [int(p) for p in rest if p.isdigit()]
                known = rests[".".join(rest)] = (".".join(["#" if p.isdigit() else p for p in rest]) if inner
                                                 else ".".join(rest), inner)
            tpl, inner = known
            entry = top[1].get(tpl)
            if entry is None:
                entry = top[1][tpl] = [set(), set(), 0, set()]
            entry[0].add(member)
            if inner:
                entry[1].update(inner)
            entry[2] += 1
            entry[3].add((t.dtype, t.shape))
        else:
            tops.setdefault(name, [set(), {}, t])
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

"""`hc inspect`'s collapsed tree: the fast grouping in build_tree keeps the old meaning."""

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_tools import write_shard
from conftest import run_hc
from hccli.checkpoint.header_types import TensorInfo
from ckpt_tools import tree_by_name as build_tree

F32_ONE = struct.pack("<f", 1.0)


def test_non_ascii_digit_parts_print_not_crash(tmp_path):
    # '²' and '٣' pass str.isdigit() but int() refuses them: they are names, not member numbers
    f = tmp_path / "odd.safetensors"
    names = ["layers.².w.weight", "layers.0.x.٣.weight", "model.layers.².w", "blocks.1.ffn.²"]
    write_shard(f, [(n, "F32", (1,), F32_ONE) for n in names])
    r = run_hc("inspect", f)
    assert r.exit_code == 0, r.stdout[-2000:]
    assert "layers.².w.weight" in r.stdout and "x.٣.weight" in r.stdout and "ffn.²" in r.stdout


def _tensors(names, shapes):
    return {n: ("s.safetensors", TensorInfo(n, "F32" if i % 3 else "BF16", shapes[i % len(shapes)], 0, 4))
            for i, n in enumerate(names)}


def _reference(tensors):
    """The tree as the old, name-at-a-time build_tree defined it (its grouping, without its speed)."""
    tops: dict[str, list] = {}
    for name, (_, t) in tensors.items():
        parts = name.split(".")
        num = [p.isdigit() and p.isascii() and (p[0] != "0" or p == "0") for p in parts]  # canonical numbers
        i = 1 if len(parts) > 2 and num[1] else 2 if len(parts) > 3 and num[2] and parts[0] in ("model", "decoder") else 0
        if not i:
            tops.setdefault(name, [set(), {}, t])
            continue
        top = tops.setdefault(".".join(parts[:i]), [set(), {}, t])
        member, rest = int(parts[i]), parts[i + 1:]
        inner = [int(p) for p, n in zip(rest, num[i + 1:]) if n]
        tpl = ".".join("#" if n else p for p, n in zip(rest, num[i + 1:]))
        top[0].add(member)
        e = top[1].setdefault(tpl, [set(), set(), 0, set()])
        e[0].add(member)
        e[1].update(inner)
        e[2] += 1
        e[3].add((t.dtype, t.shape))
    return {k: (v[0], {tpl: e for tpl, e in v[1].items()}) for k, v in tops.items()}


_part = st.sampled_from(["layers", "model", "blk", "w", "x", "0", "1", "2", "17", "03", "²", "٣", ""])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_part, min_size=1, max_size=6).map(".".join), min_size=1, max_size=40, unique=True),
       st.lists(st.tuples(st.integers(1, 3), st.integers(1, 3)), min_size=1, max_size=3))
def test_tree_matches_reference_grouping(names, shapes):
    tensors = _tensors(names, shapes)
    ref = _reference(tensors)
    nodes = build_tree((n, t.dtype, t.shape) for n, (_, t) in tensors.items())
    assert len(nodes) == len(ref)
    for node, (key, (members, templates)) in zip(nodes, ref.items()):
        assert node.label.startswith(key)  # the same roots, in first-seen order
        if not members:
            assert node.count == 1 and not node.children
            continue
        assert node.count == len(members)
        assert [c.count for c in node.children] == [e[2] for e in templates.values()]
        for child, (tpl, e) in zip(node.children, templates.items()):
            assert child.label.split("[")[0] == tpl.split("#")[0]
            sig = e[3]
            assert (f"{len(sig)} shapes" in child.detail) if len(sig) > 2 else \
                all(f"{d} {list(s)}" in child.detail for d, s in sig)


def _columns_of(entries):
    from hccli.checkpoint.header_types import Columns

    names, dtypes, shapes = (list(x) for x in zip(*entries)) if entries else ([], [], [])
    return Columns(names, dtypes, shapes, [0] * len(names), [0] * len(names))


_member_name = st.builds(lambda root, num, rest: f"{root}.{num}.{rest}" if rest else f"{root}.{num}",
                         st.sampled_from(["layers", "mtp", "model.layers", "blk", "decoder.layers", "x"]),
                         st.sampled_from(["0", "1", "2", "10", "9", "²", "03", "a"]),
                         st.lists(_part, max_size=4).map(".".join))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.one_of(_member_name, st.lists(_part, min_size=1, max_size=5).map(".".join)),
                         max_size=30, unique=True), min_size=1, max_size=4),
       st.lists(st.tuples(st.sampled_from(["F32", "BF16", "I8"]), st.sampled_from([(1,), (2, 3), (4,)])),
                min_size=1, max_size=4),
       st.booleans())
def test_tree_by_blocks_is_the_tree_name_by_name(groups, sigs, sort):
    # headers of any order (sorted stretches as safetensors writes them, or not), names unique overall
    from hccli.inspect_tree import build_tree_columns

    seen, headers = set(), []
    for names in groups:
        names = [n for n in names if n not in seen]
        seen.update(names)
        if sort:
            names.sort()
        headers.append([(n, *sigs[i % len(sigs)]) for i, n in enumerate(names)])
    by_name = build_tree([e for h in headers for e in h])
    assert build_tree_columns([_columns_of(h) for h in headers]) == by_name


def test_tree_by_blocks_on_a_release_layout(phantoms):
    from hccli.checkpoint.opening import open_checkpoint
    from hccli.inspect_report import _columns
    from hccli.inspect_tree import build_tree_columns

    ck = open_checkpoint(phantoms("deepseek-v4-flash")[0])
    columns = _columns(ck)
    nodes = build_tree_columns(columns)
    assert nodes == build_tree((n, d, s) for c in columns for n, d, s in zip(c.names, c.dtypes, c.shapes))
    layers = next(n for n in nodes if n.label.startswith("layers.["))
    assert any(c.label.startswith("ffn.experts.[0-255]") for c in layers.children)

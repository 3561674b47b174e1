"""`hc inspect`'s totals and collapsed tree, built from header columns: the same as the merged
table (the first occurrence of each name) read name by name, whatever the order of entries, odd
names ('²' is a digit to str.isdigit, no number to int) or repeated names across shards."""

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

import pytest
from ckpt_tools import read_entries, tiny, write_shard
from conftest import run_hc
from hccli.checkpoint.safetensors.header_types import TensorInfo
from hccli.checkpoint.opening import open_checkpoint
from hccli.inspecting.tree import totals_from_columns
from ckpt_tools import tree_by_name as build_tree

F32_ONE = struct.pack("<f", 1.0)


def test_non_ascii_digit_parts_print_not_crash(tmp_path):
    # '²' and '٣' pass str.isdigit() but int() refuses them: they are names, not member numbers
    f = tmp_path / "odd.safetensors"
    names = ["layers.².w.weight", "layers.0.x.٣.weight", "model.layers.².w", "blocks.1.ffn.²"]
    write_shard(f, [(n, "F32", (1,), F32_ONE) for n in names])
    r = run_hc("inspect", f, "--tree")
    assert r.exit_code == 0, r.stdout[-2000:]
    assert "layers.².w.weight" in r.stdout and "x.٣.weight" in r.stdout and "ffn.²" in r.stdout


def _tensors(names, shapes):
    return {n: ("s.safetensors", TensorInfo(n, "F32" if i % 3 else "BF16", shapes[i % len(shapes)], 0, 4))
            for i, n in enumerate(names)}


def _reference(tensors):
    """The tree's grouping written out name at a time: the reference of the grouping by blocks."""
    tops: dict[str, list] = {}
    for name, (_, t) in tensors.items():
        parts = name.split(".")
        num = [p.isdigit() and p.isascii() and (p[0] != "0" or p == "0") for p in parts]  # canonical numbers
        # the root: every part before the first number that has a rest after it
        i = next((k for k in range(1, len(parts) - 1) if num[k]), 0)
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
    from hccli.checkpoint.safetensors.header_types import Columns

    names, dtypes, shapes = (list(x) for x in zip(*entries)) if entries else ([], [], [])
    return Columns(names, dtypes, shapes, [0] * len(names), [0] * len(names))


_member_name = st.builds(lambda root, num, rest: f"{root}.{num}.{rest}" if rest else f"{root}.{num}",
                         st.sampled_from(["layers", "mtp", "model.layers", "blk", "decoder.layers", "x",
                                          "vision.blocks", "language_model.model.layers"]),
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
    from hccli.inspecting.tree import build_tree_columns

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
    from hccli.inspecting.report import _columns
    from hccli.inspecting.tree import build_tree_columns

    ck = open_checkpoint(phantoms("deepseek-v4-flash")[0])
    columns = _columns(ck)
    nodes = build_tree_columns(columns)
    assert nodes == build_tree((n, d, s) for c in columns for n, d, s in zip(c.names, c.dtypes, c.shapes))
    layers = next(n for n in nodes if n.label.startswith("layers.["))
    assert any(c.label.startswith("ffn.experts.[0-255]") for c in layers.children)


# --- totals and the tree from header columns, against the merged table


def _merged(ckpt):
    """The totals tensor by tensor over the merged table (first occurrence of each name): the
    reference the totals from columns must equal."""
    from hccli.checkpoint.safetensors.header_types import DTYPES

    tensors = ckpt.tensors()
    per: dict[str, tuple[int, int]] = {}
    logical = 0
    for name, (_, t) in tensors.items():
        n, b = per.get(t.dtype, (0, 0))
        per[t.dtype] = (n + 1, b + t.nbytes)
        if t.dtype not in DTYPES:
            logical += t.n_elements
        elif t.dtype != "F8_E8M0":
            logical += t.nbytes * 8 // DTYPES[t.dtype]
        shape = t.shape
        if t.dtype == "I8" and len(shape) == 2 and name.endswith(".weight") and shape[1] % 16 == 0:
            sib = tensors.get(name[:-7] + ".scale")
            if sib is not None and sib[1].dtype == "F8_E8M0" and sib[1].shape == (shape[0], shape[1] // 16):
                logical += shape[0] * shape[1]  # packed fp4: two parameters a byte
    return len(tensors), dict(sorted(per.items())), logical


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    return tiny(tmp_path_factory.mktemp("fast") / "tiny")


def test_column_totals_equal_the_merged_tables(tiny_ckpt):
    ckpt = open_checkpoint(tiny_ckpt)
    assert ckpt.unique
    got = totals_from_columns([s.header.columns for s in ckpt.readable()])
    assert got == _merged(ckpt)
    from hccli.checkpoint.safetensors.header_types import DTYPES

    stored_elements = sum(b * 8 // DTYPES[d] for d, (_, b) in got[1].items() if d != "F8_E8M0")
    assert got[2] > stored_elements  # packed fp4 weights found: two parameters a byte


@settings(max_examples=25, deadline=None)
@given(order=st.permutations(range(12)), drop_scale=st.integers(0, 3), wide=st.booleans())
def test_column_totals_whatever_the_entry_order(tmp_path_factory, tiny_ckpt, order, drop_scale, wide):
    """Shards whose entries interleave dtypes (runs of one entry), lose an fp4 scale, or give a
    scale the wrong width: the column totals stay those of the merged table."""
    from hccli.checkpoint.safetensors.header import read_header
    from hccli.checkpoint.source import LocalFile

    out = tmp_path_factory.mktemp("mix")
    entries = max((read_entries(p) for p in sorted(tiny_ckpt.glob("*.safetensors"))),
                  key=lambda es: sum(d in ("I8", "F8_E8M0") for _, d, _, _ in es))
    weights = [e for e in entries if e[1] == "I8" and e[0].endswith(".weight")][:6]
    by_name = {e[0]: e for e in entries}
    fp4 = weights + [by_name[n[:-7] + ".scale"] for n, *_ in weights if n[:-7] + ".scale" in by_name]
    assert {d for _, d, _, _ in fp4} == {"I8", "F8_E8M0"}
    rest = [e for e in entries if e not in fp4][:4]
    picked = [fp4[i] for i in order if i < len(fp4)] + rest
    scales = [i for i, e in enumerate(picked) if e[1] == "F8_E8M0"]
    if scales and drop_scale:
        picked.pop(scales[drop_scale % len(scales)])
    if wide and scales:
        i = next(i for i, e in enumerate(picked) if e[1] == "F8_E8M0")
        n, d, s, b = picked[i]
        picked[i] = (n, d, (s[0], s[1] + 1), b + bytes(s[0]))
    write_shard(out / "model.safetensors", picked)
    with LocalFile(out / "model.safetensors") as f:
        header = read_header(f)
    ckpt = open_checkpoint(out / "model.safetensors")
    assert totals_from_columns([header.columns]) == _merged(ckpt)


def test_repeated_names_across_shards_take_the_merged_table(tiny_ckpt, tmp_path):
    """A name in two shards: the first occurrence counts once, as the merged table has it."""
    import shutil

    from conftest import run_hc

    ck = tmp_path / "dup"
    shutil.copytree(tiny_ckpt, ck)
    (ck / "model.safetensors.index.json").unlink()
    shards = sorted(ck.glob("*.safetensors"))
    write_shard(ck / "zz-extra.safetensors", read_entries(shards[0])[:3])
    ckpt = open_checkpoint(ck)
    assert not ckpt.unique
    doc = run_hc("inspect", ck, "--json").json()
    n, per, logical = _merged(ckpt)
    assert doc["tensors"] == n and doc["logical_params"] == logical
    assert {d: (v["tensors"], v["bytes"]) for d, v in doc["dtypes"].items()} == per


def test_tree_takes_names_whose_digits_are_no_numbers():
    """'²' is a digit to str.isdigit but no number to int(): such a part is a name, not a member."""
    from ckpt_tools import tree_by_name as build_tree

    nodes = build_tree([("layers.².w", "F32", (1,)), ("layers.0.w", "F32", (2,)), ("layers.1.w", "F32", (2,)),
                        ("model.layers.³.w", "BF16", (3,)), ("blk.0.x.²", "F32", (4,))])
    labels = {n.label: n for n in nodes}
    assert labels["layers.².w"].count == 1 and labels["model.layers.³.w"].count == 1
    assert labels["layers.[0-1]"].count == 2 and labels["blk.[0]"].children[0].label == "x.²"


def test_inspect_prints_a_checkpoint_with_such_a_name(tmp_path, tiny_ckpt):
    import shutil

    from conftest import run_hc

    ck = tmp_path / "odd"
    shutil.copytree(tiny_ckpt, ck)
    (ck / "model.safetensors.index.json").unlink()
    write_shard(ck / "zz-odd.safetensors", [("layers.².odd", "F32", (1,), b"\0\0\0\0")])
    r = run_hc("inspect", ck, "--tree")
    assert r.exit_code == 0, r.stdout[-2000:]
    assert "layers.².odd" in r.stdout


def test_tree_from_columns_equals_tree_from_the_merged_table(tiny_ckpt):
    from ckpt_tools import tree_by_name as build_tree

    ckpt = open_checkpoint(tiny_ckpt)
    merged = build_tree((n, t.dtype, t.shape) for n, (_, t) in ckpt.tensors().items())
    from hccli.inspecting.report import build_inspect

    assert build_inspect(tiny_ckpt).tree() == merged and len(merged) > 3

"""The fast path of `hc inspect` (issue #14): the plain-Python float32 op, totals from header
columns, and what `inspect --json` leaves unimported. Each is checked against the path it
replaces, which stays in the project for the cases the fast path hands back."""

from __future__ import annotations

import json
import subprocess
import sys
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hccli.kernels.split_np as sinkhorn_np
from ckpt_tools import read_entries, tiny, write_shard
from conftest import ROOT
from hccli.checkpoint.opening import open_checkpoint
from hccli.inspect_tree import totals_from_columns
from hccli.kernels.split_f32 import head_pre_zero, split_sinkhorn_zero, supports


def _numpy_with(exp):
    """sinkhorn_np's functions with numpy's exp swapped for `exp` (the rest of numpy as is)."""
    fake = types.SimpleNamespace(**{k: getattr(np, k) for k in dir(np) if not k.startswith("__")})
    fake.exp = exp
    return fake


def _exp_correctly_rounded(x):
    x = np.asarray(x)
    return np.exp(x.astype(np.float64)).astype(np.float32)


def _sites(rng, k: int, hc: int, spread: float):
    bases = (rng.standard_normal((k, (2 + hc) * hc)) * spread).astype(np.float32)
    scales = rng.standard_normal((k, 3)).astype(np.float32)
    return bases, scales


def _bits(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float32).view(np.int32)


@pytest.mark.parametrize("hc", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("spread", [0.05, 1.0, 8.0, 40.0])
def test_every_operation_is_numpys_float32_but_exp(monkeypatch, hc, spread):
    """With numpy's exp replaced by the correctly rounded one, the numpy op and the plain one agree
    to the bit: every other operation, order and rounding is the same."""
    rng = np.random.default_rng(hc * 100 + int(spread * 10))
    bases, scales = _sites(rng, 9, hc, spread)
    monkeypatch.setattr(sinkhorn_np, "np", _numpy_with(_exp_correctly_rounded))
    with np.errstate(all="ignore"):
        want = sinkhorn_np.split_sinkhorn(np.zeros_like(bases), scales, bases, hc, 20, 1e-6)
    got = split_sinkhorn_zero(bases.tolist(), scales.tolist(), hc, 20, 1e-6)
    for w, g in zip(want, got):
        assert np.array_equal(_bits(w), _bits(g))


@pytest.mark.parametrize("hc", [2, 4])
def test_within_a_few_units_of_numpys_own_exp(hc):
    """numpy's float32 exp is not correctly rounded (its SIMD path differs by CPU); twenty
    Sinkhorn rounds carry that last-place difference a little further, never more than this."""
    rng = np.random.default_rng(5)
    bases, scales = _sites(rng, 200, hc, 3.0)
    with np.errstate(all="ignore"):
        want = sinkhorn_np.split_sinkhorn(np.zeros_like(bases), scales, bases, hc, 20, 1e-6)
    got = split_sinkhorn_zero(bases.tolist(), scales.tolist(), hc, 20, 1e-6)
    for w, g in zip(want, got):
        assert np.abs(_bits(w).astype(np.int64) - _bits(g)).max() <= 32
        assert np.allclose(w, np.asarray(g, dtype=np.float32), rtol=1e-5, atol=1e-7)


def test_non_finite_values_come_out_as_numpys(monkeypatch):
    bases = np.zeros((5, 24), np.float32)
    scales = np.ones((5, 3), np.float32)
    bases[0, 8] = np.nan  # a NaN comb offset: its row's max is NaN
    bases[1, 9] = np.inf
    bases[2, 10] = -np.inf
    scales[3, 2] = np.inf  # 0 x inf: NaN
    bases[4, :4] = 1e30  # pre saturates
    monkeypatch.setattr(sinkhorn_np, "np", _numpy_with(_exp_correctly_rounded))
    with np.errstate(all="ignore"):
        want = sinkhorn_np.split_sinkhorn(np.zeros_like(bases), scales, bases, 4, 20, 1e-6)
    got = split_sinkhorn_zero(bases.tolist(), scales.tolist(), 4, 20, 1e-6)
    for w, g in zip(want, got):
        assert np.array_equal(np.asarray(w), np.asarray(g, dtype=np.float32), equal_nan=True)


def test_eps_rounding_to_zero_divides_as_ieee():
    """A column of zeros with eps below float32's range: 0 / 0 is NaN, not a ZeroDivisionError."""
    bases = np.zeros((1, 24), np.float32)
    bases[0, 8:] = [0, -1e4, -1e4, -1e4] * 4  # every row puts all its weight on column 0
    with np.errstate(all="ignore"):
        want = sinkhorn_np.split_sinkhorn(np.zeros_like(bases), np.ones((1, 3)), bases, 4, 3, 1e-60)
    got = split_sinkhorn_zero(bases.tolist(), [[1.0, 1.0, 1.0]], 4, 3, 1e-60)
    assert np.array_equal(np.asarray(want[2]), np.asarray(got[2], dtype=np.float32), equal_nan=True)
    assert np.isnan(np.asarray(got[2])).any()


def test_head_mix_and_supported_counts():
    rng = np.random.default_rng(3)
    b, s = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal((6, 1)).astype(np.float32)
    want = sinkhorn_np.head_pre(np.zeros_like(b), s, b, 1e-6)
    assert np.allclose(want, np.asarray(head_pre_zero(b.tolist(), s.tolist(), 1e-6), dtype=np.float32), rtol=1e-6)
    assert [h for h in range(1, 20) if supports(h)] == [1, 2, 4, 8, 16]
    with pytest.raises(ValueError):
        split_sinkhorn_zero([[0.0] * 15], [[1.0] * 3], 3, 20, 1e-6)


def test_inspect_of_a_non_power_of_two_site_uses_numpy(tmp_path):
    """hc = 3 has no pure halving tree: the report still holds its comb (numpy's op)."""
    from conftest import run_hc

    cfg = json.loads((ROOT / "sample_configs" / "tiny-v4.1.json").read_text())
    cfg["hc_mult"] = 3
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    ck = tiny(tmp_path / "ck", str(tmp_path / "c.json"))
    doc = run_hc("inspect", ck, "--json").json()
    split = [e for e in doc["hc"] if "comb_from_base" in e]
    assert split and all(len(e["comb_from_base"]) == 3 for e in split)
    comb = np.array(split[0]["comb_from_base"])
    assert np.allclose(comb.sum(0), 1, atol=1e-4) and np.allclose(comb.sum(1), 1, atol=1e-4)


# --------------------------------------------------------------------------- totals


def _merged(ckpt):
    """The totals tensor by tensor over the merged table (first occurrence of each name), by the
    rule as written before the column path: the reference the column path must equal."""
    from hccli.checkpoint.header_types import DTYPES

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
    from hccli.checkpoint.header_types import DTYPES

    stored_elements = sum(b * 8 // DTYPES[d] for d, (_, b) in got[1].items() if d != "F8_E8M0")
    assert got[2] > stored_elements  # packed fp4 weights found: two parameters a byte


@settings(max_examples=25, deadline=None)
@given(order=st.permutations(range(12)), drop_scale=st.integers(0, 3), wide=st.booleans())
def test_column_totals_whatever_the_entry_order(tmp_path_factory, tiny_ckpt, order, drop_scale, wide):
    """Shards whose entries interleave dtypes (runs of one entry), lose an fp4 scale, or give a
    scale the wrong width: the column totals stay those of the merged table."""
    from hccli.checkpoint.header import read_header
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


def test_inspect_json_imports_no_numpy_nor_verify_nor_the_layer_plan(tiny_ckpt):
    code = ("import sys; from hccli.cli.app import main; sys.argv = ['hc', 'inspect', sys.argv[1], '--json'];\n"
            "import atexit; atexit.register(lambda: sys.stderr.write(' '.join(sorted(m for m in sys.modules if m in"
            " ('numpy', 'hccli.checkpoint.verify', 'hccli.inventory', 'hccli.layers', 'torch', 'rich.console')))))"
            "\nmain()")
    r = subprocess.run([sys.executable, "-c", code, str(tiny_ckpt)], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["hc"]
    assert r.stderr.strip() == ""


def test_inspect_verify_json_of_safetensors_imports_no_numpy(tiny_ckpt):
    # the NaN/Inf scan of F32 values counts exponent bits in the bytes
    code = ("import sys; from hccli.cli.app import main; sys.argv = ['hc', 'inspect', sys.argv[1], '--verify',"
            " '--json'];\nimport atexit; atexit.register(lambda: sys.stderr.write(' '.join(sorted(m for m in"
            " sys.modules if m in ('numpy', 'torch', 'rich.console')))))\nmain()")
    r = subprocess.run([sys.executable, "-c", code, str(tiny_ckpt)], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["findings"] == []
    assert r.stderr.strip() == ""


# --------------------------------------------------------------------------- tree


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
    from hccli.inspect_report import build_inspect

    assert build_inspect(tiny_ckpt).tree() == merged and len(merged) > 3


def test_llama_cpp_names_in_a_safetensors_file_print(tmp_path):
    """blk.N names read as the GGUF dialect; a safetensors file has no GGUF metadata to show (this
    was an internal error, exit 70)."""
    import struct

    from conftest import run_hc

    f = tmp_path / "m.safetensors"
    write_shard(f, [("blk.1.ffn.x", "F32", (1,), struct.pack("<f", 1.0))])
    for args in ((), ("--json",), ("--verify", "--json")):
        r = run_hc("inspect", f, *args)
        assert r.exit_code == 0, (args, r.stdout[-1000:])
    doc = r.json()
    assert doc["dialect"]["name"] == "gguf" and doc["gguf"] is None and doc["tensors"] == 1

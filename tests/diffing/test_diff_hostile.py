"""`hc diff` against hostile or odd input: a model width it would not hold a sample of, a
quantised tensor streamed in blocks, names holding rich markup, and +0.0 against -0.0."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import run_hc_process
from diff_fixtures import add_shard, edit_copy, hc_values, release

from hccli.names import dialects as D
from hccli.base.limits import MAX_ELEMENTS

MARKUP = ("[link=http://x]a[/link]", "x[bold]y")
QUANT = "blk.0.attn_q_a.weight"  # layers.0.attn.wq_a.weight


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return release(tmp_path_factory.mktemp("rel") / "tiny")


def _gguf(path, values, *, dim: int = 64, tensors=(), strings=()):
    """A deepseek4 GGUF by gguf's GGUFWriter: the HC `values` (canonical names) in F32, then
    (name, array, GGML type or None) tensors and (key, text) metadata strings."""
    g = pytest.importorskip("gguf")
    w = g.GGUFWriter(path, "deepseek4")
    for key, v in (("block_count", 6), ("embedding_length", dim), ("hyper_connection.count", 4)):
        w.add_uint32(f"deepseek4.{key}", v)
    for key, text in strings:
        w.add_string(f"deepseek4.{key}", text)
    for name, x in values.items():
        spelt = D.spell_hc(D.parse_hc_name(name), D.GGUF)
        if spelt is not None:
            w.add_tensor(spelt, np.ascontiguousarray(x, np.float32))
    for name, x, raw in tensors:
        w.add_tensor(name, x, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# --- the sample hidden states are bounded -------------------------------------------------

def test_gguf_claiming_a_huge_width_is_one_error(tiny, tmp_path):
    path = _gguf(tmp_path / "wide.gguf", hc_values(tiny), dim=1 << 24)  # [16, 4, 2^24]: 4 GiB of float32
    proc, seconds, peak = run_hc_process("diff", path, path, "--json")
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and "key 'deepseek4.embedding_length'" in proc.stderr
    assert peak < 500 and seconds < 60


def test_gguf_at_the_width_bound_sends_fewer_sample_tokens(tiny, tmp_path):
    path = _gguf(tmp_path / "wide.gguf", hc_values(tiny), dim=1 << 20)  # 16 tokens would be 64M values
    proc, seconds, peak = run_hc_process("diff", path, path, "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["sample_tokens"] * 4 * (1 << 20) <= MAX_ELEMENTS and doc["model"]["dim"] == 1 << 20
    assert any(f"expected at most {MAX_ELEMENTS:,} values" in n for n in doc["notes"])
    assert peak < 500 and seconds < 60


@pytest.mark.parametrize("hc_mult, dim, sent", [(64, 1 << 20, 0), (4, 1 << 18, 4)])
def test_config_at_the_bounds_sends_what_fits(hc, tiny, tmp_path, hc_mult, dim, sent):
    # named by --config-a/-b: used as given (beside the checkpoint, a config whose dim and hc_mult
    # its headers contradict is set aside)
    ck = edit_copy(tiny, tmp_path / "ck", lambda t: None)
    cfg = json.loads((ck / "config.json").read_text())
    cfg.update(hidden_size=dim, hc_mult=hc_mult)
    claim = tmp_path / "claim.json"
    claim.write_text(json.dumps(cfg))
    named = ("--config-a", claim, "--config-b", claim)
    r = hc("diff", ck, ck, "--json", *named)
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert doc["sample_tokens"] == sent and (doc["model"]["hc_mult"], doc["model"]["dim"]) == (hc_mult, dim)
    assert sum(f"x hc_mult {hc_mult} x dim {dim:,}" in n for n in doc["notes"]) == 1
    assert sent * hc_mult * dim <= MAX_ELEMENTS < (sent + 1) * hc_mult * dim
    assert doc["findings_a"][0]["code"] == "config_mismatch"  # and said so
    text = hc("diff", ck, ck, *named).stdout
    assert f"{sent} sent" in text if sent else "none sent" in text


def test_sample_tokens_are_bounded_for_any_claim():
    from hccli.diffing.effect import sample_tokens

    assert sample_tokens(16, 4, 64) == (16, "") and sample_tokens(16, None, 64) == (16, "")
    for hc_mult, dim in ((-4, -64), (4, -64), (2**32, 64)):  # a GGUF's int32 metadata may be negative
        sent, note = sample_tokens(16, hc_mult, dim)
        assert sent == 0 and "none sent" in note and f"at most {MAX_ELEMENTS:,}" in note


# --- quantised values are streamed in whole blocks ---------------------------------------

def test_values_all_dequantises_a_q8_0_tensor_a_chunk_at_a_time(hc, tiny, tmp_path):
    g = pytest.importorskip("gguf")
    from hccli.checkpoint.view import open_view
    from hccli.diffing.values import CHUNK_ELEMENTS

    q8 = g.GGMLQuantizationType.Q8_0
    cols = 4096
    rows = 2 * CHUNK_ELEMENTS // cols + 16
    x = np.random.default_rng(0).standard_normal((rows, cols), dtype=np.float32)
    qa = g.quants.quantize(x, q8)
    y = x.copy()
    y[-1, :32] += 1  # one block of the last chunk
    qy = g.quants.quantize(y, q8)
    a = _gguf(tmp_path / "a.gguf", hc_values(tiny), tensors=[(QUANT, qa, q8)])
    b = _gguf(tmp_path / "b.gguf", hc_values(tiny), tensors=[(QUANT, qy, q8)])
    with open_view(a) as v:
        stream = v.value_stream(QUANT)
        assert (stream.unit_values, stream.unit_bytes) == (32, 34)
        with stream.open() as src:
            parts = [stream.decode(c) for c in stream.chunks(src, CHUNK_ELEMENTS)]
    assert [p.size for p in parts] == [CHUNK_ELEMENTS, CHUNK_ELEMENTS, 16 * cols]  # never the whole tensor at once
    assert np.array_equal(np.concatenate(parts), g.quants.dequantize(qa, q8).reshape(-1))
    r = hc("diff", a, b, "--values", "all", "--json")
    assert r.exit_code == 1, r.stderr
    values = {v["name"]: v for v in r.json()["values"]}
    gap = np.abs(g.quants.dequantize(qy, q8).astype(np.float64) - g.quants.dequantize(qa, q8).astype(np.float64))
    assert values["layers.0.attn.wq_a.weight"]["status"] == "differs"
    assert values["layers.0.attn.wq_a.weight"]["max_abs"] == gap.max() > 0
    assert hc("diff", a, a, "--values", "all", "--json").json()["values"][-1]["status"] == "equal"


def test_values_all_pairs_a_q8_0_tensor_with_its_f32_values(hc, tiny, tmp_path, monkeypatch):
    """Units of 32 values against single ones: the chunks and pieces cut both sides at whole
    blocks, and the values compared are the same ones."""
    g = pytest.importorskip("gguf")
    from hccli.diffing import values as DV

    monkeypatch.setattr(DV, "CHUNK_ELEMENTS", 100)  # a step of 96 values: 3 blocks
    monkeypatch.setattr(DV, "WINDOW_VALUES", 70)  # windows of 64 values: 2 blocks
    monkeypatch.setattr(DV, "PIECE_BYTES", 1000)  # pieces of 192 values: 3 windows (B's 768 bytes)
    q8 = g.GGMLQuantizationType.Q8_0
    x = np.random.default_rng(1).standard_normal((40, 64), dtype=np.float32)
    qa = g.quants.quantize(x, q8)
    exact = g.quants.dequantize(qa, q8).astype(np.float32)
    a = _gguf(tmp_path / "a.gguf", hc_values(tiny), tensors=[(QUANT, qa, q8)])
    b = _gguf(tmp_path / "b.gguf", hc_values(tiny), tensors=[(QUANT, exact, None)])
    edited = exact.copy()
    edited.reshape(-1)[191] += 0.5  # the last value of the first piece
    c = _gguf(tmp_path / "c.gguf", hc_values(tiny), tensors=[(QUANT, edited, None)])
    same = {v["name"]: v for v in hc("diff", a, b, "--values", "all", "--json").json()["values"]}
    assert same["layers.0.attn.wq_a.weight"]["status"] == "equal"
    r = hc("diff", a, c, "--values", "all", "--json")
    row = {v["name"]: v for v in r.json()["values"]}["layers.0.attn.wq_a.weight"]
    assert r.exit_code == 1 and row["status"] == "differs"
    assert row["max_abs"] == abs(float(edited.reshape(-1)[191]) - float(exact.reshape(-1)[191]))


# --- names and metadata print as written ------------------------------------------------

def test_markup_in_gguf_names_and_metadata_prints_as_written(hc, tiny, tmp_path):
    extra = [(name, np.zeros(4, np.float32), None) for name in MARKUP]
    path = _gguf(tmp_path / "m.gguf", hc_values(tiny), tensors=extra, strings=[(MARKUP[1], MARKUP[0])])
    out = hc("inspect", path).stdout
    lines = out.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("GGUF architecture"))
    line = " ".join(ln.strip() for ln in lines[at:at + 2])  # piped, prose wraps at 120: the line goes on on the next
    assert f"{MARKUP[1]} {MARKUP[0]}" in line and "\\" not in line, line
    line = next(ln for ln in hc("diff", tiny, path).stdout.splitlines() if ln.startswith("only in B"))
    assert line.endswith(f"e.g. {MARKUP[0]}, {MARKUP[1]}"), line


def test_markup_in_safetensors_names_prints_as_written(hc, tiny, tmp_path):
    ck = edit_copy(tiny, tmp_path / "ck", lambda t: None)
    add_shard(ck, "model-extra.safetensors", {name: np.zeros(4, np.float32) for name in MARKUP})
    line = next(ln for ln in hc("diff", tiny, ck).stdout.splitlines() if ln.startswith("only in B"))
    assert line == f"only in B: 2 tensors, e.g. {MARKUP[0]}, {MARKUP[1]}", line


# --- bit-identical means the same bits ----------------------------------------------------

def test_signed_zeros_are_equal_numbers_not_identical_values(hc, tiny, tmp_path):
    base, weight = "layers.0.hc_attn_base", "layers.0.attn_norm.weight"

    def zero(bits: bytes):
        def edit(t):
            for name in (base, weight):
                if name in t:
                    dtype, shape, raw = t[name]
                    width = 4 if dtype == "F32" else 2
                    t[name] = (dtype, shape, bytes(width - 1) + bits + raw[width:])
        return edit

    plus = edit_copy(tiny, tmp_path / "plus", zero(b"\x00"))
    minus = edit_copy(tiny, tmp_path / "minus", zero(b"\x80"))
    r = hc("diff", plus, minus, "--values", "all", "--json")
    assert r.exit_code == 0, r.stderr  # equal numbers: within any tolerance
    doc = r.json()
    row = next(x for x in doc["sites"] if x["name"] == base)
    assert row["status"] == "within" and row["max_abs"] == 0 and row["beyond"] == 0
    assert {x["status"] for x in doc["sites"] if x["name"] != base} == {"equal"}
    value = next(v for v in doc["values"] if v["name"] == weight)
    assert value["status"] == "within" and value["max_abs"] == 0
    same = hc("diff", plus, plus, "--values", "all", "--json").json()
    assert {x["status"] for x in same["sites"]} == {v["status"] for v in same["values"]} == {"equal"}
    assert math.copysign(1, np.frombuffer(bytes(3) + b"\x80", "<f4")[0]) == -1  # the edit wrote -0.0

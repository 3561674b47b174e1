"""GGUF through the checkpoint store: the header walked over byte ranges agrees with
gguf's own GGUFReader, hostile headers end in one line (exit 2), and neither gguf nor
transformers is imported unless such a checkpoint is opened."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest
from conftest import SAMPLES, run_hc
from gguf_fixtures import hc_values, write_gguf

from hccli.checkpoint.gguf.store import read_gguf_header
from hccli.checkpoint.source import LocalFile
from hccli.model.config.model import load_config


def test_header_over_byte_ranges_agrees_with_gguf_reader(tmp_path):
    write_gguf(tmp_path / "m.gguf", hc_values(3), split_max_tensors=12)
    parts = sorted(tmp_path.glob("m-*.gguf"))
    from gguf import GGUFReader

    want, meta = {}, {}
    for p in parts:  # gguf's own reader is the reference
        r = GGUFReader(p, "r")
        want.update({t.name: (t.tensor_type.name, tuple(int(d) for d in t.shape.tolist())[::-1], int(t.data_offset),
                              int(t.n_bytes), p.name) for t in r.tensors})
        if p == parts[0]:
            meta = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
        r.data._mmap.close()
    got = {}
    for p in parts:
        with LocalFile(p) as src:
            h = read_gguf_header(src)
        got.update({t.name: (t.dtype, t.shape, t.abs_begin, t.nbytes, p.name) for t in h.tensors})
        if p == parts[0]:
            assert {k: h.kv[k] for k in meta if not k.startswith("GGUF.")} == meta
    assert got == want


def _header(n_tensors: int, kvs: bytes, n_kv: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + kvs


def _tensor_info(name: bytes, ne: tuple, ggml_type: int, offset: int) -> bytes:
    return (struct.pack("<Q", len(name)) + name + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
            + struct.pack("<IQ", ggml_type, offset))


@pytest.mark.parametrize("body, message", [
    (b"PK\x03\x04" + bytes(100), "no GGUF magic"),
    (_header(1 << 40, b"", 0), "tensors"),
    (_header(0, b"", 2), "past the end"),
    (struct.pack("<4sI", b"GGUF", 99) + bytes(16), "version 99"),
    (_header(1, _tensor_info(b"blk.0.hc_attn_fn.weight", (250, 24), 8, 0), 0), "blocks of 32"),
    (_header(1, _tensor_info(b"blk.0.hc_attn_fn.weight", (256, 24), 99, 0), 0), "GGML type 99"),
    (_header(1, _tensor_info(b"blk.0.hc_attn_base.weight", (24,), 0, 0), 0) + bytes(8), "truncated"),
])
def test_hostile_headers_are_one_line_exit_2(tmp_path, body, message):
    p = tmp_path / "bad.gguf"
    p.write_bytes(body)
    r = run_hc("inspect", p)
    assert r.exit_code == 2 and message in r.stderr and "bad.gguf" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_transformers_written_config_loads_as_its_release_config(tmp_path):
    from transformers_fixtures import save_transformers_config

    for name in ("deepseek-v4-flash.hf.json", "tiny-v4.hf.json"):
        tf = load_config(save_transformers_config(name, tmp_path / name))
        rel = load_config(SAMPLES / name)
        assert (tf.n_layers, tf.n_stages, tf.compress_ratios, tf.hc_mult, tf.dim) == \
               (rel.n_layers, rel.n_stages, rel.compress_ratios, rel.hc_mult, rel.dim)


def test_inspect_of_a_release_imports_neither_gguf_nor_transformers(tmp_path):
    from ckpt_tools import tiny

    ck = tiny(tmp_path / "tiny")
    code = ("import sys; from typer.testing import CliRunner; from hccli.cli.app import register; "
            f"r = CliRunner().invoke(register(), ['inspect', {str(ck)!r}, '--verify']); "
            "assert r.exit_code == 0, r.output; "
            "print(sorted(m for m in ('gguf', 'transformers', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == "[]"

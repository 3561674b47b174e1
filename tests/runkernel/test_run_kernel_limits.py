"""hc run-kernel on hostile and careless input: refused by name, in one line, quickly, before allocating.

Every fixture is built here in tmp_path: headers that claim more than the file
holds, sparse multi-GB files, FIFOs, deep or long JSON, configs with absurd
hc_mult. A watchdog fails a test that blocks (a FIFO opened for reading waits
forever for a writer) instead of letting it hang the suite.
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest

pytest.importorskip("torch")

from conftest import SAMPLES, alarm_watchdog, run_hc  # noqa: E402
from test_kernel_inputs import write_safetensors  # noqa: E402

from hccli.base.limits import MAX_ELEMENTS, MAX_HC_MULT  # noqa: E402

SECONDS = 10  # the issue's bound for any input under 100 MB


@pytest.fixture(autouse=True)
def watchdog():
    with alarm_watchdog(SECONDS):
        yield


def refused(*args, words):
    r = run_hc("run-kernel", *[str(a) for a in args])
    assert r.exit_code == 2, (r.stdout[-500:], r.stderr)
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    for w in words if isinstance(words, (list, tuple)) else [words]:
        assert w in line, line
    return line


def npy_header(shape, dtype="<f4") -> bytes:
    """A .npy v1.0 header (numpy's own writer) for an array of `shape` that is never built."""
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": tuple(shape)})
    return buf.getvalue()  # numpy writes the magic string too


def test_npy_header_claiming_ten_billion_values(tmp_path):
    p = tmp_path / "huge.npy"
    p.write_bytes(npy_header((10**10 // 24, 24)))
    refused("--mixes", p, words=["huge.npy", f"at most {MAX_ELEMENTS:,}"])


@pytest.mark.parametrize("flag", ["--mixes", "--hidden-file"])
def test_sparse_4gb_npy(tmp_path, flag):
    p = tmp_path / "sparse.npy"
    with p.open("wb") as f:
        f.write(npy_header((2, 4, 64) if flag == "--hidden-file" else (4, 24)))
        f.truncate(4 << 30)  # 4 GB on paper, a few bytes on disk
    refused(flag, p, words=["sparse.npy", "4,294,967,296 bytes", "implies"])


def test_sparse_4gb_npy_whose_header_agrees(tmp_path):
    # the header claims as much as the file holds: refused by the element bound, not read
    p = tmp_path / "agree.npy"
    head = npy_header((2**30 // 24 * 1, 24))
    with p.open("wb") as f:
        f.write(head)
        f.truncate(len(head) + 4 * (2**30 // 24) * 24)
    refused("--mixes", p, words=["agree.npy", f"at most {MAX_ELEMENTS:,}"])


@pytest.mark.parametrize("flag", ["--mixes", "--hidden-file", "--config", "--compare"])
def test_fifo_is_refused_by_name(tmp_path, flag):
    fifo = tmp_path / ("m.safetensors" if flag == "--compare" else "m.npy")
    os.mkfifo(fifo)
    refused(flag, fifo, words=[flag, str(fifo), "not a regular file"])


def test_fifo_as_save_target(tmp_path):
    fifo = tmp_path / "out.safetensors"
    os.mkfifo(fifo)
    for extra in ([], ["--force"]):
        refused("--save", fifo, *extra, words=["--save", "not a regular file"])


def test_dev_zero_as_config():
    refused("--config", "/dev/zero", words=["/dev/zero", "not a regular file"])


def test_json_with_deep_nesting(tmp_path):
    p = tmp_path / "deep.json"
    p.write_text("[" * 100_000 + "]" * 100_000)
    refused("--mixes", p, words=["deep.json", "nested deeper than"])


def test_json_with_a_5000_digit_integer(tmp_path):
    p = tmp_path / "digits.json"
    p.write_text("[[" + "7" * 5000 + "," + ", ".join(["0"] * 23) + "]]")
    refused("--mixes", p, words=["digits.json", "5,000 characters"])


def test_json_too_large_to_read_whole(tmp_path):
    p = tmp_path / "big.json"
    with p.open("wb") as f:
        f.write(b"[")
        f.truncate(90 << 20)
    refused("--mixes", p, words=["big.json", "bytes of JSON"])


def test_hc_mult_bounds(tmp_path):
    refused("--hc-mult", MAX_HC_MULT + 1, words=[f"--hc-mult {MAX_HC_MULT + 1}", f"at most {MAX_HC_MULT}"])
    raw = json.loads((SAMPLES / "tiny-v4.1.json").read_text())
    raw["hc_mult"] = 10**9
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(raw))
    r = run_hc("run-kernel", "--config", cfg)
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and "hc_mult" in r.stderr, r.stderr


def test_hc_mult_64_still_runs():
    r = run_hc("run-kernel", "--hc-mult", MAX_HC_MULT, "--tokens", 2, "--iters", 2, "--json")
    assert r.exit_code == 0, r.stderr
    assert np.array(r.json()["comb"]).shape == (2, MAX_HC_MULT, MAX_HC_MULT)


@pytest.mark.parametrize("args, words", [
    (["--tokens", 10**9], f"at most {MAX_ELEMENTS:,}"),
    (["--hidden", "--tokens", 4, "--dim", 10**7], f"at most {MAX_ELEMENTS:,}"),
    (["--iters", 10**9], "at most 1,000"),
    (["--eps", "nan"], "--eps nan"),
    (["--seed", -1], "--seed -1"),
])
def test_sizes_beyond_bounds(args, words):
    refused(*args, words=words)


def test_safetensors_mixes_go_through_the_hardened_reader(tmp_path):
    good = write_safetensors(tmp_path / "m.safetensors", {"mixes": np.zeros((2, 24), np.float32)})
    raw = good.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = raw[8:8 + n].decode()
    # a duplicate key (the lax parser kept the last one) and a NaN literal in the header
    dup = header[:-1] + ', "mixes": ' + json.dumps(json.loads(header)["mixes"]) + "}"
    nan = header.replace('"data_offsets"', '"x": NaN, "data_offsets"', 1)
    for name, text in (("dup", dup), ("nan", nan)):
        body = text.encode()
        p = tmp_path / f"{name}.safetensors"
        p.write_bytes(struct.pack("<Q", len(body)) + body + raw[8 + n:])
        refused("--mixes", p, words=[f"{name}.safetensors"])


def test_safetensors_tensor_beyond_the_bound_is_not_read(tmp_path):
    from hccli.checkpoint.synth import header_bytes

    rows = MAX_ELEMENTS // 24 + 1
    p = tmp_path / "big.safetensors"
    with p.open("wb") as f:
        f.write(header_bytes([("mixes", "F32", (rows, 24), rows * 24 * 4)], {}))
        f.truncate(f.tell() + rows * 24 * 4)  # sparse
    refused("--mixes", p, words=["big.safetensors", f"at most {MAX_ELEMENTS:,}"])


@pytest.fixture(scope="module")
def tiny_release(tmp_path_factory):
    from ckpt_tools import tiny

    return tiny(tmp_path_factory.mktemp("release") / "ck")


def _drop_from_release(tmp_path, release, drop: str):
    """A copy of a tiny release checkpoint (make-checkpoint) whose shard holding `drop` is written
    again by safetensors' own serializer without it, and whose index no longer names it."""
    from ckpt_tools import copy, edit_index, shard_of
    from safetensors.torch import load_file, save_file

    ck = copy(release, tmp_path / "ck")
    shard = shard_of(ck, drop)
    tensors = load_file(str(shard))
    del tensors[drop]
    save_file(tensors, str(shard), metadata={"format": "pt"})
    edit_index(ck, lambda doc: doc["weight_map"].pop(drop))
    return ck, drop


def _drop_from_gguf(tmp_path, drop: str):
    """A GGUF written by gguf-py's GGUFWriter holding every HC tensor of the tiny V4 but `drop`."""
    from gguf_fixtures import hc_values, write_gguf

    values = hc_values()
    del values[drop]
    return write_gguf(tmp_path / "m.gguf", values), {"base": "blk.1.hc_{s}_base.weight",
                                                      "scale": "blk.1.hc_{s}_scale.weight"}


@pytest.mark.parametrize("fmt", ["safetensors", "gguf"])
@pytest.mark.parametrize("site", ["attn", "ffn"])
@pytest.mark.parametrize("part", ["base", "scale"])
def test_site_without_base_or_scale_is_named(tmp_path, tiny_release, fmt, site, part):
    # the site is still found (its fn and the other part are there); the missing tensor is named
    canonical = f"layers.1.hc_{site}_{part}"
    if fmt == "safetensors":
        ck, stored = _drop_from_release(tmp_path, tiny_release, canonical)
    else:
        ck, spelled = _drop_from_gguf(tmp_path, canonical)
        stored = spelled[part].format(s=site)
    for extra in ([], ["--hidden"]):
        refused("--checkpoint", ck, "--layers", 1, "--site", site, *extra,
                words=[str(ck), f"'{stored}'", f"the {site} site of layers.1 (layer 1)", "not in the checkpoint",
                       f"expected hc_{site}_{part}"])

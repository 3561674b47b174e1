"""Shard headers against safetensors' own serializer (the installed package), byte for byte."""

import json

import pytest

from ckpt_tools import read_entries
from conftest import SAMPLES
from hccli.model.config.model import load_config
from hccli.model import inventory as INV
from hccli.model.inventory import build_inventory
from hccli.checkpoint.safetensors.layout import header_bytes, serializer_order
from hccli.checkpoint.synth import INDEX_NAME, make_checkpoint, plan_shards

torch = pytest.importorskip("torch")
st_torch = pytest.importorskip("safetensors.torch")

TORCH_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "I8": torch.int8,
                "I64": torch.int64, "F8_E4M3": getattr(torch, "float8_e4m3fn", None),
                "F8_E8M0": getattr(torch, "float8_e8m0fnu", None)}


def reference_header(specs):
    """What safetensors.torch.save writes before the data, for zero tensors of these (name, dtype, shape)."""
    tensors = {n: torch.zeros(s, dtype=TORCH_DTYPES[d]) for n, d, s in specs}
    blob = st_torch.save(tensors)
    n = int.from_bytes(blob[:8], "little")
    return blob[:8 + n], len(blob)


def ours(specs):
    nbytes = {n: torch.zeros(s, dtype=TORCH_DTYPES[d]).nbytes for n, d, s in specs}
    ordered = serializer_order(specs, name=lambda t: t[0], dtype=lambda t: t[1])
    return header_bytes([(n, d, s, nbytes[n]) for n, d, s in ordered])


def test_every_dtype_and_tricky_names_match_the_serializer():
    missing = [d for d, t in TORCH_DTYPES.items() if t is None]
    assert not missing, f"this torch lacks {missing}"
    specs = []
    for k, d in enumerate(TORCH_DTYPES):
        # names whose byte order differs from "natural" order: digits, case, a dot against a letter
        for name in (f"layers.10.{d}", f"layers.9.{d}", f"Layers.9.{d}", f"layers.9{d}"):
            specs.append((name, d, (k + 1, 3)))
    specs += [("scalar_f32", "F32", ()), ("empty_bf16", "BF16", (0, 4)), ("odd", "I8", (7,))]
    head, _ = reference_header(specs)
    assert ours(specs) == head
    assert b"__metadata__" not in head and len(head) % 8 == 0


def test_order_is_dtype_descending_then_name():
    specs = [("b", "I8", (1,)), ("a", "F8_E4M3", (1,)), ("c", "F8_E8M0", (1,)), ("z", "F32", (1,)),
             ("y", "BF16", (1,)), ("x", "I64", (1,)), ("w", "F16", (1,))]
    head, _ = reference_header(specs)
    names = [k for k in json.loads(head[8:])]
    assert names == ["x", "z", "y", "w", "c", "a", "b"]
    assert [n for n, *_ in serializer_order(specs, name=lambda t: t[0], dtype=lambda t: t[1])] == names


@pytest.mark.parametrize("config", ["tiny-v4.1.json", "tiny-v4.hf.json"])
@pytest.mark.parametrize("phantom", [True, False])
def test_every_shard_is_what_safetensors_writes(tmp_path, config, phantom):
    ck = make_checkpoint(SAMPLES / config, tmp_path / "ck", phantom=phantom).outdir
    inv = build_inventory(load_config(SAMPLES / config))
    plans = plan_shards(inv)
    assert sorted(p.name for p in ck.glob("*.safetensors")) == [p.file for p in plans]
    for plan in plans:
        path = ck / plan.file
        head, size = reference_header([(t.name, t.dtype, t.shape) for t in plan.tensors])
        assert path.read_bytes()[:len(head)] == head, plan.file
        assert path.stat().st_size == size, plan.file
    if not phantom:  # the values too: safetensors re-serialises the file to the same bytes
        plan = plans[3]
        loaded = {n: torch.frombuffer(bytearray(b), dtype=TORCH_DTYPES[d]).reshape(s) if b else
                  torch.zeros(s, dtype=TORCH_DTYPES[d]) for n, d, s, b in read_entries(ck / plan.file)}
        assert st_torch.save(loaded) == (ck / plan.file).read_bytes()
    index = json.loads((ck / INDEX_NAME).read_text())
    assert index["metadata"]["producer"] == "hccli make-checkpoint" + (" --phantom" if phantom else "")


def test_the_header_writer_of_the_tests_is_the_compact_form():
    # _as_published reads the text's length as the compact header's: header_bytes writes that form
    head = header_bytes([("a", "F32", (2,), 8), ("b", "BF16", (3,), 6)])
    assert b" " not in head[8:].rstrip(b" ")


# --- the serializer's order and header size, for names that escape and offsets of every digit count


def _spec(name, dtype, shape):
    return INV.TensorSpec(name, shape, dtype, "attention", None, "text")


ODD_NAMES = ["b", "a\"q", "a\\\\s", "é", "\u00ff", "\U0001f600x", "z\nline", "A", "a.10", "a.9", "\uffff", "ab"]


def test_serializer_order_is_byte_order_then_dtype():
    from hccli.checkpoint.safetensors.layout import DTYPE_RANK, serializer_order

    specs = [_spec(n, d, (1,)) for n in ODD_NAMES for d in ("F32", "BF16", "I8")]
    got = serializer_order(specs)
    assert got == sorted(specs, key=lambda t: (-DTYPE_RANK[t.dtype], t.name.encode("utf-8")))


@pytest.mark.parametrize("names", [ODD_NAMES, ["plain.a", "plain.b"], ["\u00e9t\u00e9"], ["one"]])
def test_header_size_counts_escapes_and_digits(names):
    from hccli.checkpoint.verify.placement import _header_size
    from hccli.checkpoint.safetensors.layout import serializer_order
    from hccli.checkpoint.synth import ShardPlan, shard_header

    # sizes crossing digit counts, so offsets of 1 to 13 digits are counted
    specs = [_spec(n, "F32", (10 ** (k % 4), 3)) for k, n in enumerate(names)]
    specs += [_spec(f"big.{k}", "I8", (7 ** k + 1,)) for k in range(14)]
    plan = ShardPlan("model-00001-of-00001.safetensors", tuple(serializer_order(specs)))
    assert _header_size(plan, [t.nbytes for t in plan.tensors]) == len(shard_header(plan))

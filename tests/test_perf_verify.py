"""The fast paths verify takes (inventory per expert group, placement arithmetic, fn scan)
against the plain per-tensor rules they replace, and the findings they must not drop."""

import pytest

from conftest import SAMPLES
from hccli import inventory as INV
from hccli.config.model import load_config
from hccli.layers import plan_layers

CONFIGS = sorted(p.name for p in SAMPLES.glob("*.json"))


def _per_tensor(cfg):
    """The inventory with every expert tensor written through add() one by one (fp4/fp8), as
    before the template path."""
    def experts(b, p, n, linears):
        for x in range(n):
            for name, o, i in linears:
                (b.fp4 if b.cfg.expert_dtype == "fp4" else b.fp8)(f"{p}.ffn.experts.{x}.{name}", o, i, "routed_experts")

    fast = INV._Builder.experts
    INV._Builder.experts = experts
    try:
        return INV._inventory(cfg, plan_layers(cfg))
    finally:
        INV._Builder.experts = fast


@pytest.mark.parametrize("name", CONFIGS)
def test_expert_groups_match_per_tensor_inventory(name):
    cfg = load_config(SAMPLES / name)
    got = INV._inventory(cfg, plan_layers(cfg))
    want = _per_tensor(cfg)
    assert got.tensors == want.tensors
    assert got.release == want.release
    # the columns are the records', and the byte total kept while building is their sum
    assert tuple(map(list, zip(*want.tensors))) == tuple(got.columns)
    assert got.total_size == sum(t.nbytes for t in want.tensors)
    assert got.by_name() == {t.name: t for t in want.tensors}


def _spec(name, dtype, shape):
    return INV.TensorSpec(name, shape, dtype, "attention", None, "text")


ODD_NAMES = ["b", "a\"q", "a\\\\s", "é", "\u00ff", "\U0001f600x", "z\nline", "A", "a.10", "a.9", "\uffff", "ab"]


def test_serializer_order_is_byte_order_then_dtype():
    from hccli.st_layout import _RANK, serializer_order

    specs = [_spec(n, d, (1,)) for n in ODD_NAMES for d in ("F32", "BF16", "I8")]
    got = serializer_order(specs)
    assert got == sorted(specs, key=lambda t: (-_RANK[t.dtype], t.name.encode("utf-8")))


@pytest.mark.parametrize("names", [ODD_NAMES, ["plain.a", "plain.b"], ["\u00e9t\u00e9"], ["one"]])
def test_header_size_counts_escapes_and_digits(names):
    from hccli.checkpoint.placement import _header_size
    from hccli.st_layout import serializer_order
    from hccli.synth import ShardPlan, shard_header

    # sizes crossing digit counts, so offsets of 1 to 13 digits are counted
    specs = [_spec(n, "F32", (10 ** (k % 4), 3)) for k, n in enumerate(names)]
    specs += [_spec(f"big.{k}", "I8", (7 ** k + 1,)) for k in range(14)]
    plan = ShardPlan("model-00001-of-00001.safetensors", tuple(serializer_order(specs)))
    assert _header_size(plan, [t.nbytes for t in plan.tensors]) == len(shard_header(plan))


def _findings(path, code):
    from conftest import run_hc

    r = run_hc("inspect", path, "--verify", "--json")
    return r.exit_code, [f for f in r.json()["findings"] if f["code"] == code]


def test_one_tensor_gone_from_one_expert_group_and_one_shape_changed(tmp_path):
    from ckpt_tools import edit_index, read_entries, rewrite, shard_of, tiny

    ck = tiny(tmp_path / "ck")
    gone, bent = "layers.1.ffn.experts.2.w3.scale", "layers.0.ffn.experts.3.w2.weight"
    rewrite(shard_of(ck, gone), drop={gone})
    edit_index(ck, lambda d: d["weight_map"].pop(gone))
    (dtype, shape, data), = [(d, s, b) for n, d, s, b in read_entries(shard_of(ck, bent)) if n == bent]
    rewrite(shard_of(ck, bent), replace={bent: (dtype, (shape[1], shape[0]), data)})
    code, missing = _findings(ck, "missing_tensor")
    assert code == 1 and [f["message"].split("'")[1] for f in missing] == [gone]
    _, shapes = _findings(ck, "wrong_shape")
    assert [f["message"].split("'")[1] for f in shapes] == [bent]


"""The inventory against the published V4.1-Flash layout (reference/deepseek-v4-family.md), and its
experts built by group equal to them built one by one."""

import re
from math import ceil

import pytest

from conftest import ALL_CONFIGS, SAMPLES
from hccli.model import inventory as INV
from hccli.counting.sites import hc_sites
from hccli.model.config.model import load_config
from hccli.model.inventory import build_hc_inventory, build_inventory
from hccli.model.layers import plan_layers

D, V, H, I, E = 5120, 129280, 64, 2304, 384


@pytest.fixture(scope="module")
def v41():
    return build_inventory(load_config(SAMPLES / "deepseek-v4.1-flash.json")).by_name()


def fp8(o, i):
    return [("F8_E4M3", (o, i)), ("F8_E8M0", (ceil(o / 32), ceil(i / 32)))]


def fp4(o, i):
    return [("I8", (o, i // 2)), ("F8_E8M0", (o, i // 32))]


def check(inv, prefix, expected):
    got = [(inv[f"{prefix}.weight"].dtype, inv[f"{prefix}.weight"].shape),
           (inv[f"{prefix}.scale"].dtype, inv[f"{prefix}.scale"].shape)]
    assert got == expected, prefix


def test_v41_globals(v41):
    assert v41["embed.weight"].shape == (V, D) and v41["embed.weight"].dtype == "BF16"
    assert v41["head.weight"].shape == (V, D)
    assert v41["norm.weight"].shape == (D,)
    for name in ("image_start", "image_end", "image_newline"):
        assert v41[name].shape == (D,) and v41[name].scope == "vision"
    assert not any(n.startswith("hc_head") or ".hc_head" in n for n in v41)  # V4.1 has no head mix


@pytest.mark.parametrize("layer", [0, 1, 2, 3, 14, 20, 24, 39])
def test_v41_every_layer(v41, layer):
    p = f"layers.{layer}"
    check(v41, f"{p}.attn.wq_a", fp8(1280, D))
    check(v41, f"{p}.attn.wq_b", fp8(H * 512, 1280))
    check(v41, f"{p}.attn.wkv", fp8(512, D))
    check(v41, f"{p}.attn.wo_a", fp8(8 * 1024, H * 512 // 8))
    check(v41, f"{p}.attn.wo_b", fp8(D, 8 * 1024))
    assert v41[f"{p}.attn.q_norm.weight"].shape == (1280,)
    assert v41[f"{p}.attn.kv_norm.weight"].shape == (512,)
    assert (v41[f"{p}.attn.attn_sink"].dtype, v41[f"{p}.attn.attn_sink"].shape) == ("F32", (H,))
    assert v41[f"{p}.ffn.gate.weight"].shape == (E, D)
    assert v41[f"{p}.ffn.gate.bias_vl"].shape == (E,)
    for x in (0, 383):
        check(v41, f"{p}.ffn.experts.{x}.w1", fp4(I, D))
        check(v41, f"{p}.ffn.experts.{x}.w2", fp4(D, I))
    assert f"{p}.ffn.experts.384.w1.weight" not in v41
    check(v41, f"{p}.ffn.shared_experts.w3", fp8(I, D))
    for site in ("attn", "ffn"):
        assert v41[f"{p}.hc_{site}_fn"].shape == (24, 4 * D)
        assert v41[f"{p}.hc_{site}_base"].shape == (24,)
        assert v41[f"{p}.hc_{site}_scale"].shape == (3,)
        assert v41[f"{p}.hc_{site}_scale"].dtype == "F32"


def test_v41_sources_indexers_engram(v41):
    layers_with = lambda suffix: sorted(  # noqa: E731
        int(m[1]) for n in v41 if (m := re.fullmatch(rf"layers\.(\d+)\.{re.escape(suffix)}", n)))
    assert layers_with("attn.compressor.wkv.weight") == [2, 8, 14, 20]
    assert layers_with("attn.compressor.wgate.weight") == [2, 8, 14]  # ratio 2 only
    assert layers_with("attn.indexer.wk.weight") == [2, 8, 14, 20]
    assert layers_with("attn.indexer.wq_b.weight") == [2, 8, 14, 20, 24, 28, 32, 36]
    assert layers_with("attn.indexer.weights_proj.weight") == [2, 8, 14, 20, 24, 28, 32, 36]
    assert layers_with("engram.embed.weight") == [1, 14]
    assert v41["layers.1.engram.embed.weight"].shape == (384006168, 256)
    assert v41["layers.14.engram.embed.scale"].shape == (384016682, 8)
    check(v41, "layers.14.engram.wkv", fp8(D * 5, 3 * 8 * 256))
    assert v41["layers.1.engram.q_weight"].shape == (4, D)
    assert v41["layers.2.attn.indexer.wk.weight"].shape == (128, 512)


def test_v41_stages_and_vision(v41):
    assert v41["mtp.0.ffn.gate.weight"].shape == (128, D)
    assert "mtp.1.ffn.experts.127.w2.weight" in v41 and "mtp.1.ffn.experts.128.w2.weight" not in v41
    assert not any(n.startswith("mtp.") and (".compressor." in n or ".indexer." in n or ".engram." in n) for n in v41)
    check(v41, "mtp.0.main_proj", fp8(D, 3 * D))
    assert v41["mtp.2.markov_head.head.weight"].shape == (V, 256)
    assert v41["mtp.2.confidence_head.proj.weight"].shape == (1, D + 256)
    assert all(v41[f"mtp.{s}.hc_attn_base"].shape == (24,) for s in range(3))
    assert v41["vision.blocks.31.mlp.w1.weight"].shape == (2 * 2816, 1024)
    assert v41["aligner.w1.weight"].shape == (D, 1024 * 9)
    assert "vision.blocks.32.norm1.weight" not in v41


def test_hub_and_inference_v41_give_identical_inventories():
    a = build_inventory(load_config(SAMPLES / "deepseek-v4.1-flash.json")).tensors
    b = build_inventory(load_config(SAMPLES / "deepseek-v4.1-flash.hf.json")).tensors
    assert a == b and len(a) > 90_000


@pytest.mark.parametrize("model, n_layers, dim, stages", [
    ("deepseek-v4-flash", 43, 4096, 1), ("deepseek-v4-flash-0731", 43, 4096, 3),
    ("deepseek-v4-pro", 61, 7168, 1), ("deepseek-v4-pro-0813", 61, 7168, 3),
])
def test_v4_family_hc_tensors_exact(model, n_layers, dim, stages):
    inv = build_inventory(load_config(SAMPLES / f"{model}.hf.json"))
    hc = {t.name: (t.dtype, t.shape) for t in inv.tensors if "hc_" in t.name}
    expected = {}
    owners = [f"layers.{i}" for i in range(n_layers)] + [f"mtp.{s}" for s in range(stages)]
    for o in owners:
        for site in ("attn", "ffn"):
            expected[f"{o}.hc_{site}_fn"] = ("F32", (24, 4 * dim))
            expected[f"{o}.hc_{site}_base"] = ("F32", (24,))
            expected[f"{o}.hc_{site}_scale"] = ("F32", (3,))
    for p in ("", f"mtp.{stages - 1}."):
        expected[f"{p}hc_head_fn"] = ("F32", (4, 4 * dim))
        expected[f"{p}hc_head_base"] = ("F32", (4,))
        expected[f"{p}hc_head_scale"] = ("F32", (1,))
    assert hc == expected
    assert all(t.exact for t in inv.tensors if "hc_" in t.name)
    assert inv.exact and inv.release is not None  # a published release: all of it (test_layouts.py)


def test_v4_config_of_no_release_is_best_effort_outside_hc():
    inv = build_inventory(load_config(SAMPLES / "tiny-v4.hf.json"))
    assert inv.release is None and not inv.exact
    assert {t.name for t in inv.tensors if t.exact} == {t.name for t in inv.tensors if "hc_" in t.name}


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.json")), ids=lambda p: p.name)
def test_hc_only_inventory_matches_full(path):
    cfg = load_config(path)
    full = [(t.name, t.shape, t.dtype) for t in build_inventory(cfg).tensors if re.search(r"(^|\.)hc_", t.name)]
    quick = [(t.name, t.shape, t.dtype) for t in build_hc_inventory(cfg)]
    assert sorted(full) == sorted(quick)
    assert len(hc_sites(cfg)) == 2 * (cfg.n_layers + cfg.n_stages) + (2 if cfg.has_head_mix and cfg.n_stages else 0)


def test_names_unique_and_logical_counts():
    inv = build_inventory(load_config(SAMPLES / "tiny-v4.1.json"))
    names = [t.name for t in inv.tensors]
    assert len(names) == len(set(names))
    w = inv.by_name()["layers.0.ffn.experts.0.w1.weight"]
    assert w.fp4_packed and w.logical_params == 2 * w.elements
    assert inv.by_name()["layers.0.ffn.experts.0.w1.scale"].logical_params == 0


# --- experts by group: the same tensors as one by one, and verify still names one tensor of a group


def _per_tensor(cfg):
    """The inventory with every expert tensor written through add() one by one (fp4/fp8): the
    rule the expert-group template must equal."""
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


@pytest.mark.parametrize("path", ALL_CONFIGS, ids=lambda p: p.name)
def test_expert_groups_match_per_tensor_inventory(path):
    cfg = load_config(path)
    got = INV._inventory(cfg, plan_layers(cfg))
    want = _per_tensor(cfg)
    assert got.tensors == want.tensors
    assert got.release == want.release
    # the columns are the records', and the byte total kept while building is their sum
    assert tuple(map(list, zip(*want.tensors))) == tuple(got.columns)
    assert got.total_size == sum(t.nbytes for t in want.tensors)
    assert got.by_name() == {t.name: t for t in want.tensors}


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

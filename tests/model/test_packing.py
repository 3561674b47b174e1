"""The release's packed-fp4 rule (model/packing.py) is the one figure of logical parameters: the
inventory a config implies, inspect's totals from header columns and diff's view agree, tensor by
tensor and in all, on a checkpoint make-checkpoint wrote, and on widths no fp4 layout has."""

import math

from ckpt_tools import tiny, write_shard
from conftest import SAMPLES
from hccli.checkpoint.view import open_view
from hccli.inspecting.report import build_inspect
from hccli.model.config.model import load_config
from hccli.model.inventory import build_inventory
from hccli.model.packing import FP4_PER_BYTE, fp4_scale_shape, release_params


def test_inventory_inspect_and_diff_give_one_figure(tmp_path):
    from hccli.diffing.diff import build_diff

    config = SAMPLES / "tiny-v4.1.json"  # a release-style config with fp4 experts
    inv = build_inventory(load_config(config))
    fp4 = [t for t in inv.tensors if t.fp4_packed]
    assert fp4 and all(t.dtype == "I8" for t in fp4)  # the figure below depends on the rule
    want = {t.name: t.logical_params for t in inv.tensors}
    total = sum(want.values())
    assert total > sum(t.elements for t in inv.tensors if not t.is_scale)  # fp4 bytes counted twice

    ck = tiny(tmp_path / "ck")
    view = open_view(ck)
    seen = {t.stored_name: t.logical_params for t in view.others.values()}
    seen.update((t.stored_name, math.prod(t.shape)) for t in view.hc.values())
    assert seen == want
    assert build_inspect(ck).logical_params == total
    report = build_diff(view, open_view(ck))
    assert sum(c.params_a for c in report.components) == sum(c.params_b for c in report.components) == total


def test_widths_no_fp4_layout_has_count_a_byte_each(tmp_path):
    """An I8 weight of 24 bytes a row holds 48 fp4 values in one and a half blocks: no release
    writes it (config.json's bounds keep fp4 widths to whole blocks), so its bytes are I8 values,
    whether the scale beside it is floored or rounded up."""
    e = "layers.0.ffn.experts.0"
    entries = [(f"{e}.w1.weight", "I8", (4, 32), bytes(128)), (f"{e}.w1.scale", "F8_E8M0", (4, 2), bytes(8)),
               (f"{e}.w2.weight", "I8", (4, 24), bytes(96)), (f"{e}.w2.scale", "F8_E8M0", (4, 1), bytes(4)),
               (f"{e}.w3.weight", "I8", (4, 24), bytes(96)), (f"{e}.w3.scale", "F8_E8M0", (4, 2), bytes(8))]
    f = tmp_path / "model.safetensors"
    write_shard(f, entries)
    expected = 4 * 32 * FP4_PER_BYTE + 4 * 24 + 4 * 24
    assert fp4_scale_shape((4, 32)) == (4, 2) and fp4_scale_shape((4, 24)) is None
    sigs = {n: (d, s) for n, d, s, _ in entries}
    assert sum(release_params(n, d, s, math.prod(s), sigs.get) for n, d, s, _ in entries) == expected
    assert build_inspect(f).logical_params == expected
    assert sum(t.logical_params for t in open_view(f).others.values()) == expected

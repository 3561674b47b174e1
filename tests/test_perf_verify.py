"""The fast paths verify takes (inventory per expert group, placement arithmetic, fn scan)
against the plain per-tensor rules they replace, and the findings they must not drop."""

import pytest

from conftest import SAMPLES
from hccli import inventory as INV
from hccli.config import load_config
from hccli.layers import plan_layers

CONFIGS = sorted(p.name for p in SAMPLES.glob("*.json"))


def _per_tensor(cfg):
    """The inventory with every expert written through expert_linear, as before the fast path."""
    def experts(b, prefix, n, inter, dim):
        for x in range(n):
            for w, (o, i) in (("w1", (inter, dim)), ("w3", (inter, dim)), ("w2", (dim, inter))):
                b.expert_linear(f"{prefix}{x}.{w}", o, i, "routed_experts")

    fast = INV._experts
    INV._experts = experts
    try:
        return INV._inventory(cfg, plan_layers(cfg))
    finally:
        INV._experts = fast


@pytest.mark.parametrize("name", CONFIGS)
def test_expert_groups_match_per_tensor_inventory(name):
    cfg = load_config(SAMPLES / name)
    got = INV._inventory(cfg, plan_layers(cfg))
    want = _per_tensor(cfg)
    assert got.tensors == want.tensors
    assert got.release == want.release

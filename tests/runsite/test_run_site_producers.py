"""`hc run-site` on checkpoints written by mlx-lm and compressed-tensors themselves: the same
site outputs as on the source they were converted from (their HC tensors are kept float32)."""

from __future__ import annotations

import pytest
from conftest import run_hc

from hccli.names import dialects as D


def _sites(path) -> tuple[dict, dict]:
    r = run_hc("run-site", str(path), "--tokens", "4", "--json")
    assert r.exit_code == 0, (r.stderr, r.stdout[-2000:])
    doc = r.json()
    return doc, {s["key"]: s for s in doc["sites"]}


def _same_backbone(made_sites: dict, source_sites: dict) -> int:
    shared = [k for k in made_sites if k in source_sites and k.split(".")[1] in ("attn", "ffn")]
    for k in shared:
        a, b = made_sites[k], source_sites[k]
        assert {f: a[f] for f in ("pre", "post")} == {f: b[f] for f in ("pre", "post")}, k
    return len(shared)


@pytest.fixture(scope="module")
def mlx_made(tmp_path_factory):
    from mlx_fixtures import release_and_conversions

    return release_and_conversions(tmp_path_factory.mktemp("mlx-site"))


@pytest.mark.parametrize("kind", ["plain", "q4"])
def test_run_site_on_mlx_lm_conversions(mlx_made, kind):
    doc, sites = _sites(mlx_made[kind])
    assert doc["dialect"] == D.MLX_LM and doc["family"] == "v4.1"
    _, source = _sites(mlx_made["release"])
    backbone = [k for k in source if k.split(".")[1] in ("attn", "ffn") and int(k.split(".")[0]) < 8]
    assert len(backbone) == 2 * 8 and _same_backbone(sites, source) >= len(backbone)  # every layer's two sites


@pytest.mark.parametrize("scheme", ["W4A16", "W8A8"])
def test_run_site_on_compressed_tensors_saves(tmp_path, scheme):
    from ct_fixtures import SCHEMES, compressed_tensors, save_compressed

    assert scheme in SCHEMES
    compressed_tensors()
    doc, sites = _sites(save_compressed(tmp_path / scheme, scheme)[1])
    assert doc["dialect"] == D.COMPRESSED_TENSORS and doc["family"] == "v4"
    assert sum(1 for k in sites if k.split(".")[1] in ("attn", "ffn")) >= 2 * 2

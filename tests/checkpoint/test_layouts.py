"""The five published releases: figures from their public index files and headers,
and where each tensor lies (issue 12), pinned from count-params and from phantoms."""

import dataclasses
import json
import re
from pathlib import Path

import pytest

from conftest import SAMPLES, run_hc
from hccli.model.config.model import load_config
from hccli.model.inventory import build_inventory

# release: (shards, tensors, index total_size), as published
PUBLISHED = {
    "deepseek-v4-flash": (46, 69_187, 159_609_485_896),
    "deepseek-v4-flash-0731": (48, 72_317, 166_878_536_440),
    "deepseek-v4-pro": (64, 145_116, 864_704_792_696),
    "deepseek-v4-pro-0813": (66, 149_782, 892_727_580_904),
    "deepseek-v4.1-flash": (48, 96_085, 510_286_023_000),
}
LAYERS = {"deepseek-v4-flash": 43, "deepseek-v4-flash-0731": 43, "deepseek-v4-pro": 61, "deepseek-v4-pro-0813": 61,
          "deepseek-v4.1-flash": 40}


def published_shard(release: str, name: str) -> int:
    """The placement rules of issue 12, written out independently of hccli/model/releases.py."""
    n_layers = LAYERS[release]
    m = re.match(r"(layers|mtp)\.(\d+)\.", name)
    if release == "deepseek-v4.1-flash":
        if name.startswith(("vision.", "aligner.", "image_")):
            return 1
        if name == "embed.weight":
            return 2
        if name.startswith("layers.1.engram.embed."):
            return 47
        if name.startswith("layers.14.engram.embed."):
            return 48
        if m and m[1] == "layers":
            return int(m[2]) + 3
        if name in ("head.weight", "norm.weight"):
            return 43
        assert m and m[1] == "mtp", name
        return 44 + int(m[2])
    if name == "embed.weight":
        return 1
    if m and m[1] == "layers":
        return int(m[2]) + 2
    first_stage = {"deepseek-v4-flash": 46, "deepseek-v4-pro": 64, "deepseek-v4-flash-0731": 46,
                   "deepseek-v4-pro-0813": 64}[release]
    if name in ("head.weight", "norm.weight") or name.startswith("hc_head_"):
        assert first_stage - 1 == n_layers + 2
        return first_stage - 1
    assert m and m[1] == "mtp", name
    return first_stage + int(m[2])


@pytest.fixture(params=sorted(PUBLISHED))
def phantom(request, phantoms):
    return request.param, *phantoms(request.param)


@pytest.mark.parametrize("style", ["json", "hf.json"])
@pytest.mark.parametrize("release", sorted(PUBLISHED))
def test_count_params_gives_the_published_figures(release, style):
    m = run_hc("count-params", SAMPLES / f"{release}.{style}", "--model", "--json").json()["model"]
    _, tensors, total = PUBLISHED[release]
    assert (m["tensors"], m["stored_bytes"]) == (tensors, total)
    assert m["exact"] is True  # recognised as the release: every tensor exact


def test_phantom_figures_and_placement(phantom):
    release, out, doc = phantom
    shards, tensors, total = PUBLISHED[release]
    assert (doc["shards"], doc["tensors"], doc["total_size"]) == (shards, tensors, total)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == total and len(index["weight_map"]) == tensors
    files = sorted(p.name for p in out.glob("*.safetensors"))
    assert files == [f"model-{k:05d}-of-{shards:05d}.safetensors" for k in range(1, shards + 1)]
    wrong = [(n, f) for n, f in index["weight_map"].items() if f != files[published_shard(release, n) - 1]]
    assert not wrong, wrong[:5]


def test_phantom_headers_carry_no_metadata_and_files_have_header_plus_data(phantom):
    release, out, _ = phantom
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    in_file: dict[str, set[str]] = {}
    for n, f in index.items():
        in_file.setdefault(f, set()).add(n)
    for p in sorted(out.glob("*.safetensors")):
        raw = p.open("rb").read(8)
        n = int.from_bytes(raw, "little")
        with p.open("rb") as f:
            f.seek(8)
            header = json.loads(f.read(n))
        assert "__metadata__" not in header and n % 8 == 0, p.name
        assert set(header) == in_file[p.name]
        end = max(v["data_offsets"][1] for v in header.values())
        assert p.stat().st_size == 8 + n + end, p.name


def test_phantom_verifies_clean_with_no_placement_finding(phantom):
    release, out, _ = phantom
    r = run_hc("inspect", out, "--verify", "--json")
    assert r.exit_code == 0 and r.json()["findings"] == []


@pytest.mark.parametrize("release", sorted(PUBLISHED))
def test_inventory_is_recognised_as_the_release(release):
    inv = build_inventory(load_config(SAMPLES / f"{release}.hf.json"))
    assert inv.release is not None and inv.exact
    assert (inv.release.shards, inv.release.tensors, inv.release.total_size) == PUBLISHED[release]


@pytest.mark.parametrize("config", ["tiny-v4.1.json", "tiny-v4.hf.json"])
def test_other_configs_are_no_release(config):
    inv = build_inventory(load_config(SAMPLES / config))
    assert inv.release is None
    assert inv.exact == (config == "tiny-v4.1.json")  # V4.1 rules are the reference code's; V4 best effort


def test_a_release_lookalike_with_another_inventory_is_best_effort():
    cfg = load_config(SAMPLES / "deepseek-v4-flash.json")
    assert build_inventory(cfg).release is not None
    other = dataclasses.replace(cfg, moe_inter_dim=cfg.moe_inter_dim + 128)  # same family, dims, layers, stages
    inv = build_inventory(other)
    assert inv.release is None and not inv.exact
    assert all(t.exact for t in inv.tensors if "hc_" in t.name)


def test_count_params_says_best_effort_only_outside_the_releases():
    assert "best effort" not in run_hc("count-params", SAMPLES / "deepseek-v4-pro.json", "--model").stdout
    r = run_hc("count-params", SAMPLES / "tiny-v4.hf.json", "--model", "--json")
    assert r.json()["model"]["exact"] is False


def test_readme_exactness_column_is_what_the_inventory_says():
    from conftest import ROOT

    rows = re.findall(r"^\| `(sample_configs/[\w.\-]+\.json)` \|.*\| yes: (\d+) shards, ([\d,]+) tensors \|$",
                      (ROOT / "docs" / "commands" / "count-params.md").read_text(), re.M)
    assert len(rows) == 5
    for path, shards, tensors in rows:
        m = run_hc("count-params", ROOT / path, "--model", "--json").json()["model"]
        assert m["exact"] is True and m["tensors"] == int(tensors.replace(",", "")), path
        inv = build_inventory(load_config(ROOT / path))
        assert inv.release is not None and inv.n_shards == int(shards), path
        assert PUBLISHED[Path(path).stem][:2] == (int(shards), m["tensors"])

"""transformers-written configs read as the release config they came from.

The transformers configs are written by transformers itself (DeepseekV4Config
built from the bundled release hub config, save_pretrained to tmp_path)."""

from __future__ import annotations

import json

import pytest
from conftest import SAMPLES, run_hc
from transformers_fixtures import hub_config, save_tiny_model, save_transformers_config

from hccli.model.config.model import load_config, parse_config
from hccli.model.config.hf import is_transformers_config, release_config_from_transformers, transformers_params
from hccli.base.errors import HcError
from hccli.model.inventory import build_inventory
from hccli.model.layers import plan_layers

RELEASES = ["deepseek-v4-flash.hf.json", "deepseek-v4-pro.hf.json",
            "deepseek-v4-flash-0731.hf.json", "deepseek-v4-pro-0813.hf.json"]


def _count(path) -> dict:
    r = run_hc("count-params", path, "--model", "--json")
    assert r.exit_code == 0, r.stderr
    d = r.json()
    d["config"].pop("path")
    return d


@pytest.mark.parametrize("name", RELEASES)
def test_transformers_config_counts_as_its_release(name, tmp_path):
    written = json.loads(save_transformers_config(name, tmp_path / "tf").read_text())
    assert is_transformers_config(written)
    mapped = tmp_path / "mapped.json"
    mapped.write_text(json.dumps(release_config_from_transformers(written, "tf/config.json")))

    release = _count(SAMPLES / name)
    assert _count(mapped) == release  # layer plan, HC figures, inventory totals, notes: all of it

    a, b = load_config(mapped), load_config(SAMPLES / name)
    assert a.compress_ratios == b.compress_ratios and a.n_hash_layers == b.n_hash_layers
    assert plan_layers(a) == plan_layers(b)


def test_unmapped_transformers_config_would_miscount(tmp_path):
    """Why the mapping exists: read raw, transformers' keys lose the compressed layers;
    load_config maps them (config.parse_config's hook) and counts as the release."""
    from hccli.model.config.model import from_mapping

    p = save_transformers_config("deepseek-v4-flash.hf.json", tmp_path / "tf")
    raw = from_mapping(json.loads(p.read_text()), str(p))
    assert set(raw.compress_ratios) == {0}
    release = load_config(SAMPLES / "deepseek-v4-flash.hf.json")
    assert len(build_inventory(raw).tensors) != len(build_inventory(release).tensors)
    assert len(build_inventory(load_config(p)).tensors) == len(build_inventory(release).tensors)


def test_rope_and_dtype_come_back(tmp_path):
    written = json.loads(save_transformers_config("deepseek-v4-flash.hf.json", tmp_path).read_text())
    out = release_config_from_transformers(written)
    hub = hub_config("deepseek-v4-flash.hf.json")
    assert out["rope_theta"] == hub["rope_theta"] and out["compress_rope_theta"] == hub["compress_rope_theta"]
    assert out["rope_scaling"] == hub["rope_scaling"]
    assert out["torch_dtype"] == hub["torch_dtype"]
    assert not {"layer_types", "mlp_layer_types", "rope_parameters", "dtype"} & set(out)


@pytest.mark.parametrize("mutate, key", [
    (lambda d: d["layer_types"].__setitem__(4, "full_attention"), "layer_types[4]"),
    (lambda d: d["layer_types"].pop(), "layer_types"),
    (lambda d: d["mlp_layer_types"].__setitem__(10, "hash_moe"), "mlp_layer_types[10]"),
    (lambda d: d["compress_rates"].__setitem__("heavily_compressed_attention", 0),
     "compress_rates.heavily_compressed_attention"),
    (lambda d: d.__setitem__("num_hidden_layers", "43"), "num_hidden_layers"),
])
def test_bad_transformers_config_names_the_key(tmp_path, mutate, key):
    d = json.loads(save_transformers_config("deepseek-v4-flash.hf.json", tmp_path).read_text())
    mutate(d)
    with pytest.raises(HcError) as e:
        release_config_from_transformers(d, "x/config.json")
    assert f"x/config.json: key '{key}'" in str(e.value)


@pytest.mark.parametrize("release", ["tiny-v4.hf.json"])
def test_transformers_params_is_num_parameters(tmp_path, release):
    model, out = save_tiny_model(tmp_path / "m", release)
    cfg = parse_config(json.dumps(release_config_from_transformers(json.loads((out / "config.json").read_text()))),
                       "saved")
    count = transformers_params(build_inventory(cfg).tensors)
    assert count.params == model.num_parameters()
    # what it leaves out is exactly the persistent buffers transformers saves
    buffers = {n: b.numel() for n, b in model.named_buffers() if n.endswith(("tid2eid", "e_score_correction_bias"))}
    assert count.left_out["hash-routing tables tid2eid (buffers)"] == sum(
        v for n, v in buffers.items() if n.endswith("tid2eid"))
    assert count.left_out["router correction biases (buffers)"] == sum(
        v for n, v in buffers.items() if n.endswith("e_score_correction_bias"))
    assert count.left_out["stages (not built by transformers)"] > 0



def test_transformers_params_figure_of_count_params(tmp_path):
    # `count-params --model --json` reports model.num_parameters() of the same model built by
    # transformers (V4 family), and what that count leaves out; V4.1 has no transformers model
    from conftest import run_hc
    from transformers_fixtures import save_tiny_model

    model, _ = save_tiny_model(tmp_path / "m", "tiny-v4.hf.json")
    doc = run_hc("count-params", str(SAMPLES / "tiny-v4.hf.json"), "--model", "--json").json()["model"]
    assert doc["transformers_params"] == model.num_parameters()
    left = doc["transformers_params_left_out"]
    assert doc["transformers_params"] + sum(left.values()) == doc["logical_params"]
    assert left["stages (not built by transformers)"] == doc["stage_params"]
    human = run_hc("count-params", str(SAMPLES / "tiny-v4.hf.json"), "--model").stdout
    assert f"{model.num_parameters():,}" in human and "transformers_params" in human
    v41 = run_hc("count-params", "--model", "--json").json()["model"]
    assert "transformers_params" not in v41


def test_readme_transformers_params_figure():
    from conftest import ROOT

    m = run_hc("count-params", str(SAMPLES / "deepseek-v4-flash.json"), "--model", "--json").json()["model"]
    row = next(line for line in (ROOT / "docs" / "commands" / "count-params.md").read_text().splitlines()
               if line.startswith("| `transformers_params`"))
    assert f"{m['transformers_params']:,}" in row
    assert f"{m['text_path_params'] - m['transformers_params']:,} under the text path" in row

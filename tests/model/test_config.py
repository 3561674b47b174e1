import json

import pytest

from conftest import ALL_CONFIGS, PUBLISHED, SAMPLES
from hccli.model.config.model import load_config, parse_config
from hccli.base.errors import HcError


@pytest.mark.parametrize("path", ALL_CONFIGS, ids=lambda p: p.name)
def test_every_sample_config_loads(path):
    cfg = load_config(path)
    assert cfg.n_layers > 0
    assert len(cfg.compress_ratios) == cfg.n_layers + cfg.n_stages
    assert cfg.hc_mult == 4


def test_ten_published_configs_are_bundled():
    assert len(PUBLISHED) == 10


@pytest.mark.parametrize("model", ["deepseek-v4.1-flash", "deepseek-v4-flash", "deepseek-v4-flash-0731",
                                   "deepseek-v4-pro", "deepseek-v4-pro-0813", "tiny-v4.1"])
def test_hub_and_inference_styles_agree(model):
    inf = load_config(SAMPLES / f"{model}.json")
    hub = load_config(SAMPLES / f"{model}.hf.json")
    assert (inf.style, hub.style) == ("inference", "hub")
    for field in ("dim", "n_layers", "n_stages", "vocab_size", "n_heads", "compress_ratios", "kv_source_layers",
                  "index_source_layers", "engram_layer_ids", "engram_num_embeddings", "hc_mult",
                  "hc_sinkhorn_iters", "hc_eps", "n_routed_experts", "moe_inter_dim", "family", "fp8_block",
                  "stage_kind", "n_hash_layers", "dspark_target_layer_ids", "vision"):
        assert getattr(inf, field) == getattr(hub, field), field


def test_v41_facts():
    cfg = load_config(SAMPLES / "deepseek-v4.1-flash.json")
    assert cfg.family == "v4.1" and not cfg.has_head_mix
    assert cfg.kv_source_layers == (2, 8, 14, 20)
    assert cfg.n_stages == 3 and cfg.stage_kind == "dspark"
    assert cfg.vision is not None and cfg.vision.n_layers == 32


def test_0731_hub_config_declares_one_stage_but_carries_three():
    cfg = load_config(SAMPLES / "deepseek-v4-flash-0731.hf.json")
    assert cfg.n_stages == 3
    assert any("num_nextn_predict_layers" in n for n in cfg.notes)


def test_v4_defaults_for_absent_keys():
    cfg = load_config(SAMPLES / "deepseek-v4-flash.json")  # no hc_eps, no n_mtp_layers
    assert cfg.hc_eps == 1e-6
    assert cfg.n_stages == 1 and cfg.stage_kind == "mtp"
    assert cfg.family == "v4" and cfg.has_head_mix and cfg.engram_layer_ids == ()


def _tiny(**changes):
    d = json.loads((SAMPLES / "tiny-v4.1.json").read_text())
    d.update(changes)
    return d


def _err(data, source="cfg.json") -> str:
    with pytest.raises(HcError) as ei:
        parse_config(json.dumps(data) if not isinstance(data, (bytes, str)) else data, source)
    assert ei.value.exit_code == 2
    msg = ei.value.message
    assert "\n" not in msg and source in msg
    return msg


def test_unknown_keys_tolerated():
    assert parse_config(json.dumps(_tiny(something_new=[1, 2])), "x").n_layers == 8


@pytest.mark.parametrize("changes, key", [
    ({"dim": "64"}, "'dim'"),
    ({"dim": True}, "'dim'"),
    ({"hc_mult": 0}, "'hc_mult'"),
    ({"hc_eps": "tiny"}, "'hc_eps'"),
    ({"compress_ratios": [0, 0, 2]}, "'compress_ratios'"),
    ({"compress_ratios": "0,0"}, "'compress_ratios'"),
    ({"kv_source_layers": [2, 50]}, "'kv_source_layers[1]'"),
    ({"kv_source_layers": [0]}, "'kv_source_layers[0]'"),
    ({"engram_layer_ids": [1, 9]}, "'engram_layer_ids[1]'"),
    ({"engram_num_embeddings": [1, 2]}, "'engram_num_embeddings'"),
    ({"dspark_target_layer_ids": [6]}, "'dspark_target_layer_ids'"),
    ({"n_layers": None}, "'n_layers'"),
])
def test_bad_values_name_the_key(changes, key):
    assert key in _err(_tiny(**changes))


def test_hub_errors_name_the_nested_key():
    d = json.loads((SAMPLES / "tiny-v4.1.hf.json").read_text())
    d["text_config"]["kv_source_layer_ids"] = [2, 99]
    assert "'text_config.kv_source_layer_ids[1]'" in _err(d)
    d = json.loads((SAMPLES / "tiny-v4.1.hf.json").read_text())
    del d["text_config"]["hidden_size"]
    assert "'text_config.hidden_size'" in _err(d)


@pytest.mark.parametrize("raw, words", [
    ("{", "not valid JSON"),
    ("[1, 2]", "expected an object"),
    (b"\xff\xfe", "not UTF-8"),
    ('{"dim": NaN}', "not valid JSON"),
])
def test_not_a_config(raw, words):
    assert words in _err(raw)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(HcError, match="no such file"):
        load_config(tmp_path / "nope.json")
    with pytest.raises(HcError, match="without a config.json"):
        load_config(tmp_path)
    (tmp_path / "config.json").write_text((SAMPLES / "tiny-v4.1.json").read_text())
    assert load_config(tmp_path).n_layers == 8

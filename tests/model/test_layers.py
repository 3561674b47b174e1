from conftest import SAMPLES
from hccli.model.config.model import load_config
from hccli.model.layers import plan_layers


def test_v41_flash_groups():
    plan = plan_layers(load_config(SAMPLES / "deepseek-v4.1-flash.json"))
    assert [g.label for g in plan.groups] == ["0-1", "2-7", "8-13", "14-19", "20-39", "40-42"]
    assert [g.kind for g in plan.groups] == ["window", "kv", "kv", "kv", "kv", "stages"]
    roles = {layer.index: layer.role for layer in plan.layers}
    assert roles[0] == roles[1] == "window"
    assert [i for i in range(40) if roles[i] == "source"] == [2, 8, 14, 20]
    assert [i for i in range(40) if roles[i] == "reindex"] == [24, 28, 32, 36]
    assert sum(1 for i in range(2, 8) if roles[i] == "reuse") == 5
    assert [layer.index for layer in plan.layers if layer.engram] == [1, 14]
    assert [layer.name for layer in plan.stages] == ["mtp.0", "mtp.1", "mtp.2"]
    assert plan.layers[23].kv_source == 20 and plan.layers[13].kv_source == 8


def test_groups_follow_the_config_not_the_model(tmp_path):
    import json

    d = json.loads((SAMPLES / "tiny-v4.1.json").read_text())
    plan = plan_layers(load_config(SAMPLES / "tiny-v4.1.json"))
    assert [g.label for g in plan.groups] == ["0-1", "2-4", "5-7", "8-9"]
    d["kv_source_layers"] = [2, 4]
    d["index_source_layers"] = [2, 4, 6]
    p = tmp_path / "c.json"
    p.write_text(json.dumps(d))
    plan = plan_layers(load_config(p))
    assert [g.label for g in plan.groups] == ["0-1", "2-3", "4-7", "8-9"]
    assert plan.layers[6].role == "reindex"


def test_v4_without_sources_forms_compressed_runs():
    plan = plan_layers(load_config(SAMPLES / "deepseek-v4-pro-0813.json"))
    assert [g.label for g in plan.groups] == ["0-60", "61-63"]
    assert all(layer.role == "compressed" for layer in plan.backbone)
    assert [layer.index for layer in plan.backbone if layer.hash_routed] == [0, 1, 2]

"""`hc count-params` through the CLI, asserting on JSON."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ALL_CONFIGS, SAMPLES, run_hc
from hccli.model.config.model import load_config


def test_seed_figure_by_group_and_role():
    r = run_hc("count-params", "--group", "2-7", "--role", "reuse", "--site", "attn", "--component", "comb", "--json")
    assert r.exit_code == 0, r.stderr
    sel = r.json()["selection"]
    assert (sel["per_instance"], sel["instances"], sel["total"]) == (17, 5, 85)
    assert sel["lines"][0]["text"] == "Stream combination (attn): 17 x 5 layers = 85"


def test_seed_figure_by_layers_and_text():
    r = run_hc("count-params", "--layers", "3-7", "--site", "attn", "--component", "combination")
    assert r.exit_code == 0, r.stderr
    assert "Stream combination (attn): 17 x 5 layers = 85" in r.stdout


@pytest.mark.parametrize("comp, per", [("pre", 5), ("read", 5), ("post", 5), ("fn", 24 * 4 * 5120)])
def test_components_per_instance(comp, per):
    sel = run_hc("count-params", "-l", "2,8,14", "-s", "ffn", "-c", comp, "--json").json()["selection"]
    assert (sel["per_instance"], sel["instances"], sel["total"]) == (per, 3, 3 * per)


def expected_text_path_hc(cfg):
    hc, d = cfg.hc_mult, cfg.dim
    mix = (2 + hc) * hc
    site = mix + 3 + mix * hc * d
    head = (hc + 1 + hc * hc * d) if cfg.has_head_mix else 0
    return cfg.n_layers * 2 * site + head, cfg.n_stages * 2 * site + (head if cfg.n_stages else 0)


@pytest.mark.parametrize("path", ALL_CONFIGS, ids=lambda p: p.name)
def test_hc_totals_of_every_bundled_config(path):
    doc = run_hc("count-params", path, "--json").json()
    cfg = load_config(path)
    text, stages = expected_text_path_hc(cfg)
    assert doc["selection"]["total"] == doc["text_path"]["hc_params"] == text
    assert doc["stages"]["hc_params"] == stages
    assert sum(g["hc_params"] for g in doc["groups"]) + doc["text_path"]["head_mix_params"] == text + stages
    with_stages = run_hc("count-params", path, "--stages", "--json").json()["selection"]["total"]
    assert with_stages == text + stages


def test_readme_hc_table_is_what_the_command_prints():
    # every row of the docs' table of bundled configs, against count-params --model --json
    import re

    from conftest import ROOT

    rows = re.findall(r"^\| `(sample_configs/[\w.\-]+\.json)` \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \((\d+) (\w+)\) "
                      r"\| ([\d.,]+) GB \| ([\d.,]+) G \| ([\d.,]+) G \|",
                      (ROOT / "docs" / "commands" / "count-params.md").read_text(), re.M)
    assert len(rows) == 5
    num = lambda s: float(s.replace(",", ""))  # noqa: E731
    for path, text, head, stages, n_stages, kind, gb, logical, text_path in rows:
        doc = run_hc("count-params", ROOT / path, "--model", "--json").json()
        assert doc["text_path"]["hc_params"] == num(text), path
        assert doc["text_path"]["head_mix_params"] == num(head), path
        assert (doc["stages"]["hc_params"], doc["stages"]["count"], doc["stages"]["kind"]) == (num(stages),
                                                                                               int(n_stages), kind)
        m = doc["model"]
        assert f"{m['stored_bytes'] / 1e9:,.2f}" == gb and f"{m['logical_params'] / 1e9:,.2f}" == logical, path
        assert f"{m['text_path_params'] / 1e9:,.2f}" == text_path, path


@pytest.mark.parametrize("path", [SAMPLES / "deepseek-v4.1-flash.json", SAMPLES / "tiny-v4.1.json",
                                  SAMPLES / "tiny-v4.hf.json", SAMPLES / "deepseek-v4-pro-0813.json"],
                         ids=lambda p: p.name)
def test_model_totals_conventions_add_up(path):
    m = run_hc("count-params", path, "--model", "--json").json()["model"]
    for key in ("tensors", "stored_bytes", "stored_elements", "logical_params", "text_path_params"):
        assert isinstance(m[key], int) and m[key] > 0
    i8 = m["dtypes"].get("I8", {}).get("elements", 0)  # packed fp4: two parameters a byte
    assert m["logical_params"] == m["stored_elements"] - m["scale_elements"] + i8
    assert m["scale_elements"] == m["dtypes"]["F8_E8M0"]["elements"]
    assert m["text_path_params"] + m["vision_params"] + m["stage_params"] == m["logical_params"]
    assert m["text_path_backbone_params"] + m["text_path_engram_params"] == m["text_path_params"]
    assert sum(c["stored_bytes"] for c in m["components"].values()) == m["stored_bytes"]
    assert sum(d["bytes"] for d in m["dtypes"].values()) == m["stored_bytes"]


def test_v41_model_is_exact_and_v4_says_best_effort():
    assert run_hc("count-params", "--model", "--json").json()["model"]["exact"] is True
    # a V4 config that is none of the published releases (those are exact: test_layouts.py)
    r = run_hc("count-params", SAMPLES / "tiny-v4.hf.json", "--model")
    assert "best effort" in r.stdout


def test_human_output_default():
    r = run_hc("count-params")
    assert r.exit_code == 0
    for words in ("Stream combination (comb)", "16 offsets + 1 scale", "2-7", "KV source 2, 5 reusing",
                  "DSpark stages, reported beside"):
        assert words in r.stdout


def test_by_layer_json():
    rows = run_hc("count-params", "--by-layer", "--json").json()["layers"]
    assert len(rows) == 43 and rows[1]["roles"] == ["window", "engram"] and rows[40]["name"] == "mtp.0"


@pytest.mark.parametrize("args, words", [
    (["/nonexistent/config.json"], "no such file"),
    (["--layers", "3-99"], "--layers 3-99: this model has layers 0-39 and mtp.0-mtp.2 (40-42); no head mix"),
    (["--layers", "7-3"], "runs backwards"),
    (["--layers", "x"], "not a layer"),
    (["--site", "mlp2"], "--site"),
    (["--component", "nope"], "--component"),
    (["--role", "boss"], "--role"),
    (["--group", "77"], "the groups are 0-1, 2-7, 8-13"),
    (["--layers", "3", "--site", "head"], "matches no HC site"),
    ([str(SAMPLES / "deepseek-v4-flash.json"), "--site", "head", "--component", "comb"], "pre and fn only"),
])
def test_bad_input_one_line_exit_2(args, words):
    r = run_hc("count-params", *args)
    assert r.exit_code == 2
    assert words in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("content, words", [
    ("{not json", "not valid JSON"),
    ('{"dim": 64}', "is missing"),
    (json.dumps({**json.loads((SAMPLES / "tiny-v4.1.json").read_text()), "n_heads": "4"}), "'n_heads'"),
    (json.dumps({**json.loads((SAMPLES / "tiny-v4.1.json").read_text()), "compress_ratios": [0, 0]}),
     "'compress_ratios'"),
])
def test_bad_config_files(tmp_path, content, words):
    p = tmp_path / "config.json"
    p.write_text(content)
    r = run_hc("count-params", p)
    assert r.exit_code == 2 and words in r.stderr and str(p) in r.stderr


def test_console_script_has_no_traceback_and_no_torch():
    # the real entry point, in a fresh interpreter: exit code, one line, torch never imported
    code = (
        "import sys, runpy\n"
        "sys.argv = ['hc', 'count-params', '--layers', '99']\n"
        "try:\n"
        "    from hccli.cli.app import main; main()\n"
        "except SystemExit as e:\n"
        "    bad = [m for m in ('torch', 'tilelang', 'numpy') if m in sys.modules]\n"
        "    print('EXIT', e.code, 'IMPORTED', bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "EXIT 2 IMPORTED []" in out.stdout, out.stdout + out.stderr
    assert out.stderr.count("\n") == 1 and "--layers 99: this model has layers 0-39" in out.stderr


def test_count_params_and_model_do_not_import_torch():
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from hccli.cli.app import register; app = register()\n"
        "r1 = CliRunner().invoke(app, ['count-params', '--json'])\n"
        "r2 = CliRunner().invoke(app, ['count-params', 'sample_configs/tiny-v4.1.json', '--model', '--json'])\n"
        "assert r1.exit_code == 0 and r2.exit_code == 0\n"
        "print(sorted(m for m in ('torch', 'tilelang') if m in sys.modules))\n"
    )
    from conftest import ROOT

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


_GOLDEN = json.loads((Path(__file__).parent / "golden" / "count_params_json.sha256.json").read_text())["documents"]


@pytest.mark.parametrize("args", sorted(_GOLDEN))
def test_json_documents_unchanged(args):
    # digests of the documents as they were before the report became typed rows
    import hashlib

    argv = [str(SAMPLES / a) if a.endswith(".json") else a for a in args.split()]
    doc = run_hc("count-params", *argv).json()
    # the envelope (issue 36) comes first; the body after it is the document these digests pin
    envelope = {k: doc.pop(k) for k in ("schema_version", "command", "exit_code", "warnings", "findings")}
    assert envelope == {"schema_version": 1, "command": "count-params", "exit_code": 0, "warnings": [],
                        "findings": []} and "verdict" not in doc
    doc["config"]["path"] = Path(doc["config"]["path"]).name
    if "model" in doc:  # whether an inventory is exact follows release recognition, tested on its own
        assert isinstance(doc["model"].pop("exact"), bool)
        # added since (issue 10): transformers' own count, tested in test_transformers_params_figure
        doc["model"].pop("transformers_params", None)
        doc["model"].pop("transformers_params_left_out", None)
    assert hashlib.sha256(json.dumps(doc, indent=2).encode()).hexdigest() == _GOLDEN[args]

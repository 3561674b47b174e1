"""count-params tables for people: at 80 columns (what a pipe gets) no number is cut."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, SAMPLES

_RUN = (
    "import json, sys\n"
    "from typer.testing import CliRunner\n"
    "from hccli.cli.app import register\n"
    "app = register()\n"
    "args = sys.argv[1:]\n"
    "human = CliRunner().invoke(app, ['count-params', *args])\n"
    "doc = CliRunner().invoke(app, ['count-params', *args, '--json'])\n"
    "print(json.dumps({'human': human.stdout, 'code': human.exit_code, 'doc': json.loads(doc.stdout)}))\n"
)


def _at_80_columns(*args: str) -> tuple[str, dict]:
    # a fresh interpreter: the console takes its width from COLUMNS when it is made
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", _RUN, *args], capture_output=True, text=True, timeout=120,
                         cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["code"] == 0
    return res["human"], res["doc"]


@pytest.mark.parametrize("config", ["deepseek-v4-pro-0813.json", "deepseek-v4.1-flash.json"])
def test_no_number_cut_at_80_columns(config):
    human, doc = _at_80_columns(str(SAMPLES / config), "--model", "--by-layer")
    assert "…" not in human and "..." not in human
    # piped output (CliRunner's stdout is not a terminal) is not wrapped: each line stays one line of data
    m = doc["model"]
    numbers = [m[k] for k in ("stored_bytes", "stored_elements", "logical_params", "text_path_params",
                              "stage_params", "text_path_hc_params")]
    numbers += [c[k] for c in m["components"].values() for k in ("stored_elements", "logical_params")]
    numbers += [d["bytes"] for d in m["dtypes"].values()]
    numbers += [g["hc_params"] for g in doc["groups"]] + [row["total"] for row in doc["layers"]]
    for n in numbers:
        assert f"{n:,}" in human, n
    for key in ("stored_elements_without_scales", "text_path_backbone_params"):  # JSON keys stay whole too
        assert key in human


def test_the_head_mix_table_is_not_called_per_layer(hc):
    out = hc("count-params", SAMPLES / "deepseek-v4-flash.json").stdout
    assert "The head mix (after the last layer)" in out and "One attention or FFN site (per layer)" in out
    assert "head mix (per layer)" not in out

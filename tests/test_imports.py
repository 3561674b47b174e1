"""What a command imports: `hc count-params` pulls in no heavy module it never uses, and
`hc inspect --json` (with --verify too) of a safetensors checkpoint loads neither numpy nor rich.
Checked in a fresh interpreter, because the test process itself has imported everything already."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt_tools import tiny

ROOT = Path(__file__).resolve().parents[1]

# main() ends count-params with os._exit after the atexit functions, so the probe is one of them
PROBE = """
import atexit, json, sys
def _report(path=sys.argv[1]):
    with open(path, "w") as f:
        json.dump(sorted(sys.modules), f)
atexit.register(_report)
sys.argv = ["hc", *sys.argv[2:]]
from hccli.cli.app import main
main()
"""

HEAVY = ("numpy", "torch", "tilelang", "safetensors", "huggingface_hub", "matplotlib")


def _modules(tmp_path: Path, *args: str) -> set[str]:
    out = tmp_path / "modules.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(out), *args], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(out.read_text()))


@pytest.mark.parametrize("args", [("count-params",), ("count-params", "--json"),
                                  ("count-params", "-g", "2-7", "-r", "reuse", "-s", "attn", "-c", "comb")])
def test_count_params_imports_nothing_heavy(tmp_path, args):
    mods = _modules(tmp_path, *args)
    assert "hccli.counting.report" in mods  # the probe saw the command run
    heavy = sorted(m for m in mods if m.split(".")[0] in HEAVY)
    assert not heavy, heavy
    assert "rich._emoji_codes" not in mods  # nothing printed by default could hold an emoji code
    # other commands are registered only for --help
    assert not {"hccli.cli.commands.inspect", "hccli.cli.commands.run_kernel", "hccli.cli.commands.bench"} & mods


def test_count_params_json_skips_rich_tables(tmp_path):
    assert "rich.table" not in _modules(tmp_path, "count-params", "--json")
    assert "hccli.counting.model" not in _modules(tmp_path, "count-params", "--json")


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    return tiny(tmp_path_factory.mktemp("imports") / "tiny")


def test_inspect_json_imports_no_numpy_nor_verify_nor_the_layer_plan(tiny_ckpt):
    code = ("import sys; from hccli.cli.app import main; sys.argv = ['hc', 'inspect', sys.argv[1], '--json'];\n"
            "import atexit; atexit.register(lambda: sys.stderr.write(' '.join(sorted(m for m in sys.modules if m in"
            " ('numpy', 'hccli.checkpoint.verify.checks', 'hccli.model.inventory', 'hccli.model.layers', 'torch', 'rich.console')))))"
            "\nmain()")
    r = subprocess.run([sys.executable, "-c", code, str(tiny_ckpt)], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["hc"]
    assert r.stderr.strip() == ""


def test_inspect_verify_json_of_safetensors_imports_no_numpy(tiny_ckpt):
    # the NaN/Inf scan of F32 values counts exponent bits in the bytes
    code = ("import sys; from hccli.cli.app import main; sys.argv = ['hc', 'inspect', sys.argv[1], '--verify',"
            " '--json'];\nimport atexit; atexit.register(lambda: sys.stderr.write(' '.join(sorted(m for m in"
            " sys.modules if m in ('numpy', 'torch', 'rich.console')))))\nmain()")
    r = subprocess.run([sys.executable, "-c", code, str(tiny_ckpt)], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["findings"] == []
    assert r.stderr.strip() == ""

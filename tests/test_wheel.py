"""The wheel holds the whole package: every module of the source tree and the bundled configs.

A package list written by hand once left hccli.model.config and hccli.counting out, and only an
install that is not editable showed it (`ModuleNotFoundError` at the first command). The wheel
is built from a copy of the source (a build writes build/ and *.egg-info beside its sources)
with the setuptools of this environment, so no network is needed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile

import pytest
from conftest import ROOT

pytest.importorskip("setuptools", minversion="70.1")  # builds wheels itself (no `wheel` package)

# what the build never reads: version control, environments, caches, earlier build products
_NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", ".device", "build", "dist", "*.egg-info", "__pycache__",
                                     ".pytest_cache", ".hypothesis", "tests", "benchmarks")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """(the names in the wheel built from this source tree, its entry_points.txt)"""
    src = tmp_path_factory.mktemp("src") / "hccli"
    shutil.copytree(ROOT, src, ignore=_NOT_SOURCE)
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "--disable-pip-version-check", "-w", str(out), str(src)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    wheels = list(out.glob("hccli-*.whl"))
    assert len(wheels) == 1, wheels
    with zipfile.ZipFile(wheels[0]) as z:
        names = set(z.namelist())
        return names, z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()


def test_every_module_of_the_source_tree_is_in_the_wheel(wheel):
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "hccli").rglob("*.py")}
    assert len(modules) > 100  # the tree was found
    assert sorted(modules - wheel[0]) == []


def test_the_bundled_configs_ship_inside_the_package(wheel):
    configs = {f"hccli/sample_configs/{p.name}" for p in (ROOT / "sample_configs").glob("*.json")}
    assert "hccli/sample_configs/deepseek-v4.1-flash.json" in configs  # count-params' default
    assert sorted((configs | {"hccli/sample_configs/__init__.py"}) - wheel[0]) == []


def test_the_console_script_is_declared(wheel):
    assert "hc = hccli.cli.app:main" in wheel[1].splitlines()

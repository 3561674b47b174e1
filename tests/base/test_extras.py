"""The install hint of an optional extra: in an editable checkout it names the checkout
(`pip install -e '.[plot]'`), elsewhere the released package; one helper for every hint."""

import json
import sys
from importlib import metadata

import pytest
from conftest import ROOT, run_hc

from hccli.base import extras


class _Dist:
    def __init__(self, direct_url):
        self.direct_url = direct_url

    def read_text(self, name):
        assert name == "direct_url.json"
        return self.direct_url


def _installed(monkeypatch, direct_url):
    def distribution(name):
        assert name == "hccli"
        if direct_url is None:
            raise metadata.PackageNotFoundError(name)
        return _Dist(direct_url)

    monkeypatch.setattr(metadata, "distribution", distribution)


def _editable(url):
    return json.dumps({"dir_info": {"editable": True}, "url": url})


@pytest.mark.parametrize("direct_url", [
    None,  # not installed (run from a source tree)
    json.dumps({"dir_info": {}, "url": "file:///somewhere"}),  # a wheel built from a checkout
    json.dumps({"url": "https://example.org/hccli.whl", "archive_info": {}}),
    "{not json",
    "",
])
def test_the_released_package_unless_installed_editable_from_here(monkeypatch, direct_url):
    _installed(monkeypatch, direct_url)
    assert extras.install_hint("plot") == "pip install 'hccli[plot]'"


def test_an_editable_checkout_is_named(monkeypatch, tmp_path):
    _installed(monkeypatch, _editable(ROOT.as_uri()))
    monkeypatch.chdir(ROOT)
    assert extras.install_hint("plot") == "pip install -e '.[plot]'"
    monkeypatch.chdir(tmp_path)
    assert extras.install_hint("kernel") == f"pip install -e '{ROOT}[kernel]'"
    _installed(monkeypatch, _editable((tmp_path / "other").as_uri()))  # another checkout's install
    assert extras.install_hint("plot") == "pip install 'hccli[plot]'"


def test_every_hint_comes_from_the_helper(monkeypatch, tmp_path):
    _installed(monkeypatch, _editable(ROOT.as_uri()))
    monkeypatch.chdir(ROOT)
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    r = run_hc("count-params", "--plot", tmp_path / "p.png")
    assert r.exit_code == 2 and r.stderr.strip().endswith("pip install -e '.[plot]'"), r.stderr
    for name in [m for m in sys.modules if m == "torch" or m.startswith("torch.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "torch", None)
    r = run_hc("run-kernel")
    assert r.exit_code == 2 and r.stderr.strip().endswith("pip install -e '.[kernel]'"), r.stderr
    text = "\n".join(run_hc(c, "--help").stdout for c in ("count-params", "inspect", "diff", "run-kernel"))
    assert "pip install" not in text  # a help text cannot know where it runs: the error says it

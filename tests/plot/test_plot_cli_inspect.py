"""`hc inspect CKPT --plot`, through Typer's CliRunner (the inspect part of
test_plot_cli.py, kept apart so that neither module passes 400 lines): the figure
draws the `hc` entries the same run's `--json` prints, laid out by the config's
layer plan (or, without a config, backbone and stages apart, said in the figure),
titled with the checkpoint, dialect and a hub repository's revision; refusals come
before any work, with nothing printed or written."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from ckpt_tools import tiny
from conftest import SAMPLES, run_hc
from test_plot import images_by_gid
from test_plot_cli import noted_png, one_line


def made(tmp_path, config: str):
    """A tiny checkpoint written by the command a user runs."""
    ck = tmp_path / "ck"
    r = run_hc("make-checkpoint", SAMPLES / config, ck)
    assert r.exit_code == 0, r.stderr
    return ck


def assert_draws_inspect_json(d, doc) -> None:
    """Every site's heatmap is its comb_from_base, every curve its scale / pre / post values."""
    images = images_by_gid(d.figure)
    split = [e for e in doc["hc"] if e["site"] != "head"]
    assert split and set(images) == {f"comb-{e['layer']}-{e['site']}" for e in split}
    for e in split:
        np.testing.assert_array_equal(images[f"comb-{e['layer']}-{e['site']}"], np.array(e["comb_from_base"]))
    for site in {e["site"] for e in doc["hc"]}:
        rows = sorted((e for e in doc["hc"] if e["site"] == site), key=lambda e: e["layer"])
        np.testing.assert_array_equal(d.arrays[f"layers/{site}"], [e["layer"] for e in rows])
        names = ("pre",) if site == "head" else ("pre", "post", "comb")
        for p, name in enumerate(names):
            np.testing.assert_array_equal(d.arrays[f"scale/{site}/{name}"], [e["scale"][p] for e in rows])
        for k in range(len(rows[0]["pre_from_base"])):
            np.testing.assert_array_equal(d.arrays[f"pre/{site}/{k}"], [e["pre_from_base"][k] for e in rows])
            if site != "head":
                np.testing.assert_array_equal(d.arrays[f"post/{site}/{k}"], [e["post_from_base"][k] for e in rows])
    # one colour scale for every heatmap, reaching the largest value the JSON holds
    lo, hi = d.arrays["norm"]
    assert {(im.norm.vmin, im.norm.vmax) for ax in d.figure.axes for im in ax.images} == {(lo, hi)}
    assert hi == max(max(map(max, e["comb_from_base"])) for e in split)


def group_texts(d) -> list[str]:
    return [t.get_text() for t in d.figure.texts]


@pytest.mark.parametrize("config, name", [("tiny-v4.1.json", "hc.png"), ("tiny-v4.hf.json", "hc.svg")])
def test_inspect_plot_draws_its_json_by_the_configs_plan(mpl, spy, tmp_path, config, name):
    from hccli.model.config.model import load_config
    from hccli.model.layers import plan_layers

    ck = made(tmp_path, config)
    drawn = spy("hccli.plot.model", "plot_model")
    out = tmp_path / name
    r = run_hc("inspect", ck, "--json", "--plot", out)
    assert r.exit_code == 0, r.stderr
    doc = r.json()  # stdout is the JSON document alone; the note went to stderr
    (d,) = drawn
    w, h = d.figure.get_size_inches()
    if name.endswith(".png"):
        assert noted_png(r, out) == (round(w * 100), round(h * 100))
    else:
        root = ET.fromstring(out.read_bytes())
        assert (root.get("width"), root.get("height")) == (f"{w * 72:g}pt", f"{h * 72:g}pt")
        assert one_line(r) == f"wrote {out} ({w * 72:g}x{h * 72:g} pt SVG)"
    assert_draws_inspect_json(d, doc)
    assert ("head" in {e["site"] for e in doc["hc"]}) == (config == "tiny-v4.hf.json")  # the V4 head mix
    # laid out by the config's layer plan, stages marked; a local checkpoint names no revision
    plan = plan_layers(load_config(ck / "config.json"))
    texts = group_texts(d)
    for g in plan.groups:
        assert any(t.startswith(f"{g.label}\n") for t in texts), g.label
    labels = {t.get_gid(): t.get_text() for ax in d.figure.axes for t in ax.texts if t.get_gid()}
    for i in plan.layers:
        assert labels[f"label-{i.index}"] == f"{i.index} {'stage' if i.is_stage else i.role}"
    assert not any("no usable config" in t for t in texts)
    assert d.figure.get_suptitle() == f"{doc['path']}, dialect {doc['dialect']['name']}"


def test_inspect_plot_same_bytes_and_beside_the_tables(mpl, tmp_path):
    ck = tiny(tmp_path / "ck")
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    r = run_hc("inspect", ck, "--plot", a)
    assert r.exit_code == 0 and "Hyper-connections" in r.stdout and r.stderr.startswith(f"wrote {a} (")
    assert run_hc("inspect", ck, "--verify", "--plot", b).exit_code == 0
    assert a.read_bytes() == b.read_bytes()


def test_inspect_plot_of_a_gguf_without_and_with_a_config(mpl, spy, tmp_path):
    from gguf_fixtures import hc_values, write_gguf

    folder = tmp_path / "g"
    folder.mkdir()
    gg = write_gguf(folder / "tiny-v4.gguf", hc_values())
    drawn = spy("hccli.plot.model", "plot_model")
    out = tmp_path / "g.png"
    r = run_hc("inspect", gg, "--json", "--plot", out)
    assert r.exit_code == 0, r.stderr
    noted_png(r, out)
    doc = r.json()
    d = drawn[-1]
    assert_draws_inspect_json(d, doc)
    assert d.figure.get_suptitle() == f"{gg}, dialect gguf"
    # no config: one group of the backbone, said in the figure
    layers = sorted({e["layer"] for e in doc["hc"] if e["site"] != "head"})
    assert [t for t in group_texts(d) if "\n" in t] == [(f"{layers[0]}-{layers[-1]}\nbackbone, roles unknown (no\n"
                                                        "config)")]
    notes = [t.get_text() for t in d.figure.texts if t.get_gid() == "plan-note"]
    assert len(notes) == 1 and "--config" in notes[0]
    # with the release config: its plan's groups, and no such note
    r = run_hc("inspect", gg, "--config", SAMPLES / "tiny-v4.hf.json", "--json", "--plot", out)
    assert r.exit_code == 0, r.stderr
    assert_draws_inspect_json(drawn[-1], r.json())
    assert not any(t.get_gid() == "plan-note" for t in drawn[-1].figure.texts)
    assert sum("\n" in t for t in group_texts(drawn[-1])) > 1
    # a single file's folder is the checkpoint's: refused there
    r = run_hc("inspect", gg, "--plot", folder / "g.png")
    assert r.exit_code == 2 and r.stdout == "" and "checkpoint directory" in one_line(r)
    assert [p.name for p in folder.iterdir()] == ["tiny-v4.gguf"]


def test_inspect_plot_without_a_config_keeps_the_stages_apart(mpl, spy, tmp_path):
    ck = tiny(tmp_path / "ck")
    (ck / "config.json").unlink()  # the layer roles are gone; the stage names remain
    drawn = spy("hccli.plot.model", "plot_model")
    r = run_hc("inspect", ck, "--json", "--plot", tmp_path / "p.png")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert_draws_inspect_json(drawn[0], doc)
    backbone = sorted({e["layer"] for e in doc["hc"] if not e["stage"]})
    stages = sorted({e["layer"] for e in doc["hc"] if e["stage"]})
    assert stages and [t.split("\n")[0] for t in group_texts(drawn[0]) if "\n" in t] == [
        f"{backbone[0]}-{backbone[-1]}", f"{stages[0]}-{stages[-1]}"]
    labels = {t.get_gid(): t.get_text() for ax in drawn[0].figure.axes for t in ax.texts if t.get_gid()}
    assert all(labels[f"label-{i}"] == f"{i} stage" for i in stages)
    assert any(t.get_gid() == "plan-note" for t in drawn[0].figure.texts)


def test_inspect_plot_of_a_hub_repo_names_the_revision(mpl, spy, tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    from hub_server import SHA, Hub

    ck = tiny(tmp_path / "repo")
    drawn = spy("hccli.plot.model", "plot_model")
    with Hub({"org/tiny": ck}) as h:
        monkeypatch.setenv("HF_ENDPOINT", h.endpoint)
        monkeypatch.setenv("HC_CACHE_DIR", str(tmp_path / "cache"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        out = tmp_path / "hub.png"
        r = run_hc("inspect", "hf://org/tiny", "--json", "--plot", out)
    assert r.exit_code == 0, r.stderr
    noted_png(r, out)
    doc = r.json()
    assert_draws_inspect_json(drawn[0], doc)
    assert drawn[0].figure.get_suptitle() == f"hf://org/tiny, dialect release, revision main ({SHA[:12]})"


@pytest.mark.parametrize("name, words", [
    ("p.pdf", "plot file extension '.pdf' not supported; expected .png or .svg"),
    ("missing/p.png", "does not exist"),
    ("ck/p.png", "inside the checkpoint directory"),
    ("ck/sub/p.svg", "inside the checkpoint directory"),
])
def test_inspect_bad_plot_fails_before_any_work(tmp_path, monkeypatch, name, words):
    ck = tiny(tmp_path / "ck")
    (ck / "sub").mkdir()
    before = sorted(p.name for p in tmp_path.rglob("*"))
    monkeypatch.chdir(tmp_path)
    for extra in ((), ("--json", "--verify")):
        r = run_hc("inspect", "ck", *extra, "--plot", name)
        assert r.exit_code == 2 and r.stdout == "", r.stdout[:300]
        assert one_line(r).startswith(f"hc: error: --plot {name}") and words in one_line(r)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_inspect_plot_without_matplotlib_says_how_to_install(tmp_path, monkeypatch):
    from hccli.base.extras import install_hint

    INSTALL_HINT = install_hint("plot")

    ck = tiny(tmp_path / "ck")
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    r = run_hc("inspect", ck, "--plot", tmp_path / "p.png")
    assert r.exit_code == 2 and r.stdout == "" and INSTALL_HINT in one_line(r)
    assert not (tmp_path / "p.png").exists()


def test_inspect_plot_of_a_checkpoint_without_hc_values(mpl, tmp_path):
    from ckpt_tools import write_shard

    (tmp_path / "ck").mkdir()
    f = tmp_path / "ck" / "x.safetensors"
    write_shard(f, [("embed.weight", "F32", (2, 2), bytes(16))])
    r = run_hc("inspect", f, "--plot", tmp_path / "p.png")
    assert r.exit_code == 2 and r.stdout == "" and "no HC values to plot" in one_line(r)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["ck", "x.safetensors"]
    assert run_hc("inspect", f).exit_code == 0  # without --plot, nothing to refuse

"""The plotting layer: valid PNG/SVG files of the expected size, the same bytes for the
same data, the data drawn equal to what the commands' JSON says, and the failures a
user can cause (no matplotlib, a wrong extension, a checkpoint directory)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from ckpt_tools import tiny
from conftest import ROOT, SAMPLES, run_hc
from hccli.base.errors import HcError
from hccli.ops.split_np import split_sinkhorn

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tiny_inspect(tmp_path_factory):
    ck = tiny(tmp_path_factory.mktemp("ck") / "tiny")
    r = run_hc("inspect", ck, "--json")
    assert r.exit_code == 0, r.stdout[-2000:]
    return ck, r.json()


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def expected_pixels(fig) -> tuple[int, int]:
    from hccli.plot import DPI

    w, h = fig.get_size_inches()
    return round(w * DPI), round(h * DPI)


def model_data(ck, doc):
    from hccli.model.config.model import load_config
    from hccli.model.layers import plan_layers
    from hccli.plot.model import ModelFigureData, groups_from_plan, sites_from_json

    plan = plan_layers(load_config(ck / "config.json"))
    return ModelFigureData(doc["path"], "release", "main", sites_from_json(doc["hc"]), groups_from_plan(plan))


def images_by_gid(fig) -> dict[str, np.ndarray]:
    return {im.get_gid(): np.asarray(im.get_array()) for ax in fig.axes for im in ax.images if im.get_gid()}


# --- the model figure (inspect) ---

def test_model_png_draws_inspect_json(mpl, tiny_inspect, tmp_path):
    from hccli.plot.model import plot_model

    ck, doc = tiny_inspect
    out = tmp_path / "hc.png"
    drawn = plot_model(model_data(ck, doc), out)
    assert png_size(out) == expected_pixels(drawn.figure)
    images = images_by_gid(drawn.figure)
    sites = [e for e in doc["hc"] if e["site"] != "head"]
    assert len(images) == len(sites) and any(e["stage"] for e in sites)
    for e in sites:
        want = np.array(e["comb_from_base"])
        # the array read back from the Axes' image is the JSON's comb at zero mixes
        np.testing.assert_array_equal(images[f"comb-{e['layer']}-{e['site']}"], want)
        np.testing.assert_array_equal(drawn.arrays[f"comb/{e['layer']}/{e['site']}"], want)
    for site in ("attn", "ffn"):
        rows = sorted((e for e in doc["hc"] if e["site"] == site), key=lambda e: e["layer"])
        for p, name in enumerate(("pre", "post", "comb")):
            np.testing.assert_array_equal(drawn.arrays[f"scale/{site}/{name}"], [e["scale"][p] for e in rows])
        for k in range(4):
            np.testing.assert_array_equal(drawn.arrays[f"pre/{site}/{k}"], [e["pre_from_base"][k] for e in rows])
            np.testing.assert_array_equal(drawn.arrays[f"post/{site}/{k}"], [e["post_from_base"][k] for e in rows])
    # one shared colour scale covering every matrix
    lo, hi = drawn.arrays["norm"]
    combs = np.array([e["comb_from_base"] for e in sites])
    assert lo <= combs.min() and hi == combs.max()
    norms = {(im.norm.vmin, im.norm.vmax) for ax in drawn.figure.axes for im in ax.images}
    assert norms == {(lo, hi)}


def test_model_stages_marked_and_title(mpl, tiny_inspect, tmp_path):
    from hccli.plot.model import plot_model

    ck, doc = tiny_inspect
    drawn = plot_model(model_data(ck, doc), tmp_path / "hc.png")
    stage_layers = {e["layer"] for e in doc["hc"] if e["stage"]}
    labels = {t.get_gid(): t.get_text() for ax in drawn.figure.axes for t in ax.texts if t.get_gid()}
    assert stage_layers and all(labels[f"label-{s}"] == f"{s} stage" for s in stage_layers)
    assert not any(v.endswith("stage") for k, v in labels.items() if int(k.split("-")[1]) not in stage_layers)
    frames = [p for ax in drawn.figure.axes for p in ax.patches if not p.get_fill()]
    assert sum(p.get_linewidth() == 2.0 for p in frames) == 2 * len(stage_layers)  # stages framed thick
    title = drawn.figure.get_suptitle()
    assert doc["path"] in title and "dialect release" in title and "revision main" in title


def test_model_svg_deterministic_and_valid(mpl, tiny_inspect, tmp_path):
    from hccli.plot.model import plot_model

    ck, doc = tiny_inspect
    data = model_data(ck, doc)
    a, b = tmp_path / "a.svg", tmp_path / "b.svg"
    fig = plot_model(data, a).figure
    plot_model(data, b)
    assert a.read_bytes() == b.read_bytes()
    root = ET.fromstring(a.read_bytes())
    w, h = fig.get_size_inches()
    assert (root.get("width"), root.get("height")) == (f"{w * 72:g}pt", f"{h * 72:g}pt")
    text = a.read_text()
    assert "<dc:date>" not in text and "Matplotlib v" not in text
    pa, pb = tmp_path / "a.png", tmp_path / "b.png"
    plot_model(data, pa)
    plot_model(data, pb)
    assert pa.read_bytes() == pb.read_bytes() and b"Software" not in pa.read_bytes()


def test_model_v4_head_mix_in_curves_not_grid(mpl, tmp_path):
    from hccli.plot.model import plot_model

    ck = tiny(tmp_path / "v4", "tiny-v4.hf.json")
    doc = run_hc("inspect", ck, "--json").json()
    drawn = plot_model(model_data(ck, doc), tmp_path / "v4.png")
    heads = sorted((e for e in doc["hc"] if e["site"] == "head"), key=lambda e: e["layer"])
    assert heads and not any(g.endswith("-head") for g in images_by_gid(drawn.figure))
    np.testing.assert_array_equal(drawn.arrays["scale/head/pre"], [e["scale"][0] for e in heads])
    np.testing.assert_array_equal(drawn.arrays["pre/head/0"], [e["pre_from_base"][0] for e in heads])


def test_model_nonfinite_and_hostile_label(mpl, tiny_inspect, tmp_path):
    from hccli.plot.model import ModelFigureData, SiteValues, plot_model

    ck, doc = tiny_inspect
    entries = json.loads(json.dumps(doc["hc"]))
    entries[0]["comb_from_base"][1][2] = "nan"  # as emit_json writes a non-finite value
    entries[0]["scale"][0] = "inf"
    sites = tuple(SiteValues.from_json(e) for e in entries)
    # unbalanced mathtext and a terminal escape: drawn as plain text, no crash
    data = ModelFigureData("ckpt $\\frac{ \x1b[31m", "x$y", None, sites, model_data(ck, doc).groups)
    drawn = plot_model(data, tmp_path / "nan.svg")
    got = drawn.arrays[f"comb/{entries[0]['layer']}/{entries[0]['site']}"]
    assert np.isnan(got[1, 2]) and np.isfinite(np.delete(got.ravel(), 6)).all()
    assert np.isfinite(drawn.arrays["norm"]).all()
    assert "\x1b" not in drawn.figure.get_suptitle() and "\\x1b" in drawn.figure.get_suptitle()


@pytest.mark.parametrize("mutate, key", [
    (lambda e: e.update(layer="3"), "'layer'"),
    (lambda e: e.update(site="mlp"), "'site'"),
    (lambda e: e.update(scale=[1.0, 2.0]), "'scale'"),
    (lambda e: e["comb_from_base"].pop(), "'comb_from_base'"),
    (lambda e: e.update(pre_from_base=[True] * 4), "'pre_from_base'"),
    (lambda e: e.update(post_from_base=[0.5] * 100), "'post_from_base'"),
])
def test_site_values_validated(tiny_inspect, mutate, key):
    from hccli.plot.model import sites_from_json

    entries = json.loads(json.dumps(tiny_inspect[1]["hc"][:1]))
    mutate(entries[0])
    with pytest.raises(HcError) as e:
        sites_from_json(entries)
    assert key in str(e.value) and "hc[0]" in str(e.value) and "\n" not in str(e.value)


def test_model_nothing_or_too_much_to_draw(tiny_inspect):
    from hccli.plot.model import MAX_PLOT_LAYERS, ModelFigureData, SiteValues

    with pytest.raises(HcError, match="no HC values"):
        ModelFigureData("ck", None, None, ())
    one = SiteValues.from_json(tiny_inspect[1]["hc"][0])
    many = tuple(SiteValues(i, "attn", False, one.scale, one.pre, one.post, one.comb) for i in range(MAX_PLOT_LAYERS + 1))
    with pytest.raises(HcError, match=f"at most {MAX_PLOT_LAYERS}"):
        ModelFigureData("ck", None, None, many)
    ModelFigureData("ck", None, None, many[:MAX_PLOT_LAYERS])


# --- the kernel figure (run-kernel) ---

def kernel_input(tokens: int = 10, hc: int = 4):
    rng = np.random.default_rng(7)
    mixes = rng.standard_normal((tokens, (2 + hc) * hc)).astype(np.float32)
    return split_sinkhorn(mixes, np.array([0.9, 1.1, 1.3]), rng.standard_normal((2 + hc) * hc), hc, 20, 1e-6)


@pytest.mark.parametrize("limit, shown", [(3, 3), (0, 1), (50, 8)])
def test_kernel_draws_the_first_tokens_and_their_mean(mpl, tmp_path, limit, shown):
    from hccli.plot.kernel import MAX_TOKENS, KernelFigureData, plot_kernel

    pre, post, comb = kernel_input()
    comb[1, 2, 3] = np.nan  # a token with a NaN: drawn, and left out of the mean
    out = tmp_path / "k.png"
    drawn = plot_kernel(KernelFigureData("torch on cpu", pre, post, comb, limit), out)
    assert shown <= MAX_TOKENS and png_size(out) == expected_pixels(drawn.figure)
    images = images_by_gid(drawn.figure)
    assert set(images) == {f"comb-{i}" for i in range(shown)} | {"comb-mean"}
    for i in range(shown):
        np.testing.assert_array_equal(images[f"comb-{i}"], comb[i])
        np.testing.assert_allclose(drawn.arrays[f"rowsum/{i}"], comb[i].astype(np.float64).sum(1))
        np.testing.assert_allclose(drawn.arrays[f"colsum/{i}"], comb[i].astype(np.float64).sum(0))
    finite = [i for i in range(shown) if np.isfinite(comb[i]).all()]
    np.testing.assert_allclose(images["comb-mean"], comb[finite].astype(np.float64).mean(0) if finite else np.nan)
    np.testing.assert_array_equal(drawn.arrays["pre"], pre[:shown])
    np.testing.assert_array_equal(drawn.arrays["post"], post[:shown])


def test_kernel_from_run_kernel_json(mpl, tmp_path):
    pytest.importorskip("torch")
    from hccli.cli.output import json_document
    from hccli.runkernel.run import RandomMixes, prepare, run
    from hccli.plot.kernel import KernelFigureData, plot_kernel

    result = run(prepare(RandomMixes(tokens=5, seed=3)), "torch", "cpu")
    doc = json.loads(json.dumps(json_document(result.document(), "run-kernel")))
    drawn = plot_kernel(KernelFigureData.from_result(result, limit=2), tmp_path / "k.svg")
    ET.fromstring((tmp_path / "k.svg").read_bytes())
    np.testing.assert_array_equal(images_by_gid(drawn.figure)["comb-1"], np.array(doc["comb"][1]))
    np.testing.assert_array_equal(drawn.arrays["post"], np.array(doc["post"][:2]))
    assert "torch on cpu" in drawn.figure.get_suptitle()


def test_kernel_shapes_checked():
    from hccli.plot.kernel import KernelFigureData

    pre, post, comb = kernel_input()
    with pytest.raises(HcError, match="comb"):
        KernelFigureData("x", pre, post, comb[:, :3])


# --- the diff figure ---

def test_diff_log_axis_with_zero_and_nan_in_strips_of_their_own(mpl, tmp_path):
    from hccli.plot.diff import STRIP_ROW, DiffFigureData, DiffRow, plot_diff

    rows = (DiffRow(0, "attn", "fn", 3e-7), DiffRow(0, "ffn", "fn", 0.0), DiffRow(1, "attn", "base", 2e-4),
            DiffRow(1, "attn", "scale", 0.0), DiffRow(2, "ffn", "base", float("nan")),
            DiffRow(2, "attn", "fn", 5e-9))
    out = tmp_path / "d.png"
    drawn = plot_diff(DiffFigureData("a", "b", rows, 1e-5), out)
    assert png_size(out) == expected_pixels(drawn.figure)
    a = drawn.arrays
    np.testing.assert_array_equal(a["fn/attn/value/y"], [3e-7, 5e-9])
    np.testing.assert_array_equal(a["fn/attn/value/layer"], [0, 2])
    np.testing.assert_array_equal(a["fn/ffn/zero/y"], [STRIP_ROW["fn"]])
    np.testing.assert_array_equal(a["scale/attn/zero/layer"], [1])
    np.testing.assert_array_equal(a["base/ffn/nonfinite/y"], [STRIP_ROW["base"]])
    ax, nonfinite, equal = drawn.figure.axes
    assert ax.get_yscale() == "log"
    assert any(list(line.get_ydata()) == [1e-5, 1e-5] for line in ax.get_lines())  # the tolerance line
    lo, hi = ax.get_ylim()
    assert lo < 5e-9 and hi > 2e-4  # every difference visible
    # on the log axis only differences: an equal part is no point at a small value there
    assert sorted(y for line in ax.get_lines() for y in line.get_ydata()) == [5e-9, 3e-7, 1e-5, 1e-5, 2e-4]
    for strip, words in ((equal, "= 0 (equal)"), (nonfinite, "NaN / Inf")):
        assert list(strip.get_yticks()) == [] and strip.get_yscale() == "linear"  # no scale to read a value from
        assert words in [t.get_text() for t in strip.texts]
    assert equal.get_lines()[0].get_markerfacecolor() == "none"


def test_diff_figure_text_does_not_collide_or_leave_the_figure(mpl, tmp_path):
    from hccli.plot.diff import DiffFigureData, DiffRow, plot_diff

    rows = tuple(DiffRow(layer, site, part, 1e-3 * (1 + layer))
                 for layer in range(6) for site in ("attn", "ffn", "head") for part in ("fn", "base", "scale"))
    fig = plot_diff(DiffFigureData("a" * 50, "b" * 50, rows, 2e-3), tmp_path / "d.png").figure
    r = fig.canvas.get_renderer()
    legend = fig.legends[0].get_window_extent(r)
    subtitle = next(t for t in fig.texts if t.get_text().startswith("largest")).get_window_extent(r)
    assert not legend.overlaps(subtitle)
    assert not any(legend.overlaps(a.get_window_extent(r)) for a in fig.axes)
    xlabel = fig.axes[2].xaxis.label.get_window_extent(r)
    assert legend.y1 < xlabel.y0
    whole = fig.bbox
    for text in [fig.axes[0].yaxis.label, *fig.axes[0].get_yticklabels(), *fig.texts, *fig.axes[0].texts]:
        box = text.get_window_extent(r)
        assert whole.x0 <= box.x0 and box.x1 <= whole.x1 and box.y1 <= whole.y1, text.get_text()


def test_diff_all_equal_and_bad_rows(mpl, tmp_path):
    from hccli.plot.diff import DiffFigureData, DiffRow, plot_diff

    drawn = plot_diff(DiffFigureData("a", "b", (DiffRow(0, "attn", "fn", 0.0),), 0.0), tmp_path / "eq.png")
    assert list(drawn.arrays["fn/attn/zero/layer"]) == [0] and drawn.figure.axes[0].get_lines() == []
    with pytest.raises(HcError, match="fn\\|base\\|scale"):
        DiffFigureData("a", "b", (DiffRow(0, "attn", "weight", 1.0),), 0.0)
    with pytest.raises(HcError, match="tolerance"):
        DiffFigureData("a", "b", (), float("nan"))
    with pytest.raises(HcError, match="at most"):
        DiffFigureData("a", "b", (DiffRow(0, "attn", "fn", 0.0),) * 20_001, 0.0)


# --- the params figure (count-params) ---

@pytest.mark.parametrize("convention", ["logical_params", "stored_bytes"])
def test_params_draws_count_params_json(mpl, tmp_path, convention):
    from hccli.plot.params import HC_COMPONENT, HIGHLIGHT, params_data_from_json, plot_params

    doc = run_hc("count-params", SAMPLES / "tiny-v4.1.json", "--model", "--json").json()
    out = tmp_path / "p.png"
    drawn = plot_params(params_data_from_json(doc, convention), out)
    assert png_size(out) == expected_pixels(drawn.figure)
    comps = doc["model"]["components"]
    np.testing.assert_array_equal(drawn.arrays["components"], [c[convention] for c in comps.values()])
    np.testing.assert_array_equal(drawn.arrays["hc_parts"], [ln["total"] for ln in doc["selection"]["lines"]])
    np.testing.assert_array_equal(drawn.arrays["groups"], [g["hc_params"] for g in doc["groups"]])
    ax = drawn.figure.axes[0]
    assert convention in ax.get_title(loc="left")
    from matplotlib.colors import to_hex

    colours = [to_hex(p.get_facecolor()) for p in ax.patches]
    hc_index = list(comps).index(HC_COMPONENT)
    assert colours[hc_index] == HIGHLIGHT and colours.count(HIGHLIGHT) == 1


def test_params_labels_are_whole_and_inside_the_figure(mpl, tmp_path):
    from hccli.plot.params import params_data_from_json, plot_params

    doc = run_hc("count-params", SAMPLES / "deepseek-v4.1-flash.json", "--model", "--json").json()
    fig = plot_params(params_data_from_json(doc), tmp_path / "p.png").figure
    groups = [t.get_text() for t in fig.axes[-1].get_yticklabels()]
    assert groups == [f"{g['label']}: {g['description']}" for g in doc["groups"]]  # no description cut
    assert any(len(g) > 60 for g in groups)
    r = fig.canvas.get_renderer()
    for ax in fig.axes:
        for t in [*ax.get_yticklabels(), *ax.texts]:
            box = t.get_window_extent(r)
            assert 0 <= box.x0 and box.x1 <= fig.bbox.x1, t.get_text()


def test_params_without_model_and_bad_convention(mpl, tmp_path):
    from hccli.plot.params import params_data_from_json, plot_params

    doc = run_hc("count-params", SAMPLES / "tiny-v4.1.json", "--json").json()
    drawn = plot_params(params_data_from_json(doc), tmp_path / "p.svg")
    assert "components" not in drawn.arrays and len(drawn.figure.axes) == 2
    with pytest.raises(HcError, match="convention 'text_path'"):
        params_data_from_json(doc, "text_path")
    with pytest.raises(HcError, match="nothing to plot"):
        params_data_from_json({"config": {"path": "c.json"}, "selection": {"lines": []}, "groups": []})
    doc["groups"][0]["hc_params"] = "many"
    with pytest.raises(HcError, match=r"groups\[0\]\.hc_params"):
        params_data_from_json(doc)


# --- saving: formats, guards, the missing extra ---

@pytest.mark.parametrize("name", ["hc.pdf", "hc", "hc.PNG.txt"])
def test_wrong_extension(tmp_path, name):
    from hccli.plot import plot_format
    from hccli.plot.kernel import KernelFigureData, plot_kernel

    with pytest.raises(HcError) as e:
        plot_kernel(KernelFigureData("x", *kernel_input(2)), tmp_path / name)
    assert "expected .png or .svg" in str(e.value) and name in str(e.value)
    assert list(tmp_path.iterdir()) == []
    assert plot_format(tmp_path / "A.SVG") == "svg"


def test_never_writes_into_the_checkpoint(mpl, tiny_inspect, tmp_path):
    from hccli.plot.model import plot_model

    ck, doc = tiny_inspect
    before = sorted(p.name for p in ck.iterdir())
    (tmp_path / "link").symlink_to(ck)
    for target in (ck / "hc.png", ck / "sub" / ".." / "hc.svg", tmp_path / "link" / "hc.png"):
        with pytest.raises(HcError, match="checkpoint directory"):
            plot_model(model_data(ck, doc), target, forbidden_dir=ck)
    assert sorted(p.name for p in ck.iterdir()) == before
    plot_model(model_data(ck, doc), tmp_path / "ok.png", forbidden_dir=ck)  # beside it is fine


def test_unwritable_targets(mpl, tmp_path):
    from hccli.plot.kernel import KernelFigureData, plot_kernel

    data = KernelFigureData("x", *kernel_input(2))
    with pytest.raises(HcError, match="does not exist"):
        plot_kernel(data, tmp_path / "nowhere" / "k.png")
    (tmp_path / "d.png").mkdir()
    with pytest.raises(HcError, match="is a directory"):
        plot_kernel(data, tmp_path / "d.png")


def test_missing_matplotlib_gives_the_install_hint(monkeypatch, tmp_path):
    from hccli.base.extras import install_hint

    INSTALL_HINT = install_hint("plot")
    from hccli.plot.kernel import KernelFigureData, plot_kernel

    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(HcError) as e:
        plot_kernel(KernelFigureData("x", *kernel_input(2)), tmp_path / "k.png")
    assert INSTALL_HINT in str(e.value) and "\n" not in str(e.value) and e.value.exit_code == 2
    assert not (tmp_path / "k.png").exists()


def test_global_matplotlib_state_left_alone(mpl, tmp_path):
    from hccli.plot.kernel import KernelFigureData, plot_kernel

    with mpl.rc_context({"font.size": 17.0, "svg.hashsalt": None}):
        before = dict(mpl.rcParams)
        drawn = plot_kernel(KernelFigureData("x", *kernel_input(2)), tmp_path / "k.svg")
        assert dict(mpl.rcParams) == before
    # a user's rc settings do not reach the figure (same bytes whatever matplotlibrc says)
    plot_kernel(KernelFigureData("x", *kernel_input(2)), tmp_path / "k2.svg")
    assert (tmp_path / "k.svg").read_bytes() == (tmp_path / "k2.svg").read_bytes()
    assert type(drawn.figure.canvas).__name__ == "FigureCanvasAgg"


def test_hc_start_up_imports_no_matplotlib():
    code = ("import sys, hccli.cli.app, hccli.plot, hccli.plot.model, hccli.plot.kernel, hccli.plot.diff, "
            "hccli.plot.params; print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"

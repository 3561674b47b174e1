"""`--plot FILE` on the commands, through Typer's CliRunner: the file is a valid PNG/SVG
of the size the note on stderr says, the data drawn equals the command's `--json`
output of the same run, and every failure a user can cause ends in one line before
the command does any work, with nothing written (least of all into a checkpoint)."""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from ckpt_tools import tiny
from conftest import ROOT, SAMPLES, run_hc
from test_plot import images_by_gid, png_size

TINY = SAMPLES / "tiny-v4.1.json"
NOTE = re.compile(r"^wrote (.+) \((\d+)x(\d+) PNG\)$")


def one_line(r) -> str:
    assert r.stderr.count("\n") == 1, r.stderr
    return r.stderr.strip()


def noted_png(r, path) -> tuple[int, int]:
    """The size the note says, checked against the file's own header."""
    m = NOTE.match(one_line(r))
    assert m and m.group(1) == str(path), r.stderr
    size = (int(m.group(2)), int(m.group(3)))
    assert png_size(path) == size
    return size


# --- count-params ---

@pytest.mark.parametrize("convention", [None, "stored_bytes", "stored_elements"])
def test_count_params_plot_draws_its_json(mpl, spy, tmp_path, convention):
    from hccli.plot import DPI
    from hccli.plot.params import HC_COMPONENT, HIGHLIGHT

    drawn = spy("hccli.plot.params", "plot_params")
    out = tmp_path / "params.png"
    extra = ["--convention", convention] if convention else []
    r = run_hc("count-params", TINY, "--model", "--json", "--plot", out, *extra)
    assert r.exit_code == 0, r.stderr
    doc = r.json()  # stdout is the JSON document alone; the note went to stderr
    (d,) = drawn
    w, h = d.figure.get_size_inches()
    assert noted_png(r, out) == (round(w * DPI), round(h * DPI))
    key = convention or "logical_params"
    comps = doc["model"]["components"]
    np.testing.assert_array_equal(d.arrays["components"], [c[key] for c in comps.values()])
    np.testing.assert_array_equal(d.arrays["hc_parts"], [ln["total"] for ln in doc["selection"]["lines"]])
    np.testing.assert_array_equal(d.arrays["groups"], [g["hc_params"] for g in doc["groups"]])
    ax = d.figure.axes[0]
    assert key in ax.get_title(loc="left")  # the label says which convention
    from matplotlib.colors import to_hex

    colours = [to_hex(p.get_facecolor()) for p in ax.patches]
    assert colours[list(comps).index(HC_COMPONENT)] == HIGHLIGHT and colours.count(HIGHLIGHT) == 1


def test_count_params_plot_svg_with_tables_and_a_selection(mpl, spy, tmp_path):
    drawn = spy("hccli.plot.params", "plot_params")
    out = tmp_path / "p.svg"
    args = ("count-params", TINY, "--site", "attn", "--component", "comb,pre")
    r = run_hc(*args, "--plot", out)
    assert r.exit_code == 0 and "Selection" in r.stdout  # the tables still go to stdout
    doc = run_hc(*args, "--json").json()
    (d,) = drawn
    assert "components" not in d.arrays  # no --model: the HC panels alone
    np.testing.assert_array_equal(d.arrays["hc_parts"], [ln["total"] for ln in doc["selection"]["lines"]])
    root = ET.fromstring(out.read_bytes())
    w, h = (float(root.get(k).removesuffix("pt")) for k in ("width", "height"))
    assert one_line(r) == f"wrote {out} ({w:g}x{h:g} pt SVG)"
    fw, fh = d.figure.get_size_inches()
    assert (w, h) == (fw * 72, fh * 72)


@pytest.mark.parametrize("args, words", [
    (("--convention", "stored_bytes"), "give it with --plot and --model"),
    (("--model", "--convention", "stored_bytes"), "give it with --plot and --model"),
    (("--plot", "{tmp}/p.png", "--convention", "stored_bytes"), "give it with --plot and --model"),
    (("--model", "--plot", "{tmp}/p.png", "--convention", "text_path_params"), "expected one of logical_params"),
])
def test_count_params_convention_needs_plot_and_model(tmp_path, args, words):
    r = run_hc("count-params", TINY, *(a.format(tmp=tmp_path) for a in args))
    assert r.exit_code == 2 and words in one_line(r) and r.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_count_params_never_plots_into_a_checkpoint(mpl, tmp_path):
    ck = tiny(tmp_path / "ck")
    before = sorted(p.name for p in ck.iterdir())
    r = run_hc("count-params", ck, "--plot", ck / "p.png")
    assert r.exit_code == 2 and r.stdout == ""
    assert "checkpoint directory" in one_line(r) and one_line(r).startswith("hc: error: --plot ")
    assert sorted(p.name for p in ck.iterdir()) == before
    assert run_hc("count-params", ck, "--plot", tmp_path / "p.png").exit_code == 0  # beside it is fine


# --- run-kernel ---

@pytest.mark.parametrize("limit, shown", [(3, 3), (1, 1), (20, 8)])  # --limit 0 is refused (docs/CLI.md)
def test_run_kernel_plot_draws_its_json(mpl, spy, tmp_path, limit, shown):
    pytest.importorskip("torch")
    drawn = spy("hccli.plot.kernel", "plot_kernel")
    out = tmp_path / "comb.png"
    r = run_hc("run-kernel", "--impl", "torch", "--tokens", "12", "--seed", "5", "--limit", str(limit),
               "--json", "--plot", out)
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    (d,) = drawn
    noted_png(r, out)
    comb = np.array(doc["comb"])
    images = images_by_gid(d.figure)
    assert set(images) == {f"comb-{i}" for i in range(shown)} | {"comb-mean"}
    for i in range(shown):
        np.testing.assert_array_equal(images[f"comb-{i}"], comb[i])
        np.testing.assert_allclose(d.arrays[f"rowsum/{i}"], comb[i].sum(1))
        np.testing.assert_allclose(d.arrays[f"colsum/{i}"], comb[i].sum(0))
    # the mean drawn is the mean of the JSON's comb over the first tokens
    np.testing.assert_allclose(images["comb-mean"], comb[:shown].mean(0), rtol=1e-12)
    np.testing.assert_array_equal(d.arrays["pre"], np.array(doc["pre"])[:shown])
    np.testing.assert_array_equal(d.arrays["post"], np.array(doc["post"])[:shown])


def test_run_kernel_plot_of_a_checkpoint_site_beside_the_tables(mpl, spy, tmp_path):
    pytest.importorskip("torch")
    ck = tiny(tmp_path / "ck")
    drawn = spy("hccli.plot.kernel", "plot_kernel")
    out = tmp_path / "k.svg"
    r = run_hc("run-kernel", "--impl", "torch", "--checkpoint", ck, "--layers", "1", "--site", "ffn", "--plot", out)
    assert r.exit_code == 0 and "token 0" in r.stdout, r.stderr
    ET.fromstring(out.read_bytes())
    assert one_line(r).startswith(f"wrote {out} (") and one_line(r).endswith(" pt SVG)")
    doc = run_hc("run-kernel", "--impl", "torch", "--checkpoint", ck, "--layers", "1", "--site", "ffn", "--json").json()
    texts = [t.get_text() for t in drawn[0].figure.texts]
    assert any(doc["params"]["base_scale"] in t for t in texts)  # whose base and scale made these matrices


def test_run_kernel_never_plots_into_the_checkpoint(mpl, tmp_path):
    ck = tiny(tmp_path / "ck")
    before = sorted(p.name for p in ck.iterdir())
    (tmp_path / "link").symlink_to(ck)
    for target in (ck / "x.png", tmp_path / "link" / "x.svg"):
        r = run_hc("run-kernel", "--impl", "torch", "--checkpoint", ck, "--layers", "1", "--plot", target)
        assert r.exit_code == 2 and r.stdout == ""  # refused before the kernel ran
        assert "inside the checkpoint directory" in one_line(r)
        assert one_line(r).startswith(f"hc: error: --plot {target}: ")
    assert sorted(p.name for p in ck.iterdir()) == before
    assert not any(p.name.endswith(".partial") for p in tmp_path.rglob("*"))


def test_run_kernel_plot_and_compare_exclude_each_other(tmp_path):
    golden = tmp_path / "g.safetensors"
    golden.write_bytes(b"")  # never read: the flags are refused first
    r = run_hc("run-kernel", "--compare", golden, "--plot", tmp_path / "k.png")
    assert r.exit_code == 2 and "--plot" in one_line(r) and "--compare" in one_line(r)
    assert r.stdout == "" and sorted(p.name for p in tmp_path.iterdir()) == ["g.safetensors"]


# --- failures before any work, for both commands ---

COMMANDS = [("count-params", str(TINY)), ("run-kernel", "--impl", "torch", "--tokens", "3")]


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("name, words", [
    ("p.pdf", "plot file extension '.pdf' not supported; expected .png or .svg"),
    ("p", "plot file extension '(none)' not supported"),
    ("missing/p.png", "does not exist"),
    ("adir.png", "is a directory"),
])
def test_bad_plot_file_fails_before_the_command_works(tmp_path, monkeypatch, cmd, name, words):
    (tmp_path / "adir.png").mkdir()
    monkeypatch.chdir(tmp_path)
    r = run_hc(*cmd, "--json", "--plot", name)
    assert r.exit_code == 2 and r.stdout == "", r.stdout[:300]
    assert one_line(r).startswith(f"hc: error: --plot {name}") and words in one_line(r)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir.png"]


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: c[0])
def test_missing_matplotlib_fails_with_the_hint_before_any_output(tmp_path, monkeypatch, cmd):
    from hccli.base.extras import install_hint

    INSTALL_HINT = install_hint("plot")

    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    r = run_hc(*cmd, "--plot", tmp_path / "p.png")
    assert r.exit_code == 2 and r.stdout == "" and INSTALL_HINT in one_line(r)
    assert list(tmp_path.iterdir()) == []


def test_hostile_plot_names_are_escaped(mpl, tmp_path):
    bad = tmp_path / "a\x1b[31m.pdf"
    r = run_hc("count-params", TINY, "--plot", bad)
    assert r.exit_code == 2 and "\x1b" not in r.stderr and "\\x1b[31m.pdf" in one_line(r)
    markup = tmp_path / "[bold red]p.png"  # rich markup in a file name is printed, not applied
    r = run_hc("count-params", TINY, "--plot", markup)
    assert r.exit_code == 0 and one_line(r).startswith(f"wrote {markup} (") and markup.exists()


# --- matplotlib only when asked ---

@pytest.mark.slow
def test_commands_import_matplotlib_only_for_plot(mpl, tmp_path):
    pytest.importorskip("torch")
    ck = tiny(tmp_path / "ck")
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from hccli.cli.app import register; app = register()\n"
        "def mpl(): return any(m.split('.')[0] == 'matplotlib' for m in sys.modules)\n"
        "for args in (['count-params'], ['count-params', 'sample_configs/tiny-v4.1.json', '--model', '--json'],\n"
        "             ['run-kernel', '--impl', 'torch', '--tokens', '2', '--json'],\n"
        f"             ['inspect', {str(ck)!r}], ['inspect', {str(ck)!r}, '--json', '--verify']):\n"
        "    r = CliRunner().invoke(app, args)\n"
        "    assert r.exit_code == 0, r.output\n"
        "    print(args[0], mpl())\n"
        f"r = CliRunner().invoke(app, ['count-params', '--plot', {str(tmp_path / 'p.png')!r}])\n"
        "print('plot', r.exit_code, mpl())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    # the last line shows the probe can see matplotlib once a plot asks for it
    assert out.stdout.split("\n")[:6] == ["count-params False", "count-params False", "run-kernel False",
                                          "inspect False", "inspect False", "plot 0 True"], out.stdout + out.stderr


# --- the helper the other commands wire in ---

def test_write_plot_checks_before_it_draws_and_says_what_it_wrote(mpl, tmp_path):
    from hccli.base.errors import HcError
    from hccli.plot import write_plot
    from hccli.plot.diff import DiffFigureData, DiffRow, plot_diff

    ck = tiny(tmp_path / "ck")
    calls = []

    def draw(data, path, **kw):
        calls.append(path)
        return plot_diff(data, path, **kw)

    data = DiffFigureData("a", "b", (DiffRow(0, "attn", "fn", 1e-6),), 1e-5)
    for bad, words in ((ck / "d.png", "checkpoint directory"), (tmp_path / "d.jpg", "expected .png or .svg")):
        with pytest.raises(HcError, match=words):
            write_plot(bad, draw, data, forbidden_dir=ck)
    assert calls == []  # refused before any drawing
    line = write_plot(tmp_path / "d.png", draw, data, forbidden_dir=ck)
    m = NOTE.match(line)
    assert m and m.group(1) == str(tmp_path / "d.png")
    assert png_size(tmp_path / "d.png") == (int(m.group(2)), int(m.group(3)))


# --- diff ---

def test_diff_plot_draws_its_json(mpl, spy, tmp_path):
    from diff_fixtures import edit_copy, release

    a = release(tmp_path / "a")

    def nudge(tensors):  # one base value off by 0.25: one site part differs, the rest equal
        name = "layers.2.hc_attn_base"
        if name not in tensors:  # called once per shard
            return
        dtype, shape, raw = tensors[name]
        v = np.frombuffer(raw, "<f4").copy()
        v[-1] += 0.25
        tensors[name] = (dtype, shape, v.astype("<f4").tobytes())

    b = edit_copy(a, tmp_path / "b", nudge)
    drawn = spy("hccli.plot.diff", "plot_diff")
    out = tmp_path / "diff.png"
    r = run_hc("diff", a, b, "--json", "--plot", out)
    assert r.exit_code == 1, r.stderr
    noted_png(r, out)
    doc = r.json()
    arrays = drawn[0].arrays
    for row in doc["sites"]:
        kind = "value" if row["max_abs"] > 0 else "zero"
        layers = arrays[f"{row['part']}/{row['site']}/{kind}/layer"]
        assert row["layer"] in layers
        if kind == "value":
            assert arrays[f"{row['part']}/{row['site']}/value/y"][list(layers).index(row["layer"])] == row["max_abs"]
    changed = [row for row in doc["sites"] if row["max_abs"] > 0]
    assert [(c["layer"], c["site"], c["part"]) for c in changed] == [(2, "attn", "base")]


def test_diff_never_plots_into_either_checkpoint(mpl, tmp_path):
    from diff_fixtures import release

    a = release(tmp_path / "a")
    before = sorted(p.name for p in a.iterdir())
    r = run_hc("diff", a, a, "--plot", a / "d.png")
    assert r.exit_code == 2 and "hc diff" not in r.stdout and not (a / "d.png").exists()
    assert "checkpoint" in one_line(r) and sorted(p.name for p in a.iterdir()) == before


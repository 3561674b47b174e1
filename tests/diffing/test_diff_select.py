"""`hc diff --layers/--site`: the HC comparison and --values all limited to some layers and
sites; and the counts of a diff agreeing with its exit code, HC included; progress in bytes."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
from diff_fixtures import all_tensors, edit_copy, f32, release

from hccli.diffing import diff as DF
from hccli.diffing.select import Selection
from hccli.checkpoint.view import open_view
from hccli.checkpoint.synth import to_bf16_bytes

CHANGED_HC = "layers.4.hc_attn_base"
CHANGED_NORM = "layers.0.attn_norm.weight"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A release checkpoint and a copy with one HC base and one norm weight changed."""
    root = tmp_path_factory.mktemp("sel")
    a = release(root / "a")

    def edit(t):
        if CHANGED_HC in t:
            x = f32(t, CHANGED_HC).copy()
            x[0] += 0.25
            t[CHANGED_HC] = ("F32", x.shape, x.tobytes())
        if CHANGED_NORM in t:
            _, shape, raw = t[CHANGED_NORM]
            x = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32) + 1
            t[CHANGED_NORM] = ("BF16", shape, to_bf16_bytes(x))

    return a, edit_copy(a, root / "b", edit)


def test_layers_and_site_limit_the_hc_comparison(hc, pair):
    a, b = pair
    r = hc("diff", a, b, "--layers", "3-4", "--site", "attn", "--json")
    assert r.exit_code == 1, r.stderr
    doc = r.json()
    assert {(x["layer"], x["site"]) for x in doc["sites"]} == {(3, "attn"), (4, "attn")}
    assert len(doc["sites"]) == 6 and doc["not_kept"] == 1
    assert doc["selection"] == {"layers": [3, 4], "sites": ["attn"]}
    away = hc("diff", a, b, "--layers", "0-3,5", "--json")  # the changed base is not among them
    assert away.exit_code == 0 and away.json()["not_kept"] == 0
    assert {x["layer"] for x in away.json()["sites"]} == {0, 1, 2, 3, 5}
    text = hc("diff", a, b, "--layers", "3-4", "--site", "attn").stdout
    assert "selected layers 3-4 and site attn: 6 of 54 HC tensors; the inventory is of the whole checkpoints" in text


def test_values_all_is_limited_to_the_selection(hc, pair):
    a, b = pair
    ffn = hc("diff", a, b, "--values", "all", "--layers", "0", "--site", "ffn", "--json")
    assert ffn.exit_code == 0, ffn.stderr  # the norm that changed serves layer 0's attention
    names = [v["name"] for v in ffn.json()["values"]]
    assert names and all(n.startswith(("layers.0.ffn.", "layers.0.ffn_norm.")) for n in names)
    attn = hc("diff", a, b, "--values", "all", "--layers", "0", "--site", "attn", "--json")
    assert attn.exit_code == 1
    assert [v["name"] for v in attn.json()["values"] if v["status"] == "differs"] == [CHANGED_NORM]
    head = hc("diff", a, b, "--values", "all", "--site", "head", "--json").json()
    assert {v["name"] for v in head["values"]} == {"head.weight", "norm.weight"}
    assert {x["site"] for x in head["sites"]} == {"head"}


def test_a_layer_out_of_range_or_an_empty_selection_is_one_line(hc, pair, tmp_path):
    a, b = pair
    r = hc("diff", a, b, "--layers", "3,40")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.strip() == "hc: error: --layers 3,40: this model has layers 0-5, mtp.0-mtp.1 (6-7) and head (8)"
    for bad in ("3,,5", "x"):
        r = hc("diff", a, b, "--layers", bad)
        assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and "--layers" in r.stderr
    v41 = release(tmp_path / "v41", "tiny-v4.1.json")
    r = hc("diff", v41, v41, "--site", "head")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and "no head mix" in r.stderr
    r = hc("diff", v41, v41, "--layers", "10")
    assert r.exit_code == 2 and r.stderr == ("hc: error: --layers 10: this model has layers 0-7 and mtp.0-mtp.1 (8-9); "
                                             "no head mix\n")


def test_where_other_tensors_sit():
    every = Selection(None, None)
    head = Selection(None, frozenset({"head"}))
    three = Selection(frozenset({3}), None)
    attn3 = Selection(frozenset({3}), frozenset({"attn"}))
    assert every.other("embed.weight", 6, 2) and not three.other("embed.weight", 6, 2)
    assert head.other("head.weight", 6, 2) and head.other("norm.weight", 6, 2)
    assert Selection(frozenset({8}), None).other("head.weight", 6, 2)  # numbered as the head mix
    assert attn3.other("layers.3.attn.wq_a.weight", 6, 2) and attn3.other("layers.3.attn_norm.weight", 6, 2)
    assert not attn3.other("layers.3.ffn_norm.weight", 6, 2) and not attn3.other("layers.30.attn.x", 6, 2)
    assert three.other("layers.3.engram.wkv.weight", 6, 2) and not attn3.other("layers.3.engram.wkv.weight", 6, 2)
    assert Selection(frozenset({7}), frozenset({"ffn"})).other("mtp.1.ffn.gate.weight", 6, 2)


NAMES = ["embed.weight", "head.weight", "norm.weight", "head.weight_x", "layers.3.attn.wq_a.weight",
         "layers.3.attn_norm.weight", "layers.30.attn.x", "layers.03.attn.x", "layers.6.ffn.x", "layers.7.x",
         "layers.8.ffn_norm.weight", "mtp.0.ffn.x", "mtp.1.attn.x", "mtp.2.attn.x", "mtp.01.x", "mtp.1", "layers.3",
         "layers.3x.attn.x", "layers..attn.x", "x.layers.3.attn.y", "layers.3.engram.wkv.weight"]


@pytest.mark.parametrize("layers", [{3}, {0, 3}, {6}, {7}, {8}, {9}, {30}, {3, 6, 7, 8}])
@pytest.mark.parametrize("sites", [None, {"attn"}, {"ffn", "head"}])
def test_the_layer_prefixes_reject_only_what_other_rejects(layers, sites):
    from hccli.diffing.select import layer_prefixes

    sel = Selection(frozenset(layers), None if sites is None else frozenset(sites))
    starts = layer_prefixes(sel.layers, 6, 2)
    kept = [n for n in NAMES if sel.other(n, 6, 2)]
    assert kept == [n for n in NAMES if n.startswith(starts) and sel.other(n, 6, 2)]
    if sites is None and len(layers) == 1:  # what the careful check keeps, so that the above is not empty
        assert kept == {3: ["layers.3.attn.wq_a.weight", "layers.3.attn_norm.weight", "layers.3.engram.wkv.weight"],
                        6: ["layers.6.ffn.x", "mtp.0.ffn.x"], 7: ["layers.7.x", "mtp.1.attn.x"],
                        8: ["head.weight", "norm.weight", "layers.8.ffn_norm.weight", "mtp.2.attn.x"],
                        9: [], 30: ["layers.30.attn.x"]}[min(layers)]


def test_counts_include_the_hc_and_agree_with_the_exit_code(hc, pair):
    a, b = pair
    ffn = hc("diff", a, b, "--values", "all", "--site", "ffn", "--json")  # both changes are attn's
    assert ffn.exit_code == 0 and ffn.json()["not_kept"] == 0
    r = hc("diff", a, b, "--values", "all", "--json")
    doc = r.json()
    assert r.exit_code == doc["exit_code"] == 1 and doc["not_kept"] == 2  # the HC base and the norm
    comps = {c["component"]: c for c in doc["components"]}
    assert comps["hyper_connections"]["changed"] == 1 and comps["norms"]["changed"] == 1
    text = hc("diff", a, b, "--values", "all").stdout
    assert "Values of 662 tensors (54 HC, above, and 608 others): 2 not kept (exit 1)" in text
    hc_alone = hc("diff", a, b, "--values", "all", "--layers", "4", "--site", "attn")
    assert hc_alone.exit_code == 1 and "1 not kept (exit 1)" in hc_alone.stdout
    assert "0 not kept" not in hc_alone.stdout and "0 not equal" not in hc_alone.stdout
    plain = hc("diff", a, b, "--json").json()  # without values: the HC base alone is counted changed
    assert {c["component"]: c["changed"] for c in plain["components"]}["norms"] == 0
    assert {c["component"]: c["changed"] for c in plain["components"]}["hyper_connections"] == 1


@pytest.mark.parametrize("values_all", [False, True])
def test_progress_counts_bytes_up_to_the_total(pair, monkeypatch, values_all):
    from hccli.diffing import values as DV

    monkeypatch.setattr(DV, "WINDOW_VALUES", 10)
    monkeypatch.setattr(DV, "PIECE_BYTES", 80)  # ticks inside a tensor too, a piece at a time
    a, b = pair
    ticks = []
    with open_view(a) as va, open_view(b) as vb:
        DF.build_diff(va, vb, DF.DiffRequest(values_all=values_all),
                      progress=lambda done, total, what="": ticks.append((done, total)))
    hc_bytes = sum(len(raw) for n, (_, _, raw) in all_tensors(a).items() if ".hc_" in n or n.startswith("hc_"))
    total = 2 * (sum(len(raw) for _, _, raw in all_tensors(a).values()) if values_all else hc_bytes)
    assert {t for _, t in ticks} == {total}
    done = [d for d, _ in ticks]
    assert done == sorted(done) and done[-1] == total
    assert len(ticks) > (1000 if values_all else 15)  # per site (18 here), and per chunk of a tensor's values


def test_the_progress_bar_in_bytes_shows_the_rate_and_the_time_left(monkeypatch):
    import io

    from rich.console import Console

    from hccli.cli import output

    sink = io.StringIO()
    monkeypatch.setattr(output, "_stderr", Console(file=sink, force_terminal=True, width=120))
    with output.progress_bar("comparing", in_bytes=True) as tick:
        tick(1_000_000, 9_000_000, "layers.2")
        time.sleep(0.05)
        tick(3_000_000, 9_000_000, "layers.3")
    shown = sink.getvalue()
    assert "3.0/9.0 MB" in shown
    assert re.search(r"\d+(\.\d+)? [kMG]?B/s", shown), shown  # the rate
    narrow = io.StringIO()
    monkeypatch.setattr(output, "_stderr", Console(file=narrow, force_terminal=True, width=80))
    with output.progress_bar("comparing", in_bytes=True) as tick:
        tick(7_200_000_000, 14_800_000_000, "layers.0.ffn.experts.108.w1.scale")
    lines = [ln for ln in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "\n", narrow.getvalue()).splitlines() if ln.strip()]
    assert lines and all(len(ln) <= 80 for ln in lines) and any("7.2/14.8 GB" in ln for ln in lines), lines
    assert any("comparing layers.0" in ln and "…" in ln for ln in lines)  # the name gives way, not the figures
    assert len(re.findall(r"-:--:--|\d:\d\d:\d\d", shown.split("MB", 1)[1])) == 2  # elapsed, and left

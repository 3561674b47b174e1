"""hc inspect shows what was asked: selections print the summary line and their matches, the
tree only with --tree (every repeated numbered block collapsed, by number), --verify -q the
verdict and findings; one width rule; --metadata and --stats."""

import json
import math

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from ckpt_tools import tiny
from conftest import run_hc
from hccli.base.vocab import INDEX_NAME


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    return tiny(tmp_path_factory.mktemp("ck") / "tiny")


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# --------------------------------------------------------------------------- selections


def test_a_selection_prints_the_summary_line_and_its_rows_only(tiny_ckpt):
    r = run_hc("inspect", tiny_ckpt, "--name", "*.hc_attn_*", "--layers", "3")
    assert r.exit_code == 0, r.stdout[-2000:]
    lines = _lines(r.stdout)
    assert lines[0].startswith(str(tiny_ckpt)) and "792 tensors" in lines[1]
    rows = [line for line in lines if line.lstrip().startswith("layers.")]
    assert [row.split()[0] for row in rows] == ["layers.3.hc_attn_base", "layers.3.hc_attn_fn", "layers.3.hc_attn_scale"]
    assert len(lines) == 3 + 1 + 2 + 3  # summary (piped prose wraps at 120: two lines), title, header and rule, the rows
    for unasked in ("Bytes per dtype", "repeated", "Hyper-connections", "dialect:"):
        assert unasked not in r.stdout


def test_hc_layer_prints_those_sites_only(tiny_ckpt):
    out = run_hc("inspect", tiny_ckpt, "--layers", "3", "--hc").stdout
    assert "layers.3 (layer 3), attn site" in out and "layers.3 (layer 3), ffn site" in out
    assert "repeated" not in out and "Hyper-connections" not in out and "Bytes per dtype" not in out
    assert "layers.2 (" not in out


def test_plain_inspect_has_no_tree_and_tree_adds_it(tiny_ckpt):
    plain = run_hc("inspect", tiny_ckpt)
    assert plain.exit_code == 0
    assert "Bytes per dtype" in plain.stdout and "Hyper-connections" in plain.stdout
    assert "repeated numbered blocks collapsed" not in plain.stdout and "layers.[0-7]" not in plain.stdout
    tree = run_hc("inspect", tiny_ckpt, "--tree")
    assert tree.exit_code == 0
    assert "repeated numbered blocks collapsed" in tree.stdout and "layers.[0-7]" in tree.stdout
    assert "Hyper-connections" in tree.stdout
    both = run_hc("inspect", tiny_ckpt, "--tree", "--name", "embed.weight").stdout
    assert "layers.[0-7]" in both and "Tensors (name embed.weight): 1" in both and "Hyper-connections" not in both


def test_json_document_unchanged_without_a_selection(tiny_ckpt):
    doc = run_hc("inspect", tiny_ckpt, "--json").json()
    assert list(doc)[-1] == "verified"
    assert not {"metadata", "stats", "tensor_list"} & set(doc)
    picked = run_hc("inspect", tiny_ckpt, "--name", "*.hc_ffn_base", "--json").json()
    assert list(picked)[:-1] == list(doc) and len(picked["tensor_list"]) == 10


def _vision_file(path):
    """A tower of 12 numbered blocks beside the layers, an mlx-style prefix too, written by
    safetensors' own serializer."""
    tensors = {}
    for k in range(12):
        tensors[f"vision.blocks.{k}.attn.wqkv.weight"] = np.zeros((6, 2), np.float32)
        tensors[f"vision.blocks.{k}.norm1.weight"] = np.zeros((2,), np.float32)
        tensors[f"language_model.model.layers.{k}.mlp.gate.weight"] = np.zeros((2, 2), np.float32)
    tensors["vision.norm.weight"] = np.zeros((2,), np.float32)
    save_file(tensors, str(path))
    return path


def test_every_numbered_block_collapses_in_number_order(tmp_path):
    f = _vision_file(tmp_path / "model.safetensors")
    out = run_hc("inspect", f, "--tree").stdout
    assert "vision.blocks.[0-11]  x12" in out and "language_model.model.layers.[0-11]  x12" in out
    assert "attn.wqkv.weight  F32 [6, 2] x12" in out and "mlp.gate.weight  F32 [2, 2] x12" in out
    assert "vision.blocks.10." not in out and "vision.blocks.2." not in out  # no block listed one by one
    assert "vision.norm.weight" in out


# --------------------------------------------------------------------------- --verify -q


def test_verify_quiet_prints_the_verdict_only(tiny_ckpt):
    r = run_hc("inspect", tiny_ckpt, "--verify", "-q")
    assert r.exit_code == 0
    assert _lines(r.stdout) == [line for line in _lines(r.stdout) if "verify: clean" in line] and r.stdout.strip()


def test_verify_quiet_with_findings_prints_them_and_nothing_else(tiny_ckpt, tmp_path):
    import shutil

    ck = tmp_path / "broken"
    shutil.copytree(tiny_ckpt, ck)
    index = json.loads((ck / INDEX_NAME).read_text())
    victim = index["weight_map"]["layers.3.hc_attn_base"]
    (ck / victim).write_bytes((ck / victim).read_bytes()[:100])  # a truncated shard
    r = run_hc("inspect", ck, "--verify", "--quiet")
    assert r.exit_code == 1
    assert "verify:" in r.stdout and "unreadable_shard" in r.stdout
    for unasked in ("Bytes per dtype", "Hyper-connections", "792 tensors", str(ck) + " ("):
        assert unasked not in r.stdout


def test_quiet_without_verify_is_one_line(tiny_ckpt):
    r = run_hc("inspect", tiny_ckpt, "-q")
    assert r.exit_code == 2 and r.stdout == "" and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "--verify" in r.stderr


# --------------------------------------------------------------------------- the width rule


@pytest.fixture
def columns(monkeypatch):
    """Set COLUMNS for the consoles the next command makes (they are made once a process)."""
    from hccli.cli import output

    def set_to(value):
        monkeypatch.setattr(output, "_stdout", None)
        monkeypatch.setattr(output, "_stderr", None)
        if value is None:
            monkeypatch.delenv("COLUMNS", raising=False)
        else:
            monkeypatch.setenv("COLUMNS", value)

    return set_to


def test_columns_is_kept_when_piped(tiny_ckpt, columns):
    columns("80")
    out = run_hc("inspect", tiny_ckpt).stdout
    summary = [line for line in out.splitlines() if "stored bytes" in line]
    assert len(summary) == 1 and len(summary[0]) <= 80  # wrapped, at spaces
    assert "logical parameters (" in " ".join(out.split())
    columns(None)
    out = run_hc("inspect", tiny_ckpt).stdout
    assert any(len(line) > 80 and "logical parameters (" in line for line in out.splitlines())  # unwrapped


@pytest.mark.parametrize("width", [80, 40])
def test_names_keys_and_numbers_are_never_split(tiny_ckpt, monkeypatch, width):
    from hccli.cli import output

    # a terminal this wide (CliRunner's stdout is none): its console, as output.console() makes it
    narrow = output._console_class()(width=width, highlight=False, soft_wrap=False, emoji=False)
    monkeypatch.setattr(output, "_stdout", narrow)
    counted = run_hc("count-params", "sample_configs/deepseek-v4-pro.json", "--model")
    assert counted.exit_code == 0
    words = counted.stdout.split()
    for key in ("stored_elements_without_scales", "text_path_backbone_params", "transformers_params"):
        assert key in words, key
    model = run_hc("count-params", "sample_configs/deepseek-v4-pro.json", "--model", "--json").json()["model"]
    assert f"{model['stored_bytes']:,}" in words
    listed = run_hc("inspect", tiny_ckpt, "--name", "layers.3.hc_*").stdout.split()
    assert "model-00006-of-00014.safetensors" in listed or any(w.endswith(".safetensors") and "-of-" in w
                                                                for w in listed)
    assert "layers.3.hc_attn_scale" in listed and "24,576" in listed
    shown = run_hc("inspect", tiny_ckpt).stdout
    assert "Hyper-connections" in shown.split()
    assert "…" not in shown and "…" not in counted.stdout


def test_a_huge_columns_is_bounded(tiny_ckpt, columns):
    from hccli.cli.output import _PIPE_WIDTH, PIPED_PROSE, width_for

    columns("9" * 40)
    assert width_for(False) == _PIPE_WIDTH and width_for(True) == _PIPE_WIDTH
    for bad in ("", "0", "-5", "80x", "٣"):
        columns(bad)
        assert width_for(False) == PIPED_PROSE and width_for(True) is None  # piped: prose wraps at 120
    assert run_hc("inspect", tiny_ckpt).exit_code == 0


# --------------------------------------------------------------------------- --metadata


def test_safetensors_metadata_bounded_and_escaped(tmp_path):
    from hccli.inspecting.meta import MAX_METADATA_CHARS

    f = tmp_path / "model.safetensors"
    long = "x" * (MAX_METADATA_CHARS + 500)
    save_file({"layers.0.w": np.zeros(2, np.float32)}, str(f),
              metadata={"format": "pt", "evil": "a\x1b[2J[bold]b[/bold]:smile:", "long": long})
    r = run_hc("inspect", f, "--metadata")
    assert r.exit_code == 0, r.stdout[-2000:]
    assert "\x1b" not in r.stdout and "\\x1b[2J[bold]b[/bold]:smile:" in r.stdout
    assert "format" in r.stdout and f"({len(long):,} characters)" in r.stdout
    assert "Hyper-connections" not in r.stdout
    doc = run_hc("inspect", f, "--metadata", "--json").json()
    (group,) = doc["metadata"]
    assert group["files"] == ["model.safetensors"] and group["format"] == "safetensors"
    entries = {e["key"]: e for e in group["entries"]}
    assert entries["format"] == {"key": "format", "type": "string", "value": "pt"}
    assert entries["evil"]["value"] == "a\x1b[2J[bold]b[/bold]:smile:"  # JSON escapes it itself
    assert len(entries["long"]["value"]) == MAX_METADATA_CHARS and entries["long"]["length"] == len(long)
    assert list(doc)[-1] == "metadata"


def test_metadata_of_shards_alike_is_one_group(tiny_ckpt):
    doc = run_hc("inspect", tiny_ckpt, "--metadata", "--json").json()
    assert sum(len(g["files"]) for g in doc["metadata"]) == doc["shards"]
    index = json.loads((tiny_ckpt / INDEX_NAME).read_text())
    shard = sorted(set(index["weight_map"].values()))[0]
    with safe_open(str(tiny_ckpt / shard), framework="numpy") as f:
        want = f.metadata() or {}
    group = next(g for g in doc["metadata"] if shard in g["files"])
    assert {e["key"]: e["value"] for e in group["entries"]} == want


def test_gguf_key_values(tmp_path):
    from gguf_fixtures import hc_values, write_gguf

    path = write_gguf(tmp_path / "m.gguf", hc_values())
    doc = run_hc("inspect", path, "--metadata", "--json").json()
    (group,) = doc["metadata"]
    assert group["format"] == "gguf"
    entries = {e["key"]: e for e in group["entries"]}
    assert entries["general.architecture"]["value"] == "deepseek4"
    assert entries["deepseek4.block_count"] == {"key": "deepseek4.block_count", "type": "integer", "value": 6}
    ratios = entries["deepseek4.attention.compress_ratios"]
    assert ratios["type"] == "array of integer" and ratios["length"] == 6 and len(ratios["value"]) == 6
    out = run_hc("inspect", path, "--metadata").stdout
    assert "GGUF key/values of 1 file: m.gguf" in out and "deepseek4.hyper_connection.count" in out


# --------------------------------------------------------------------------- --stats


def _want(x: np.ndarray) -> dict:
    x = x.astype(np.float64).ravel()
    fin = x[np.isfinite(x)]
    return {"elements": x.size, "nonfinite": int(x.size - fin.size), "min": fin.min(), "max": fin.max(),
            "mean": fin.mean(), "std": fin.std()}


def _close(got: dict, want: dict, rel: float = 1e-9) -> None:
    for k, v in want.items():
        assert math.isclose(got[k], v, rel_tol=rel, abs_tol=1e-12), (got["name"], k, got[k], v)


def test_stats_equal_numpy_over_the_stored_values(tiny_ckpt):
    doc = run_hc("inspect", tiny_ckpt, "--stats", "--json").json()
    index = json.loads((tiny_ckpt / INDEX_NAME).read_text())["weight_map"]
    stats = doc["stats"]
    assert len(stats) == 3 * 2 * 10 and list(doc)[-1] == "stats"
    assert [(s["layer"], s["site"], s["part"]) for s in stats[:3]] == [(0, "attn", "fn"), (0, "attn", "base"),
                                                                        (0, "attn", "scale")]
    for s in stats:
        with safe_open(str(tiny_ckpt / index[s["name"]]), framework="numpy") as f:
            _close(s, _want(f.get_tensor(s["name"])))
    assert doc["stats_bytes_read"] == sum(s["elements"] * 4 for s in stats)  # F32: every value's bytes, once
    picked_doc = run_hc("inspect", tiny_ckpt, "--stats", "--layers", "2", "--json").json()
    picked = picked_doc["stats"]
    assert {s["layer"] for s in picked} == {2} and len(picked) == 6
    assert picked_doc["stats_bytes_read"] == sum(s["elements"] * 4 for s in picked)
    out = run_hc("inspect", tiny_ckpt, "--stats").stdout
    assert "layers.0.hc_attn_fn" in out and "non-finite" in out and "Hyper-connections" not in out
    assert f"read {doc['stats_bytes_read']:,} bytes" in out


def test_stats_in_small_chunks_count_non_finite_values(tmp_path, monkeypatch):
    from hccli.inspecting import stats as inspect_stats
    from hccli.checkpoint.opening import open_checkpoint

    rng = np.random.default_rng(3)
    fn = rng.standard_normal((24, 64)).astype(np.float32)
    fn[0, :3] = [np.nan, np.inf, -np.inf]
    fn[5, 7] = np.nan
    f = tmp_path / "m.safetensors"
    save_file({"layers.0.hc_attn_fn": fn, "layers.0.hc_attn_base": rng.standard_normal(24).astype(np.float32),
               "layers.0.hc_attn_scale": np.full(3, np.nan, np.float32)}, str(f))
    monkeypatch.setattr(inspect_stats, "STATS_CHUNK_ELEMENTS", 7)  # many chunks, the last one short
    ckpt = open_checkpoint(f)
    seen = []
    stats, notes, read = inspect_stats.hc_stats(ckpt, list(ckpt.hc_sites), lambda d, t, w: seen.append((d, t)))
    by = {s.part: s for s in stats}
    _close({"name": "fn", **{k: getattr(by["fn"], k) for k in ("elements", "nonfinite", "min", "max", "mean", "std")}},
           _want(fn))
    assert by["fn"].nonfinite == 4
    assert by["scale"].nonfinite == 3 and by["scale"].min is None and by["scale"].std is None
    assert notes == [] and seen[-1] == (seen[-1][1], 24 * 64 * 4 + 24 * 4 + 12) and read == seen[-1][1]
    assert all(a <= b for (a, _), (b, _) in zip(seen, seen[1:]))  # the bar only goes forward
    doc = run_hc("inspect", f, "--stats", "--json").json()
    scale = next(s for s in doc["stats"] if s["part"] == "scale")
    assert scale["nonfinite"] == 3 and scale["mean"] is None


def test_stats_bounded_by_the_bytes_one_inspect_reads(tiny_ckpt, monkeypatch):
    from hccli.inspecting import stats as inspect_stats
    from hccli.checkpoint.opening import open_checkpoint

    ckpt = open_checkpoint(tiny_ckpt)
    sites = list(ckpt.hc_sites)
    first_fn = sites[0].parts["fn"][1].nbytes
    monkeypatch.setattr(inspect_stats, "MAX_STATS_BYTES", first_fn + 200)  # the first site's three, no more
    stats, notes, read = inspect_stats.hc_stats(ckpt, sites)
    assert [s.part for s in stats] == ["fn", "base", "scale"] and read <= first_fn + 200
    assert len(notes) == 1 and f"{3 * len(sites) - 3:,} of {3 * len(sites):,} HC tensors left out" in notes[0]


def test_stats_of_a_gguf_decode_f16_and_q8_0(tmp_path):
    from gguf_fixtures import F16_SITE, Q8_SITE, hc_values, stored_values, write_gguf

    values = hc_values()
    path = write_gguf(tmp_path / "m.gguf", values)
    stored = stored_values(values)
    doc = run_hc("inspect", path, "--stats", "--json").json()
    assert doc["stats"]
    by_canon = {}
    for s in doc["stats"]:
        prefix = "" if s["site"] == "head" else f"layers.{s['layer']}."  # the root head mix: hc_head_*
        by_canon[f"{prefix}hc_{s['site']}_{s['part']}"] = s
    assert set(by_canon) == set(stored)
    assert by_canon[F16_SITE]["dtype"] == "F16" and by_canon[Q8_SITE]["dtype"] == "Q8_0"
    for canon, s in by_canon.items():
        _close(s, _want(stored[canon]), rel=1e-6)

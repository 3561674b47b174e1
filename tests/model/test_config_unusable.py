"""An unusable config.json beside a checkpoint: inspect, run-kernel --checkpoint and diff set it
aside with one note, the same words in each (the file, the key, what was expected, what is used
instead), as a warning line on stderr and a field in --json; run-kernel never says "no config.json"
when there is one, and takes none of its values (not the 7 iterations beside a bad hc_mult).

Every file is made here: the checkpoint by make-checkpoint, each config from the sample configs
by json (or as raw bytes where JSON cannot say it), the 100 MB one sparse, the FIFO by mkfifo."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from ckpt_tools import tiny
from conftest import SAMPLES, alarm_watchdog, run_hc

from hccli.model.config.model import USED_INSTEAD
from hccli.model.config.read import MAX_CONFIG_BYTES

pytest.importorskip("torch")  # run-kernel's reference

SECONDS = 30  # one variant, three commands: a FIFO that blocks fails here instead of hanging the suite

INF = json.loads((SAMPLES / "tiny-v4.1.json").read_text())  # the checkpoint's own config, inference style
HUB = json.loads((SAMPLES / "tiny-v4.1.hf.json").read_text())  # the same model in the hub's style


def inference(**keys) -> bytes:
    return json.dumps({**INF, **keys}).encode()


def without(key: str) -> bytes:
    return json.dumps({k: v for k, v in INF.items() if k != key}).encode()


def hub(text_config) -> bytes:
    return json.dumps({**HUB, "text_config": text_config}).encode()


def hub_text(**keys) -> bytes:
    return hub({**HUB["text_config"], **keys})


def raw_hc_mult(text: str) -> bytes:
    """The config with hc_mult written as JSON text json.dumps would not write."""
    body = json.dumps({**INF, "hc_mult": "@"})
    return body.replace('"@"', text).encode()


# name -> (how to make config.json, the key named ("" for the file as a whole), what was expected)
VARIANTS = {
    "hc_mult 0": (inference(hc_mult=0), "hc_mult", "an integer >= 1"),
    "hc_mult -1": (inference(hc_mult=-1), "hc_mult", "an integer >= 1"),
    "hc_mult 1e9": (inference(hc_mult=1e9), "hc_mult", "at most 64"),
    "hc_mult '4'": (inference(hc_mult="4"), "hc_mult", "an integer"),
    "hc_mult 65": (inference(hc_mult=65), "hc_mult", "at most 64"),
    "hc_mult true": (inference(hc_mult=True), "hc_mult", "an integer"),
    "hc_mult 4.5": (inference(hc_mult=4.5), "hc_mult", "an integer"),
    "hc_mult [4]": (inference(hc_mult=[4]), "hc_mult", "an integer"),
    "hc_mult 1e400": (raw_hc_mult("1e400"), "hc_mult", "at most 64"),
    "hc_mult of 40 digits": (raw_hc_mult("9" * 40), "hc_mult", "at most 64"),
    "iterations 7 beside hc_mult 0": (inference(hc_mult=0, hc_sinkhorn_iters=7), "hc_mult", "an integer >= 1"),
    "iterations 0": (inference(hc_sinkhorn_iters=0), "hc_sinkhorn_iters", "an integer >= 1"),
    "iterations 1001": (inference(hc_sinkhorn_iters=1001), "hc_sinkhorn_iters", "at most 1,000"),
    "hc_eps -1": (inference(hc_eps=-1), "hc_eps", "a number from 0 to 1"),
    "dim missing": (without("dim"), "dim", "an integer"),
    "dim 0": (inference(dim=0), "dim", "an integer >= 1"),
    "model_type llama": (inference(model_type="llama"), "model_type", "a DeepSeek-V4-family config"),
    "compress_ratios short": (inference(compress_ratios=[0, 0]), "compress_ratios", "layers + stages"),
    "kv source out of range": (inference(kv_source_layers=[99]), "kv_source_layers[0]", "a layer 0..7"),
    "text_config a string": (hub("x"), "text_config", "an object"),
    "text_config a list": (hub([]), "text_config", "an object"),
    "text_config.hc_mult 0": (hub_text(hc_mult=0), "text_config.hc_mult", "an integer >= 1"),
    "text_config.num_hidden_layers 0": (hub_text(num_hidden_layers=0), "text_config.num_hidden_layers",
                                        "an integer >= 1"),
    "NaN": (inference(hc_eps=float("nan")), "", "valid JSON"),
    "Infinity": (inference(norm_eps=float("inf")), "", "valid JSON"),
    "nested 10^5 deep": (b"[" * 100_000 + b"]" * 100_000, "", "JSON a few levels deep"),
    "UTF-16 with BOM": (inference().decode().encode("utf-16"), "", "UTF-8 JSON text"),
    "UTF-8 with BOM": (b"\xef\xbb\xbf" + inference(), "", "valid JSON"),
    "not UTF-8": (b'{"hc_mult": "\xff"}', "", "UTF-8 JSON text"),
    "empty": (b"", "", "valid JSON"),
    "truncated": (inference()[:40], "", "valid JSON"),
    "top level a list": (b"[1, 2]", "", "a JSON object"),
    "top level null": (b"null", "", "a JSON object"),
    "100 MB": ("sparse", "", f"a readable regular file of at most {MAX_CONFIG_BYTES:,} bytes"),
    "a FIFO": ("fifo", "", f"a readable regular file of at most {MAX_CONFIG_BYTES:,} bytes"),
    "a directory": ("dir", "", f"a readable regular file of at most {MAX_CONFIG_BYTES:,} bytes"),
}


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    return tiny(tmp_path_factory.mktemp("release") / "ck")


@pytest.fixture(autouse=True)
def watchdog():
    with alarm_watchdog(SECONDS):
        yield


def place(cfg, how) -> None:
    """config.json made as `how` says: bytes, a 100 MB sparse file, a FIFO or a directory."""
    cfg.unlink()
    if how == "sparse":
        with cfg.open("wb") as f:
            f.write(inference())
            f.truncate(100 * 1000 * 1000)  # a hole: refused by its size, never read
    elif how == "fifo":
        os.mkfifo(cfg)
    elif how == "dir":
        cfg.mkdir()
    else:
        cfg.write_bytes(how)


def notes(ck, gguf: bool = False) -> dict[str, tuple[dict, str]]:
    """Each command's --json note and stderr, on the checkpoint `ck`."""
    out = {}
    r = run_hc("inspect", ck, "--json")
    assert r.exit_code == 0, r.stderr
    out["inspect"] = (r.json()["config_note"], r.stderr)
    r = run_hc("run-kernel", "--checkpoint", ck, "--layers", 1, "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert "no config.json" not in r.stdout + r.stderr  # there is one; it is not used
    # nothing of the file is taken: not the 7 iterations beside a bad hc_mult
    assert doc["params"]["sinkhorn_iters"] == 20
    assert ("GGUF metadata" if gguf else "config.json not used") in doc["params"]["origin"]
    out["run-kernel"] = (doc["config_note"], r.stderr)
    r = run_hc("diff", ck, ck, "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert doc["config_note_a"] == doc["config_note_b"]
    out["diff"] = (doc["config_note_a"], r.stderr)
    return out


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_one_note_in_every_command(tmp_path, release, variant):
    how, key, expected = VARIANTS[variant]
    ck = shutil.copytree(release, tmp_path / "ck")
    cfg = ck / "config.json"
    place(cfg, how)
    seen = notes(ck)
    first, _ = seen["inspect"]
    assert first is not None, variant
    for command, (note, stderr) in seen.items():
        assert note == first, command  # the same note, field by field
        assert f"warning: {note['line']}" in stderr.replace("\n", ""), (command, stderr)
        assert stderr.count("warning:") == (2 if command == "diff" else 1), (command, stderr)
    assert first["file"] == str(cfg) and first["key"] == key and expected in first["expected"], first
    assert first["used_instead"] == USED_INSTEAD
    line = first["line"]
    assert line.startswith(f"config.json not used: {cfg}: ") and line.endswith(USED_INSTEAD), line
    assert (key in line) if key else ("key '" not in line), line
    assert len(line.splitlines()) == 1
    if how == "sparse":  # refused by the size fstat gives, before a byte of it is read
        assert "100,000,000 bytes; expected a model config.json of at most" in line, line


def test_human_output_says_config_json_not_used(tmp_path, release):
    ck = shutil.copytree(release, tmp_path / "ck")
    (ck / "config.json").write_bytes(inference(hc_mult=0, hc_sinkhorn_iters=7))
    r = run_hc("inspect", ck)
    assert r.exit_code == 0 and "(directory, config.json not used)" in r.stdout and "no config.json" not in r.stdout
    r = run_hc("run-kernel", "--checkpoint", ck, "--layers", 1)
    assert r.exit_code == 0 and "20 Sinkhorn iterations" in r.stdout and "no config.json" not in r.stdout
    assert "config.json not used" in r.stdout and "warning: config.json not used" in r.stderr


def test_usable_or_absent_config_has_no_note(tmp_path, release):
    ck = shutil.copytree(release, tmp_path / "ck")
    assert all(note is None and "warning" not in err for note, err in notes_of_good(ck).values())
    (ck / "config.json").unlink()
    assert all(note is None and "warning" not in err for note, err in notes_of_good(ck).values())


def notes_of_good(ck):
    out = {}
    r = run_hc("inspect", ck, "--json")
    out["inspect"] = (r.json()["config_note"], r.stderr)
    r = run_hc("run-kernel", "--checkpoint", ck, "--layers", 1, "--json")
    out["run-kernel"] = (r.json()["config_note"], r.stderr)
    r = run_hc("diff", ck, ck, "--json")
    out["diff"] = (r.json()["config_note_a"], r.stderr)
    return out


@pytest.mark.parametrize("variant", ["iterations 7 beside hc_mult 0", "hc_mult 65", "100 MB", "a FIFO",
                                     "UTF-16 with BOM"])
@pytest.mark.parametrize("named", ["file", "directory"])
def test_beside_a_gguf(tmp_path, variant, named):
    # a GGUF written by gguf-py's GGUFWriter; its own metadata says 20 iterations
    from gguf_fixtures import hc_values, write_gguf

    (tmp_path / "g").mkdir()
    path = write_gguf(tmp_path / "g" / "m.gguf", hc_values())
    cfg = tmp_path / "g" / "config.json"
    cfg.write_bytes(b"")
    how, key, expected = VARIANTS[variant]
    place(cfg, how)
    seen = notes(path if named == "file" else path.parent, gguf=True)
    first, _ = seen["inspect"]
    assert first["file"] == str(cfg) and first["key"] == key and expected in first["expected"], first
    for command, (note, stderr) in seen.items():
        assert note == first and f"warning: {note['line']}" in stderr.replace("\n", ""), (command, stderr)


@pytest.mark.parametrize("variant", ["iterations 7 beside hc_mult 0", "100 MB", "UTF-16 with BOM"])
def test_over_the_hub(tmp_path, release, monkeypatch, variant):
    # the same note for a hub repository (the loopback stand-in), whose config.json is read by range
    pytest.importorskip("huggingface_hub")
    from hub_server import Hub

    ck = shutil.copytree(release, tmp_path / "repo")
    how, key, expected = VARIANTS[variant]
    place(ck / "config.json", how)
    with Hub({"org/bad": ck}) as h:
        monkeypatch.setenv("HF_ENDPOINT", h.endpoint)
        monkeypatch.setenv("HC_CACHE_DIR", str(tmp_path / "cache"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        seen = notes("hf://org/bad")
        sent = h.stats.body_bytes
    first, _ = seen["inspect"]
    assert "config.json" in first["file"] and first["key"] == key and expected in first["expected"], first
    for command, (note, stderr) in seen.items():
        assert note == first and f"warning: {note['line']}" in stderr.replace("\n", ""), (command, stderr)
    assert sent < 10 * 1000 * 1000  # the 100 MB one refused by its size, not fetched

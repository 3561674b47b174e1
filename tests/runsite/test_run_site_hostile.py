"""`hc run-site` on hostile input: a checkpoint's unusable config.json set aside (said on stderr
and in --json, the run made from the tensors), `--save` targets judged before the run (and
`--force` honoured by the write itself), and golden files past the bounds the readers hold.

Every file is made here: checkpoints by make-checkpoint, configs by json."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import SAMPLES

from hccli.checkpoint.synth import make_checkpoint

INF = json.loads((SAMPLES / "tiny-v4.1.json").read_text())
HOSTILE_MLX = {"group_size": 64, "bits": 4, "mode": "affine",
               "model.layers.0.attn.wq_a": {"bits": 10 ** 6, "group_size": 64}}

# name -> (the keys that spoil the config, the key the note names)
UNUSABLE = {
    "hc_mult 0": ({"hc_mult": 0}, "hc_mult"),
    "hc_mult a string": ({"hc_mult": "4"}, "hc_mult"),
    "n_layers 1e9": ({"n_layers": 1e9}, "n_layers"),
    "a hostile mlx quantization block": ({"quantization": HOSTILE_MLX}, "quantization.model.layers.0.attn.wq_a.bits"),
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny") / "ckpt"
    make_checkpoint(SAMPLES / "tiny-v4.1.json", d, seed=0)
    return d


@pytest.mark.parametrize("name", UNUSABLE)
def test_an_unusable_config_is_set_aside_and_said(hc, tiny, tmp_path, name):
    keys, key = UNUSABLE[name]
    ck = tmp_path / "ck"
    shutil.copytree(tiny, ck)
    (ck / "config.json").write_text(json.dumps({**INF, **keys}))
    r = hc("run-site", str(ck), "--layers", "0", "--tokens", "2", "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    note = doc["config_note"]
    assert note["key"] == key and note["file"] == str(ck / "config.json"), note
    lines = r.stderr.strip().splitlines()
    assert lines == [f"warning: {note['line']}"], r.stderr
    assert f"key '{key}'" in note["line"]
    # the run is the checkpoint's own: its tensor shapes, the reference defaults
    assert doc["hc_mult"] == 4 and doc["sinkhorn_iters"] == 20 and doc["family"] == "v4.1"
    assert "tensor shapes" in doc["params_origin"] and [s["key"] for s in doc["sites"]] == ["0.attn", "0.ffn"]
    plain = hc("run-site", str(ck), "--layers", "0", "--tokens", "2")
    assert plain.exit_code == 0 and plain.stderr.strip().splitlines() == lines


def test_a_usable_config_has_no_note(hc, tiny):
    r = hc("run-site", str(tiny), "--layers", "0", "--tokens", "2", "--json")
    assert r.exit_code == 0 and r.json()["config_note"] is None and r.stderr == ""


def test_save_force_replaces_and_without_it_nothing_runs(hc, tiny, tmp_path, monkeypatch):
    target = tmp_path / "g.safetensors"
    target.write_bytes(b"old")
    r = hc("run-site", str(tiny), "--layers", "0", "--tokens", "2", "--save", str(target), "--force", "--json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["saved"] == str(target) and target.read_bytes()[:8] != b"old"
    assert hc("run-site", "--compare", str(target)).exit_code == 0
    from hccli.runsite import run as site_run

    def no_run(*a, **k):
        raise AssertionError("the run started before the --save target was judged")

    monkeypatch.setattr(site_run, "run_chain", no_run)
    before = target.read_bytes()
    r = hc("run-site", str(tiny), "--layers", "0", "--tokens", "2", "--save", str(target))
    assert r.exit_code == 2 and r.stdout == "" and target.read_bytes() == before
    assert r.stderr.strip() == f"hc: error: --save {target}: file exists; expected a new file name (or pass --force)"


def test_only_a_real_checkpoint_directory_is_protected(hc, tiny, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(SAMPLES / "tiny-v4.1.json", work / "config.json")
    beside = work / "golden.safetensors"
    r = hc("run-site", str(work / "config.json"), "--layers", "0", "--tokens", "2", "--save", str(beside))
    assert r.exit_code == 0 and beside.is_file(), r.stderr
    r = hc("run-site", str(work / "config.json"), "--layers", "0", "--tokens", "2", "--save", str(beside), "--force")
    assert r.exit_code == 0, r.stderr  # its own earlier golden does not make the folder a checkpoint
    # a config.json inside a checkpoint directory: that directory is still never written into
    inside = tiny / "golden.safetensors"
    r = hc("run-site", str(tiny / "config.json"), "--layers", "0", "--tokens", "2", "--save", str(inside))
    assert r.exit_code == 2 and "inside the checkpoint directory" in r.stderr and not inside.exists()


def test_a_plot_beside_a_config(hc, tmp_path, mpl):
    shutil.copy(SAMPLES / "tiny-v4.1.json", tmp_path / "config.json")
    r = hc("run-site", str(tmp_path / "config.json"), "--layers", "0", "--tokens", "2", "--plot",
           str(tmp_path / "s.png"))
    assert r.exit_code == 0 and (tmp_path / "s.png").stat().st_size > 1000, r.stderr


def _config(tmp_path, **keys):
    path = tmp_path / "cfg" / f"config{''.join(f'-{k}{v}' for k, v in keys.items())}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({**INF, **keys}))
    return path


def test_a_golden_its_readers_would_refuse_is_refused_before_the_run(hc, tmp_path, monkeypatch):
    from hccli.runsite import run as site_run

    # hc_mult 64 at dim 64: fn is [4224, 4096], past the bound every golden tensor is read under
    wide = _config(tmp_path, hc_mult=64)
    monkeypatch.setattr(site_run, "run_chain", lambda *a, **k: pytest.fail("the run started"))
    for extra in ((), ("--save", str(tmp_path / "g.safetensors"))):
        r = hc("run-site", str(wide), "--tokens", "2", "--layers", "0", *extra)
        lines = r.stderr.strip().splitlines()
        assert r.exit_code == 2 and r.stdout == "" and len(lines) == 1, r.stderr
        assert "fn is [4,224, 4,096], 17,301,504 values" in lines[0] and "4,194,304" in lines[0]
    assert not (tmp_path / "g.safetensors").exists()


def test_the_widest_golden_hc_writes_reads_back(hc, tmp_path):
    # hc_mult 50 at dim 32: fn [2600, 1600], 4,160,000 values, just inside the bound
    golden = tmp_path / "g.safetensors"
    r = hc("run-site", str(_config(tmp_path, hc_mult=50, dim=32)), "--tokens", "2", "--layers", "0", "--save",
           str(golden))
    assert r.exit_code == 0, r.stderr
    assert hc("run-site", "--compare", str(golden), "--json").json()["ok"]
    r = hc("check-port", str(golden), "--golden", str(golden), "--json")
    assert r.exit_code == 0, r.stdout + r.stderr


def test_the_save_size_is_the_readers_to_the_value(hc, tmp_path, monkeypatch):
    from hccli.runsite import golden as site_golden

    src = _config(tmp_path)
    monkeypatch.setattr(site_golden, "MAX_TENSOR_VALUES", 2 * 4 * 64 - 1)  # one value short of streams_in
    r = hc("run-site", str(src), "--tokens", "2", "--layers", "0", "--save", str(tmp_path / "g.safetensors"))
    assert r.exit_code == 2 and "tensor `0.attn.streams_in` would have shape [2, 4, 64], 512 values" in r.stderr
    monkeypatch.setattr(site_golden, "MAX_TENSOR_VALUES", 4224 * 4096)
    # the total: every tensor the file holds, counted as the reader counts them
    r = hc("run-site", str(src), "--tokens", "2", "--layers", "0", "--site", "attn", "--save",
           str(tmp_path / "one.safetensors"))
    assert r.exit_code == 0, r.stderr
    from safetensors.numpy import load_file

    held = sum(a.size for a in load_file(str(tmp_path / "one.safetensors")).values())
    monkeypatch.setattr(site_golden, "MAX_GOLDEN_VALUES", held - 1)
    from hccli.runsite import run as site_run

    real_chain = site_run.run_chain
    monkeypatch.setattr(site_run, "run_chain", lambda *a, **k: pytest.fail("the run started"))
    r = hc("run-site", str(src), "--tokens", "2", "--layers", "0", "--site", "attn", "--save",
           str(tmp_path / "two.safetensors"))
    assert r.exit_code == 2 and f"{held:,} values to save" in r.stderr and not (tmp_path / "two.safetensors").exists()
    monkeypatch.setattr(site_golden, "MAX_GOLDEN_VALUES", held)
    monkeypatch.setattr(site_run, "run_chain", real_chain)
    r = hc("run-site", str(src), "--tokens", "2", "--layers", "0", "--site", "attn", "--save",
           str(tmp_path / "two.safetensors"))
    assert r.exit_code == 0, r.stderr


def test_a_folder_that_cannot_be_written_is_said_before_the_run(hc, tiny, tmp_path, monkeypatch):
    import os

    from hccli.base import safe_write
    from hccli.runsite import run as site_run

    real = os.access
    folder = os.stat(tmp_path)

    def access(path, mode, *, dir_fd=None, **kw):  # the folder as a user without write permission sees it
        st = os.stat(path, dir_fd=dir_fd)
        if (st.st_dev, st.st_ino) == (folder.st_dev, folder.st_ino) and mode & os.W_OK:
            return False
        return real(path, mode, dir_fd=dir_fd, **kw)

    monkeypatch.setattr(safe_write.os, "access", access)
    monkeypatch.setattr(site_run, "run_chain", lambda *a, **k: pytest.fail("the run started"))
    r = hc("run-site", str(tiny), "--layers", "0", "--tokens", "2", "--save", str(tmp_path / "g.safetensors"))
    assert r.exit_code == 2 and r.stdout == "", r.stderr
    assert r.stderr.strip() == (f"hc: error: --save {tmp_path / 'g.safetensors'}: its folder {tmp_path} is not "
                                "writable; expected a folder hc may write in")

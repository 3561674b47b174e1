"""A shard the index names and that is not there, and a GGUF split set without one of its parts:
every command that reads the checkpoint says so without --verify, in one `warning:` line naming
the file and as a missing_shard finding in --json, and a command that needs what the gone file
held fails naming that file (docs/commands/inspect.md, "Damage every command reports").

The release checkpoint is made by make-checkpoint's writer (synth.make_checkpoint), the split
set by gguf-py's GGUFWriter (gguf_fixtures.write_gguf); each test removes a file of a copy."""

from __future__ import annotations

import shutil

import pytest

from ckpt_tools import tiny
from conftest import run_hc

LAYER0 = "model-00003-of-00014.safetensors"  # layers.0 of the tiny V4.1, its two HC sites among them
EMBED = "model-00002-of-00014.safetensors"  # embed.weight alone: no HC tensor
STAGE0 = "model-00012-of-00014.safetensors"  # mtp.0


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    return tiny(tmp_path_factory.mktemp("damage") / "tiny")


def without(release, tmp_path, *files):
    ck = shutil.copytree(release, tmp_path / "ck")
    for f in files:
        (ck / f).unlink()
    return ck


def warnings(r) -> list[str]:
    return [line for line in r.stderr.splitlines() if line.startswith("warning:")]


def one_error(r, *words):
    assert r.exit_code == 2 and r.stdout == "", (r.exit_code, r.stdout[-500:], r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hc: error: "), r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


def said_once(r, file):
    """Exit 0 and the one warning line, naming the file."""
    assert r.exit_code == 0, r.stderr
    lines = warnings(r)
    assert len(lines) == 1 and file in lines[0], r.stderr


def the_finding(findings, file):
    assert [f["code"] for f in findings] == ["missing_shard"], findings
    assert file in findings[0]["message"] and findings[0]["severity"] == "error"
    return findings[0]


# --- a release checkpoint with a shard gone ----------------------------------------------------

@pytest.mark.parametrize("extra", [(), ("--tree",), ("--metadata",), ("--stats",), ("--tensors",)])
def test_inspect_says_the_missing_shard_and_exits_0(release, tmp_path, extra):
    whole = run_hc("inspect", release, "--json", *extra)
    assert whole.exit_code == 0 and whole.json()["findings"] == [] and warnings(whole) == []
    ck = without(release, tmp_path, LAYER0)
    r = run_hc("inspect", ck, *extra)
    said_once(r, LAYER0)
    assert "layers.0 (attn, ffn)" in warnings(r)[0]  # what the index placed there
    j = run_hc("inspect", ck, "--json", *extra)
    said_once(j, LAYER0)
    f = the_finding(j.json()["findings"], LAYER0)
    assert f["id"] == f"missing_shard:{LAYER0}" and j.json()["verified"] is False


def test_json_finding_is_verify_s(release, tmp_path):
    ck = without(release, tmp_path, LAYER0)
    plain = the_finding(run_hc("inspect", ck, "--json").json()["findings"], LAYER0)
    v = run_hc("inspect", ck, "--verify", "--json")
    assert v.exit_code == 1
    assert [f for f in v.json()["findings"] if f["code"] == "missing_shard"] == [plain]  # one fact, one finding
    assert warnings(v) == []  # --verify's table says it with the rest


def test_inspect_of_layers_the_shard_held_names_it(release, tmp_path):
    ck = without(release, tmp_path, LAYER0)
    one_error(run_hc("inspect", ck, "--layers", 0, "--hc"), LAYER0, "layers.0.hc_attn_fn")
    one_error(run_hc("inspect", ck, "--stats", "--layers", 0), LAYER0)
    r = run_hc("inspect", ck, "--layers", 1, "--hc", "--json")  # a layer that is there
    said_once(r, LAYER0)
    assert [e["layer"] for e in r.json()["hc"]] == [1, 1]


@pytest.mark.parametrize("order", ["gone is B", "gone is A"])
def test_diff_refuses_a_side_without_a_shard_naming_it(release, tmp_path, order):
    ck = without(release, tmp_path, EMBED)  # no HC tensor there: still not the whole model
    a, b = (release, ck) if order == "gone is B" else (ck, release)
    one_error(run_hc("diff", a, b), EMBED, "not in")
    one_error(run_hc("diff", a, b, "--json"), EMBED)


def test_run_site_names_the_shard_of_a_site_it_needs(release, tmp_path):
    ck = without(release, tmp_path, LAYER0)
    one_error(run_hc("run-site", ck, "--layers", 3, "--tokens", 2), LAYER0, "layers.0.hc_attn_fn")


def test_run_site_runs_without_a_shard_of_no_site_and_says_so(release, tmp_path):
    ck = without(release, tmp_path, EMBED)
    said_once(run_hc("run-site", ck, "--layers", 0, "--tokens", 2), EMBED)
    r = run_hc("run-site", ck, "--layers", 0, "--tokens", 2, "--json")
    said_once(r, EMBED)
    the_finding(r.json()["findings"], EMBED)


def test_run_site_stops_the_stages_at_a_gone_shard_naming_it(release, tmp_path):
    ck = without(release, tmp_path, STAGE0)
    r = run_hc("run-site", ck, "--layers", 0, "--tokens", 2, "--json")
    said_once(r, STAGE0)
    assert any("holds the HC tensors of 0" in n and STAGE0 in n for n in r.json()["notes"]), r.json()["notes"]


def test_run_kernel_names_the_shard_of_its_site(release, tmp_path):
    pytest.importorskip("torch")
    ck = without(release, tmp_path, LAYER0)
    one_error(run_hc("run-kernel", "--checkpoint", ck, "--layers", 0, "--site", "attn"), LAYER0, "layer 0")
    r = run_hc("run-kernel", "--checkpoint", ck, "--layers", 1, "--json")  # a site that is there runs
    said_once(r, LAYER0)
    the_finding(r.json()["findings"], LAYER0)


def test_without_an_index_the_names_imply_the_gone_shard(release, tmp_path):
    ck = without(release, tmp_path, "model.safetensors.index.json", EMBED)
    r = run_hc("inspect", ck, "--json")
    said_once(r, EMBED)
    assert "-of-N names imply" in the_finding(r.json()["findings"], EMBED)["message"]


def test_a_hub_shard_the_listing_lacks_is_said_without_asking_for_it(release, tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    from hub_server import Hub

    repo = without(release, tmp_path, LAYER0)
    with Hub({"org/ck": repo}) as h:
        monkeypatch.setenv("HF_ENDPOINT", h.endpoint)
        monkeypatch.setenv("HC_CACHE_DIR", str(tmp_path / "cache"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        r = run_hc("inspect", "hf://org/ck", "--json")
        said_once(r, LAYER0)
        the_finding(r.json()["findings"], LAYER0)
        assert not any(LAYER0 in path for path, _ in h.stats.auth)  # the listing said it: no request for it


# --- a GGUF split set without a part -----------------------------------------------------------

@pytest.fixture
def split_set(tmp_path):
    from gguf_fixtures import hc_values, write_gguf

    write_gguf(tmp_path / "m.gguf", hc_values(1), split_max_tensors=10)
    parts = sorted(tmp_path.glob("m-*-of-*.gguf"))
    assert len(parts) > 2
    return parts


@pytest.mark.parametrize("extra", [(), ("--tree",), ("--metadata",), ("--stats",)])
@pytest.mark.parametrize("given", ["folder", "first part"])
def test_inspect_says_the_missing_middle_part(split_set, extra, given):
    gone = split_set[1]
    gone.unlink()
    where = gone.parent if given == "folder" else split_set[0]
    said_once(run_hc("inspect", where, *extra), gone.name)
    r = run_hc("inspect", where, "--json", *extra)
    said_once(r, gone.name)
    assert "missing" in the_finding(r.json()["findings"], gone.name)["message"]


def test_a_missing_part_under_verify_is_the_same_finding(split_set):
    gone = split_set[1]
    gone.unlink()
    plain = the_finding(run_hc("inspect", split_set[0], "--json").json()["findings"], gone.name)
    v = run_hc("inspect", split_set[0], "--verify", "--json")
    assert v.exit_code == 1 and plain in v.json()["findings"]


def test_a_folder_without_the_first_part_names_it(split_set):
    gone = split_set[0]
    gone.unlink()
    r = run_hc("inspect", gone.parent, "--json")
    said_once(r, gone.name)
    the_finding(r.json()["findings"], gone.name)


def test_commands_that_need_the_whole_set_name_the_first_part(split_set):
    # (the middle part gone: test_gguf_hostile's test_a_missing_part_warns_in_inspect_and_stops_run_kernel)
    gone = split_set[0]
    gone.unlink()
    folder = gone.parent
    one_error(run_hc("diff", folder, folder), gone.name, "missing")
    one_error(run_hc("run-site", folder, "--tokens", 2), gone.name, "missing")
    pytest.importorskip("torch")
    one_error(run_hc("run-kernel", "--checkpoint", folder, "--layers", 0), gone.name, "missing")

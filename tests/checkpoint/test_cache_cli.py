"""`hc cache list|clear` over a cache filled by real hub reads (the hub stand-in on 127.0.0.1)."""

import os

import pytest

pytest.importorskip("huggingface_hub")

from ckpt_tools import tiny  # noqa: E402
from conftest import run_hc  # noqa: E402
from hub_server import SHA, Hub  # noqa: E402

from hccli.base.words import size  # noqa: E402
from hccli.checkpoint.remote import cache  # noqa: E402


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    return {"org/one": tiny(root / "one"), "org/two": tiny(root / "two", config="tiny-v4.hf.json")}


@pytest.fixture
def filled(repos, monkeypatch, tmp_path):
    """A cache holding what `hc inspect` of both repositories left there."""
    root = tmp_path / "cache"
    with Hub(repos) as h:
        monkeypatch.setenv("HF_ENDPOINT", h.endpoint)
        monkeypatch.setenv("HC_CACHE_DIR", str(root))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        for name in repos:
            assert run_hc("inspect", f"hf://{name}", "--json").exit_code == 0
    return root


def _on_disk(root):
    return sum(os.lstat(os.path.join(d, f)).st_size for d, _, files in os.walk(root) for f in files)


def _folders(root):
    return sorted(p.name for p in root.iterdir())


def test_list_names_every_file_with_sizes_and_the_total(filled):
    doc = run_hc("cache", "list", "--json").json()
    assert doc["root"] == str(filled)
    assert {f["repo"] for f in doc["files"]} == {"org/one", "org/two"}
    assert all(f["commit"] == SHA and f["revisions"] == ["main"] for f in doc["files"])
    one = {f["file"] for f in doc["files"] if f["repo"] == "org/one"}
    assert {"", "config.json", "model.safetensors.index.json", "model-00001-of-00014.safetensors"} <= one
    assert doc["bytes"] == _on_disk(filled) == sum(f["bytes"] for f in doc["files"])
    assert doc["entries"] == sum(len(files) for _, _, files in os.walk(filled))
    assert doc["unrecognised_entries"] == 0 and doc["left_alone"] == [] and not doc["truncated"]
    text = run_hc("cache", "list")
    assert text.exit_code == 0
    assert f"total: {doc['entries']:,} entries, {doc['bytes']:,} bytes ({size(doc['bytes'])}) in {filled}" in text.stdout
    assert "org/two" in text.stdout and "model.safetensors.index.json" in text.stdout


def test_clear_one_repository_leaves_the_other(filled):
    before = run_hc("cache", "list", "--json").json()
    two = [f for f in before["files"] if f["repo"] == "org/two"]
    r = run_hc("cache", "clear", "hf://org/two", "--yes")
    assert r.exit_code == 0, r.stderr
    assert "removed org/two:" in r.stdout
    assert f"removed {sum(f['entries'] for f in two):,} entries, {sum(f['bytes'] for f in two):,} bytes" in r.stdout
    after = run_hc("cache", "list", "--json").json()
    assert after["files"] == [f for f in before["files"] if f["repo"] == "org/one"]
    again = run_hc("cache", "clear", "org/two", "--yes")
    assert again.exit_code == 0 and f"nothing to remove: no entries of org/two in {filled}" in again.stdout


def test_clear_everything_and_bad_names(filled):
    r = run_hc("cache", "clear", "--json", "-y")
    assert r.exit_code == 0
    assert sorted(n for x in r.json()["removed"] for n in x["repos"]) == ["org/one", "org/two"]
    assert _folders(filled) == []
    assert run_hc("cache", "list", "--json").json()["entries"] == 0
    for bad in ("hf://org/two@main", "org/two/sub", "../x", "a b"):
        r = run_hc("cache", "clear", bad)
        assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, (bad, r.stderr)
        assert "expected a hub repository org/name" in r.stderr


def test_clear_follows_no_link_and_leaves_what_hc_did_not_make(filled, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("precious")
    folder = next(p for p in filled.iterdir())
    commit = folder / SHA
    os.symlink(outside, commit / "ranges" / "link-to-outside")  # planted inside one of hc's folders
    os.symlink(outside, filled / ("f" * 32))  # a link named like a repository folder
    (filled / ("e" * 32)).mkdir()  # a folder named like one, holding something hc never writes
    (filled / ("e" * 32) / "notes.txt").write_text("mine")
    (filled / "README").write_text("mine too")
    listed = run_hc("cache", "list", "--json").json()
    assert listed["unrecognised_entries"] == 1  # the planted link, counted, never opened
    assert sorted(listed["left_alone"]) == ["README", "e" * 32, "f" * 32]
    r = run_hc("cache", "clear", "--yes")
    assert r.exit_code == 0, r.stderr
    assert "left alone in" in r.stdout and "README" in r.stdout
    assert (outside / "keep.txt").read_text() == "precious"
    assert sorted(_folders(filled)) == sorted(["README", "e" * 32, "f" * 32])
    assert (filled / ("e" * 32) / "notes.txt").exists() and (filled / ("f" * 32)).is_symlink()


def test_an_empty_or_absent_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HC_CACHE_DIR", str(tmp_path / "nothing-here"))
    r = run_hc("cache", "list")
    assert r.exit_code == 0 and "holds no entries" in r.stdout
    r = run_hc("cache", "clear")
    assert r.exit_code == 0 and "nothing to remove" in r.stdout
    assert not (tmp_path / "nothing-here").exists()  # clearing creates nothing


def test_the_walk_is_bounded(filled, monkeypatch):
    monkeypatch.setattr(cache, "MAX_CACHE_ENTRIES", 5)
    doc = run_hc("cache", "list", "--json").json()
    assert doc["truncated"] and doc["entries"] <= 5
    assert "lower bound" in run_hc("cache", "list").stdout


# --- clear asks first (`hf cache rm` does too), and can say what it would remove ---------------

def _answering(answer, monkeypatch, *args):
    """`hc cache clear ARGS` with a person at a terminal typing `answer`."""
    from typer.testing import CliRunner

    from conftest import Result
    from hccli.cli.app import register
    from hccli.cli.commands import cache as cache_cmd

    monkeypatch.setattr(cache_cmd, "stdin_is_terminal", lambda: True)
    return Result(CliRunner().invoke(register(), ["cache", "clear", *args], input=answer))


def test_clear_asks_and_a_no_removes_nothing(filled, monkeypatch):
    before = _on_disk(filled)
    r = _answering("n\n", monkeypatch)
    assert r.exit_code == 0, r.stderr
    assert "would remove org/one:" in r.stdout and "would remove org/two:" in r.stdout
    assert "Remove " in r.stderr and "[y/N]" in r.stderr and "nothing removed" in r.stderr
    assert _on_disk(filled) == before and len(_folders(filled)) == 2
    r = _answering("\n", monkeypatch)  # the default is no
    assert r.exit_code == 0 and _on_disk(filled) == before


def test_clear_asks_and_a_yes_removes_what_it_showed(filled, monkeypatch):
    plan = run_hc("cache", "clear", "--dry-run", "--json").json()
    r = _answering("y\n", monkeypatch, "org/one")
    assert r.exit_code == 0, r.stderr
    one = next(x for x in plan["removed"] if x["repos"] == ["org/one"])
    assert f"Remove {one['entries']:,} entries ({size(one['bytes'])}) in {filled}?" in r.stderr
    assert "would remove org/one:" in r.stdout and "removed org/one:" in r.stdout
    assert {f["repo"] for f in run_hc("cache", "list", "--json").json()["files"]} == {"org/two"}


def test_clear_without_a_terminal_refuses_unless_yes(filled):
    before = _on_disk(filled)
    for args in ((), ("--json",), ("org/one",)):
        r = run_hc("cache", "clear", *args)  # CliRunner's stdin is no terminal
        assert r.exit_code == 2 and r.stdout == "", (args, r.stdout)
        lines = r.stderr.strip().splitlines()
        assert lines[0].startswith("hc: error: cache clear would remove ") and "--yes" in lines[0], r.stderr
        assert len(lines) <= 2
    assert _on_disk(filled) == before
    assert run_hc("cache", "clear", "-y").exit_code == 0 and _folders(filled) == []


def test_dry_run_says_what_and_how_much_and_removes_nothing(filled):
    before = _on_disk(filled)
    listed = run_hc("cache", "list", "--json").json()
    doc = run_hc("cache", "clear", "--dry-run", "--json").json()
    assert doc["dry_run"] is True and doc["bytes"] == listed["bytes"] == before
    assert doc["entries"] == listed["entries"]
    assert sorted(n for x in doc["removed"] for n in x["repos"]) == ["org/one", "org/two"]
    text = run_hc("cache", "clear", "--dry-run", "org/two")
    assert text.exit_code == 0 and "would remove org/two:" in text.stdout and "org/one" not in text.stdout
    two = next(x for x in doc["removed"] if x["repos"] == ["org/two"])
    assert f"{two['entries']:,} entries, {two['bytes']:,} bytes ({size(two['bytes'])})" in text.stdout
    assert _on_disk(filled) == before and len(_folders(filled)) == 2
    done = run_hc("cache", "clear", "--yes", "--json").json()
    assert done["dry_run"] is False and done["bytes"] == before and _folders(filled) == []

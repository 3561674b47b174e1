"""One layer grammar across every command that takes --layers (docs/CLI.md#layers): numbers,
ranges, lists, `mtp.N` for a stage and `head` for the head mix, one numbering (stage k is
n_layers + k, the head mix n_layers + n_stages), and one out-of-range line naming what the
model has."""

from __future__ import annotations

import pytest
import typer

from ckpt_tools import tiny
from conftest import SAMPLES, run_hc
from hccli.cli.app import register

V4 = "tiny-v4.hf.json"  # 6 layers, 2 stages, the root head mix
V4_HAS = "this model has layers 0-5, mtp.0-mtp.1 (6-7) and head (8)"
V41_HAS = "this model has layers 0-7 and mtp.0-mtp.1 (8-9); no head mix"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("grammar")
    return {"v4": tiny(root / "v4", V4), "v4.1": tiny(root / "v41")}


# how each command is run on a model, its --layers after these
RUN = {
    "count-params": lambda m, family: [str(SAMPLES / (V4 if family == "v4" else "tiny-v4.1.json")), "--json"],
    "inspect": lambda m, family: [str(m[family]), "--hc", "--json"],
    "diff": lambda m, family: [str(m[family]), str(m[family]), "--json"],
    "run-site": lambda m, family: [str(m[family]), "--tokens", "2", "--json"],
    "run-kernel": lambda m, family: ["--checkpoint", str(m[family]), "--impl", "torch", "--json"],
}
ONE_LAYER = {"run-kernel"}  # runs one site: one layer, never the head mix (no Sinkhorn)


def test_every_command_with_layers_is_here():
    app = typer.main.get_command(register())
    taking = {name for name, cmd in app.commands.items()
              if any("--layers" in p.opts for p in getattr(cmd, "params", []))}
    assert taking == set(RUN)
    for name in taking:  # one spelling: the old singular ones are gone
        opts = {o for p in app.commands[name].params for o in p.opts}
        assert "-l" in opts and not opts & {"--layer", "--hc-layer"}


def _run(command, models, family, spec):
    return run_hc(command, *RUN[command](models, family), "--layers", spec)


@pytest.mark.parametrize("command", sorted(RUN))
@pytest.mark.parametrize("spec", ["3", "2-3", "1,4", "mtp.0", "mtp.0-mtp.1", "head", "2,mtp.1,head"])
def test_the_grammar_is_taken(command, models, spec):
    if command in ONE_LAYER and ("," in spec or "-" in spec or "head" in spec):
        r = _run(command, models, "v4", spec)
        assert r.exit_code == 2 and r.stdout == "" and r.stderr.startswith(f"hc: error: --layers ")
        return
    r = _run(command, models, "v4", spec)
    assert r.exit_code in (0, 1), r.stderr  # diff: 1 would be a difference (none here)
    r.json()


@pytest.mark.parametrize("command", sorted(RUN))
@pytest.mark.parametrize("named, numbered", [("mtp.0", "6"), ("mtp.1", "7"), ("head", "8")])
def test_one_numbering(command, models, named, numbered):
    # a stage's name and its number select the same layer: the documents are the same
    if command in ONE_LAYER and named == "head":
        return
    a, b = _run(command, models, "v4", named), _run(command, models, "v4", numbered)
    assert a.exit_code == b.exit_code == 0, a.stderr + b.stderr
    drop = ("elapsed", "seconds", "took")
    strip = lambda d: {k: v for k, v in d.items() if k not in drop} if isinstance(d, dict) else d  # noqa: E731
    assert strip(a.json()) == strip(b.json())


@pytest.mark.parametrize("command", sorted(RUN))
@pytest.mark.parametrize("family, spec, has", [
    ("v4", "99", V4_HAS), ("v4", "3-99", V4_HAS), ("v4", "mtp.2", V4_HAS), ("v4", "9", V4_HAS),
    ("v4.1", "10", V41_HAS), ("v4.1", "head", V41_HAS), ("v4.1", "mtp.2", V41_HAS),
])
def test_one_out_of_range_line(command, models, family, spec, has):
    if command in ONE_LAYER and (spec == "head" or "-" in spec):
        return  # refused as a one-layer spec first (test_the_grammar_is_taken)
    r = _run(command, models, family, spec)
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == f"hc: error: --layers {spec}: {has}\n"

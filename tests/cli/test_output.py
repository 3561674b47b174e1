"""The output layer: numbers are never cut, piped lines are not wrapped, JSON from dataclasses,
our markup read as rich reads it but emoji codes left as written."""

import math
import re
from dataclasses import dataclass

import pytest
from rich.table import Table

from conftest import SAMPLES, run_hc
from hccli.cli import output


def test_piped_tables_keep_every_figure_whole():
    # CliRunner's stdout is no terminal, as a pipe: V4-Pro's figures once ended in "..."
    cfg = SAMPLES / "deepseek-v4-pro.json"
    model = run_hc("count-params", cfg, "--model", "--json").json()["model"]
    out = run_hc("count-params", cfg, "--model").stdout
    assert "…" not in out and "..." not in out
    assert f"{model['stored_bytes']:,}" in out or f"{model['logical_params']:,}" in out


def test_piped_prose_wraps_at_120_and_table_rows_stay_whole(tmp_path):
    from ckpt_tools import tiny

    out = run_hc("inspect", tiny(tmp_path / "t"), "--stats").stdout
    summary = [line for line in out.splitlines() if "stored bytes" in line]
    assert len(summary) == 1 and 80 < len(summary[0]) <= output.PIPED_PROSE and "logical parameters (" in summary[0]
    rows = [line for line in out.splitlines() if line.lstrip().startswith("layers.0.hc_attn_fn ")]
    assert len(rows) == 1 and len(rows[0]) > 80 and rows[0].rstrip().endswith(" 0")  # one record: name to non-finite


def test_a_table_fits_80_columns_by_splitting_where_its_numbers_need_more(tmp_path, monkeypatch):
    from ckpt_tools import tiny

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(output, "_stdout", None)  # the console takes its width when it is made
    out = run_hc("inspect", tiny(tmp_path / "t"), "--stats").stdout
    assert max(map(len, out.splitlines())) <= 80
    rows = [line.split() for line in out.splitlines() if line.lstrip().startswith("layers.0.hc_attn_fn ")]
    assert len(rows) == 2 and rows[0][-1] != "0" and rows[1][-1] == "0"  # the name leads both parts


def test_a_narrow_terminal_folds_numbers_instead_of_cutting_them(monkeypatch):
    narrow = output._console_class()(width=24, force_terminal=False, highlight=False)
    monkeypatch.setattr(output, "_stdout", narrow)
    figure = "1,598,839,674,752,123,456"
    t = Table("component", "parameters")
    t.add_row("Mix projection (fn)", figure)
    with narrow.capture() as cap:
        output.show(t)
    text = cap.get()
    assert "…" not in text
    digits = "".join(re.findall(r"[\d,]+", text))
    assert figure in digits


@dataclass(frozen=True)
class _Row:
    name: str
    values: tuple


@dataclass(frozen=True)
class _Doc:
    rows: list
    by: dict
    missing: object = None


def test_to_jsonable_keeps_field_order_and_names_non_finite_floats():
    doc = _Doc([_Row("a", (1.5, math.nan, -math.inf))], {"x": _Row("b", ())})
    assert output.to_jsonable(doc) == {"rows": [{"name": "a", "values": [1.5, "nan", "-inf"]}],
                                       "by": {"x": {"name": "b", "values": []}}, "missing": None}
    assert list(output.to_jsonable(doc)) == ["rows", "by", "missing"]


def test_names_that_look_like_emoji_codes_are_printed_as_written(tmp_path):
    # a tensor name, a directory and a config path a user does not control: rich would print 😄
    import struct

    from ckpt_tools import write_shard
    from conftest import run_hc

    d = tmp_path / "ck:smile:"
    d.mkdir()
    one = struct.pack("<f", 1.0)
    write_shard(d / "model.safetensors", [("layers.0.x:thumbs_up:", "F32", (1,), one),
                                          (":smile:.weight", "F32", (1,), one),
                                          ("[bold]a[/bold]\x1b[2J.weight", "F32", (1,), one)])
    r = run_hc("inspect", d, "--tree")
    assert r.exit_code == 0, r.stdout[-2000:]
    assert "ck:smile:" in r.stdout and "x:thumbs_up:" in r.stdout and ":smile:.weight" in r.stdout
    assert "\U0001f604" not in r.stdout and "\U0001f44d" not in r.stdout
    assert "[bold]a[/bold]\\x1b[2J.weight" in r.stdout  # markup stays text, the escape code is shown escaped


@pytest.mark.parametrize("text", ["", "plain", "a: b", "[bold]a:[/]b:", "10:30 : 4:5", "\\[x]", "no: code: here"])
def test_markup_is_richs_markup(text):
    # what rich makes of our markup, emoji codes aside (there are none in our strings)
    from rich.text import Text

    from hccli.cli.output import markup

    ours, rich_default = markup(text, "table.title"), Text.from_markup(text, style="table.title")
    assert (ours.plain, ours.spans, ours.style) == (rich_default.plain, rich_default.spans, rich_default.style)


@pytest.mark.parametrize("text", ["x:smile:y", "[bold]x:smile:[/] y", ":+1: and :-1:", "dir/x:thumbs_up-emoji:y"])
def test_markup_leaves_emoji_codes_as_written(text):
    # a name from a file or a server that looks like an emoji code is printed as written
    from rich.text import Text

    from hccli.cli.output import markup

    assert markup(text).plain == Text.from_markup(text, emoji=False).plain
    assert ":" in markup(text).plain and markup(text).plain != Text.from_markup(text).plain


def test_the_sink_takes_a_result_object_only():
    # a dict assembled in a command would be a second builder of its document
    output.begin_invocation()
    assert output.json_document(_Doc([], {}), "x") == {"schema_version": 1, "command": "x", "exit_code": 0,
                                                       "warnings": [], "findings": [], "rows": [], "by": {},
                                                       "missing": None}
    for built in ({"ok": True}, [1], _Doc):
        with pytest.raises(TypeError, match="result object"):
            output.json_document(built, "x")


@dataclass(frozen=True)
class _Judged:
    said: str
    word: str = "departs"
    VERDICTS = ("matches", "departs")

    @property
    def exit_code(self) -> int:  # the protocol: properties the sink reads, never fields of the body
        return 1

    @property
    def verdict(self) -> str:
        return self.word


def test_the_envelope_comes_first_and_owns_its_keys(capsys):
    # exit code and verdict from the result object, this invocation's warnings, then the body
    output.begin_invocation()
    output.warn("a [b] file")
    doc = output.json_document(_Judged("x"), "check-port")
    assert list(doc) == ["schema_version", "command", "exit_code", "verdict", "warnings", "findings", "said", "word"]
    assert doc["exit_code"] == 1 and doc["verdict"] == "departs" and doc["warnings"] == ["a [b] file"]
    assert "warning: a [b] file" in capsys.readouterr().err
    output.begin_invocation()
    assert output.json_document(_Doc([], {}), "x")["warnings"] == []  # the next invocation's own
    with pytest.raises(TypeError, match="VERDICTS"):  # a word outside the documented vocabulary
        output.json_document(_Judged("x", word="fine"), "check-port")

    @dataclass(frozen=True)
    class Clash:
        warnings: list

    with pytest.raises(TypeError, match="envelope owns: warnings"):  # never overwritten silently
        output.json_document(Clash([]), "x")


def test_an_infinite_difference_reads_the_same_in_run_kernel_and_run_site(tmp_path):
    # run-kernel --compare once wrote null for it and run-site --compare "inf": one encoder, one way
    pytest.importorskip("torch")
    import json

    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import save_file

    def with_an_infinity(src, name):
        with safe_open(str(src), framework="numpy") as f:
            tensors, meta = {k: f.get_tensor(k) for k in f.keys()}, f.metadata()
        tensors[name] = tensors[name].copy()
        tensors[name].flat[0] = np.inf  # the re-run's value is finite: |inf - x| = inf
        save_file(tensors, str(tmp_path / f"inf-{src.name}"), metadata=meta)
        return tmp_path / f"inf-{src.name}"

    kernel, site = tmp_path / "kernel.safetensors", tmp_path / "site.safetensors"
    assert run_hc("run-kernel", "--tokens", 5, "--save", kernel).exit_code == 0
    assert run_hc("run-site", SAMPLES / "tiny-v4.1.json", "--tokens", 2, "--layers", 0, "--save", site).exit_code == 0
    k = run_hc("run-kernel", "--compare", with_an_infinity(kernel, "comb"), "--json")
    s = run_hc("run-site", "--compare", with_an_infinity(site, "0.attn.comb"), "--json")
    assert k.exit_code == 1 and s.exit_code == 1, k.stderr + s.stderr
    assert k.json()["outputs"]["comb"]["max_abs_diff"] == "inf"
    assert {x["step"]: x for x in s.json()["steps"]}["comb"]["max_abs_diff"] == "inf"
    for r in (k, s):
        assert '"max_abs_diff": "inf"' in r.stdout and "null" not in r.stdout
        json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"{c} is no JSON"))  # no bare Infinity

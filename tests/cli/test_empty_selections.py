"""A selection that matches nothing is a usage error in every command (`hc: error:`, one line,
nothing on stdout, exit 2): it names the option, what it was matched against, and what is close.
A listing of nothing would exit 0 and read as an answer; a comparison of nothing as a pass."""

from __future__ import annotations

import pytest
from ckpt_tools import tiny
from conftest import SAMPLES, run_hc


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny(tmp_path_factory.mktemp("sel") / "tiny")  # tiny V4.1: layers 0-7, stages 8-9


def _one_line(r):
    assert r.exit_code == 2 and r.stdout == "", (r.exit_code, r.stdout)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hc: error: "), r.stderr
    return lines[0]


@pytest.mark.parametrize("args, said", [
    # whole names: a prefix without '*' is said to be one, with what it would match
    (["--name", "layers.0.hc_attn"], "--name 'layers.0.hc_attn' matches no tensor: it is a glob ('*', '?', '[...]') "
                                     "over whole tensor names as this checkpoint stores them (release, e.g. "
                                     "'layers.0.hc_attn_base'); 'layers.0.hc_attn*' matches 3 tensors"),
    (["--name", "hc_ffn_fn"], "'*hc_ffn_fn*' matches 10 tensors"),
    (["--name", "layers.3.hc_atn_fn"], "; close names: 'layers.3.hc_attn_fn', "),
    (["--name", "*.zzz*"], "over whole tensor names as this checkpoint stores them"),
    (["--dtype", "F64"], "--dtype F64 matches no tensor: this checkpoint stores BF16, F32, F8_E4M3, F8_E8M0, I8"),
    (["--name", "*.hc_*", "--dtype", "BF16"], "no tensor matches --name and --dtype together "
                                              "(alone: --name matches 60, --dtype 98)"),
])
def test_inspect_says_what_a_selection_was_matched_against(ckpt, args, said):
    for json_out in ((), ("--json",)):
        assert said in _one_line(run_hc("inspect", ckpt, *args, *json_out)), args


def test_inspect_says_which_options_match_nothing_together(ckpt):
    # through the core: the option's spelling (--layer, --layers) is the options module's business
    from hccli.base.errors import HcError
    from hccli.inspecting.report import InspectRequest, build_inspect

    with pytest.raises(HcError, match=r"no tensor matches --name and --layers together "
                                      r"\(alone: --name matches 1, --layers \d+\)"):
        build_inspect(ckpt, InspectRequest(name_glob="head.weight", layers=frozenset({3})))


def test_diff_and_run_site_name_the_option_that_kept_no_site(ckpt):
    line = _one_line(run_hc("diff", ckpt, ckpt, "--site", "head"))
    assert line == ("hc: error: A and B: --site head matches no HC tensor: the sites there are attn, ffn "
                    "(this family has no head mix)")
    v4 = SAMPLES / "tiny-v4.hf.json"
    line = _one_line(run_hc("run-site", v4, "--layers", "8", "--site", "attn"))
    assert line.endswith("--layers 8 and --site attn match no site together: there, the sites are head; "
                         "the attn sites are at layers 0-7")


def test_count_params_names_what_it_matched_against():
    line = _one_line(run_hc("count-params", SAMPLES / "tiny-v4.1.json", "--layers", "3", "--site", "head"))
    assert "matches no HC site" in line and "sites: attn, ffn" in line

"""The shared selection options: parsed once in the CLI, strict about what they accept."""

import pytest

from conftest import SAMPLES, run_hc
from hccli.counting import report as count_report
from hccli.cli.specs import COMPONENT_ALIASES, MAX_LAYER_NUMBER, parse_choices, parse_layers, parse_ranges
from hccli.base.errors import HcError


def test_layer_specs():
    assert parse_layers("3-7,8, 14-15", "--layers") == {3, 4, 5, 6, 7, 8, 14, 15}
    assert parse_ranges("2-7,8", "--group") == ((2, 7), (8, 8))


@pytest.mark.parametrize("spec, words", [
    ("3,,5", "empty item"),
    ("3,", "empty item"),
    (",3", "empty item"),
    ("", "empty item"),
    ("7-3", "runs backwards"),
    ("x", "not a layer number"),
    ("3-", "not a layer number"),
    ("-3", "not a layer number"),
    ("9" * 5000, "not a layer number"),
    ("0-999999999", "past any model"),
])
def test_bad_layer_specs(spec, words):
    with pytest.raises(HcError) as ei:
        parse_layers(spec, "--layers")
    assert words in ei.value.message and "--layers" in ei.value.message and "\n" not in ei.value.message
    assert len(ei.value.message) < 200


def test_largest_layer_number_is_any_model_s_last():
    assert max(parse_layers(f"0-{MAX_LAYER_NUMBER}", "--layers")) == MAX_LAYER_NUMBER


def test_every_alias_names_a_canonical_name_of_the_core():
    from hccli.counting.sites import HC_COMPONENTS, ROLES
    from hccli.cli.specs import ROLE_ALIASES, SITE_ALIASES
    from hccli.base.vocab import HC_SITES

    assert set(COMPONENT_ALIASES.values()) == set(HC_COMPONENTS)
    assert set(SITE_ALIASES.values()) == set(HC_SITES)
    assert set(ROLE_ALIASES.values()) == set(ROLES)


def test_choices_take_aliases_commas_and_repeats():
    assert parse_choices(["read,comb", "projection"], "--component", COMPONENT_ALIASES, "") == {"pre", "comb", "fn"}
    with pytest.raises(HcError, match="--component 'nope'"):
        parse_choices(["pre,nope"], "--component", COMPONENT_ALIASES, "")


@pytest.mark.parametrize("args, words", [
    (["--layers", "3,,5"], "--layers '3,,5': an empty item"),
    (["--group", "3-9"], "the groups are 0-1, 2-7, 8-13, 14-19, 20-39, 40-42"),
    (["--group", "2-8"], "spans 2-8"),
    (["--group", "3"], "spans 3"),
    (["--role", "reuse,boss"], "--role 'boss'"),
])
def test_cli_refuses_what_it_used_to_accept_or_widen(args, words):
    r = run_hc("count-params", *args)
    assert r.exit_code == 2 and r.stdout == ""
    assert words in r.stderr and len(r.stderr.splitlines()) == 1


def test_group_bounds_may_span_neighbouring_groups():
    sel = run_hc("count-params", "--group", "2-13", "--site", "attn", "--component", "comb", "--json").json()
    assert sel["selection"]["description"].startswith("group 2-7, 8-13")
    assert sel["selection"]["layers"] == list(range(2, 14))
    one = run_hc("count-params", "--group", "2-7,8-13", "-s", "attn", "-c", "comb", "--json").json()
    assert one["selection"]["total"] == sel["selection"]["total"] == 12 * 17


def test_core_errors_name_the_config_not_a_flag():
    path = SAMPLES / "deepseek-v4.1-flash.json"
    for kwargs in ({"layers": frozenset({99})}, {"groups": ((3, 9),)}):
        with pytest.raises(HcError) as ei:
            count_report.build_report(path, **kwargs)
        assert str(path) in ei.value.message and "--" not in ei.value.message


@pytest.mark.parametrize("args, flag", [
    (["count-params", "--layers"], "--layers"),
    (["inspect", "nowhere", "--layer"], "--layer"),
    (["inspect", "nowhere", "--hc-layer"], "--hc-layer"),
    (["diff", "a", "b", "--layers"], "--layers"),
    (["run-site", "nowhere", "--layers"], "--layers"),
    (["run-kernel", "--layer"], "--layer"),
])
def test_every_layer_option_speaks_one_grammar(args, flag):
    # refused while the flags are parsed, before any file is looked for, in the words of the one parser
    r = run_hc(*args, "3,,5")
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == f"hc: error: {flag} '3,,5': an empty item between commas; expected layer numbers or " \
                       "ranges like 3-7, separated by single commas\n"


def test_one_layer_options_take_the_grammar_but_one_layer():
    from hccli.cli.specs import parse_one_layer

    assert parse_one_layer(" 7 ", "--layer") == parse_one_layer("7-7", "--layer") == 7
    with pytest.raises(HcError, match="expected one layer number"):
        parse_one_layer("2-3", "--layer")


def test_a_command_with_flag_rules_checks_them_first():
    import ast
    import inspect

    import typer

    from hccli.cli.app import register
    from hccli.cli.flag_rules import RULES

    commands = typer.main.get_command(register()).commands
    for name in RULES:
        body = ast.parse(inspect.getsource(commands[name].callback.__wrapped__)).body[0].body
        first = body[1] if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else body[0]
        assert ast.unparse(first) == "check_flags(ctx)", name


def test_a_flag_given_its_default_conflicts_with_nothing(tmp_path):
    # --compare refuses what would choose other inputs; --precision f32 chooses nothing new
    golden = tmp_path / "golden.safetensors"
    golden.write_bytes(b"not one")
    r = run_hc("run-site", "--compare", str(golden), "--precision", "f32")
    assert r.exit_code == 2 and "drop" not in r.stderr and "golden.safetensors" in r.stderr
    r = run_hc("run-site", "--compare", str(golden), "--precision", "bf16")
    assert r.exit_code == 2 and "drop --precision" in r.stderr

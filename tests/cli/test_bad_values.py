"""Every option of every command given a bad value: one line `hc: error: ...` naming the option,
at most one hint after it, nothing on stdout, exit 2 (docs/CLI.md).

The cases are built from the app's own parameter list, so that an option added later is covered
without a line here: a number gets a value of the wrong type and one out of bounds, a choice a
name it does not have, an input path a missing file, a flag `--flag=x`. A free-text option
must say here what is bad for it, or the completeness test fails."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from ckpt_tools import tiny
from conftest import run_hc
from hccli.cli.app import register

# Text options: what is bad for each (hc cannot tell a string's meaning from its type).
TEXT_BAD = {
    "--layers": ["x", "99"],  # not a layer; past the model's layers
    "--group": ["x"],
    "--site": ["nowhere"],
    "--component": ["nope"],
    "--role": ["boss"],
    "--device": ["tpu"],
    "--checkpoint": ["{missing}"],
    "--sublayer": ["{missing}"],
    "--impl": ["nosuch"],
    "--accept": ["nosuch"],  # a variant check-port does not know
}
# Text options with no bad value: every string is one.
TEXT_FREE = {"--name": "a glob: any text is one (an empty selection is said, not refused)"}
# Paths a command writes: a name it cannot write (a missing file is what it makes).
WRITTEN = {"--save": "{missing_dir}/out.safetensors", "--plot": "out.txt"}
# Numbers whose value may be negative: none. A number is refused below its bound in hc's words.
NUMBER_BAD = {"INT": ["1.5", "-1"], "FLOAT": ["x", "-1", "nan"]}


def _commands():
    app = typer.main.get_command(register())

    def walk(cmd, path):
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                yield from walk(sub, (*path, name))
        else:
            yield path, cmd

    return list(walk(app, ()))


def _flag(param) -> str:
    return max(param.opts, key=len)


def _bad_values(param) -> list[str]:
    flag = _flag(param)
    if param.is_flag:
        return [f"{flag}=x"]
    kind = type(param.type).__name__
    if flag in WRITTEN:
        return [WRITTEN[flag]]
    if kind == "TyperPath" or kind == "Path":
        return ["{missing}"]
    if param.type.name.upper() in NUMBER_BAD:
        return NUMBER_BAD[param.type.name.upper()]
    if ("Choice" in kind or kind == "FuncParamType") and flag not in TEXT_BAD:
        return ["nosuch"]
    return TEXT_BAD.get(flag, [])


def _cases():
    out = []
    for path, cmd in _commands():
        for param in cmd.params:
            if param.param_type_name != "option" or param.name == "help":
                continue
            for value in _bad_values(param):
                out.append(pytest.param(path, _flag(param), value, id=f"{' '.join(path)} {_flag(param)} {value}"))
    return out


CASES = _cases()


def test_every_option_with_a_value_has_a_bad_value():
    # a new text option needs a line in TEXT_BAD (or TEXT_FREE, saying why no value is bad)
    covered = {(c.values[0], c.values[1]) for c in CASES}
    missing = [f"{' '.join(path)} {_flag(p)}" for path, cmd in _commands() for p in cmd.params
               if p.param_type_name == "option" and p.name != "help" and (path, _flag(p)) not in covered
               and _flag(p) not in TEXT_FREE]
    assert not missing, f"no bad value for: {missing}"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny(tmp_path_factory.mktemp("bad") / "tiny")


def _arguments(path: tuple[str, ...], ckpt: Path) -> list[str]:
    """What a command needs besides the option to reach the option's check."""
    return {
        ("inspect",): [str(ckpt)],
        ("diff",): [str(ckpt), str(ckpt)],
        ("run-site",): [str(ckpt)],
        ("check-port",): [str(ckpt / "config.json"), "--golden", str(ckpt / "config.json")],
    }.get(path, [])


@pytest.mark.parametrize("path, flag, value", CASES)
def test_a_bad_value_is_one_line_naming_the_option(path, flag, value, ckpt, tmp_path):
    value = value.format(missing=tmp_path / "missing", missing_dir=tmp_path / "no-such-dir")
    given = [value] if value.startswith(flag + "=") else [flag, value]
    args = [*path, *_arguments(path, ckpt), *given]
    if path == ("check-port",) and flag == "--golden":
        args = [*path, str(ckpt / "config.json"), *given]
    r = run_hc(*args)
    lines = r.stderr.splitlines()
    assert (r.exit_code, r.stdout) == (2, ""), (args, r.stdout, r.stderr)
    assert lines and lines[0].startswith("hc: error: ") and len(lines) <= 2, (args, r.stderr)
    assert flag in lines[0] or f"'{flag}'" in lines[0], (args, r.stderr)
    assert len(lines) == 1 or lines[1].startswith("see '"), (args, r.stderr)

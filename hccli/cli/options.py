"""Options shared by several commands (the huggingface_hub CLI habit): one spelling
per concept, parsed in callbacks, so that a command body receives sets and numbers
and the core never sees a flag.

A callback's error is an HcError naming the flag as typed; the app's error
boundary prints it as one line with exit code 2. Every layer selection is `--layers/-l`
(docs/CLI.md: one name, one grammar); a command whose help says more of it calls
`layers_option(help=...)`.

A choice is a str Enum, so that typer checks it, lists it in --help and completes it;
`choice_option()` keeps the one line a command has always given for a bad value where
scripts and tests read it. Options whose help differs by command (--seed, --tokens, --device,
--config) are made by one function each: the flag, its type and its check stay one.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Callable, List, Optional

import typer

from hccli.base.errors import HcError
from hccli.cli import specs


def _flag(param: typer.CallbackParam) -> str:
    return max(param.opts, key=len) if param.opts else f"--{param.name}"


def _joined(value: Optional[list[str]]) -> Optional[str]:
    # a list option given more than once means the union: `-l 3 -l 5` is `-l 3,5` (docs/CLI.md)
    return ",".join(value) if value else None


def layers_callback(ctx: typer.Context, param: typer.CallbackParam, value: Optional[list[str]]):
    """'3-7,8,mtp.0,head' (repeats joined) -> [a LayerSpec] the core numbers against its model:
    typer hands a list option's value to the command as a list, so the spec travels in one, and
    the command takes it out with `layer_spec`."""
    text = _joined(value)
    if text is None or ctx.resilient_parsing:
        return None
    return [specs.parse_layers(text, _flag(param))]


def layer_spec(value: Optional[list]) -> Any:
    """The LayerSpec of a --layers value (None when the option is absent)."""
    return value[0] if value else None


def one_layer_callback(ctx: typer.Context, param: typer.CallbackParam, value: Optional[str]):
    """The same grammar, one layer: a command that runs one site."""
    if value is None or ctx.resilient_parsing:
        return value
    return specs.parse_one_layer(value, _flag(param))


def ranges_callback(ctx: typer.Context, param: typer.CallbackParam, value: Optional[list[str]]):
    """'2-7,8-13' (repeats joined) -> ((2, 7), (8, 13)): bounds the core matches against the groups."""
    text = _joined(value)
    if text is None or ctx.resilient_parsing:
        return None
    return specs.parse_ranges(text, _flag(param))


def check_plot(value: Path, flag: str = "--plot", forbidden_dir: Optional[object] = None) -> None:
    """The plot file can be written (extension, matplotlib, folder, not in forbidden_dir, a
    checkpoint), or an HcError naming the flag. Commands call it before their work; the
    option's callback already has, without the checkpoint."""
    from hccli.plot import check_target, clean_text  # numpy and matplotlib load only when a plot is asked for

    try:
        check_target(value, forbidden_dir=forbidden_dir)
    except HcError as exc:
        named = clean_text(str(value))
        what = exc.message if exc.message.startswith((named, str(value))) else f"{named}: {exc.message}"
        raise HcError(f"{flag} {what}") from None


def plot_callback(ctx: typer.Context, param: typer.CallbackParam, value: Optional[Path]):
    """A wrong plot file must fail while the flags are parsed, before the command computes or prints."""
    if value is None or ctx.resilient_parsing:
        return value
    check_plot(value, _flag(param))
    return value


def choices_callback(aliases: dict[str, str], expected: str):
    def callback(ctx: typer.Context, param: typer.CallbackParam, value: Optional[list[str]]):
        if not value or ctx.resilient_parsing:
            return None
        # typer turns a list option's value back into a list: hand it over sorted
        return sorted(specs.parse_choices(value, _flag(param), aliases, expected))

    return callback


sites_callback = choices_callback(specs.SITE_ALIASES, "attn, ffn, head")
components_callback = choices_callback(specs.COMPONENT_ALIASES,
                               "pre, post, comb, fn (or read, write, combination, projection)")
roles_callback = choices_callback(specs.ROLE_ALIASES, ", ".join(dict.fromkeys(specs.ROLE_ALIASES.values())))

LAYERS_HELP = ("Layers: numbers, ranges and lists (3, 2-7, 2,8,14), mtp.N for a stage (also numbered after "
               "the backbone: mtp.0 is 40 in V4.1-Flash), head for the head mix.")


def layers_option(help: str = LAYERS_HELP, one: bool = False) -> Any:
    """--layers/-l, the one layer option: a LayerSpec to the command, or with `one` a spec of
    exactly one layer (else one line: the command runs one site)."""
    if one:
        return Annotated[Optional[str], typer.Option(
            "--layers", "-l", callback=one_layer_callback, metavar="LAYER", show_default=False, help=help)]
    return Annotated[Optional[List[str]], typer.Option(
        "--layers", "-l", callback=layers_callback, metavar="LAYERS", show_default=False, help=help)]


# Typer sees str / list[str]; the command receives a LayerSpec, a tuple of (first, last)
# bounds, and sorted lists of canonical site / component / role names.
LayersOpt = layers_option()
GroupOpt = Annotated[Optional[List[str]], typer.Option(
    "--group", "-g", callback=ranges_callback, show_default=False,
    help="Layer groups by their bounds as the groups table prints them, e.g. 2-7, or 2-13 for two "
         "neighbouring groups.")]
SitesOpt = Annotated[Optional[list[str]], typer.Option(
    "--site", "-s", callback=sites_callback, show_default=False, help="attn, ffn or head.")]
ComponentsOpt = Annotated[Optional[list[str]], typer.Option(
    "--component", "-c", callback=components_callback, show_default=False,
    help="pre (read), post (write), comb (combination), fn (projection).")]
RolesOpt = Annotated[Optional[list[str]], typer.Option(
    "--role", "-r", callback=roles_callback, show_default=False,
    help="window, source, reuse, reindex, compressed, engram, hash, stage.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document for scripts instead of tables.")]
PlotOpt = Annotated[Optional[Path], typer.Option(
    # readable=False: the file is written, never read (click's readable check follows a link)
    "--plot", callback=plot_callback, metavar="FILE", show_default=False, readable=False,
    help="Also draw a picture into FILE, .png or .svg by its extension (needs matplotlib, hccli's "
         "plot extra).")]


# ---- checks of one value, and choices ------------------------------------------------------

def at_least(flag: str, minimum: int, maximum: int | None = None, why: str = ""):
    """A callback: every value (one, or each of a list) within [minimum, maximum], else one line."""
    def check(value):
        if value is None:
            return value
        for v in value if isinstance(value, list) else [value]:
            if v < minimum or (maximum is not None and v > maximum):
                upper = f" and at most {maximum:,}" if maximum is not None else ""
                raise HcError(f"{flag} {v}: expected at least {minimum}{upper}{why}")
        return value

    return check


def non_negative(flag: str):
    """A callback: a finite number >= 0 (a tolerance), else one line; NaN and inf are refused."""
    def check(value: Optional[float]) -> Optional[float]:
        if value is not None and not (value >= 0 and value != float("inf")):
            raise HcError(f"{flag} {value}: expected a finite number >= 0")
        return value

    return check


def input_file(flag: str):
    """A callback: an optional path read as an input file (a regular file, else one line naming the flag)."""
    def check(value: Optional[Path]) -> Optional[Path]:
        if value is not None:
            from hccli.runkernel.files import regular_file  # at parse time: start-up stays light

            try:
                regular_file(value)
            except HcError as exc:
                raise HcError(f"{flag} {exc.message}") from None
        return value

    return check


def _non_negative_seed(value: int) -> int:
    if value < 0:
        raise HcError(f"--seed {value}: expected a non-negative integer")
    return value


class Choice(str, Enum):
    """The base of every choice: a str, and str() of a member is its value (3.11's StrEnum),
    which typer's conversion of a value and of a callback's result relies on."""

    def __str__(self) -> str:
        return self.value


def listed(enum: type[Enum]) -> str:
    """An Enum option's metavar, [a|b|c]: typer's own writes <a|b|c>, which reads as a placeholder."""
    return "[" + "|".join(m.value for m in enum) + "]"


def choice_option(enum: type[Enum], *flags: str, refuse: Callable[[str], str], **option: Any) -> Any:
    """An Enum option whose bad value is answered by the command's own line, `refuse(value)`,
    instead of click's: the Enum's values are checked here, and --help lists them."""
    values = [m.value for m in enum]

    def parse(text: str | Enum) -> str:
        value = text.value if isinstance(text, enum) else text  # the default arrives as the member
        if value not in values:
            raise HcError(refuse(value))
        return value  # typer makes it the Enum's member

    option.setdefault("metavar", listed(enum))
    return Annotated[enum, typer.Option(*flags, parser=parse, **option)]


# ---- options whose help says what the value is for in each command ---------------------------

def seed_option(help: str) -> Any:
    return Annotated[int, typer.Option("--seed", callback=_non_negative_seed, help=help)]


def tokens_option(help: str, at_least_: int = 1, at_most: int | None = None) -> Any:
    return Annotated[Optional[int], typer.Option(
        "--tokens", "-t", callback=at_least("--tokens", at_least_, at_most), help=help)]


def token_list_option(help: str, most: int | None = None) -> Any:
    """A repeatable --tokens; `most` bounds how many times it may be given."""
    each = at_least("--tokens", 1)

    def check(value: Optional[List[int]]) -> Optional[List[int]]:
        if value is not None and most is not None and len(value) > most:
            raise HcError(f"--tokens given {len(value):,} times: expected at most {most} token counts a run")
        return each(value)

    return Annotated[Optional[List[int]], typer.Option("--tokens", "-t", callback=check, help=help)]


def _device(value: Optional[str]) -> Optional[str]:
    # the devices the kernels take (kernels/registry.py's normalise_device), checked as the flags are
    # parsed: a typo is refused before torch loads or a run starts
    import re

    if value is not None and not re.fullmatch(r"cpu|cuda(:\d{1,4})?", value):
        raise HcError(f"--device {value!r}: expected cpu, cuda or cuda:N")
    return value


def device_option(help: str) -> Any:
    return Annotated[Optional[str], typer.Option("--device", callback=_device, help=help)]


def config_option(help: str) -> Any:
    """--config: a config.json, checked as an input file as the flags are parsed."""
    return Annotated[Optional[Path], typer.Option("--config", callback=input_file("--config"), help=help)]


# run-kernel's and run-site's --save and --compare: one wording, one check
ForceOpt = Annotated[bool, typer.Option("--force", help="Overwrite the --save file.")]
CompareAtolOpt = Annotated[float, typer.Option("--atol", callback=non_negative("--atol"),
                                               help="With --compare: the largest absolute difference that "
                                               "still counts as equal (default 0: bit for bit).")]

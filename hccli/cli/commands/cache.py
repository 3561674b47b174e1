"""`hc cache list|clear`: what `hc` keeps of hub reads (headers, small files, HC value ranges)."""

from typing import Annotated, Optional

import typer

from hccli.cli.app import HcTyper, app
from hccli.cli.options import JsonOpt

EPILOG = """Examples:

\b
  # every cached repository, commit and file, with sizes
  hc cache list

\b
  hc cache list --json

\b
  # one repository's entries
  hc cache clear deepseek-ai/DeepSeek-V4-Flash

\b
  # what would be removed, and its size
  hc cache clear --dry-run

\b
  # everything hc cached, without asking
  hc cache clear --yes
"""

cache_app = HcTyper(
    help="List or clear the cache of hub reads (HC_CACHE_DIR, else ~/.cache/hccli).",
    epilog=EPILOG, no_args_is_help=True, rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(cache_app, name="cache")


@cache_app.command("list", epilog=EPILOG)
def list_cmd(json_out: JsonOpt = False) -> None:
    """Show each cached repository, revision, commit and file with the bytes its entries take, and the total."""
    from hccli.checkpoint.remote.cache import list_cache
    from hccli.cli.render import cache as render_cache
    from hccli.cli.output import emit

    listing = list_cache()
    emit(listing, json_out, lambda: render_cache.listing(listing), command="cache list")


def stdin_is_terminal() -> bool:
    """Whether a person can answer the confirmation (tests stand in for one here)."""
    import sys

    return sys.stdin is not None and sys.stdin.isatty()


@cache_app.command("clear", epilog=EPILOG)
def clear_cmd(
    repo: Annotated[Optional[str], typer.Argument(
        metavar="REPO", show_default=False,
        help="Only this repository's entries, org/name or hf://org/name (default: every entry).")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Remove without asking.")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Say what would be removed, and its size; remove nothing.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Remove cached entries, after saying what and asking (--yes: without asking).

    Without a terminal to ask on, it removes nothing unless --yes is given. Only the
    folders hc made under the cache root are removed, never through a link; anything else
    found there is left alone and named.
    """
    import dataclasses

    from hccli.checkpoint.remote.cache import clear_cache
    from hccli.cli.render import cache as render_cache
    from hccli.cli.output import emit, note
    from hccli.base.errors import HcError
    from hccli.base.words import plural, size

    repo_id = None
    if repo is not None:
        from hccli.checkpoint.remote.hub import parse_repo_spec
        from hccli.checkpoint.source import one_line

        ref = parse_repo_spec(repo, bare_allowed=True)
        if ref is None or ref.revision or ref.subfolder:
            raise HcError(f"{one_line(repo, 120)}: expected a hub repository org/name (or hf://org/name), "
                          "without a revision or subfolder: its entries of every commit are removed")
        repo_id = ref.repo_id
    # what would go, measured first: a dry run ends here, a confirmation shows it
    plan = clear_cache(repo_id, dry_run=True)
    cleared = plan if dry_run or plan.removed else dataclasses.replace(plan, dry_run=False)  # nothing to do
    if not dry_run and plan.removed:
        what = f"{plural(plan.entries, 'entry')} ({size(plan.bytes)}) in {plan.root}"
        if not yes and not stdin_is_terminal():
            raise HcError(f"cache clear would remove {what}; no terminal to confirm on: "
                          "pass --yes to remove, or --dry-run to list them")
        if not yes:
            if not json_out:
                emit(plan, False, lambda: render_cache.cleared(plan, repo_id), command="cache clear")
            if not typer.confirm(f"Remove {what}?", default=False, err=True):
                note("nothing removed")
                if json_out:
                    emit(plan, True, lambda: [], command="cache clear")  # the plan, dry_run true: nothing was removed
                return
        cleared = clear_cache(repo_id, only=frozenset(r.folder for r in plan.removed))
    emit(cleared, json_out, lambda: render_cache.cleared(cleared, repo_id), command="cache clear")

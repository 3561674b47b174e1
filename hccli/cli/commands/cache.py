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
  # everything hc cached
  hc cache clear
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
    emit(listing, json_out, lambda: render_cache.listing(listing))


@cache_app.command("clear", epilog=EPILOG)
def clear_cmd(
    repo: Annotated[Optional[str], typer.Argument(
        metavar="REPO", show_default=False,
        help="Only this repository's entries, org/name or hf://org/name (default: every entry).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Remove cached entries and say what was removed; asks nothing.

    Only the folders hc made under the cache root are removed, never through a link;
    anything else found there is left alone and named.
    """
    from hccli.checkpoint.remote.cache import clear_cache
    from hccli.cli.render import cache as render_cache
    from hccli.cli.output import emit
    from hccli.base.errors import HcError

    repo_id = None
    if repo is not None:
        from hccli.checkpoint.remote.hub import parse_repo_spec
        from hccli.checkpoint.source import one_line

        ref = parse_repo_spec(repo, bare_allowed=True)
        if ref is None or ref.revision or ref.subfolder:
            raise HcError(f"{one_line(repo, 120)}: expected a hub repository org/name (or hf://org/name), "
                          "without a revision or subfolder: its entries of every commit are removed")
        repo_id = ref.repo_id
    cleared = clear_cache(repo_id)
    emit(cleared, json_out, lambda: render_cache.cleared(cleared, repo_id))

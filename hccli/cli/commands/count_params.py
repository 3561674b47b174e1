"""`hc count-params`: hyper-connection parameters per component, site, layer and group;
with --model, the whole model under each counting convention."""


from pathlib import Path
from typing import Optional

import typer
from typing import Annotated

from hccli.counting import report as count_report
from hccli.cli.render import count as render_count
from hccli.cli.app import app
from hccli.cli.flag_rules import check_flags
from hccli.cli.options import (ComponentsOpt, GroupOpt, JsonOpt, LayersOpt, PlotOpt, RolesOpt, SitesOpt,
                               Choice, check_plot, choice_option, layer_spec)
from hccli.cli.output import emit, json_document, note, safe

EPILOG = """Examples:

\b
  # bundled V4.1-Flash config, HC of the text path
  hc count-params

\b
  # 17 x 5 = 85
  hc count-params --group 2-7 --role reuse --site attn --component comb

\b
  hc count-params --layers 3-7 --site attn --component comb --json

\b
  hc count-params sample_configs/deepseek-v4-pro.hf.json --by-layer

\b
  # every counting convention
  hc count-params sample_configs/deepseek-v4.1-flash.json --model

\b
  # and a picture
  hc count-params --model --plot params.png --convention stored_bytes
"""

class Convention(Choice):
    """What the component bars of --plot can count: the per-component keys of `--model --json`."""

    logical_params = "logical_params"
    stored_elements = "stored_elements"
    stored_bytes = "stored_bytes"


PLOT_CONVENTIONS = tuple(c.value for c in Convention)


@app.command("count-params", epilog=EPILOG)
def count_params(
    ctx: typer.Context,
    config: Annotated[
        Optional[Path],
        typer.Argument(help="A config.json (inference or hub style), or a folder holding one. "
                            "Default: the bundled DeepSeek-V4.1-Flash config.", show_default=False),
    ] = None,
    layers: LayersOpt = None,
    group: GroupOpt = None,
    role: RolesOpt = None,
    site: SitesOpt = None,
    component: ComponentsOpt = None,
    stages: Annotated[bool, typer.Option("--stages", help="Include the DSpark/MTP stages in the selection.")] = False,
    by_layer: Annotated[bool, typer.Option("--by-layer", help="Add a table with one row per layer.")] = False,
    model: Annotated[bool, typer.Option("--model", "-m", help="Whole-model totals per component and per "
                                        "counting convention, from the tensor inventory.")] = False,
    json_out: JsonOpt = False,
    plot: PlotOpt = None,
    convention: choice_option(
        Convention, "--convention", metavar="KEY", show_default=False,
        refuse=lambda v: f"--convention {v!r}: expected one of {', '.join(PLOT_CONVENTIONS)}",
        help="What the whole-model bars of --plot count: logical_params (default), stored_elements or "
             "stored_bytes. Needs --plot and --model.") = None,
) -> None:
    """Count hyper-connection parameters from a config.json.

    By default: the HC parameters of the text path (backbone layers, and the head
    mix where the family has one), per component of one site, per layer group, with
    the DSpark/MTP stages reported beside. Filters select layers, groups, roles,
    sites and components and print the arithmetic, e.g.
    "Stream combination (attn): 17 x 5 layers = 85".
    """
    check_flags(ctx)  # the option callbacks have turned the flags into sets and bounds by now
    # a folder holding config.json is a checkpoint: never written into
    guard = config if config is not None and config.is_dir() else None
    if plot is not None:
        check_plot(plot, forbidden_dir=guard)
    report = count_report.build_report(
        config, layers=layer_spec(layers), groups=group, roles=role, sites=site, components=component,
        stages=stages, by_layer=by_layer, model=model,
    )
    emit(report, json_out, lambda: render_count.renderables(report), command="count-params")
    if plot is not None:
        from hccli.plot import write_plot
        from hccli.plot.params import params_data_from_json, plot_params

        # drawn from the JSON document itself, so that the bars are the figures --json prints
        data = params_data_from_json(json_document(report, "count-params"), (convention or Convention.logical_params).value)
        note(safe(write_plot(plot, plot_params, data, forbidden_dir=guard)), wrap=False)

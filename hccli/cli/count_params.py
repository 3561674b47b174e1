"""`hc count-params`: hyper-connection parameters per component, site, layer and group;
with --model, the whole model under each counting convention."""


from pathlib import Path
from typing import Optional

import typer
from typing import Annotated

from hccli import count_report
from hccli.cli import render_count
from hccli.cli.app import app
from hccli.cli.options import JsonOpt
from hccli.cli.output import emit_json, show

EPILOG = """Examples:

  hc count-params                                   # bundled V4.1-Flash config, HC of the text path

  hc count-params --group 2-7 --role reuse --site attn --component comb    # the seed's 17 x 5 = 85

  hc count-params --layers 3-7 --site attn --component comb --json

  hc count-params sample_configs/deepseek-v4-pro.hf.json --by-layer

  hc count-params sample_configs/deepseek-v4.1-flash.json --model   # every counting convention
"""


@app.command("count-params", epilog=EPILOG)
def count_params(
    config: Annotated[
        Optional[Path],
        typer.Argument(help="A config.json (inference or hub style), or a folder holding one. "
                            "Default: the bundled DeepSeek-V4.1-Flash config.", show_default=False),
    ] = None,
    layers: Annotated[Optional[str], typer.Option("--layers", "-l", help="Layers, e.g. 3-7, 2,8,14 or 20-39. "
                                                  "Stages are numbered after the backbone (40-42 in V4.1).")] = None,
    group: Annotated[Optional[str], typer.Option("--group", "-g", help="The groups holding these layers, "
                                                 "e.g. 2-7 or 8 (see the groups table).")] = None,
    role: Annotated[Optional[list[str]], typer.Option("--role", "-r", help="window, source, reuse, reindex, "
                                                      "compressed, engram, hash, stage.")] = None,
    site: Annotated[Optional[list[str]], typer.Option("--site", "-s", help="attn, ffn or head.")] = None,
    component: Annotated[Optional[list[str]], typer.Option("--component", "-c", help="pre (read), post (write), "
                                                           "comb (combination), fn (projection).")] = None,
    stages: Annotated[bool, typer.Option("--stages", help="Include the DSpark/MTP stages in the selection.")] = False,
    by_layer: Annotated[bool, typer.Option("--by-layer", help="Add a table with one row per layer.")] = False,
    model: Annotated[bool, typer.Option("--model", "-m", help="Whole-model totals per component and per "
                                        "counting convention, from the tensor inventory.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Count hyper-connection parameters from a config.json.

    By default: the HC parameters of the text path (backbone layers, and the head
    mix where the family has one), per component of one site, per layer group, with
    the DSpark/MTP stages reported beside. Filters select layers, groups, roles,
    sites and components and print the arithmetic, e.g.
    "Stream combination (attn): 17 x 5 layers = 85".
    """
    report = count_report.build_report(
        config, layers=layers, group=group, role=role, site=site, component=component,
        stages=stages, by_layer=by_layer, model=model,
    )
    if json_out:
        emit_json(report.to_json())
    else:
        show(*render_count.renderables(report))

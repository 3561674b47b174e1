"""`hc inspect`: what a checkpoint holds, its hyper-connection values, and --verify."""


import typer

from hccli.cli.app import app
from hccli.cli.flag_rules import check_flags
from hccli.cli.inspect_options import (
    ConfigOpt,
    DtypeOpt,
    HcOpt,
    LayersOpt,
    LimitOpt,
    MetadataOpt,
    NameOpt,
    PathArg,
    QuietOpt,
    StatsOpt,
    TensorsOpt,
    TreeOpt,
    VerifyOpt,
)
from hccli.cli.options import JsonOpt, PlotOpt, layer_spec
from hccli.base.errors import EXIT_FINDINGS

EPILOG = """Examples:

\b
  hc make-checkpoint sample_configs/tiny-v4.1.json /tmp/tiny &&
    hc inspect /tmp/tiny

\b
  # exit 1 if an error-level finding exists
  hc inspect /tmp/tiny --verify

\b
  # the verdict and the findings only
  hc inspect /tmp/tiny --verify -q

\b
  # the tensors, repeated numbered blocks collapsed
  hc inspect /tmp/tiny --tree

\b
  hc inspect /tmp/tiny --name '*.hc_attn_*' --layers 2-3

\b
  hc inspect /tmp/tiny/model.safetensors.index.json --dtype F32 --json

\b
  # comb offsets and the comb matrix of layer 3
  hc inspect /tmp/tiny --layers 3 --hc

\b
  # min, max, mean, std, non-finite of every HC tensor
  hc inspect /tmp/tiny --stats

\b
  # the file's own key/values (safetensors: __metadata__)
  hc inspect model.gguf --metadata

\b
  # over HTTP ranges: headers and HC values only
  hc inspect hf://deepseek-ai/DeepSeek-V4.1-Flash --verify

\b
  # a transformers save_pretrained folder
  hc inspect ./my-finetune --verify

\b
  # a GGUF (or a folder / first part of a split set)
  hc inspect model-Q4_K_M.gguf --verify

\b
  # layer plan and inventory from the release config
  hc inspect model.gguf --config config.json

\b
  # every site's comb as a heatmap, scales by layer
  hc inspect /tmp/tiny --plot hc.png
"""


@app.command("inspect", epilog=EPILOG)
def inspect_cmd(
    ctx: typer.Context,
    path: PathArg,
    config: ConfigOpt = None,
    verify: VerifyOpt = False,
    name: NameOpt = None,
    layers: LayersOpt = None,
    dtype: DtypeOpt = None,
    tensors: TensorsOpt = False,
    limit: LimitOpt = 50,
    hc: HcOpt = False,
    tree: TreeOpt = False,
    quiet: QuietOpt = False,
    metadata: MetadataOpt = False,
    stats: StatsOpt = False,
    json_out: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """Read a checkpoint's headers (never its weights) and show what it holds.

    A summary (shards, tensors, stored bytes, bytes per dtype, logical parameters)
    and the hyper-connection section: per layer and site the scale values, the base
    split into pre/post/comb offsets, and the comb matrix the base alone yields
    (mixes = 0). A selection (--name, --layers, --dtype, --tensors, --hc,
    --metadata, --stats) prints the summary line and what it selects only; --tree
    adds the tree of tensors. Nothing is ever written into the checkpoint's directory.
    """
    check_flags(ctx)
    from pathlib import Path

    # a local checkpoint's folder is never written into; a hub name is no local path
    guard = Path(path) if plot is not None and Path(path).exists() else None
    if plot is not None:
        from hccli.cli.options import check_plot

        check_plot(plot, forbidden_dir=guard)  # before any work: nothing printed when refused
    from hccli.base.words import plural
    from hccli.cli.output import damage_warnings, emit, note, progress_bar, safe, warn
    from hccli.inspecting.report import InspectRequest, build_inspect

    # --layers picks the HC sites where --hc or --stats shows them, and the tensors listed where a
    # list is asked for (by --tensors, --name, --dtype, or by --layers alone)
    layers, sites_view = layer_spec(layers), hc or stats
    listing = tensors or name is not None or dtype is not None or not sites_view
    request = InspectRequest(config=config, name_glob=name, dtype=dtype, list_tensors=tensors,
                             layers=layers if listing else None, hc_layers=layers if sites_view else None,
                             run_verify=verify, metadata=metadata)
    with progress_bar("reading headers", enabled=not json_out) as tick:
        report = build_inspect(path, request, progress=tick)
    if stats:
        with progress_bar("HC statistics", enabled=not json_out, in_bytes=True) as tick:
            report = report.with_stats(tick)
    # without --verify, what opening found wrong; --verify's findings say it with the rest
    damage_warnings(report.damage if report.findings is None else (), report.ckpt.config_note)
    unreadable = [s for s in report.ckpt.shards if s.header is None]
    if unreadable and report.findings is None:
        for s in unreadable[:5]:
            warn(f"shard not read: {s.error or s.file}")
        if len(unreadable) > 5:
            warn(f"... and {plural(len(unreadable) - 5, 'more shard')} not read (--verify lists all)")
    for line in report.notes:  # a GGUF split set not whole, HC values past inspect's bounds
        warn(line)
    doc = report.document() if json_out or plot is not None else None
    figure = None
    if plot is not None:
        from hccli.plot.model import inspect_figure_data

        # from the document --json prints, before any output: a checkpoint without HC values fails here
        figure = inspect_figure_data(doc, report.ckpt.config)

    def render():
        # rich's tables and trees: --json never loads them
        from hccli.cli.render import inspect as render_inspect

        filters = ", ".join(f for f in (f"name {name}" if name else "", f"dtype {dtype}" if dtype else "",
                                        "layers selected" if layers is not None and listing else "") if f)
        view = render_inspect.View(tree=tree, quiet=quiet, detail=hc, limit=limit, filters=filters)
        return render_inspect.renderables(report, view)

    emit(doc, json_out, render, command="inspect")
    if figure is not None:
        from hccli.plot import write_plot
        from hccli.plot.model import plot_model

        note(safe(write_plot(plot, plot_model, figure, forbidden_dir=guard)), wrap=False)
    if report.exit_code:
        raise typer.Exit(report.exit_code)

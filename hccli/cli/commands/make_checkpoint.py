"""`hc make-checkpoint`: sample checkpoints from a config (tiny with values, or a
full-scale sparse phantom)."""


from pathlib import Path
from typing import Annotated, Optional

import typer

from hccli.cli.app import app
from hccli.cli.options import JsonOpt, seed_option

EPILOG = """Examples:

\b
  # random values in every tensor
  hc make-checkpoint sample_configs/tiny-v4.1.json /tmp/tiny

\b
  # all 48 shards of V4.1-Flash, sparse
  hc make-checkpoint --phantom /tmp/v41-phantom

\b
  hc make-checkpoint sample_configs/deepseek-v4-pro.json /tmp/pro \\
    --phantom --force
"""


@app.command("make-checkpoint", epilog=EPILOG)
def make_checkpoint_cmd(
    config: Annotated[Optional[Path], typer.Argument(help="config.json (default: the bundled V4.1-Flash). "
                                                     "With one argument, it is taken as OUTDIR.",
                                                     show_default=False)] = None,
    outdir: Annotated[Optional[Path], typer.Argument(help="Directory to create (new or empty).",
                                                     show_default=False)] = None,
    phantom: Annotated[bool, typer.Option("--phantom", help="Full-scale layout as a sparse file per shard: "
                                          "real headers, real hc base/scale values, every other byte a hole.")]
    = False,
    seed: seed_option("Seed of the random values.") = 0,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing OUTDIR that holds only checkpoint "
                                        "files (shards, index, config.json).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Write a checkpoint for a config: shards, model.safetensors.index.json, config.json.

    Without --phantom every tensor gets random values of its dtype (hc base/scale
    realistic, comb offsets favouring the diagonal); that is for small configs
    (2 GB at most). With --phantom any config is written at full scale as sparse
    files: a 510 GB V4.1-Flash takes a few MB of disk. OUTDIR appears whole or
    not at all (written beside it, then renamed into place).
    """
    from hccli.base.words import plural
    from hccli.cli.output import emit, progress_bar
    from hccli.base.errors import HcError
    from hccli.checkpoint.synth import make_checkpoint

    usage = "usage: hc make-checkpoint [CONFIG] OUTDIR (CONFIG defaults to the bundled V4.1-Flash)"
    if outdir is None:
        if config is None:
            raise HcError(f"missing OUTDIR; {usage}")
        if config.is_file() or config.suffix == ".json":
            raise HcError(f"missing OUTDIR: '{config}' looks like a config file, not a directory to "
                          f"create; {usage}")
        config, outdir = None, config
    with progress_bar("writing shards", enabled=not json_out) as tick:
        done = make_checkpoint(config, outdir, phantom=phantom, seed=seed, force=force, progress=tick)
    kind = "phantom (sparse) " if done.phantom else ""
    emit(done, json_out, lambda: [f"wrote {kind}checkpoint {done.outdir}: {plural(done.shards, 'shard')}, "
                                  f"{plural(done.tensors, 'tensor')}, {plural(done.total_size, 'byte')} of tensor data"],
         command="make-checkpoint")

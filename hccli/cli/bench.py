"""`hc bench`: time the split-Sinkhorn implementations (block, torch, exact, fast) on a GPU."""


from typing import Annotated, List, Optional

import typer

from hccli.cli.app import app
from hccli.cli.options import JsonOpt

EPILOG = """Examples:

  hc bench                                        # every implementation, 1 .. 16M tokens

  hc bench --tokens 4096 --tokens 16777216 --impl exact --impl fast

  hc bench --json > bench.json                    # with device, driver and versions

  hc bench --host                                 # also the host time of one eager call

  hc bench --device cpu                           # no GPU: the torch reference on the CPU
"""


@app.command("bench", epilog=EPILOG)
def bench_cmd(
    tokens: Annotated[Optional[List[int]], typer.Option("--tokens", "-t", help="Token counts to time (repeat "
                                                        "the option; default 1, 64, 4096, 65536, 1M, 16M on a "
                                                        "GPU, up to 65536 on the CPU).", min=1)] = None,
    impl: Annotated[Optional[List[str]], typer.Option("--impl", help="block, torch, exact or fast (repeat; "
                                                      "default all that can run here).")] = None,
    device: Annotated[Optional[str], typer.Option("--device", help="cuda, cuda:N or cpu (default: the first "
                                                  "CUDA device).")] = None,
    hc_mult: Annotated[int, typer.Option("--hc-mult", help="Streams.", min=1)] = 4,
    iters: Annotated[int, typer.Option("--iters", help="Sinkhorn iterations.", min=1)] = 20,
    eps: Annotated[float, typer.Option("--eps", help="eps.")] = 1e-6,
    reps: Annotated[int, typer.Option("--reps", help="Timed samples per point (the median is shown).",
                                      min=1)] = 15,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed calls first (they also build the "
                                        "kernels).", min=0)] = 3,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random inputs.", min=0)] = 0,
    host: Annotated[bool, typer.Option("--host", help="Also time the host side of one eager call (raw launch, "
                                       "public call with and without preallocated outputs) at n = 1, 64, "
                                       "4096.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Time every implementation of the split-Sinkhorn op over a range of token counts.

    Per token count: time per call, tokens/s, GB/s (192 bytes a token for hc 4) and
    the share of the device's copy bandwidth (measured in the same run), speed-up
    over the block kernel (the published reference kernel's shape), and the largest
    difference from its outputs (the exact kernel's should be 0: bit-identical). Without a GPU, --device cpu times
    the torch reference.
    """
    from hccli.cli import render_bench
    from hccli.cli.output import emit_json, progress_bar, show
    from hccli.kernels.bench import ALL_IMPLS, run_bench

    with progress_bar("timing") as tick:
        result = run_bench(tuple(tokens) if tokens else None, tuple(impl) if impl else ALL_IMPLS,
                           hc_mult=hc_mult, sinkhorn_iters=iters, eps=eps, device=device, reps=reps,
                           warmup=warmup, seed=seed, host=host, progress=tick)
    if json_out:
        emit_json(result.to_json())
    else:
        show(*render_bench.renderables(result))

"""`hc bench`: time the split-Sinkhorn implementations (block, torch, exact, fast) on a GPU."""


from typing import Annotated, List, Optional

import typer

from hccli.cli.app import app
from hccli.cli.kernel_options import EpsOpt, HcMultOpt, ItersOpt, SeedOpt, TokenListOpt, _at_least
from hccli.cli.options import JsonOpt
from hccli.errors import HcError
from hccli.kernels.registry import ALIASES
from hccli.vocab import DEFAULT_HC_EPS, DEFAULT_HC_MULT, DEFAULT_SINKHORN_ITERS

EPILOG = """Examples:

  hc bench                                        # every implementation, 1 .. 16M tokens

  hc bench --tokens 4096 --tokens 16777216 --impl exact --impl fast

  hc bench --json > bench.json                    # with device, driver and versions

  hc bench --host                                 # also the host time of one eager call

  hc bench --device cpu                           # no GPU: the torch reference on the CPU
"""


@app.command("bench", epilog=EPILOG)
def bench_cmd(
    tokens: TokenListOpt = None,
    impl: Annotated[Optional[List[str]], typer.Option("--impl", help="block, torch, exact or fast (repeat; "
                                                      "default all that can run here).")] = None,
    device: Annotated[Optional[str], typer.Option("--device", help="cuda, cuda:N or cpu (default: the first "
                                                  "CUDA device).")] = None,
    hc_mult: HcMultOpt = None,
    iters: ItersOpt = None,
    eps: EpsOpt = None,
    reps: Annotated[int, typer.Option("--reps", callback=_at_least("--reps", 1),
                                      help="Timed samples per point (the median is shown).")] = 15,
    warmup: Annotated[int, typer.Option("--warmup", callback=_at_least("--warmup", 0),
                                        help="Untimed calls first (they also build the kernels).")] = 3,
    seed: SeedOpt = 0,
    host: Annotated[bool, typer.Option("--host", help="Also time the host side of one eager call (raw launch, "
                                       "public call with and without preallocated outputs) at n = 1, 64, "
                                       "4096.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Time every implementation of the split-Sinkhorn op over a range of token counts.

    Per token count: time per call, tokens/s, GB/s (192 bytes a token for hc 4) and
    the share of the device's copy bandwidth (measured in the same run), speed-up
    over the block kernel (the published reference kernel's shape), and the largest
    difference from its outputs (the exact kernel's should be 0: bit-identical).
    Without a GPU, --device cpu times the torch reference.
    """
    from hccli.cli import render_bench
    from hccli.cli.output import emit_json, progress_bar, show
    from hccli.kernels.bench import ALL_IMPLS, run_bench

    for name in impl or ():
        if ALIASES.get(name, name) not in ALL_IMPLS:
            raise HcError(f"--impl {name!r} is unknown to hc bench; expected some of {', '.join(ALL_IMPLS)}")
    names = tuple(ALIASES.get(n, n) for n in impl) if impl else ALL_IMPLS
    with progress_bar("timing") as tick:
        result = run_bench(tuple(tokens) if tokens else None, names,
                           hc_mult=DEFAULT_HC_MULT if hc_mult is None else hc_mult,
                           sinkhorn_iters=DEFAULT_SINKHORN_ITERS if iters is None else iters,
                           eps=DEFAULT_HC_EPS if eps is None else eps, device=device, reps=reps,
                           warmup=warmup, seed=seed, host=host, progress=tick)
    if json_out:
        emit_json(result.to_json())
    else:
        show(*render_bench.renderables(result))

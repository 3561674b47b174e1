"""`hc bench`: time the split-Sinkhorn implementations (kernels/registry.py's table) on a GPU, or with
--op site-pre / site-write / site-chain the site's kernels beside the eager chain, TileKernels and the
serving engines' kernels (--peers DIR)."""


from pathlib import Path
from typing import Annotated, List, Optional

import typer

from hccli.cli.app import app
from hccli.cli.flag_rules import check_flags
from hccli.cli.kernel_options import EpsOpt, HcMultOpt, ItersOpt, SeedOpt, TokenListOpt, one_of
from hccli.cli.options import Choice, JsonOpt, at_least, choice_option, device_option, non_negative
from hccli.base.limits import MAX_BENCH_REPS, MAX_BENCH_WARMUP
from hccli.bench.requests import BenchRequest, SiteBenchRequest
from hccli.kernels.registry import TIMED, canonical
from hccli.base.vocab import DEFAULT_HC_EPS, DEFAULT_HC_MULT, DEFAULT_SINKHORN_ITERS

SITE_NORM_EPS = 1e-20  # V4.1-Flash's norm_eps, the shapes the site benchmark is about

EPILOG = """Examples:

\b
  # every implementation, 1 .. 16M tokens
  hc bench

\b
  hc bench --tokens 4096 --tokens 16777216 --impl exact --impl fast

\b
  # with device, driver and versions
  hc bench --json > bench.json

\b
  # also the host time of one eager call
  hc bench --host

\b
  # no GPU: the torch reference on the CPU
  hc bench --device cpu

\b
  # the site's pre step: eager, TileKernels, site_pre
  hc bench --op site-pre --json > pre.json

\b
  hc bench --op site-write --dim 4096 --stream-dtype f32

\b
  # site k's write-back + site k+1's pre: ours, TileKernels, vLLM's
  hc bench --op site-chain --peers .device/peers --json > chain.json
"""

class Op(Choice):
    split = "split"
    site_pre = "site-pre"
    site_write = "site-write"
    site_chain = "site-chain"


class Stream(Choice):
    """The streams' dtype, in hc's short names and torch's."""

    bf16 = "bf16"
    bfloat16 = "bfloat16"
    f32 = "f32"
    float32 = "float32"

    @property
    def torch_name(self) -> str:
        return {"bf16": "bfloat16", "f32": "float32"}.get(self.value, self.value)


_OPS = ", ".join(o.value for o in Op)


@app.command("bench", epilog=EPILOG)
def bench_cmd(
    ctx: typer.Context,
    op: choice_option(Op, "--op", refuse=lambda v: f"--op {v!r} is unknown; expected one of {_OPS}",
                      help="split (the split-Sinkhorn op, default), site-pre, site-write or site-chain (the "
                      "site's kernels, hc 4; site-chain: a write-back then the next site's pre).") = Op.split,
    dim: Annotated[int, typer.Option("--dim", callback=at_least("--dim", 1),
                                     help="Features per stream for --op site-* (default 5120).")] = 5120,
    # --stream-dtype, not --dtype: inspect's --dtype is a stored dtype (F32, BF16); this is a compute one
    dtype: choice_option(Stream, "--stream-dtype", metavar="[bf16|f32]",  # torch's names accepted, not listed
                         refuse=lambda v: f"--stream-dtype {v!r}: expected bf16 or f32 (the streams' dtype)",
                         help="The streams' dtype for --op site-*: bf16 (default) or f32.") = Stream.bf16,
    norm_eps: Annotated[Optional[float], typer.Option("--norm-eps", callback=non_negative("--norm-eps"),
                                                      help="The RMS statistic's eps for --op site-pre (default "
                                                      "1e-20, V4.1-Flash's).")] = None,
    tokens: TokenListOpt = None,
    impl: Annotated[Optional[List[str]], typer.Option("--impl", help=f"{one_of(list(TIMED))} (repeat; "
                                                      "default all that can run here); for --op site-*: eager, "
                                                      "tilekernels, vllm, site_pre / site_write; site-chain: "
                                                      "site_write+site_pre, tilekernels, vllm, "
                                                      "sglang.")] = None,
    device: device_option("cuda, cuda:N or cpu (default: the first CUDA device).") = None,
    hc_mult: HcMultOpt = None,
    iters: ItersOpt = None,
    eps: EpsOpt = None,
    reps: Annotated[int, typer.Option("--reps", callback=at_least("--reps", 1, MAX_BENCH_REPS),
                                      help=f"Timed samples per point (the median is shown; at most "
                                      f"{MAX_BENCH_REPS:,}).")] = 15,
    warmup: Annotated[int, typer.Option("--warmup", callback=at_least("--warmup", 0, MAX_BENCH_WARMUP),
                                        help=f"Untimed calls first (they also build the kernels; at most "
                                        f"{MAX_BENCH_WARMUP}).")] = 3,
    seed: SeedOpt = 0,
    host: Annotated[bool, typer.Option("--host", help="Also time the host side of one eager call (raw launch, "
                                       "public call with and without preallocated outputs) at n = 1, 64, "
                                       "4096.")] = False,
    peers: Annotated[Optional[Path], typer.Option("--peers", metavar="DIR", help="For --op site-*: a folder "
                                                  "of the serving engines' kernel files (DIR/vllm/, DIR/sglang/; "
                                                  "see docs/commands/bench.md), timed beside ours; default none "
                                                  "(they are skipped, and said so).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Time every implementation of the split-Sinkhorn op over a range of token counts.

    Per token count: time per call, tokens/s, GB/s (192 bytes a token for hc 4) and
    the share of the device's copy bandwidth (measured in the same run), speed-up
    over the block kernel (the published reference kernel's shape), and the largest
    difference from its outputs (the exact kernel's should be 0: bit-identical).
    Without a GPU, --device cpu times the torch reference.

    --op site-pre / site-write time the site's kernels (hc 4) beside the eager chain and
    DeepSeek's TileKernels (where `tile_kernels` imports), with every output's largest
    error against the float64 chain, at 1, 16, 128, 1K, 8K and 64K tokens by default.
    """
    check_flags(ctx)
    from hccli.cli.render import bench as render_bench
    from hccli.cli.output import emit, progress_bar
    from hccli.bench.op import run_bench

    iters = DEFAULT_SINKHORN_ITERS if iters is None else iters
    eps = DEFAULT_HC_EPS if eps is None else eps
    if op is not Op.split:  # --hc-mult: flag_rules has held it to the site kernels' 4
        _site(SiteBenchRequest(op.value, tuple(tokens) if tokens else None, tuple(impl) if impl else None, dim=dim,
                               stream=dtype.torch_name, sinkhorn_iters=iters, eps=eps,
                               norm_eps=SITE_NORM_EPS if norm_eps is None else norm_eps, reps=reps, warmup=warmup,
                               seed=seed, host=host, device=device, peers=None if peers is None else str(peers)),
              json_out)
        return

    names = tuple(canonical(n) for n in impl) if impl else TIMED
    request = BenchRequest(tuple(tokens) if tokens else None, names,
                           hc_mult=DEFAULT_HC_MULT if hc_mult is None else hc_mult, sinkhorn_iters=iters, eps=eps,
                           device=device, reps=reps, warmup=warmup, seed=seed, host=host)
    with progress_bar("timing") as tick:
        result = run_bench(request, progress=tick)
    emit(result, json_out, lambda: render_bench.renderables(result), command="bench")


def _site(request: SiteBenchRequest, json_out: bool) -> None:
    from hccli.cli.output import emit, progress_bar

    if request.op == Op.site_chain.value:
        from hccli.cli.render import bench_chain as render
        from hccli.bench.site_chain import run_chain_bench as run
    else:
        from hccli.cli.render import bench_site as render  # type: ignore[no-redef]
        from hccli.bench.site import run_site_bench as run  # type: ignore[no-redef]
    with progress_bar("timing") as tick:
        result = run(request, progress=tick)
    emit(result, json_out, lambda: render.renderables(result), command="bench")

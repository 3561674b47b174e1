"""The HC site's forward and the chains of sites, in numpy: float32 in the published order.

One site (attention or FFN) with streams x [T, hc, dim] (values of the streams' dtype,
bf16 in the model, held as float32), fn [(2+hc)*hc, hc*dim], base, scale, and the
sub-layer's output f [T, dim]:

    flat      = x.flatten(-2).float()                          # [T, hc*dim]
    rsqrt     = rsqrt(mean(flat**2, -1) + norm_eps)            # [T]: one statistic a token, no weight
    mixes     = linear(flat, fn) * rsqrt                       # [T, (2+hc)*hc]: projection, then the factor
    pre, post, comb = split(mixes, scale, base)                # kernels.split_np.split_sinkhorn, the one split op
    collapsed = cast(sum_i w[i] * x[i])                        # summed over i in order, float32
    streams_out[k] = cast(post[k] * f + sum_j comb[j, k] * x[j])

w is the site's own pre in V4 and the pre handed over by the site before in V4.1; cast
rounds float32 to the streams' dtype. V4's head mix is the pre part only:
pre = sigmoid(mixes * scale + base) + hc_eps, then collapsed; V4.1's end of a stack is
a collapse alone, with the last FFN's pre.

Where each line comes from (docs/commands/check-port.md has the excerpts):
- mixes, collapse, write-back: DeepSeek-V4-Flash inference/model.py Block.hc_pre and
  Block.hc_post (`x.flatten(2).float()`, `F.linear(x, hc_fn) * rsqrt`,
  `torch.sum(pre.unsqueeze(-1) * x.view(shape), dim=2)`, `post.unsqueeze(-1) * x.unsqueeze(-2)
  + torch.sum(comb.unsqueeze(-1) * residual.unsqueeze(-2), dim=2)`, `.to(dtype)`); V4.1-Flash's
  Block.hc_mixes / hc_pre / hc_post are the same lines, split apart.
- the chains: V4 Block.forward (each site collapses with its own pre) and
  ParallelHead.hc_head; V4.1 Block.forward (attention collapses with the `pre_mix` it is
  handed, the FFN with the attention's pre, and returns the FFN's pre), Transformer.forward
  (`make_identity_pre_mix`: a one-hot on copy 0; the last FFN's pre collapses at the end)
  and Transformer.forward_spec (the DSpark stages: one one-hot for the stack, each stage
  hands its FFN's pre to the next, forward_head collapses with the last stage's).
- transformers' modeling_deepseek_v4 (DeepseekV4HyperConnection, DeepseekV4DecoderLayer:
  "comb is consumed transposed") and mlx-lm's deepseek_v4/deepseek_v41 read the chain the same
  way and normalise before the projection (the same op within rounding); transformers writes
  back in bf16 (Variant.writeback), which the published code does not.

Variant holds the ways a port computes it differently; its defaults are the reference.
`hc check-port` recomputes a port's known mistakes with them (hccli/port/check.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from hccli.base.floats import round_to, to_bf16
from hccli.ops.split_np import head_pre, split_sinkhorn

STEPS = ("rsqrt", "mixes", "pre", "post", "comb", "collapsed", "streams_out")
INPUTS = ("streams_in", "fn", "base", "scale", "f", "pre_mix_in")
FAMILIES = ("v4", "v4.1")
# the other family's norm_eps, for the mistake of taking it (V4.1-Flash 1e-20, V4 1e-6)
FAMILY_NORM_EPS = {"v4.1": 1e-20, "v4": 1e-6}


@dataclass(frozen=True)
class SiteParams:
    family: str  # "v4" (own-site collapse, a head mix) | "v4.1" (the delayed hand-off)
    hc_mult: int
    iters: int
    hc_eps: float
    norm_eps: float
    streams_dtype: str = "bf16"  # what collapsed and streams_out are cast to: "bf16" | "f32"


@dataclass(frozen=True)
class Variant:
    """How a site is computed. The defaults are the published forward; each other value is
    a way ports have computed it (named by hccli/port/check.py), or an equivalent order."""

    projection: str = "f32"  # operands of linear(flat, fn): f32 | tf32 | bf16 | f16 | fn-bf16 (fn only)
    projection_out: str = "f32"  # the projection's result: f32, or bf16 (a plain bf16 matmul returns bf16)
    norm_first: bool = False  # mlx-lm's and transformers' order, linear(flat * rsqrt, fn): the same op within rounding
    tensors: str = "f32"  # base and scale as the module holds them: f32, or bf16 (the whole module cast)
    hc_eps: float | None = None  # None: the model's
    norm_eps: float | None = None  # None: the model's
    rms_over: str = "flat"  # the statistic over hc*dim ("flat") or over each stream's dim ("stream")
    iters: int | None = None  # None: the model's
    post_mult: float = 2.0
    softmax_eps: bool = True  # hc_eps added after the softmax
    sum_eps: bool = True  # hc_eps added to every row and column sum
    softmax_axis: int = -1  # -1: over k (the row), as the kernel; -2 is over j
    comb_transposed: bool = True  # write-back sums comb[j, k] * x[j] (False: comb[k, j] * x[j])
    collapse_with: str = "family"  # "family" | "own" (V4's) | "handoff" (V4.1's)
    collapse_sum: str = "f32"  # "f32" | "bf16" (every product and partial sum rounded)
    collapsed_factor: float = 1.0  # a constant on the collapsed sub-layer input
    writeback: str = "f32"  # "f32" | "bf16": post and comb cast to bf16, each term and the sum rounded (transformers)


REFERENCE = Variant()


@dataclass(frozen=True)
class SiteRef:
    """One site of a chain. layer is hc's numbering: L, n_layers + s for stage s, the head last."""

    layer: int
    site: str  # "attn" | "ffn" | "head"
    owner: str  # "layers.3", "mtp.0", "" (V4's root head mix); a stack's end: its last owner or ""
    stack: str  # "backbone" | "stages"
    has_params: bool = True  # False for V4.1's end-of-stack collapse, which has no tensors

    @property
    def key(self) -> str:
        """The prefix of its golden tensors: "3.attn", "43.head"."""
        return f"{self.layer}.{self.site}"

    @property
    def label(self) -> str:
        return self.owner or "head"


@dataclass(frozen=True)
class SiteInputs:
    site: str
    streams: np.ndarray  # [T, hc, dim] float32 holding values of the streams' dtype
    fn: np.ndarray | None = None  # None: V4.1's end-of-stack collapse
    base: np.ndarray | None = None
    scale: np.ndarray | None = None
    f: np.ndarray | None = None  # [T, dim], the sub-layer's output (not at a head)
    pre_mix: np.ndarray | None = None  # [T, hc]: the weights handed over (V4.1), else None


def cast(x: np.ndarray, streams_dtype: str, dtype=np.float32) -> np.ndarray:
    """Round to the streams' dtype (the reference's `.to(dtype)`); a float64 oracle keeps its values."""
    if dtype is not np.float32:
        return x
    return to_bf16(x) if streams_dtype == "bf16" else np.asarray(x, dtype=np.float32)


def one_hot(tokens: int, hc: int, dtype=np.float32) -> np.ndarray:
    """V4.1's first hand-off (make_identity_pre_mix): weight 1 on copy 0."""
    w = np.zeros((tokens, hc), dtype=dtype)
    w[:, 0] = 1
    return w


def collapse_uses_handoff(family: str, variant: Variant = REFERENCE) -> bool:
    """Whether a site collapses with the pre handed over from the site before (V4.1) or its own (V4)."""
    if variant.collapse_with == "family":
        return family == "v4.1"
    return variant.collapse_with == "handoff"


def eps_of(params: SiteParams, variant: Variant = REFERENCE) -> float:
    """The hc_eps the variant computes with."""
    return params.hc_eps if variant.hc_eps is None else variant.hc_eps


def held(a: np.ndarray, variant: Variant = REFERENCE) -> np.ndarray:
    """base or scale as the variant's module holds it (a bf16 module rounds them; float32 arithmetic)."""
    return to_bf16(np.asarray(a, dtype=np.float32)) if variant.tensors == "bf16" else a


def rms_factor(x: np.ndarray, norm_eps: float, variant: Variant = REFERENCE, dtype=np.float32) -> np.ndarray:
    """rsqrt(mean(flat**2) + norm_eps) [T]; [T, hc] when the statistic is taken per stream."""
    xs = x.astype(dtype)
    eps = dtype(norm_eps if variant.norm_eps is None else variant.norm_eps)
    if variant.rms_over == "stream":
        return dtype(1) / np.sqrt(np.mean(xs * xs, axis=-1, dtype=dtype) + eps)
    flat = xs.reshape(xs.shape[0], -1)
    return dtype(1) / np.sqrt(np.mean(flat * flat, axis=-1, dtype=dtype) + eps)


def mix(x: np.ndarray, fn: np.ndarray, r: np.ndarray, variant: Variant = REFERENCE, dtype=np.float32) -> np.ndarray:
    """mixes = linear(flat, fn) * r (or linear(flat * r, fn) normalising first), the operands in the
    variant's format and its result rounded to bf16 where the variant's projection returns bf16
    (float32 arithmetic)."""
    t = x.shape[0]
    fn_ = np.asarray(fn, dtype=dtype)
    narrow = dtype is np.float32 and variant.projection != "f32"
    if narrow:
        fn_ = round_to(fn_, "bf16" if variant.projection == "fn-bf16" else variant.projection)

    def operand(a: np.ndarray) -> np.ndarray:
        return round_to(a, variant.projection) if narrow and variant.projection != "fn-bf16" else a

    def result(p: np.ndarray) -> np.ndarray:
        return to_bf16(p) if variant.projection_out == "bf16" and dtype is np.float32 else p
    if r.ndim == 2:  # per stream: each copy normalised by its own statistic, then projected
        return result(operand((x.astype(dtype) * r[..., None]).reshape(t, -1)) @ fn_.T)
    flat = x.reshape(t, -1).astype(dtype)
    if variant.norm_first:
        return result(operand(flat * r[:, None]) @ fn_.T)
    return result(operand(flat) @ fn_.T) * r[:, None]


def project(x: np.ndarray, fn: np.ndarray, norm_eps: float, variant: Variant = REFERENCE,
            dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    """(rsqrt, mixes) of one site."""
    r = rms_factor(x, norm_eps, variant, dtype)
    return r, mix(x, fn, r, variant, dtype)


def collapse(x: np.ndarray, w: np.ndarray, variant: Variant = REFERENCE, dtype=np.float32) -> np.ndarray:
    """sum_i w[:, i] * x[:, i], in order, before the cast to the streams' dtype."""
    xs, ws = x.astype(dtype), np.asarray(w, dtype=dtype)
    if variant.collapse_sum == "bf16" and dtype is np.float32:
        acc = to_bf16(ws[:, 0, None] * xs[:, 0])
        for i in range(1, xs.shape[1]):
            acc = to_bf16(acc + to_bf16(ws[:, i, None] * xs[:, i]))
    else:
        acc = ws[:, 0, None] * xs[:, 0]
        for i in range(1, xs.shape[1]):
            acc = acc + ws[:, i, None] * xs[:, i]
    return acc if variant.collapsed_factor == 1.0 else acc * dtype(variant.collapsed_factor)


def write_back(f: np.ndarray, x: np.ndarray, post: np.ndarray, comb: np.ndarray, variant: Variant = REFERENCE,
               dtype=np.float32) -> np.ndarray:
    """streams_out[k] = post[k] * f + sum_j comb[j, k] * x[j] (in order over j), before the cast.
    A bf16 write-back (transformers' `post.to(dtype) * f + matmul(comb.to(dtype).T, x)` on bf16
    streams) rounds post and comb to bf16, the product, the matmul's float32 sum and their sum."""
    xs, c = x.astype(dtype), np.asarray(comb, dtype=dtype)
    if not variant.comb_transposed:
        c = np.swapaxes(c, -1, -2)
    p = np.asarray(post, dtype=dtype)
    low = variant.writeback == "bf16" and dtype is np.float32
    if low:
        c, p = to_bf16(c), to_bf16(p)
    mixed = c[:, 0, :, None] * xs[:, 0, None, :]
    for j in range(1, xs.shape[1]):
        mixed = mixed + c[:, j, :, None] * xs[:, j, None, :]
    term = p[:, :, None] * np.asarray(f, dtype=dtype)[:, None, :]
    return to_bf16(to_bf16(term) + to_bf16(mixed)) if low else term + mixed


def forward(inp: SiteInputs, params: SiteParams, variant: Variant = REFERENCE, dtype=np.float32
            ) -> dict[str, np.ndarray]:
    """Every step of one site, by the golden file's step names. dtype float64 is an oracle of the
    float32 values: the same steps in float64, collapsed and streams_out left uncast."""
    out: dict[str, np.ndarray] = {}
    x = inp.streams
    with np.errstate(all="ignore"):  # NaN and Inf in a file are passed through, as the model would
        if inp.fn is not None:
            out["rsqrt"], out["mixes"] = project(x, inp.fn, params.norm_eps, variant, dtype)
            scale, base, eps = held(inp.scale, variant), held(inp.base, variant), eps_of(params, variant)
            if inp.site == "head":
                out["pre"] = head_pre(out["mixes"], scale, base, eps, dtype)
            else:
                out["pre"], out["post"], out["comb"] = split_sinkhorn(
                    out["mixes"], scale, base, params.hc_mult,
                    params.iters if variant.iters is None else variant.iters, eps, dtype,
                    post_mult=variant.post_mult, softmax_eps=variant.softmax_eps, sum_eps=variant.sum_eps,
                    softmax_axis=variant.softmax_axis)
        w = inp.pre_mix if inp.pre_mix is not None else out["pre"]
        out["collapsed"] = cast(collapse(x, w, variant, dtype), params.streams_dtype, dtype)
        if inp.site != "head":
            out["streams_out"] = cast(write_back(inp.f, x, out["post"], out["comb"], variant, dtype),
                                      params.streams_dtype, dtype)
    return out


# ---- chains ------------------------------------------------------------------------------------

def plan_sites(family: str, n_layers: int, n_stages: int, stages: int, root_head: bool,
               stage_head: bool) -> tuple[SiteRef, ...]:
    """The sites in the order the model runs them: the backbone and its end, then the stack of
    `stages` stages (of n_stages the config numbers) and its end. V4 ends a stack with a head mix
    where the checkpoint has one; V4.1 always ends it with a collapse (no tensors)."""
    out = [SiteRef(layer, site, f"layers.{layer}", "backbone") for layer in range(n_layers)
           for site in ("attn", "ffn")]
    if family == "v4.1" or root_head:
        out.append(SiteRef(n_layers + n_stages, "head", "", "backbone", family == "v4"))
    out += [SiteRef(n_layers + s, site, f"mtp.{s}", "stages") for s in range(stages) for site in ("attn", "ffn")]
    if stages and (family == "v4.1" or stage_head):
        out.append(SiteRef(n_layers + stages - 1, "head", f"mtp.{stages - 1}", "stages", family == "v4"))
    return tuple(out)


@dataclass(frozen=True)
class ChainSite:
    ref: SiteRef
    inputs: SiteInputs
    steps: dict[str, np.ndarray]


def run_chain(plan: tuple[SiteRef, ...], params: SiteParams, streams: np.ndarray,
              tensors: Callable[[SiteRef], tuple[np.ndarray, np.ndarray, np.ndarray]],
              sublayer: Callable[[SiteRef], np.ndarray], wanted: Callable[[SiteRef], bool] = lambda s: True,
              variant: Variant = REFERENCE,
              compute: Callable[[SiteInputs, SiteParams, Variant], dict] = forward) -> Iterator[ChainSite]:
    """Each site's inputs and steps, site after site: a site's streams_out is the next one's
    streams_in, and in V4.1 its pre the next one's weights. Each stack starts from `streams`
    (cast to the streams' dtype) and, in V4.1, a one-hot; a stack stops after the last site
    `wanted`, and its tensors and sub-layer outputs are asked for only up to there."""
    start = cast(np.asarray(streams, dtype=np.float32), params.streams_dtype)
    handoff = collapse_uses_handoff(params.family, variant)
    for stack in ("backbone", "stages"):
        sites = [s for s in plan if s.stack == stack]
        last = max((i for i, s in enumerate(sites) if wanted(s)), default=-1)
        x, weights = start, one_hot(start.shape[0], params.hc_mult)
        for s in sites[: last + 1]:
            fn, base, scale = tensors(s) if s.has_params else (None, None, None)
            use = weights if (handoff or not s.has_params) else None
            inp = SiteInputs(s.site, x, fn, base, scale, None if s.site == "head" else sublayer(s), use)
            steps = compute(inp, params, variant)
            yield ChainSite(s, inp, steps)
            weights = steps.get("pre", weights)
            x = steps.get("streams_out", x)


def sample_streams(tokens: int, seed: int, hc: int, dim: int) -> np.ndarray:
    """Seeded streams [T, hc, dim]: independent N(0, s_t^2) copies, s_t log-uniform in
    [1e-4, 10] per token, so that norm_eps and the narrow formats' range show in some tokens."""
    rng = np.random.default_rng(seed)
    scale = (10.0 ** rng.uniform(-4.0, 1.0, size=tokens)).astype(np.float32)
    return rng.standard_normal((tokens, hc, dim), dtype=np.float32) * scale[:, None, None]


def sample_sublayer(seed: int, index: int, tokens: int, dim: int, scale: np.ndarray | None = None) -> np.ndarray:
    """A seeded sub-layer output [T, dim] for the site at `index` of the plan: N(0, 1), times a
    scale per token (the RMS of the streams the run starts from, so that no token drowns)."""
    f = np.random.default_rng([seed, 1 + index]).standard_normal((tokens, dim), dtype=np.float32)
    return f if scale is None else f * np.asarray(scale, dtype=np.float32)[:, None]


def token_rms(x: np.ndarray) -> np.ndarray:
    """Each token's RMS over its streams [T]."""
    return np.sqrt(np.mean(np.square(x.astype(np.float64)), axis=(1, 2))).astype(np.float32)

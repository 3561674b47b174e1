"""The mistakes `hc check-port` tests a departing port for, each with the public report behind it.

A mistake is a Variant of the site's forward (hccli/ops/site.py): the same ops, computed the
way a port got them wrong. Two mistakes of one kind are never paired (one projection
format at a time, one iteration count). docs/commands/check-port.md lists them with their reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from hccli.ops.site import FAMILY_NORM_EPS, SiteParams, Variant

# Constants a fused kernel's factor is named by when the fitted one is this close (relative):
# a bf16 collapsed carries 2^-8 of its own.
NAMED_FACTORS = {"sqrt(2)": math.sqrt(2), "1/sqrt(2)": 1 / math.sqrt(2), "2": 2.0, "1/2": 0.5}
FACTOR_CLOSE = 2.0 ** -7


@dataclass(frozen=True)
class Mistake:
    key: str  # stable id, in --json
    text: str  # what it is, in the verdict
    kind: str  # mistakes of one kind are not paired
    report: str  # the public report (or source) behind it
    changes: tuple[tuple[str, object], ...]  # the Variant fields it sets
    shipped: str = ""  # who ships it on purpose (a variant, not a slip); --accept takes these keys

    def variant(self, base: Variant | None = None) -> Variant:
        return replace(base or Variant(), **dict(self.changes))


def _m(key, text, kind, report, shipped="", **changes) -> Mistake:
    return Mistake(key, text, kind, report, tuple(sorted(changes.items())), shipped)


# transformers runs V4 with bf16 streams and writes them back in bf16: its DecoderLayer's
# `post.to(dtype) * attn_output + matmul(comb.to(dtype).transpose(-1, -2), hidden_states)`
BF16_WRITE_BACK = _m(
    "bf16-write-back", "a bf16 write-back (post and comb cast to bf16, each term and their sum rounded)",
    "writeback-dtype", "transformers modeling_deepseek_v4 DeepseekV4DecoderLayer.forward (post.to(dtype), "
    "comb.to(dtype)); the published hc_post sums in float32 and casts once",
    shipped="transformers (DeepseekV4DecoderLayer)", writeback="bf16")
SHIPPED = {BF16_WRITE_BACK.key: BF16_WRITE_BACK}


def powers_of_ten(eps: float) -> list[float]:
    """hc_eps off by one or two powers of ten: a config typed 1e-5 for 1e-6, say."""
    return [float(f"{eps * 10.0 ** k:.6g}") for k in (-2, -1, 1, 2)] if eps > 0 else []


def iteration_counts(iters: int) -> tuple[int, ...]:
    """The Sinkhorn iteration counts a port is tried with instead of the model's `iters`: the
    published ones (the models' 20, TileKernels' default 10), one off either way (the first
    normalisation counted as an iteration, or not), half and twice (a row and a column pass
    counted as two iterations, or as one), and one (the loop skipped). At most seven, each at
    most 2 * iters: the search is bounded by the golden's own count, never scanned over 1..N."""
    return tuple(sorted({20, 10, iters - 1, iters + 1, iters // 2, 2 * iters, 1} - {0, iters}))


def catalogue(params: SiteParams) -> list[Mistake]:
    """Every single mistake that applies to a model of these parameters (the iteration counts
    of iteration_counts)."""
    other_eps = FAMILY_NORM_EPS["v4" if params.family == "v4.1" else "v4.1"]
    out = [
        _m("comb-untransposed", "comb applied untransposed in the write-back (sum_j comb[k, j] x[j])", "writeback",
           "NeMo-Automodel #2154; Megatron-LM #4957", comb_transposed=False),
        _m("post-mult-1", "post multiplier 1 instead of 2", "post",
           "TileKernels mhc_pre default post_mult_value=1.0 (vLLM passes 2)", post_mult=1.0),
        _m("softmax-eps", "hc_eps left out after the comb softmax", "softmax-eps", "maxtext #4337",
           softmax_eps=False),
        _m("sum-eps", "hc_eps left out of the Sinkhorn row and column sums", "sum-eps", "maxtext #4337",
           sum_eps=False),
        _m("softmax-axis", "comb softmax over j (the column) instead of k (the row)", "softmax-axis",
           "the reference kernel's reduce_max/reduce_sum over dim 1", softmax_axis=-2),
        _m("norm-eps", f"norm_eps {other_eps:g} (the other family's) instead of {params.norm_eps:g}", "norm-eps",
           "norm_eps 1e-20 in V4.1-Flash's inference/config.json, rms_norm_eps 1e-6 in V4's", norm_eps=other_eps),
        _m("rms-stream", "RMS statistic over each stream's dim instead of over hc*dim", "rms",
           "the published hc_mixes: one statistic a token over x.flatten(2)", rms_over="stream"),
        _m("projection-bf16", "projection in bf16 (streams and fn rounded to bf16)", "projection",
           "llama.cpp #28696", projection="bf16"),
        _m("projection-f16", "projection in f16 (streams and fn rounded to f16)", "projection",
           "llama.cpp #28696 (the same mistake in f16)", projection="f16"),
        _m("projection-tf32", "projection in tf32 (fn and streams rounded to tf32)", "projection",
           "TileKernels mhc_pre_big_fuse (round_to_tf32 on fn)", projection="tf32"),
        _m("fn-bf16", "fn stored in bf16", "projection", "llama.cpp #28696 (a bf16 copy of fn)",
           projection="fn-bf16"),
        _m("projection-bf16-out", "projection in bf16 with a bf16 result (a plain bf16 matmul)", "projection",
           "llama.cpp #28696 (a bf16 matmul returns bf16)", projection="bf16", projection_out="bf16"),
        _m("norm-first-bf16", "bf16 projection after normalising first (flat * rsqrt rounded to bf16, fn in bf16)",
           "projection", "transformers' and mlx-lm's order with bf16 operands (llama.cpp #28696's mistake)",
           projection="bf16", norm_first=True),
        _m("norm-first-bf16-out", "bf16 projection after normalising first, with a bf16 result", "projection",
           "transformers' and mlx-lm's order, the projection a plain bf16 matmul", projection="bf16",
           norm_first=True, projection_out="bf16"),
        _m("module-bf16", "the HC module cast to bf16 (fn, base and scale rounded to bf16)", "projection",
           "transformers keeps attn_hc/ffn_hc in float32 (_keep_in_fp32_modules_strict), mlx-lm too "
           "(cast_predicate); a conversion that casts every module loses it", projection="fn-bf16", tensors="bf16"),
        _m("collapse-bf16", "collapse summed in bf16", "collapse-sum",
           "the published hc_pre sums in float32 (x.float())", collapse_sum="bf16"),
        BF16_WRITE_BACK,
    ]
    out += [_m(f"hc-eps-{e:g}", f"hc_eps {e:g} instead of {params.hc_eps:g}", "hc-eps",
               "the config's hc_eps (1e-6 in every release); a power of ten off is a typo", hc_eps=e)
            for e in powers_of_ten(params.hc_eps)]
    if params.family == "v4.1":
        out.append(_m("collapse-own", "V4's own-site collapse in a V4.1 model (pre_mix_in ignored)", "collapse",
                      "V4.1-Flash inference/model.py Block.forward (hc_pre(x, pre_mix))", collapse_with="own"))
    else:
        out.append(_m("collapse-handoff", "V4.1's delayed hand-off in a V4 model", "collapse",
                      "V4-Flash inference/model.py Block.forward (hc_pre with the site's own pre)",
                      collapse_with="handoff"))
    out += [_m(f"iters-{k}", f"{k} Sinkhorn iterations instead of {params.iters}", "iters",
               "maxtext #4337; TileKernels mhc_pre default sinkhorn_repeat=10 (the model uses 20)", iters=k)
            for k in iteration_counts(params.iters)]
    return out


FACTOR = Mistake("collapsed-factor", "a factor {c} on collapsed (the sub-layer input)", "factor",
                 "vLLM #56342 (sqrt(2) from a fused kernel on 64-wide wavefronts)", ())


def factor_name(c: float) -> str:
    for name, value in NAMED_FACTORS.items():
        if abs(c / value - 1) <= FACTOR_CLOSE:
            return name
    return f"{c:.6g}"


def snap_factor(c: float) -> float:
    for value in NAMED_FACTORS.values():
        if abs(c / value - 1) <= FACTOR_CLOSE:
            return value
    return c

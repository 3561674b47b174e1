"""What a port's steps should be, step by step, and the envelope a correct port stays within.

Each step of a site is recomputed from the inputs the port used (its own streams_in, pre_mix_in
and f where its file holds them, else the golden's) and from the port's own values of the steps
before it, where the port gave them (else from this recomputation, whose rounding the envelope
then carries forward): so a step is judged by its own op, and a departure shows where it is made,
not where it lands. The ops are hccli/ops/site.py's, with a Variant (the reference, or a known
mistake); the envelopes are hccli/port/envelope.py's.

rsqrt, pre, post and comb must also be unbiased: the mean of (port - expected) / |expected|
within 2 ULP + 4 standard errors. Rounding in another order moves elements both ways; a
mistake such as hc_eps left out of the Sinkhorn sums moves every element the same way by
~8 ULP, inside the elementwise envelope.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from hccli.base.floats import to_bf16
from hccli.ops.compare import gaps
from hccli.ops.site import (SiteInputs, SiteParams, Variant, cast, collapse, eps_of, held, mix, one_hot, rms_factor,
                            write_back)
from hccli.ops.split_np import head_pre, split_sinkhorn
from hccli.port import envelope as E

ULP = E.ULP
BIASED = ("rsqrt", "pre", "post", "comb")
USED_INPUTS = ("streams_in", "pre_mix_in", "f")  # what a port may say it used instead of the golden's


@dataclass(frozen=True)
class Check:
    """One step of one site against its expectation."""

    key: str  # the site, "3.attn"
    step: str
    elements: int
    max_abs: float  # largest |port - expected| over elements NaN on neither side (inf if one is inf)
    differing: int  # elements whose float32 bits differ (NaN on both sides counts as equal)
    beyond: int  # elements outside the envelope, or NaN on one side only
    worst: float  # largest |port - expected| / envelope
    bias: float | None  # mean relative difference in ULP (steps in BIASED)
    bias_limit: float | None
    # the sum of |port - expected| over the elements: how far off the whole step is (a hypothesis's distance)
    total: float = 0.0
    partial: bool = False  # a quick check that departs: its counts are of the tokens it looked at

    @property
    def ok(self) -> bool:
        return self.beyond == 0 and (self.bias is None or abs(self.bias) <= self.bias_limit)


def check(key: str, step: str, got: np.ndarray, want: np.ndarray, tol: np.ndarray) -> Check:
    c = gaps(got, want)
    g, w, keep = c.a, c.b, c.keep
    t = np.broadcast_to(tol, want.shape).astype(np.float64).reshape(-1)
    d = c.gap[keep]
    with np.errstate(all="ignore"):
        ratio = np.where(d == 0, 0.0, d / np.where(t[keep] > 0, t[keep], np.nan))
    ratio = np.where(np.isnan(ratio), np.inf, ratio)
    beyond = int((ratio > 1).sum()) + int(c.lone_nan.sum())
    bias = limit = None
    if step in BIASED:
        ok = keep & np.isfinite(g) & np.isfinite(w) & (w != 0)
        if ok.any():
            rel = (g[ok] - w[ok]) / np.abs(w[ok]) / ULP
            bias = float(rel.mean())
            limit = 2.0 + 4.0 * float(rel.std()) / math.sqrt(rel.size)
    total = float(np.nan_to_num(d, posinf=np.finfo(np.float64).max).sum())
    return Check(key, step, int(want.size), float(d.max()) if d.size else 0.0, c.differing, beyond,
                 float(ratio.max()) if ratio.size else 0.0, bias, limit, total)


@dataclass(frozen=True)
class InputDrift:
    """One input the port used in place of the golden's, and how far it lies from it."""

    key: str
    name: str  # streams_in | pre_mix_in | f
    max_abs: float
    differing: int  # elements whose float32 bits differ from the golden's


def used_inputs(key: str, golden: SiteInputs, given: dict[str, np.ndarray]
                ) -> tuple[SiteInputs, tuple[InputDrift, ...]]:
    """The golden's inputs with the port's own streams_in, pre_mix_in and f where it gave them
    (a port run chained hands its own output on), and how far each lies from the golden's."""
    mine = {"streams_in": golden.streams, "pre_mix_in": golden.pre_mix, "f": golden.f}
    drift = []
    for name in USED_INPUTS:
        a, b = given.get(name), mine[name]
        if a is None or b is None:
            continue
        c = gaps(a, b)
        drift.append(InputDrift(key, name, c.max_kept(), c.differing))
    inputs = replace(golden, streams=given.get("streams_in", golden.streams),
                     pre_mix=given.get("pre_mix_in", golden.pre_mix) if golden.pre_mix is not None else None,
                     f=given.get("f", golden.f) if golden.f is not None else None)
    return inputs, tuple(drift)


_SPLIT = ("iters", "post_mult", "softmax_eps", "sum_eps", "softmax_axis", "tensors", "hc_eps")
_COLLAPSE = ("collapse_with", "collapse_sum", "collapsed_factor")
_PROJECTION = ("projection", "projection_out", "norm_first", "rms_over")


class SiteExpect:
    """One golden site and the port's steps there: each step's expectation under a variant, its
    envelope, its check against the port, and the pre this site hands on. A step's result depends
    only on the variant fields its op and the ops before it read, and is computed once per such fields."""

    def __init__(self, key: str, site: str, inputs: SiteInputs, port: dict[str, np.ndarray], params: SiteParams):
        self.key, self.site, self.inputs, self.port, self.params = key, site, inputs, port, params
        self._values: dict[tuple, object] = {}  # the small steps (rsqrt, mixes, split) by their fields
        self._checks: dict[tuple, Check] = {}

    def fields(self, step: str, v: Variant) -> tuple:
        """The variant fields a step's value reads: its own op's, and those of the steps before it
        that the port did not give (a step the port gave is taken as given)."""
        if step == "rsqrt":
            return (v.norm_eps, v.rms_over)
        if step == "mixes":
            own_r = "rsqrt" not in self.port or v.rms_over == "stream"
            return tuple(getattr(v, f) for f in _PROJECTION) + (self.fields("rsqrt", v) if own_r else ())
        if step in ("pre", "post", "comb", "split", "comb_carried"):
            head = self.site == "head"
            return tuple(getattr(v, f) for f in (("tensors", "hc_eps") if head else _SPLIT)) + (
                self.fields("mixes", v) if "mixes" not in self.port else ())
        if step == "weights":
            if self.inputs.pre_mix is not None and v.collapse_with != "own":
                return ()
            if v.collapse_with == "handoff":  # the site before's pre: whatever decided it there
                return ("handoff", *(getattr(v, f) for f in _SPLIT), v.norm_eps, *(getattr(v, f) for f in _PROJECTION))
            return (v.collapse_with,) + (self.fields("split", v) if "pre" not in self.port else ())
        if step == "collapsed":
            return tuple(getattr(v, f) for f in _COLLAPSE) + self.fields("weights", v)
        return (v.comb_transposed, v.writeback) + (
            self.fields("split", v) if not {"post", "comb"} <= set(self.port) else ())

    def _memo(self, name: str, variant: Variant, compute):
        k = (name, *self.fields(name, variant))
        if k not in self._values:
            self._values[k] = compute()
        return self._values[k]

    # ---- values and their envelopes (the envelope already carries what the port did not give) ----

    def rsqrt(self, v: Variant) -> tuple[np.ndarray, np.ndarray]:
        def compute():
            r = rms_factor(self.inputs.streams, self.params.norm_eps, v)
            return r, E.rsqrt_env(r, self.inputs.streams[0].size)
        return self._memo("rsqrt", v, compute)

    def rsqrt_used(self, v: Variant) -> tuple[np.ndarray, np.ndarray | None]:
        """The rsqrt the projection used: the port's (no envelope left) or mine, with its envelope."""
        r, env = self.rsqrt(v)
        return (self.port["rsqrt"], None) if (r.ndim == 1 and "rsqrt" in self.port) else (r, env)

    def mixes(self, v: Variant) -> tuple[np.ndarray, np.ndarray]:
        def compute():
            i = self.inputs
            r, r_env = self.rsqrt_used(v)
            with np.errstate(all="ignore"):
                m = mix(i.streams, i.fn, r, v)
                env = E.mixes_env(i.streams, i.fn, r, m, r_env)
                if v.projection_out == "bf16":
                    env = env + E.bf16_result_env(m, r, v.norm_first)
                if v.norm_first and v.projection in ("bf16", "f16", "tf32") and r_env is not None and r.ndim == 1:
                    env = env + E.operand_flips(i.streams, i.fn, r, r_env)
            return m, env
        return self._memo("mixes", v, compute)

    def _mixes_used(self, v: Variant) -> tuple[np.ndarray, np.ndarray | None]:
        return (self.port["mixes"], None) if "mixes" in self.port else self.mixes(v)

    def split(self, v: Variant) -> tuple[tuple, tuple]:
        """((pre, post, comb), their envelopes); post and comb None at a head."""
        return self._memo("split", v, lambda: self._split(v))

    def _split(self, v: Variant) -> tuple[tuple, tuple]:
        i, p = self.inputs, self.params
        m, m_env = self._mixes_used(v)
        sc, b, eps = held(i.scale, v), held(i.base, v), eps_of(p, v)
        m64, sc64, b64, hc = m.astype(np.float64), sc.astype(np.float64), b.astype(np.float64), p.hc_mult
        with np.errstate(all="ignore"):
            if self.site == "head":
                pre = head_pre(m, sc, b, eps)
                env = E.sigmoid_env(pre, m64 * sc64[0], b64, 2)
                if m_env is not None:
                    env = env + E.sigmoid_carried(pre, sc64[0], m_env)
                return (pre, None, None), (env, None, None)
            iters = p.iters if v.iters is None else v.iters
            knobs = dict(post_mult=v.post_mult, softmax_eps=v.softmax_eps, sum_eps=v.sum_eps,
                         softmax_axis=v.softmax_axis)
            pre, post, comb = split_sinkhorn(m, sc, b, hc, iters, eps, **knobs)
            e_pre = E.sigmoid_env(pre, m64[:, :hc] * sc64[0], b64[:hc], 2)
            e_post = E.sigmoid_env(post / v.post_mult, m64[:, hc:2 * hc] * sc64[1], b64[hc:2 * hc], 2 * v.post_mult,
                                   post)
            e_comb = E.comb_env(m64, sc64, b64, comb, hc)
            if m_env is not None:
                e_pre = e_pre + E.sigmoid_carried(pre, sc64[0], m_env[:, :hc])
                e_post = e_post + E.sigmoid_carried(post / v.post_mult, sc64[1], m_env[:, hc:2 * hc], v.post_mult)
        return (pre, post, comb), (e_pre, e_post, e_comb)

    def comb_carried(self, v: Variant, tokens: np.ndarray | None = None) -> np.ndarray | None:
        """What the port's own projection rounding moved its comb by (None where it gave mixes), for
        some tokens (all by default): the costly part of comb's envelope, so it is asked for the
        tokens beyond the rest of the envelope only."""
        m, m_env = self._mixes_used(v)
        if m_env is None:
            return None
        i, p = self.inputs, self.params
        sc, b = held(i.scale, v).astype(np.float64), held(i.base, v).astype(np.float64)
        iters = p.iters if v.iters is None else v.iters
        knobs = dict(post_mult=v.post_mult, softmax_eps=v.softmax_eps, sum_eps=v.sum_eps,
                     softmax_axis=v.softmax_axis, kernel_sums=False)
        sel = slice(None) if tokens is None else tokens

        def split64(mm):
            return split_sinkhorn(mm, sc, b, p.hc_mult, iters, eps_of(p, v), np.float64, **knobs)[2]
        if tokens is None:
            return self._memo("comb_carried", v, lambda: E.comb_carried(split64, m, m_env, p.hc_mult))
        return E.comb_carried(split64, m[sel], m_env[sel], p.hc_mult)

    def _split_used(self, v: Variant, step: str) -> tuple[np.ndarray, np.ndarray | None]:
        if step in self.port:
            return self.port[step], None
        at = ("pre", "post", "comb").index(step)
        values, envs = self.split(v)
        more = self.comb_carried(v) if step == "comb" else None
        return values[at], envs[at] if more is None else envs[at] + more

    def pre_used(self, v: Variant) -> np.ndarray | None:
        """The pre this site hands on (the port's where it gave one); None without a projection."""
        return None if self.inputs.fn is None else self._split_used(v, "pre")[0]

    def weights(self, v: Variant, handoff: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        if self.inputs.pre_mix is not None and v.collapse_with != "own":
            return self.inputs.pre_mix, None  # V4.1: the weights handed over are an input
        if v.collapse_with == "handoff" and handoff is not None:
            return handoff, None
        if self.inputs.fn is None:
            return self.inputs.pre_mix, None
        return self._split_used(v, "pre")

    def collapsed(self, v: Variant, handoff: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        x = self.inputs.streams
        w, w_env = self.weights(v, handoff)
        h = cast(collapse(x, w, v), self.params.streams_dtype)
        env = E.collapse_env(x, w, v.collapsed_factor, w_env)
        return h, env + (E.bf16_step(h) if self.params.streams_dtype == "bf16" else 0)

    def _streams_out(self, v: Variant) -> tuple[np.ndarray, np.ndarray]:
        i, p, x = self.inputs, self.params, self.inputs.streams
        post_u, e_post = self._split_used(v, "post")
        comb_u, e_comb = self._split_used(v, "comb")
        y = cast(write_back(i.f, x, post_u.astype(np.float32), comb_u.astype(np.float32), v), p.streams_dtype)
        swap = (lambda c: c) if v.comb_transposed else (lambda c: np.swapaxes(c, -1, -2))
        c = swap(comb_u.astype(np.float64))
        env = E.write_back_env(i.f, x, post_u.astype(np.float64), c, e_post, None if e_comb is None else swap(e_comb))
        if v.writeback == "bf16":  # the matmul's sum may round to its bf16 neighbour, as may the final sum
            cb = to_bf16(swap(comb_u.astype(np.float32))).astype(np.float64)
            env = env + E.bf16_step(np.einsum("tjk,tjd->tkd", cb, x.astype(np.float64)))
            af, ax = np.abs(i.f.astype(np.float64))[:, None, :], np.abs(x.astype(np.float64))
            if e_post is not None:  # post and comb of mine, cast to bf16: each may be its bf16 neighbour
                env = env + E.bf16_step(post_u)[:, :, None] * af
            if e_comb is not None:
                env = env + np.einsum("tjk,tjd->tkd", E.bf16_step(c), ax)
        return y, env + (E.bf16_step(y) if p.streams_dtype == "bf16" or v.writeback == "bf16" else 0)

    def expectation(self, step: str, v: Variant, handoff: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(expected values, envelope) of one step; None where the variant has no such step."""
        if step == "rsqrt":
            r, env = self.rsqrt(v)
            return None if r.ndim != 1 else (r, env)
        if step == "mixes":
            return self.mixes(v)
        if step == "collapsed":
            return self.collapsed(v, handoff)
        if step == "streams_out":
            return self._streams_out(v)
        values, envs = self.split(v)
        at = ("pre", "post", "comb").index(step)
        return values[at], envs[at]

    def check(self, step: str, v: Variant, handoff: np.ndarray | None = None, quick: bool = False) -> Check | None:
        """The port's step against its expectation (None where the variant has no such step). quick:
        enough to tell whether it departs (comb's carried envelope taken on the worst tokens only,
        so a departing check's counts are of those); a step that passes is exact either way."""
        # a V4 site's hand-off is the site before's pre, which the same fields decide
        k = (step, *self.fields(step, v))
        if k not in self._checks or (not quick and self._checks[k] is not None and self._checks[k].partial):
            with np.errstate(all="ignore"):
                e = self.expectation(step, v, handoff)
                c = None if e is None else self._judge(step, v, *e, quick)
            self._checks[k] = c
        return self._checks[k]

    def _judge(self, step: str, v: Variant, want: np.ndarray, env: np.ndarray, quick: bool) -> Check:
        got = self.port[step]
        if step != "comb" or "mixes" in self.port:
            return check(self.key, step, got, want, env)
        # comb from my mixes: add the carried part where the rest of the envelope is not enough
        d = gaps(got, want).gap.reshape(want.shape)  # NaN where one side only is NaN: beyond any envelope
        with np.errstate(all="ignore"):
            over = np.where(np.isnan(d), np.inf, d / np.where(env > 0, env, np.nan))
        over = np.nan_to_num(over, nan=np.inf).reshape(over.shape[0], -1).max(axis=1)
        bad = np.flatnonzero(over > 1)
        if bad.size == 0:
            return check(self.key, step, got, want, env)
        partial = quick and bad.size > QUICK_TOKENS
        if partial:
            bad = bad[np.argsort(-over[bad])[:QUICK_TOKENS]]
        env = env.copy()
        env[bad] = env[bad] + self.comb_carried(v, bad)
        c = check(self.key, step, got, want, env)
        # a partial judgement that passes its worst tokens says nothing of the rest: judge them all
        if partial and c.ok:
            return self._judge(step, v, want, env, False)
        return replace(c, partial=partial)


# the tokens whose comb a quick check carries the projection's rounding into first: the worst of
# them departing is enough to tell a hypothesis fails
QUICK_TOKENS = 8


def stack_starts(refs) -> set[int]:
    """Indices of the sites that begin a stack (their V4.1 hand-off is the one-hot)."""
    return {i for i, r in enumerate(refs) if i == 0 or refs[i - 1].stack != r.stack}


def first_handoff(tokens: int, hc: int) -> np.ndarray:
    return one_hot(tokens, hc)

"""What a port's steps should be, step by step, and how far float32 rounding may move them.

Each step of a site is recomputed from the golden's inputs and from the port's own values
of the steps before it, where the port gave them (else from this recomputation): so a step
is judged by its own op, and a departure shows where it is made, not where it lands. The
ops are hccli/ops/site.py's, with a Variant (the reference, or a known mistake).

The envelope of each element is what float32 arithmetic in another valid order may change
(U = 2^-24, ULP = 2U, n = hc*dim):

    rsqrt        ULP * (4 + sqrt(n)/4) * |rsqrt|                  (a sum of n squares)
    mixes        ULP * (4 + sqrt(n)/16) * sum_k |flat_k fn_ik| * rsqrt + 2 ULP * |mixes|
    pre, post    ULP * (8 |v| + c * s(1-s) * (|m scale| + |base|))   (c = 2 for pre, 4 for post)
    comb         ULP * (16 + 2 (|l| + max |l| of its row)) * |comb|,  l = m scale + base
    collapsed    ULP * (2 + hc) * sum_i |w_i x_i|                  (+ one bf16 step in bf16 streams)
    streams_out  ULP * (2 + hc) * (|post f| + sum_j |comb_jk x_j|)  (+ one bf16 step)

and pre, post, comb and rsqrt must also be unbiased: the mean of (port - expected) / |expected|
within 2 ULP + 4 standard errors. Rounding in another order moves elements both ways; a
mistake such as hc_eps left out of the Sinkhorn sums moves every element the same way by
~8 ULP, inside the elementwise envelope.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hccli.ops.compare import gaps
from hccli.ops.site import SiteParams, Variant, cast, collapse, mix, one_hot, rms_factor, write_back
from hccli.ops.split_np import head_pre, split_sinkhorn

U = 2.0 ** -24
ULP = 2 * U
BIASED = ("rsqrt", "pre", "post", "comb")


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

    @property
    def ok(self) -> bool:
        return self.beyond == 0 and (self.bias is None or abs(self.bias) <= self.bias_limit)


def _bf16_step(v: np.ndarray) -> np.ndarray:
    # one bf16 unit at |v|: a float32 difference may round a value to its bf16 neighbour
    mant, exp = np.frexp(np.abs(v).astype(np.float64))
    return np.where(mant > 0, np.ldexp(1.0, exp - 8), 0.0)


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
    return Check(key, step, int(want.size), float(d.max()) if d.size else 0.0, c.differing, beyond,
                 float(ratio.max()) if ratio.size else 0.0, bias, limit)


_SPLIT = ("iters", "post_mult", "softmax_eps", "sum_eps", "softmax_axis")
_COLLAPSE = ("collapse_with", "collapse_sum", "collapsed_factor")


class SiteExpect:
    """One golden site and the port's steps there: each step's expectation under a variant, its
    check against the port, and the pre this site hands on. A step's result depends only on the
    variant fields its op and the ops before it read, and is computed once per such fields."""

    def __init__(self, key: str, site: str, inputs, port: dict[str, np.ndarray], params: SiteParams):
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
            return (v.projection, v.norm_first, v.rms_over) + (self.fields("rsqrt", v) if own_r else ())
        if step in ("pre", "post", "comb", "split"):
            head = self.site == "head"
            return (() if head else tuple(getattr(v, f) for f in _SPLIT)) + (
                self.fields("mixes", v) if "mixes" not in self.port else ())
        if step == "weights":
            if self.inputs.pre_mix is not None and v.collapse_with != "own":
                return ()
            if v.collapse_with == "handoff":  # the site before's pre: whatever decided it there
                return ("handoff", *(getattr(v, f) for f in _SPLIT), v.norm_eps, v.rms_over, v.projection,
                        v.norm_first)
            return (v.collapse_with,) + (self.fields("split", v) if "pre" not in self.port else ())
        if step == "collapsed":
            return tuple(getattr(v, f) for f in _COLLAPSE) + self.fields("weights", v)
        return (v.comb_transposed,) + (self.fields("split", v) if not {"post", "comb"} <= set(self.port) else ())

    def _memo(self, name: str, variant: Variant, compute):
        k = (name, *self.fields(name, variant))
        if k not in self._values:
            self._values[k] = compute()
        return self._values[k]

    def _used(self, step: str, mine) -> np.ndarray:
        """The port's value of a step where it gave one, else mine() (computed only then)."""
        return self.port[step] if step in self.port else mine()

    def rsqrt(self, v: Variant) -> np.ndarray:
        return self._memo("rsqrt", v, lambda: rms_factor(self.inputs.streams, self.params.norm_eps, v))

    def rsqrt_used(self, v: Variant) -> np.ndarray:
        r = self.rsqrt(v)
        return self.port["rsqrt"] if (r.ndim == 1 and "rsqrt" in self.port) else r

    def mixes(self, v: Variant) -> np.ndarray:
        return self._memo("mixes", v, lambda: mix(self.inputs.streams, self.inputs.fn, self.rsqrt_used(v), v))

    def split(self, v: Variant) -> tuple:
        i, p = self.inputs, self.params
        m = self._used("mixes", lambda: self.mixes(v))
        if self.site == "head":
            return self._memo("split", v, lambda: (head_pre(m, i.scale, i.base, p.hc_eps), None, None))
        return self._memo("split", v, lambda: split_sinkhorn(
            m, i.scale, i.base, p.hc_mult, p.iters if v.iters is None else v.iters, p.hc_eps,
            post_mult=v.post_mult, softmax_eps=v.softmax_eps, sum_eps=v.sum_eps, softmax_axis=v.softmax_axis))

    def pre_used(self, v: Variant) -> np.ndarray | None:
        """The pre this site hands on (the port's where it gave one); None without a projection."""
        return None if self.inputs.fn is None else self._used("pre", lambda: self.split(v)[0])

    def weights(self, v: Variant, handoff: np.ndarray | None) -> np.ndarray:
        if self.inputs.pre_mix is not None and v.collapse_with != "own":
            return self.inputs.pre_mix  # V4.1: the weights handed over are an input
        if v.collapse_with == "handoff" and handoff is not None:
            return handoff
        own = self.pre_used(v)
        return own if own is not None else self.inputs.pre_mix

    def collapsed(self, v: Variant, handoff: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        x, w = self.inputs.streams, self.weights(v, handoff)
        h = cast(collapse(x, w, v), self.params.streams_dtype)
        env = ULP * (2 + x.shape[1]) * abs(v.collapsed_factor) * np.einsum(
            "ti,tid->td", np.abs(w.astype(np.float64)), np.abs(x.astype(np.float64)))
        return h, env + (_bf16_step(h) if self.params.streams_dtype == "bf16" else 0)

    def expectation(self, step: str, v: Variant, handoff: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(expected values, envelope) of one step; None where the variant has no such step."""
        i, p = self.inputs, self.params
        x = i.streams
        n = x[0].size
        if step == "rsqrt":
            r = self.rsqrt(v)
            return None if r.ndim != 1 else (r, ULP * (4 + math.sqrt(n) / 4) * np.abs(r.astype(np.float64)))
        if step == "mixes":
            r = self.rsqrt_used(v).astype(np.float64)
            scaled = x.astype(np.float64) * (r[..., None] if r.ndim == 2 else 1.0)
            s = np.abs(scaled.reshape(x.shape[0], -1)) @ np.abs(i.fn.astype(np.float64)).T
            s = s * (np.abs(r)[:, None] if r.ndim == 1 else 1.0)
            m = self.mixes(v)
            return m, ULP * (4 + math.sqrt(n) / 16) * s + 2 * ULP * np.abs(m.astype(np.float64))
        if step == "collapsed":
            return self.collapsed(v, handoff)
        if step == "streams_out":
            return self._streams_out(v)
        pre, post, comb = self.split(v)
        m = self._used("mixes", lambda: self.mixes(v)).astype(np.float64)
        b, sc, hc = i.base.astype(np.float64), i.scale.astype(np.float64), p.hc_mult
        if step == "pre":
            return pre, _sigmoid_tol(pre, m[:, :hc] * sc[0], b[:hc], 2)
        if step == "post":
            return post, _sigmoid_tol(post / v.post_mult, m[:, hc:2 * hc] * sc[1], b[hc:2 * hc], 2 * v.post_mult,
                                      post)
        if step == "comb":
            logit = np.abs(m[:, 2 * hc:] * sc[2] + b[2 * hc:]).reshape(-1, hc, hc)
            top = np.maximum(logit.max(axis=-1, keepdims=True), logit.max(axis=-2, keepdims=True))
            return comb, ULP * (16 + 2 * (logit + top)) * np.abs(comb.astype(np.float64))
        raise ValueError(step)

    def _streams_out(self, v: Variant) -> tuple[np.ndarray, np.ndarray]:
        i, p, x = self.inputs, self.params, self.inputs.streams
        post_u = self._used("post", lambda: self.split(v)[1]).astype(np.float64)
        comb_u = self._used("comb", lambda: self.split(v)[2]).astype(np.float64)
        y = cast(write_back(i.f, x, post_u.astype(np.float32), comb_u.astype(np.float32), v), p.streams_dtype)
        c = comb_u if v.comb_transposed else np.swapaxes(comb_u, -1, -2)
        mag = np.abs(post_u)[:, :, None] * np.abs(i.f.astype(np.float64))[:, None, :] + np.einsum(
            "tjk,tjd->tkd", np.abs(c), np.abs(x.astype(np.float64)))
        return y, ULP * (2 + x.shape[1]) * mag + (_bf16_step(y) if p.streams_dtype == "bf16" else 0)

    def check(self, step: str, v: Variant, handoff: np.ndarray | None = None) -> Check | None:
        """The port's step against its expectation (None where the variant has no such step)."""
        # a V4 site's hand-off is the site before's pre, which the same fields decide
        k = (step, *self.fields(step, v))
        if k not in self._checks:
            with np.errstate(all="ignore"):
                e = self.expectation(step, v, handoff)
            self._checks[k] = None if e is None else check(self.key, step, self.port[step], *e)
        return self._checks[k]


def _sigmoid_tol(v: np.ndarray, ms: np.ndarray, b: np.ndarray, c: float, value: np.ndarray | None = None
                 ) -> np.ndarray:
    s = np.clip(v.astype(np.float64), 0, 1)
    full = np.abs((value if value is not None else v).astype(np.float64))
    return ULP * (8 * full + c * s * (1 - s) * (np.abs(ms) + np.abs(b)))


def stack_starts(refs) -> set[int]:
    """Indices of the sites that begin a stack (their V4.1 hand-off is the one-hot)."""
    return {i for i, r in enumerate(refs) if i == 0 or refs[i - 1].stack != r.stack}


def first_handoff(tokens: int, hc: int) -> np.ndarray:
    return one_hot(tokens, hc)

"""Where the split-Sinkhorn op's input (the mix vectors) comes from. No printing here.

Four sources, each giving a MixesInput (float32 numpy mixes [..., (2+hc)*hc], a
one-line provenance, and the flat indices of tokens whose mixes hold NaN/Inf):

- `sample_mixes`: the bundled default, 4 tokens generated here from fixed seeds;
- `random_mixes`: N(0, std^2) mixes for any token count and seed;
- `load_mixes`: a file (.safetensors tensor `mixes`, .npy, or JSON nested lists),
  read through files.py's bounded readers;
- `hidden_mixes`: a hidden state [tokens, hc, dim] (seeded or from a file) turned
  into mixes the way the model does it, by the hc_fn projection and an RMS scale.

NaN and Inf are passed through (the op is defined on them; showing what it does
with them is the point), but reported, so the caller can say which tokens.
numpy only; the projection is hccli/ops/site.py's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hccli.ops import site
from hccli.base.errors import HcError
from hccli.runkernel.files import load_float_array, read_safetensors_tensors
from hccli.base.limits import check_count, check_hc_mult
from hccli.base.vocab import DEFAULT_HC_MULT, DEFAULT_NORM_EPS, mix_width

# The bundled sample. Its numbers come from nowhere but these seeds: a hidden
# state h ~ N(0, 1) of SAMPLE_TOKENS tokens x hc streams x SAMPLE_DIM features and an
# hc_fn ~ N(0, 1 / (hc * dim)), which after the model's RMS scaling gives mixes of
# unit variance, the size the model's own projection produces for a unit-RMS
# stream. The scale and base are made up to give a readable, non-trivial result:
# pre near 0.5, post near 1, and comb offsets of 2 on the diagonal (a matrix that
# leans towards carrying each stream over to itself, as hyper-connections start
# out), which the mixes then perturb. They are not read from any checkpoint.
SAMPLE_TOKENS = 4
SAMPLE_DIM = 64
SAMPLE_SEED = 4
SAMPLE_SCALE = (1.0, 1.0, 1.0)
SAMPLE_COMB_DIAGONAL = 2.0



@dataclass(frozen=True)
class MixesInput:
    mixes: np.ndarray  # float32, [..., (2+hc)*hc]
    provenance: str  # one line: where the numbers come from
    nonfinite_tokens: tuple[int, ...]  # flat token indices (leading dims flattened) with NaN/Inf
    hc_scale: np.ndarray | None = None  # [3], when the source comes with its own parameters
    hc_base: np.ndarray | None = None  # [(2+hc)*hc]

    @property
    def tokens(self) -> int:
        return int(np.prod(self.mixes.shape[:-1], dtype=np.int64))


def _nonfinite_tokens(mixes: np.ndarray) -> tuple[int, ...]:
    rows = mixes.reshape(-1, mixes.shape[-1])
    return tuple(int(i) for i in np.flatnonzero(~np.isfinite(rows).all(axis=1)))


def _make(mixes: np.ndarray, provenance: str, **params: Any) -> MixesInput:
    mixes = np.ascontiguousarray(mixes, dtype=np.float32)
    return MixesInput(mixes, provenance, _nonfinite_tokens(mixes), **params)


def _check_count(what: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise HcError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return int(value)


# ---- (a) the bundled sample ----------------------------------------------------


def sample_params(hc_mult: int = DEFAULT_HC_MULT) -> tuple[np.ndarray, np.ndarray]:
    """(hc_scale [3], hc_base [(2+hc)*hc]) that go with the bundled sample."""
    hc = check_hc_mult(hc_mult, "the op parameters")
    scale = np.asarray(SAMPLE_SCALE, dtype=np.float32)
    base = np.zeros(mix_width(hc), dtype=np.float32)
    base[2 * hc :] = (SAMPLE_COMB_DIAGONAL * np.eye(hc, dtype=np.float32)).reshape(-1)
    return scale, base


def sample_mixes(hc_mult: int = DEFAULT_HC_MULT) -> MixesInput:
    """The bundled default input: 4 tokens, with the scale and base to use on them."""
    hc = check_hc_mult(hc_mult, "the op parameters")
    rng = np.random.default_rng(SAMPLE_SEED)
    hidden = rng.standard_normal((SAMPLE_TOKENS, hc, SAMPLE_DIM), dtype=np.float32)
    fn = _random_fn(rng, hc, SAMPLE_DIM)
    x = hidden.reshape(SAMPLE_TOKENS, hc * SAMPLE_DIM)
    mixes = (x @ fn.T) / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(DEFAULT_NORM_EPS))
    scale, base = sample_params(hc)
    return _make(
        mixes,
        f"bundled sample: {SAMPLE_TOKENS} tokens of mixes from a seeded hidden state "
        f"(seed {SAMPLE_SEED}, dim {SAMPLE_DIM}) and a seeded hc_fn",
        hc_scale=scale,
        hc_base=base,
    )


def _random_fn(rng: np.random.Generator, hc: int, dim: int) -> np.ndarray:
    # N(0, 1/(hc*dim)): unit-variance mixes from a unit-RMS hidden state
    return rng.standard_normal((mix_width(hc), hc * dim), dtype=np.float32) / np.float32(math.sqrt(hc * dim))


# ---- (b) random mixes -------------------------------------------------------------


def random_mixes(tokens: int, seed: int = 0, hc_mult: int = DEFAULT_HC_MULT, std: float = 1.0) -> MixesInput:
    """`tokens` rows of N(0, std^2) mixes from numpy's default_rng(seed)."""
    tokens = _check_count("tokens", tokens)
    hc = check_hc_mult(hc_mult, "the op parameters")
    seed = _check_count("seed", seed, minimum=0)
    check_count(f"random mixes of {tokens:,} tokens x {mix_width(hc)}", tokens * mix_width(hc))
    rng = np.random.default_rng(seed)
    mixes = rng.standard_normal((tokens, mix_width(hc)), dtype=np.float32) * np.float32(std)
    return _make(mixes, f"random: {tokens} tokens, seed {seed}, N(0, {std:g}^2)")


# ---- (c) mixes from a file ----------------------------------------------------------


def load_mixes(path: str | Path, hc_mult: int = DEFAULT_HC_MULT) -> MixesInput:
    """Mixes from .safetensors (tensor `mixes`), .npy or .json, shape [..., (2+hc)*hc]."""
    hc = check_hc_mult(hc_mult, "the op parameters")
    width = mix_width(hc)
    path = Path(path)
    array, what = load_float_array(path, "mixes")
    if array.ndim < 1 or array.shape[-1] != width:
        raise HcError(
            f"{path}: {what} has shape {list(array.shape)}, expected [..., {width}] "
            f"((2 + hc_mult) * hc_mult with hc_mult = {hc})"
        )
    if array.size == 0:
        raise HcError(f"{path}: {what} has shape {list(array.shape)}, which holds no tokens")
    return _make(array, f"file {path}: {what} {list(array.shape)}")


# ---- (d) mixes from a hidden state ----------------------------------------------------


def mixes_from_hidden(hidden: Any, hc_fn: Any, norm_eps: float = DEFAULT_NORM_EPS) -> np.ndarray:
    """The model's mix projection, the one the site runs (hccli/ops/site.py):
    x = h.flatten(-2).float(); (x @ hc_fn.T) * rsqrt(mean(x^2) + norm_eps).

    hidden [..., hc, dim] (any float dtype, numpy or torch), hc_fn [(2+hc)*hc, hc*dim]; float32
    numpy result. The model takes norm_eps from its config (norm_eps / rms_norm_eps).
    """
    h, fn = (np.asarray(a.detach().float().cpu() if hasattr(a, "detach") else a) for a in (hidden, hc_fn))
    if h.ndim < 2:
        raise HcError(f"hidden state has shape {list(h.shape)}, expected [..., hc, dim]")
    hc, dim = int(h.shape[-2]), int(h.shape[-1])
    if list(fn.shape) != [mix_width(hc), hc * dim]:
        raise HcError(f"hc_fn has shape {list(fn.shape)}, expected [{mix_width(hc)}, {hc * dim}] for hc {hc}, dim {dim}")
    with np.errstate(all="ignore"):
        mixes = site.project(h.reshape(-1, hc, dim).astype(np.float32), fn, norm_eps)[1]
    return mixes.reshape(*h.shape[:-2], mix_width(hc))


def hidden_mixes(
    tokens: int = SAMPLE_TOKENS,
    dim: int = SAMPLE_DIM,
    seed: int = 0,
    hc_mult: int = DEFAULT_HC_MULT,
    path: str | Path | None = None,
    norm_eps: float = DEFAULT_NORM_EPS,
    fn: np.ndarray | None = None,
    fn_origin: str = "",
) -> MixesInput:
    """Mixes from a hidden state: seeded N(0, 1) [tokens, hc, dim], or read from `path`.

    A file holds the hidden state [..., hc, dim] (.safetensors tensor `hidden`, .npy
    or .json); a .safetensors file may also carry `hc_fn` [(2+hc)*hc, hc*dim].
    `fn` (a checkpoint's hc_fn, say) fixes dim and wins over both. Without any,
    hc_fn is seeded N(0, 1/(hc*dim)).
    """
    hc = check_hc_mult(hc_mult, "the op parameters")
    seed = _check_count("seed", seed, minimum=0)
    rng = np.random.default_rng(seed)
    if fn is not None:
        dim = int(fn.shape[1]) // hc
    if path is None:
        tokens = _check_count("tokens", tokens)
        dim = _check_count("dim", dim)
        check_count(f"a hidden state of {tokens:,} tokens x {hc} streams x {dim:,}", tokens * hc * dim)
        check_count(f"the mixes of {tokens:,} tokens x {mix_width(hc)}", tokens * mix_width(hc))
        hidden = rng.standard_normal((tokens, hc, dim), dtype=np.float32)
        origin = f"hidden state: {tokens} tokens x {hc} streams x {dim}, seed {seed} N(0, 1)"
    else:
        path = Path(path)
        hidden, what = load_float_array(path, "hidden")
        if hidden.ndim < 2 or hidden.shape[-2] != hc or hidden.shape[-1] < 1 or hidden.size == 0 \
                or (fn is not None and hidden.shape[-1] != dim):
            want = f"[..., {hc}, {dim}]" if fn is not None else f"[..., {hc}, dim]"
            raise HcError(f"{path}: {what} has shape {list(hidden.shape)}, expected {want} for hc_mult = {hc}")
        dim = int(hidden.shape[-1])
        check_count(f"{path}: the mixes of {hidden.size // (hc * dim):,} tokens x {mix_width(hc)}",
                    hidden.size // (hc * dim) * mix_width(hc))
        origin = f"hidden state: file {path} {what} {list(hidden.shape)}"
        if fn is None and path.suffix.lower() == ".safetensors":
            fn = _optional_fn(path, hc, dim)
            fn_origin = "hc_fn from the file" if fn is not None else ""
    if fn is None:
        check_count(f"a seeded hc_fn of {mix_width(hc)} x {hc * dim:,}", mix_width(hc) * hc * dim)
        fn = _random_fn(rng, hc, dim)
        fn_origin = f"hc_fn seeded N(0, 1/{hc * dim}) (seed {seed})"
    mixes = mixes_from_hidden(hidden, fn, norm_eps)
    return _make(mixes, f"{origin}; {fn_origin}; norm_eps {norm_eps:g}")


def _optional_fn(path: Path, hc: int, dim: int) -> np.ndarray | None:
    found = read_safetensors_tensors(path, (), optional=("hc_fn",))
    if "hc_fn" not in found:
        return None
    fn = found["hc_fn"][0]
    if list(fn.shape) != [mix_width(hc), hc * dim]:
        raise HcError(f"{path}: tensor `hc_fn` has shape {list(fn.shape)}, expected [{mix_width(hc)}, {hc * dim}]")
    return fn

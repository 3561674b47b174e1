"""`hc run-kernel`'s core: build the input from typed choices, run the chosen implementation,
and summarise. No printing, and no flag names: the CLI parses its options into
the MixSource / CheckpointSite / Overrides values below.

Where hc_mult, the iteration count and eps come from, in order: a checkpoint's
config.json (one it cannot use is set aside whole, and the input carries its note);
a given config; the tensors' shapes with a GGUF's metadata (as `inspect` reads it,
checkpoint/hc.py op_settings) or else the reference defaults (vocab.DEFAULT_*);
explicit overrides. The result says which.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from hccli.base.errors import HcError
from hccli.runkernel import inputs
from hccli.base.limits import MAX_SINKHORN_ITERS, check_hc_mult
from hccli.base.vocab import (DEFAULT_HC_EPS, DEFAULT_HC_MULT, DEFAULT_NORM_EPS, DEFAULT_SINKHORN_ITERS,
                         hc_from_mix_width, mix_width)

if TYPE_CHECKING:
    from hccli.model.config.model import ConfigUnusable


@dataclass(frozen=True)
class SampleMixes:
    """The bundled sample (4 seeded tokens, with its own synthetic base/scale)."""


@dataclass(frozen=True)
class RandomMixes:
    tokens: int
    seed: int = 0


@dataclass(frozen=True)
class MixesFile:
    path: Path


@dataclass(frozen=True)
class HiddenState:
    """Mixes through the model's projection from a hidden state: seeded [tokens, hc, dim], or from `path`."""

    tokens: int = inputs.SAMPLE_TOKENS
    dim: int | None = None
    seed: int = 0
    path: Path | None = None


MixSource = Union[SampleMixes, RandomMixes, MixesFile, HiddenState]


@dataclass(frozen=True)
class CheckpointSite:
    """A checkpoint site whose hc_base / hc_scale (and hc_fn for a hidden state) to use."""

    checkpoint: str
    layer: int
    site: str  # "attn" or "ffn"


@dataclass(frozen=True)
class Overrides:
    """Op parameters given explicitly; None keeps what was found."""

    hc_mult: int | None = None
    iters: int | None = None
    eps: float | None = None


@dataclass(frozen=True)
class RunParams:
    hc_mult: int
    iters: int
    eps: float
    norm_eps: float
    origin: str  # where hc_mult/iters/eps came from


@dataclass(frozen=True)
class RunInput:
    mixes: np.ndarray  # float32 [..., (2+hc)*hc]
    scale: np.ndarray  # [3]
    base: np.ndarray  # [(2+hc)*hc]
    provenance: str
    params_provenance: str  # where base/scale came from
    nonfinite_tokens: tuple[int, ...]
    params: RunParams
    config_note: ConfigUnusable | None = None  # the checkpoint's config.json, set aside


@dataclass(frozen=True)
class RunParamsDocument:
    """The parameters the op ran with, as `run-kernel --json` states them."""

    hc_mult: int
    sinkhorn_iters: int
    eps: float
    origin: str  # where hc_mult/iters/eps came from
    base_scale: str  # where hc_base/hc_scale came from
    hc_scale: np.ndarray
    hc_base: np.ndarray


@dataclass(frozen=True)
class RunDocument:
    """`hc run-kernel --json`, field by field in its order (output.emit writes it)."""

    impl: str
    device: str
    reason: str
    tokens: int
    input: str  # where the mixes came from
    params: RunParamsDocument
    config_note: ConfigUnusable | None
    nonfinite_tokens: tuple[int, ...]
    max_abs_row_sum_dev: float
    max_abs_col_sum_dev: float
    pre: np.ndarray
    post: np.ndarray
    comb: np.ndarray


@dataclass(frozen=True)
class RunResult:
    impl: str
    device: str
    reason: str
    input: RunInput
    pre: np.ndarray  # [n, hc] float32, leading dims flattened row-major
    post: np.ndarray
    comb: np.ndarray  # [n, hc, hc]

    @property
    def tokens(self) -> int:
        return int(self.pre.shape[0])

    def deviations(self) -> tuple[float, float]:
        """Largest |row sum - 1| and |column sum - 1| over the finite tokens."""
        ok = np.isfinite(self.comb).all(axis=(1, 2))
        if not ok.any():
            return float("nan"), float("nan")
        c = self.comb[ok].astype(np.float64)
        return float(np.abs(c.sum(-1) - 1).max()), float(np.abs(c.sum(-2) - 1).max())

    def document(self) -> RunDocument:
        row, col = self.deviations()
        i, p = self.input, self.input.params
        return RunDocument(self.impl, self.device, self.reason, self.tokens, i.provenance,
                           RunParamsDocument(p.hc_mult, p.iters, p.eps, p.origin, i.params_provenance, i.scale, i.base),
                           i.config_note, i.nonfinite_tokens, row, col, self.pre, self.post, self.comb)


def _params_from_config(path: Path, what: str) -> RunParams:
    from hccli.model.config.model import load_config
    from hccli.runkernel.files import regular_file

    regular_file(Path(path), "config.json")
    cfg = load_config(path)
    return RunParams(check_hc_mult(cfg.hc_mult, f"{what} {path}"), cfg.hc_sinkhorn_iters, cfg.hc_eps, cfg.norm_eps,
                     f"{what} {path}")


def _check_part(site: Any, part: str, limit: int, label: str) -> None:
    # the header says how big a tensor is: refuse before reading what no model holds
    from hccli.base.limits import check_count

    if part in site.parts:
        info = site.parts[part][1]
        count = 1
        for d in info.shape:
            count *= int(d)
        check_count(f"{label}: tensor {info.name} {list(info.shape)}", count, limit)


def prepare(source: MixSource, *, site: CheckpointSite | None = None, config: Path | None = None,
            overrides: Overrides = Overrides()) -> RunInput:
    """Mixes, base, scale and the op's parameters from typed choices."""
    if site is not None and site.site not in ("attn", "ffn"):
        raise HcError(f"site {site.site!r}: the split-Sinkhorn op runs at the attn and ffn sites "
                      "(the head mix has no Sinkhorn); expected attn or ffn")
    hidden = isinstance(source, HiddenState)
    params: RunParams | None = None
    base = scale = fn = None
    base_origin = ""
    config_note = None
    if config is not None:
        params = _params_from_config(config, "config")
    if site is not None:
        from hccli.checkpoint.hc import read_base_scale, read_part, select_site
        from hccli.checkpoint.opening import open_checkpoint
        from hccli.base.limits import MAX_ELEMENTS, MAX_HC_MULT

        ckpt = open_checkpoint(site.checkpoint, config=config)
        config_note = ckpt.config_note
        s = select_site(ckpt, site.layer, site.site)
        for part in ("base", "scale"):
            _check_part(s, part, mix_width(MAX_HC_MULT), str(site.checkpoint))
        base, scale = (a.reshape(-1) for a in read_base_scale(ckpt, s))
        base_origin = f"hc_{site.site}_base/scale of {s.name} (layer {site.layer}) in {site.checkpoint}"
        if hidden:
            _check_part(s, "fn", MAX_ELEMENTS, str(site.checkpoint))
            fn = read_part(ckpt, s, "fn")
        if ckpt.config is not None and params is None:
            c = ckpt.config
            params = RunParams(check_hc_mult(c.hc_mult, f"config {c.source}"), c.hc_sinkhorn_iters, c.hc_eps,
                               c.norm_eps, f"config {c.source}")
        elif params is None:
            hc = hc_from_mix_width(base.size)
            if hc is None or scale.size != 3:
                raise HcError(f"{site.checkpoint}: hc_{site.site}_base of {s.name} has {base.size} values and scale "
                              f"{scale.size}; expected (2+hc)*hc and 3")
            params = RunParams(check_hc_mult(hc, f"the shape of hc_{site.site}_base in {site.checkpoint}"),
                               *_op_settings(ckpt, hc))
    if params is None:
        params = RunParams(DEFAULT_HC_MULT, DEFAULT_SINKHORN_ITERS, DEFAULT_HC_EPS, DEFAULT_NORM_EPS,
                           f"reference defaults (hc_mult {DEFAULT_HC_MULT}, {DEFAULT_SINKHORN_ITERS} iterations, "
                           f"eps {DEFAULT_HC_EPS:g})")
    params = _apply(params, overrides, from_checkpoint=base is not None)
    hc = params.hc_mult

    if hidden:
        fn_origin = f"hc_{site.site}_fn of {site.checkpoint}" if fn is not None else ""
        src = inputs.hidden_mixes(source.tokens, source.dim or inputs.SAMPLE_DIM, source.seed, hc, source.path,
                                  params.norm_eps, fn=fn, fn_origin=fn_origin)
    elif isinstance(source, MixesFile):
        src = inputs.load_mixes(source.path, hc)
    elif isinstance(source, RandomMixes):
        src = inputs.random_mixes(source.tokens, source.seed, hc)
    else:
        src = inputs.sample_mixes(hc)

    if src.mixes.shape[-1] != mix_width(hc):
        raise HcError(f"mixes have last dimension {src.mixes.shape[-1]}; expected (2+hc)*hc = {mix_width(hc)}")
    if base is None:
        if src.hc_base is not None:
            base, scale = src.hc_base, src.hc_scale
            base_origin = "the sample's synthetic base/scale (comb offsets 2 on the diagonal, scales 1)"
        else:
            scale, base = inputs.sample_params(hc)
            base_origin = "synthetic base/scale (comb offsets 2 on the diagonal, scales 1)"
    return RunInput(src.mixes, np.asarray(scale, np.float32), np.asarray(base, np.float32), src.provenance,
                    base_origin, src.nonfinite_tokens, params, config_note)


def _op_settings(ckpt: Any, hc: int) -> tuple[int, float, float, str]:
    """(iterations, eps, norm_eps, origin) of a checkpoint without a config: a GGUF's
    metadata where it holds them (op_settings falls back key by key), else the defaults."""
    from hccli.names import dialects as D
    from hccli.checkpoint.hc import gguf_settings, op_settings

    iters, eps = op_settings(ckpt)
    if ckpt.dialect.dialect != D.GGUF:
        # a config.json that is there but unusable is never "no config.json" (its note says why)
        why = "config.json not used" if ckpt.config_note is not None else "no config.json"
        return (iters, eps, DEFAULT_NORM_EPS, f"the tensors' shapes (hc_mult {hc}; {why}: reference "
                f"defaults {iters} iterations, eps {eps:g})")
    meta = gguf_settings(ckpt)

    def said(key: str, text: str, value: Any) -> str:
        return text if meta.get(key) == value else f"{text} (reference default)"
    return iters, eps, DEFAULT_NORM_EPS, (
        f"the tensors' shapes (hc_mult {hc}) and the GGUF metadata ("
        f"{said('hyper_connection.sinkhorn_iterations', f'{iters} iterations', iters)}, "
        f"{said('hyper_connection.epsilon', f'eps {eps:g}', eps)})")


def _apply(params: RunParams, o: Overrides, *, from_checkpoint: bool) -> RunParams:
    """Explicit values override what was found, and say so."""
    if o.hc_mult is not None and from_checkpoint and o.hc_mult != params.hc_mult:
        raise HcError(f"hc_mult {o.hc_mult} asked for disagrees with the checkpoint's hc_mult {params.hc_mult} "
                      f"({params.origin})")
    given = [f"{k} {v}" for k, v in (("hc_mult", o.hc_mult), ("iterations", o.iters), ("eps", o.eps)) if v is not None]
    if given:
        params = RunParams(o.hc_mult or params.hc_mult, o.iters if o.iters is not None else params.iters,
                           o.eps if o.eps is not None else params.eps, params.norm_eps,
                           params.origin + "; " + ", ".join(given) + " given explicitly")
    check_hc_mult(params.hc_mult, params.origin)
    if not 1 <= params.iters <= MAX_SINKHORN_ITERS:
        raise HcError(f"sinkhorn_iters {params.iters} ({params.origin}): expected at least 1 Sinkhorn iteration "
                      f"and at most {MAX_SINKHORN_ITERS}")
    if not np.isfinite(params.eps) or params.eps < 0:
        raise HcError(f"eps {params.eps} ({params.origin}): expected a finite number >= 0")
    return params


def run(inp: RunInput, impl: str = "auto", device: str | None = None) -> RunResult:
    from hccli.kernels.registry import resolve_impl

    chosen = resolve_impl(impl, device, inp.params.hc_mult)
    p = inp.params
    pre, post, comb = chosen.run(inp.mixes, inp.scale, inp.base, p.hc_mult, p.iters, p.eps)
    hc = p.hc_mult
    return RunResult(
        chosen.name, chosen.device, chosen.reason, inp,
        pre.reshape(-1, hc).float().cpu().numpy(),
        post.reshape(-1, hc).float().cpu().numpy(),
        comb.reshape(-1, hc, hc).float().cpu().numpy(),
    )


def save_golden(result: RunResult, path: Path, *, force: bool = False, protect: Path | None = None) -> None:
    """Inputs and outputs as golden vectors for ports: one .safetensors file (golden.py has the format)."""
    from hccli.runkernel import golden

    inp = result.input
    p = inp.params
    tensors = {"mixes": inp.mixes.reshape(-1, inp.mixes.shape[-1]), "hc_scale": inp.scale, "hc_base": inp.base,
               "pre": result.pre, "post": result.post, "comb": result.comb}
    meta = {"impl": result.impl, "device": result.device, "hc_mult": str(p.hc_mult),
            "sinkhorn_iters": str(p.iters), "eps": repr(float(p.eps)), "input": inp.provenance,
            "base_scale": inp.params_provenance, "producer": "hccli run-kernel"}
    golden.save(path, tensors, meta, force=force, protect=protect)

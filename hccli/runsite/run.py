"""`hc run-site` core: run a model's HC sites on streams, summarise each, save golden vectors,
re-run a golden file. The CLI parses its options into a RunRequest; nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from hccli.model.config.model import ConfigUnusable
from hccli.base.errors import HcError
from hccli.ops.site import REFERENCE, ChainSite, SiteRef, Variant, cast, forward, run_chain, sample_streams
from hccli.runsite.source import SiteModel, check_fn, check_tokens, read_streams, sublayer_outputs

DEFAULT_TOKENS = 16
# numpy: hccli/ops/site.py; auto: the site kernels on a GPU (kernels/site_fused.py), else as the rest: the torch
# path, kernels/site_torch.py, the split through that kernel
PATHS = ("numpy", "torch", "site-kernels")  # what a run's sites went through (SiteRunReport.path)


@dataclass(frozen=True)
class RunRequest:
    tokens: int | None = None  # None: DEFAULT_TOKENS seeded tokens (or the streams file's)
    seed: int = 0
    streams: Path | None = None
    sublayer: str = "random"  # "zero" | "random" | a .safetensors file
    layers: Any = None  # a LayerSpec (model/layers.py) or layer numbers; None: every layer
    sites: tuple[str, ...] | None = None
    precision: str = "f32"  # the projection's operands: f32 | tf32 | bf16 | f16
    impl: str | None = None  # None: numpy, or auto where --device names a GPU
    device: str | None = None


@dataclass(frozen=True)
class SiteRow:
    key: str  # "3.attn", as the golden names it
    layer: int
    site: str
    name: str  # "layers.3", "mtp.0", "head" (V4's head mix), "collapse" (V4.1's end of a stack)
    pre: list[float] | None  # token 0's
    post: list[float] | None
    comb: list[list[float]] | None  # token 0's, row j = from stream j, column k = to stream k
    rms_in: list[float]  # each stream's RMS over the tokens and dim, into the site
    rms_out: list[float] | None  # and out of it (None at a head)
    collapsed_rms: float
    drift: dict[str, float] | None = None  # max |at --precision - f32| of pre, post, comb, h (collapsed)


@dataclass(frozen=True)
class SiteRunReport:
    source: str
    source_kind: str  # "checkpoint" | "config"
    dialect: str
    family: str
    hc_mult: int
    sinkhorn_iters: int
    hc_eps: float
    norm_eps: float
    params_origin: str
    dim: int
    tokens: int
    streams: str  # where the streams came from
    streams_dtype: str
    sublayer: str
    impl: str
    precision: str
    sites: tuple[SiteRow, ...]
    saved: str | None = None
    notes: tuple[str, ...] = field(default=())
    path: str = "numpy"  # PATHS: numpy, the torch path or the site kernels
    config_note: ConfigUnusable | None = None  # the checkpoint's config.json, set aside
    findings: tuple[Any, ...] = ()  # what opening found wrong with the checkpoint (checkpoint/verify/damage.py)


def default_impl(impl: str | None, device: str | None) -> str:
    """--impl as given; without one, numpy on the CPU and auto (the site kernels) on another --device."""
    if impl is not None:
        return impl
    return "numpy" if device in (None, "cpu") else "auto"


@dataclass(frozen=True)
class Compute:
    run: Callable  # run(inputs, params, variant) -> {step: float32 array}
    path: str  # PATHS
    how: str  # what runs it, in words
    note: str | None = None  # why the site kernels did not run on the GPU in use


def compute_for(impl: str | None, device: str | None, hc_mult: int, dim: int, streams_dtype: str,
                unsupported: str | None = None) -> Compute:
    """numpy's forward, or (kernels/site_fused.py) the site kernels or the torch path with the split
    through the chosen kernel; `unsupported`: why this run needs what the site kernels do not give."""
    impl = default_impl(impl, device)
    if impl == "numpy":
        if device not in (None, "cpu"):
            raise HcError(f"--device {device}: the numpy forward runs on the CPU; give --impl auto, torch or a kernel")
        return Compute(forward, "numpy", "numpy: hccli/ops/site.py, float32 in the published order")
    from hccli.kernels.site_fused import choose

    p = choose(impl, device, hc_mult, dim, streams_dtype, unsupported)
    return Compute(p.compute, p.name, p.how, p.note)


def _unsupported(req: RunRequest, save: Path | None) -> str | None:
    if req.precision != "f32":
        return f"--precision {req.precision} rounds the projection's operands, and they compute it in float32"
    if save is not None:
        return "--save writes every step, and site_pre keeps the rms statistic (rsqrt) inside"
    return None


def _select(model: SiteModel, req: RunRequest) -> Callable[[SiteRef], bool]:
    """The sites --layers and --site keep. A V4.1 stack ends with a collapse that has no tensors
    (no head mix: `head` and layer n_layers + n_stages are not there, as inspect says): it runs
    with its stack's last layer, and is no site `--site head` picks."""
    from hccli.model.layers import check_layer_range

    head_mix = model.params.family == "v4"
    if req.sites and "head" in req.sites and not head_mix:
        raise HcError(f"--site head: {model.label} has no head mix (family {model.params.family}: each stack ends "
                      "with a collapse, run with its last layer); expected attn or ffn")
    layers = req.layers
    if layers is not None:
        layers = check_layer_range(layers, model.n_layers, model.n_stages, head_mix, model.label)

    def wanted(r: SiteRef) -> bool:
        at = r.layer if r.has_params or r.stack == "stages" else model.n_layers - 1
        return (layers is None or at in layers) and (req.sites is None or r.site in req.sites)
    if not any(wanted(r) for r in model.plan):
        from hccli.model.layers import no_site_matches

        raise HcError(no_site_matches(model.label, ((r.layer, r.site) for r in model.plan if r.has_params), layers,
                                      req.sites, "site"))
    return wanted


def _row(cs: ChainSite, ref: ChainSite | None) -> SiteRow:
    s, x = cs.steps, cs.inputs.streams

    def rms(a: np.ndarray) -> list[float]:
        return np.sqrt(np.mean(np.square(a.astype(np.float64)), axis=(0, 2))).tolist()

    def first(name: str):
        return s[name][0].tolist() if name in s else None
    drift = None
    if ref is not None:
        drift = {}
        for name, step in (("pre", "pre"), ("post", "post"), ("comb", "comb"), ("h", "collapsed")):
            if step in s:
                with np.errstate(invalid="ignore"):
                    d = np.abs(s[step].astype(np.float64) - ref.steps[step].astype(np.float64))
                drift[name] = float(np.nanmax(d)) if d.size else 0.0
    out = s.get("streams_out")
    name = cs.ref.label if cs.ref.has_params else "collapse"  # V4.1's end of a stack: no head mix
    return SiteRow(cs.ref.key, cs.ref.layer, cs.ref.site, name, first("pre"), first("post"), first("comb"),
                   rms(x), None if out is None else rms(out),
                   float(np.sqrt(np.mean(np.square(s["collapsed"].astype(np.float64))))), drift)


def run_site(model: SiteModel, req: RunRequest, save: Path | None = None,
             provenance: dict[str, str] | None = None, force: bool = False) -> SiteRunReport:
    """The run over the model's chosen sites; with `save`, its golden vectors written there
    (`force`: over an existing file; never inside model.protect)."""
    hc, dim = model.params.hc_mult, model.dim
    check_fn(model.label, hc, dim)
    if req.streams is not None:
        x, dtype, origin = read_streams(req.streams, hc, dim)
    else:
        tokens = DEFAULT_TOKENS if req.tokens is None else req.tokens
        check_tokens(tokens, hc, dim)
        x, dtype = sample_streams(tokens, req.seed, hc, dim), "bf16"
        origin = f"{tokens} seeded tokens (seed {req.seed}): N(0, s^2) per stream, s log-uniform in [1e-4, 10]"
    tokens = x.shape[0]
    params = replace(model.params, streams_dtype=dtype)
    wanted = _select(model, req)
    if save is not None:
        from hccli.runsite.golden import check_savable

        if req.precision != "f32":
            raise HcError("--save writes the float32 reference; drop --precision (or run it without --save)")
        check_savable(save, params, [r for r in model.plan if wanted(r)], tokens, dim)
    f_of, f_origin = sublayer_outputs(req.sublayer, model.plan, req.seed, cast(x, dtype), dtype)
    chosen = compute_for(req.impl, req.device, hc, dim, dtype, _unsupported(req, save))
    compute, how = chosen.run, chosen.how
    last: dict[SiteRef, Any] = {}

    def tensors(ref: SiteRef):  # the two chains of a --precision run ask in step: read each site once
        if ref not in last:
            last.clear()
            last[ref] = model.tensors(ref)
        return last[ref]
    variant = Variant(projection=req.precision)
    chain = run_chain(model.plan, params, x, tensors, f_of, wanted, variant, compute)
    refs = run_chain(model.plan, params, x, tensors, f_of, wanted, REFERENCE, compute) \
        if req.precision != "f32" else None
    rows, kept = [], []
    for cs in chain:
        ref = next(refs) if refs is not None else None
        if wanted(cs.ref):
            rows.append(_row(cs, ref))
            if save is not None:
                kept.append(cs)
    if save is not None:
        from hccli.runsite.golden import write_golden

        meta = {"producer": "hccli run-site", "source": model.label, "streams": origin, "sublayer": f_origin,
                "tokens": str(tokens), "dim": str(dim), "impl": how, **(provenance or {})}
        write_golden(save, kept, params, model.n_layers, meta, force=force, protect=model.protect)
    p = params
    return SiteRunReport(model.label, model.kind, model.dialect, p.family, p.hc_mult, p.iters, p.hc_eps, p.norm_eps,
                         model.origin, dim, tokens, origin, dtype, f_origin, how, req.precision, tuple(rows),
                         None if save is None else str(save), model.notes + ((chosen.note,) if chosen.note else ()),
                         chosen.path, model.config_note, model.findings)


def compare_file(path: Path, impl: str | None = None, device: str | None = None, atol: float = 0.0):
    """Re-run a golden file's inputs site by site and compare every step (runsite/golden.py's compare_golden)."""
    from hccli.runsite.golden import compare_golden, read_golden

    golden = read_golden(path)
    p = golden.params
    c = compute_for(impl, device, p.hc_mult, golden.dim, p.streams_dtype,
                    "--compare checks every step, and site_pre keeps the rms statistic (rsqrt) inside")
    how = c.how if c.note is None else f"{c.how} ({c.note})"
    return compare_golden(golden, lambda inp, params: c.run(inp, params, REFERENCE), how, atol)

"""Golden site vectors (format hc-site-golden/1): writing them, reading them back, re-running them.

One safetensors file. Metadata (all strings): format = "hc-site-golden/1", family
("v4" | "v4.1"), hc_mult, sinkhorn_iters, n_layers (decimal integers), hc_eps, norm_eps
(decimal floats that round-trip), streams_dtype ("bf16" | "f32": what collapsed and
streams_out are rounded to), sites (the sites in the order they run, "0.attn,0.ffn,...,8.head"),
stacks (how many of them each stack holds, "17,5": the backbone, then the DSpark/MTP stages),
and provenance (producer, source, streams, sublayer, tokens, dim). Tensors, all F32, named
{layer}.{site}.{name}: the inputs streams_in [T, hc, dim], fn, base, scale, f [T, dim] and,
in V4.1, pre_mix_in [T, hc]; the steps rsqrt [T], mixes, pre, post, comb [T, hc, hc],
collapsed [T, dim], streams_out [T, hc, dim]. A head has no f, post, comb or streams_out; V4.1's
end-of-stack collapse has only streams_in, pre_mix_in and collapsed. docs/site-golden.md is the
format for ports. Written through runkernel/golden.py's writer, read through runkernel/files.py.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable

import numpy as np

from hccli.base.errors import HcError
from hccli.runkernel.golden import decimal_float, decimal_int, require_f32
from hccli.base.limits import MAX_ELEMENTS
from hccli.ops.site import FAMILIES, INPUTS, STEPS, ChainSite, SiteInputs, SiteParams, SiteRef
from hccli.ops.compare import Compared
from hccli.base.vocab import MAX_HC_MULT, mix_width

FORMAT = "hc-site-golden/1"
# Values one golden (or port) file may hold in all: a full-scale V4.1-Flash at 16 tokens, every
# site, is ~1e8 (fn 2 MB a site); hc refuses more before it reads a byte of them.
MAX_GOLDEN_VALUES = 1 << 27
# Sinkhorn iterations a golden may hold, written and read: five times the published models' 20.
# check-port recomputes comb under each iteration count it tries (up to twice the golden's), so
# this bounds its work; configs may ask for more (model/config/bounds.py), and run without --save.
MAX_GOLDEN_ITERS = 100
MAX_SITES = 4096
HEAD_STEPS = ("rsqrt", "mixes", "pre", "collapsed")
_KEY = re.compile(r"([0-9]{1,6})\.(attn|ffn|head)")  # fullmatch; [0-9], not \d: ASCII digits only
_NAME = re.compile(r"([0-9]{1,6})\.(attn|ffn|head)\.([a-z_]{1,20})")
_COUNT = re.compile(r"[0-9]{1,5}")


@dataclass(frozen=True)
class GoldenSite:
    ref: SiteRef
    inputs: SiteInputs
    steps: dict[str, np.ndarray]


@dataclass(frozen=True)
class SiteGolden:
    path: str
    params: SiteParams
    sites: tuple[GoldenSite, ...]
    n_layers: int  # the model's backbone layers: a site's layer past them is an MTP stage's
    tokens: int
    dim: int
    meta: dict[str, str] = field(default_factory=dict)


def site_steps(family: str, site: str) -> tuple[str, ...]:
    """The steps a site of this kind has."""
    if site != "head":
        return STEPS
    return HEAD_STEPS if family == "v4" else ("collapsed",)


def site_inputs(family: str, site: str) -> tuple[str, ...]:
    if site != "head":
        return INPUTS if family == "v4.1" else INPUTS[:-1]
    return ("streams_in", "fn", "base", "scale") if family == "v4" else ("streams_in", "pre_mix_in")


def tensor_shapes(family: str, site: str, tokens: int, hc: int, dim: int) -> dict[str, tuple[int, ...]]:
    """The shape of each tensor a site of this kind has in the file (its inputs, then its steps)."""
    rows = mix_width(hc) if site != "head" else hc
    every = {"streams_in": (tokens, hc, dim), "fn": (rows, hc * dim), "base": (rows,),
             "scale": (3,) if site != "head" else (1,), "f": (tokens, dim), "pre_mix_in": (tokens, hc),
             "rsqrt": (tokens,), "mixes": (tokens, rows), "pre": (tokens, hc), "post": (tokens, hc),
             "comb": (tokens, hc, hc), "collapsed": (tokens, dim), "streams_out": (tokens, hc, dim)}
    return {n: every[n] for n in site_inputs(family, site) + site_steps(family, site)}


def check_savable(path, params: SiteParams, refs: Iterable[SiteRef], tokens: int, dim: int) -> None:
    """Refuse, before the run, a golden its readers would refuse: more Sinkhorn iterations than
    MAX_GOLDEN_ITERS, a tensor past MAX_ELEMENTS (the bound runkernel/files.py reads any tensor
    under, so that a golden hc writes is one its readers take), more than MAX_GOLDEN_VALUES in all."""
    if params.iters > MAX_GOLDEN_ITERS:
        raise HcError(f"--save {path}: {params.iters:,} Sinkhorn iterations; a golden holds at most "
                      f"{MAX_GOLDEN_ITERS} (runsite/golden.py's MAX_GOLDEN_ITERS; the models use 20): run it without --save")
    total = 0
    for r in refs:
        for name, shape in tensor_shapes(params.family, r.site, tokens, params.hc_mult, dim).items():
            size = math.prod(shape)
            if size > MAX_ELEMENTS:
                raise HcError(f"--save {path}: tensor `{r.key}.{name}` would have shape {list(shape)}, {size:,} "
                              f"values; hc reads at most {MAX_ELEMENTS:,} a tensor "
                              "(base/limits.py's MAX_ELEMENTS): fewer --tokens, or a model with fewer streams")
            total += size
    if total > MAX_GOLDEN_VALUES:
        raise HcError(f"--save {path}: {total:,} values to save; hc writes at most {MAX_GOLDEN_VALUES:,} "
                      "(runsite/golden.py's MAX_GOLDEN_VALUES): fewer --tokens or --layers")


# ---- writing ---------------------------------------------------------------------------------

def golden_tensors(sites: Iterable[ChainSite], family: str) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for cs in sites:
        i, k = cs.inputs, cs.ref.key
        given = {"streams_in": i.streams, "fn": i.fn, "base": i.base, "scale": i.scale, "f": i.f,
                 "pre_mix_in": i.pre_mix}
        for name in site_inputs(family, cs.ref.site):
            out[f"{k}.{name}"] = given[name]
        for step in site_steps(family, cs.ref.site):
            out[f"{k}.{step}"] = cs.steps[step]
    return out


def golden_meta(params: SiteParams, refs: list[SiteRef], n_layers: int, provenance: dict[str, str]
                ) -> dict[str, str]:
    stacks = [sum(1 for r in refs if r.stack == s) for s in ("backbone", "stages")]
    return {"format": FORMAT, "family": params.family, "hc_mult": str(params.hc_mult),
            "sinkhorn_iters": str(params.iters), "hc_eps": repr(float(params.hc_eps)),
            "norm_eps": repr(float(params.norm_eps)), "streams_dtype": params.streams_dtype,
            "n_layers": str(n_layers), "sites": ",".join(r.key for r in refs),
            "stacks": ",".join(str(n) for n in stacks), **provenance}


def write_golden(path: Path, sites: list[ChainSite], params: SiteParams, n_layers: int,
                 provenance: dict[str, str], *, force: bool = False, protect: str | Path | None = None) -> None:
    """The sites' inputs and steps as golden vectors, through the project's golden writer
    (`force`: over an existing file; never inside `protect`, a checkpoint)."""
    from hccli.runkernel import golden

    tensors = golden_tensors(sites, params.family)
    count = sum(int(a.size) for a in tensors.values())
    if count > MAX_GOLDEN_VALUES:
        raise HcError(f"{path}: {count:,} values to save; hc writes at most {MAX_GOLDEN_VALUES:,} "
                      "(runsite/golden.py's MAX_GOLDEN_VALUES): fewer --tokens or --layers")
    golden.save(Path(path), tensors, golden_meta(params, [s.ref for s in sites], n_layers, provenance),
                force=force, protect=protect)


# ---- reading ---------------------------------------------------------------------------------

def _show(text: str | None) -> str:
    from hccli.base.bounded import one_line

    return "missing" if text is None else repr(one_line(text, 40))


def _int(path, meta: dict, key: str, lo: int, hi: int) -> int:
    value = decimal_int(meta.get(key))
    if value is None or not lo <= value <= hi:
        raise HcError(f"{path}: metadata {key!r} is {_show(meta.get(key))}; expected a decimal integer {lo} to {hi:,}")
    return value


def _float(path, meta: dict, key: str) -> float:
    value = decimal_float(meta.get(key))
    if value is None or not (math.isfinite(value) and 0 <= value < 1):
        raise HcError(f"{path}: metadata {key!r} is {_show(meta.get(key))}; expected a decimal number in [0, 1)")
    return value


def _plan(path, meta: dict, family: str, n_layers: int) -> list[SiteRef]:
    keys = (meta.get("sites") or "").split(",")
    counts = (meta.get("stacks") or "").split(",")
    if len(keys) > MAX_SITES or not all(_KEY.fullmatch(k) for k in keys) or len(set(keys)) != len(keys):
        raise HcError(f"{path}: metadata 'sites' is {_show(meta.get('sites'))}; expected distinct "
                      f"LAYER.SITE names (site attn, ffn or head), comma-separated, at most {MAX_SITES:,}")
    if (not all(_COUNT.fullmatch(c) for c in counts) or not 1 <= len(counts) <= 2
            or sum(int(c) for c in counts) != len(keys)):
        raise HcError(f"{path}: metadata 'stacks' is {_show(meta.get('stacks'))}; expected one or two counts "
                      f"that add up to the {len(keys)} sites")
    refs, at = [], 0
    for stack, n in zip(("backbone", "stages"), (int(c) for c in counts)):
        for k in keys[at:at + n]:
            layer, site = int(k.split(".")[0]), k.split(".")[1]
            owner = f"layers.{layer}" if layer < n_layers else f"mtp.{layer - n_layers}"
            owner = "" if (site == "head" and stack == "backbone") else owner
            refs.append(SiteRef(layer, site, owner, stack, site != "head" or family == "v4"))
        at += n
    return refs


def _header(path: Path):
    from hccli.runkernel.files import read_safetensors_header

    source, header = read_safetensors_header(path)
    source.close()
    count = sum(math.prod(t.shape) for t in header.by_name.values())
    if count > MAX_GOLDEN_VALUES:
        raise HcError(f"{path}: its tensors hold {count:,} values; hc reads at most {MAX_GOLDEN_VALUES:,} "
                      "(runsite/golden.py's MAX_GOLDEN_VALUES)")
    return header


def _read(path: Path, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    from hccli.runkernel.files import read_safetensors_tensors

    return {k: a.astype(np.float32, copy=False) for k, (a, _) in read_safetensors_tensors(path, names).items()}


def _expect(path, name: str, a: np.ndarray, shape: tuple[int, ...]) -> None:
    if a.shape != shape:
        raise HcError(f"{path}: tensor `{name}` has shape {list(a.shape)}; expected {list(shape)}")


def read_golden(path: str | Path) -> SiteGolden:
    """A golden file, validated; HcError (exit 2) naming the file and what is wrong."""
    path = Path(path)
    header = _header(path)
    meta = dict(header.metadata or {})
    if meta.get("format") != FORMAT:
        raise HcError(f"{path}: metadata 'format' is {_show(meta.get('format'))}; expected {FORMAT!r}")
    family = meta.get("family")
    if family not in FAMILIES:
        raise HcError(f"{path}: metadata 'family' is {_show(family)}; expected one of {', '.join(FAMILIES)}")
    dtype = meta.get("streams_dtype")
    if dtype not in ("bf16", "f32"):
        raise HcError(f"{path}: metadata 'streams_dtype' is {_show(dtype)}; expected bf16 or f32")
    params = SiteParams(family, _int(path, meta, "hc_mult", 1, MAX_HC_MULT),
                        _int(path, meta, "sinkhorn_iters", 1, MAX_GOLDEN_ITERS),
                        _float(path, meta, "hc_eps"), _float(path, meta, "norm_eps"), dtype)
    n_layers = _int(path, meta, "n_layers", 0, 1 << 20)
    refs = _plan(path, meta, family, n_layers)
    names = tuple(f"{r.key}.{n}" for r in refs
                  for n in site_inputs(family, r.site) + site_steps(family, r.site))
    extra = sorted(set(header.by_name) - set(names))
    if extra:
        raise HcError(f"{path}: tensor `{_show(extra[0])[1:-1]}` is not one of the golden's names "
                      f"({{layer}}.{{site}}.{{input or step}} of the sites listed in its metadata)")
    require_f32(path, header, names)
    arrays = _read(path, names)
    hc = params.hc_mult
    first = arrays[f"{refs[0].key}.streams_in"]
    if first.ndim != 3 or first.shape[1] != hc or first.shape[0] < 1 or first.shape[2] < 1:
        raise HcError(f"{path}: tensor `{refs[0].key}.streams_in` has shape {list(first.shape)}; "
                      f"expected [tokens, {hc}, dim]")
    t, dim = first.shape[0], first.shape[2]
    sites = []
    for r in refs:
        k = r.key
        want = tensor_shapes(family, r.site, t, hc, dim)
        got = {n: arrays[f"{k}.{n}"] for n in want}
        for n, a in got.items():
            _expect(path, f"{k}.{n}", a, want[n])
        inputs = SiteInputs(r.site, got["streams_in"], got.get("fn"), got.get("base"), got.get("scale"),
                            got.get("f"), got.get("pre_mix_in"))
        sites.append(GoldenSite(r, inputs, {s: got[s] for s in site_steps(family, r.site)}))
    return SiteGolden(str(path), params, tuple(sites), n_layers, t, dim, meta)


def read_port(path: str | Path, golden: SiteGolden) -> tuple[dict[str, dict[str, np.ndarray]], tuple[str, ...]]:
    """A port's outputs for the golden's inputs: {site key: {step: values}} for the tensors named
    {layer}.{site}.{step} of the golden's sites (shapes as the golden's), with the streams_in,
    pre_mix_in and f it says it used where it holds them, and the names passed over."""
    path = Path(path)
    header = _header(path)
    known = {(gs.ref.key, s): gs.steps[s].shape for gs in golden.sites for s in gs.steps}
    # the inputs a port may say it used in the golden's place (a port run chained hands its own on)
    for gs in golden.sites:
        for n, a in (("streams_in", gs.inputs.streams), ("pre_mix_in", gs.inputs.pre_mix), ("f", gs.inputs.f)):
            if a is not None:
                known[(gs.ref.key, n)] = a.shape
    inputs = {f"{gs.ref.key}.{n}" for gs in golden.sites for n in INPUTS}
    take, skipped = [], []
    for name, info in sorted(header.by_name.items()):
        m = _NAME.fullmatch(name)
        key = (f"{m[1]}.{m[2]}", m[3]) if m else None
        if key in known:
            if tuple(info.shape) != known[key]:
                raise HcError(f"{path}: tensor `{name}` has shape {list(info.shape)}; expected "
                              f"{list(known[key])} as in {golden.path}")
            take.append(name)
        elif name not in inputs:
            skipped.append(name)
    if not any(name.rpartition(".")[2] in STEPS for name in take):
        raise HcError(f"{path}: holds none of the steps of {golden.path}; expected tensors named "
                      "{layer}.{site}.{step}, e.g. " + f"`{golden.sites[0].ref.key}.mixes`")
    out: dict[str, dict[str, np.ndarray]] = {}
    for name, a in _read(path, tuple(take)).items():
        key, _, step = name.rpartition(".")
        out.setdefault(key, {})[step] = a
    return out, tuple(skipped)


# ---- re-running ------------------------------------------------------------------------------

@dataclass(frozen=True)
class StepDiff:
    step: str
    sites: int
    elements: int
    max_abs_diff: float
    differing: int
    beyond_atol: int


@dataclass(frozen=True)
class GoldenComparison(Compared):
    file: str
    how: str  # what re-ran the inputs
    family: str
    sites: int
    tokens: int
    atol: float
    steps: tuple[StepDiff, ...]

    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("ok",)

    def parts(self) -> Iterable[Any]:
        return self.steps


@dataclass
class _StepTally:
    """One step's figures summed over the sites as they are compared: StepDiff's, but for its name."""

    sites: int = 0
    elements: int = 0
    max_abs_diff: float = 0.0
    differing: int = 0
    beyond_atol: int = 0


def compare_golden(golden: SiteGolden, compute: Callable[[SiteInputs, SiteParams], dict], how: str,
                   atol: float = 0.0) -> GoldenComparison:
    """Re-run every site from the golden's own inputs and compare each step with the stored one."""
    from hccli.runkernel.golden import diff

    acc: dict[str, _StepTally] = {}
    for gs in golden.sites:
        got = compute(gs.inputs, golden.params)
        for step, want in gs.steps.items():
            d = diff(got[step], want, atol)
            a = acc.setdefault(step, _StepTally())
            a.sites += 1
            a.elements += int(want.size)
            a.max_abs_diff = max(a.max_abs_diff, d.max_abs_diff)
            a.differing += d.differing
            a.beyond_atol += d.beyond_atol
    steps = tuple(StepDiff(s, **vars(acc[s])) for s in STEPS if s in acc)
    return GoldenComparison(golden.path, how, golden.params.family, len(golden.sites), golden.tokens, atol, steps)

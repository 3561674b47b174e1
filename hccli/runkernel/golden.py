"""Golden vectors: `run-kernel --save` writes them, `run-kernel --compare` reads them back and re-runs them.

The file is one .safetensors file (little-endian F32 tensors; docs/commands/run-kernel.md,
"Golden vectors", has the format for ports): mixes [n, (2+hc)*hc], hc_scale [3], hc_base
[(2+hc)*hc], pre [n, hc], post [n, hc], comb [n, hc, hc]; metadata "format"
(FORMAT), "hc_mult", "sinkhorn_iters" (decimal integers), "eps" (a decimal float
that round-trips), and informative "impl", "device", "input", "base_scale",
"producer". Reading goes through files.py (the hardened header parser, bounds).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Iterable

import numpy as np

from hccli.base.errors import HcError
from hccli.base.limits import MAX_SINKHORN_ITERS, check_hc_mult
from hccli.base.vocab import mix_width
from hccli.ops.compare import Compared, gaps

FORMAT = "hc-split-sinkhorn-golden/1"
OUTPUTS = ("pre", "post", "comb")
TENSORS = ("mixes", "hc_scale", "hc_base") + OUTPUTS

# Python's int() and float() also take underscores and any script's digits ("1_0e-7", fullwidth
# "１", Arabic-Indic "٢"); the formats' numbers are ASCII decimals, matched whole before converting.
_DECIMAL_INT = re.compile(r"[0-9]{1,9}")
_DECIMAL_FLOAT = re.compile(r"[+-]?(?:[0-9]{1,40}(?:\.[0-9]{0,40})?|\.[0-9]{1,40})(?:[eE][+-]?[0-9]{1,3})?")


def decimal_int(text: str | None) -> int | None:
    """A metadata value as an integer where it is ASCII decimal digits (at most 9), else None."""
    return int(text) if isinstance(text, str) and _DECIMAL_INT.fullmatch(text) else None


def decimal_float(text: str | None) -> float | None:
    """A metadata value as a float where it is an ASCII decimal number, else None."""
    return float(text) if isinstance(text, str) and _DECIMAL_FLOAT.fullmatch(text) else None


def check_save_target(path: Path, *, force: bool = False, protect: Path | None = None) -> None:
    """Refuse a golden-vector target before any work is done: the extension, then safe_write's
    rules (inside `protect`, a checkpoint; an existing file without force; anything that is not
    a regular file, a link included; a missing directory)."""
    from hccli.base.safe_write import check_target

    if Path(path).suffix != ".safetensors":
        raise HcError(f"{path}: expected a .safetensors file name for the golden vectors")
    check_target(path, overwrite=force, forbidden=protect)


def save(path: Path, tensors: dict[str, np.ndarray], meta: dict[str, str], *, force: bool = False,
         protect: Path | None = None) -> None:
    """Write the file through safe_write (a fresh temporary beside it, then renamed: never a
    half-written file, never through a link). The bytes are safetensors' own serializer's, in
    memory: the arrays are bounded by base/limits.py, so the file is too."""
    from safetensors.numpy import save as serialize

    from hccli.base.safe_write import write_file

    data = serialize({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()},
                     metadata={"format": FORMAT, **meta})
    write_file(path, lambda fh: fh.write(data), overwrite=force, forbidden=protect)


@dataclass(frozen=True)
class Golden:
    path: Path
    mixes: np.ndarray
    scale: np.ndarray
    base: np.ndarray
    outputs: dict[str, np.ndarray]  # pre, post, comb as stored
    hc_mult: int
    iters: int
    eps: float
    meta: dict[str, str]


def _meta_int(path: Path, meta: dict[str, str], key: str) -> int:
    value = decimal_int(meta.get(key))
    if value is None:
        raise HcError(f"{path}: metadata {key!r} is {_show(meta.get(key))}; expected a decimal integer")
    return value


def _show(text: str | None) -> str:
    from hccli.base.bounded import one_line

    return "missing" if text is None else repr(one_line(text, 40))


def require_f32(path: Path, header, names) -> None:
    """Refuse, from the header, a golden tensor stored in any dtype but F32: the formats are F32,
    and a BF16 or F64 copy is another file's values, not these."""
    for name in names:
        info = header.get(name)
        if info is not None and info.dtype != "F32":
            raise HcError(f"{path}: tensor `{name}` has dtype {info.dtype}; expected F32 (every tensor of a "
                          "golden file is F32)")


def read(path: Path) -> Golden:
    """A golden-vector file, validated; HcError (exit 2) naming the file and what is wrong."""
    from hccli.runkernel.files import read_safetensors_header, read_safetensors_tensors

    path = Path(path)
    source, header = read_safetensors_header(path)
    source.close()
    meta = dict(header.metadata or {})
    fmt = meta.get("format")
    if fmt is not None and fmt != FORMAT:
        raise HcError(f"{path}: metadata 'format' is {_show(fmt)}; expected {FORMAT!r}")
    hc = check_hc_mult(_meta_int(path, meta, "hc_mult"), f"{path} metadata")
    iters = _meta_int(path, meta, "sinkhorn_iters")
    if not 1 <= iters <= MAX_SINKHORN_ITERS:
        raise HcError(f"{path}: metadata 'sinkhorn_iters' is {iters}; expected 1 to {MAX_SINKHORN_ITERS}")
    eps = decimal_float(meta.get("eps"))
    if eps is None or not (math.isfinite(eps) and eps >= 0):
        raise HcError(f"{path}: metadata 'eps' is {_show(meta.get('eps'))}; expected a finite decimal >= 0")
    require_f32(path, header, TENSORS)
    arrays = {k: a for k, (a, _) in read_safetensors_tensors(path, TENSORS).items()}
    w = mix_width(hc)
    n = arrays["mixes"].shape[0] if arrays["mixes"].ndim == 2 else -1
    want = {"mixes": (n, w), "hc_scale": (3,), "hc_base": (w,), "pre": (n, hc), "post": (n, hc), "comb": (n, hc, hc)}
    for name, shape in want.items():
        if n < 1 or arrays[name].shape != shape:
            raise HcError(f"{path}: tensor `{name}` has shape {list(arrays[name].shape)}; expected "
                          f"{list(shape) if n >= 1 else '[n >= 1, ' + str(w) + ']'} for hc_mult {hc}")
    return Golden(path, arrays["mixes"], arrays["hc_scale"], arrays["hc_base"], {k: arrays[k] for k in OUTPUTS},
                  hc, iters, eps, meta)


@dataclass(frozen=True)
class OutputDiff:
    max_abs_diff: float  # over elements NaN on neither side (inf where an infinity meets a finite value)
    differing: int  # elements whose float32 bits differ (NaN on both sides counts as equal)
    beyond_atol: int  # elements more than atol apart, or NaN on exactly one side


@dataclass(frozen=True)
class Comparison(Compared):
    file: str
    impl: str
    device: str
    reason: str
    tokens: int
    hc_mult: int
    sinkhorn_iters: int
    eps: float
    atol: float
    outputs: dict[str, OutputDiff]
    stored_impl: str | None  # what wrote the file, as its metadata says

    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("ok",)

    def parts(self) -> Iterable[Any]:
        return self.outputs.values()


def diff(got: np.ndarray, want: np.ndarray, atol: float) -> OutputDiff:
    c = gaps(got.astype(np.float32), want.astype(np.float32))  # the file holds float32 outputs
    beyond = int((c.gap[c.keep] > atol).sum()) + int(c.lone_nan.sum())
    return OutputDiff(c.max_kept(), c.differing, beyond)


def compare(golden: Golden, impl: str = "auto", device: str | None = None, atol: float = 0.0) -> Comparison:
    """Re-run the golden file's inputs on `impl` and compare each output with the stored one."""
    from hccli.kernels.registry import resolve_impl

    chosen = resolve_impl(impl, device, golden.hc_mult)
    hc = golden.hc_mult
    outs = chosen.run(golden.mixes, golden.scale, golden.base, hc, golden.iters, golden.eps)
    got = [t.float().cpu().numpy() for t in outs]
    diffs = {name: diff(g, golden.outputs[name], atol) for name, g in zip(OUTPUTS, got)}
    return Comparison(str(golden.path), chosen.name, chosen.device, chosen.reason, int(golden.mixes.shape[0]), hc,
                      golden.iters, golden.eps, float(atol), diffs, golden.meta.get("impl"))


"""The split-Sinkhorn op's implementations as one table, and picking one; the site's kernels beside them.

`TABLE` is the one list of the op's implementations: each row's name is the
`--impl` of run-kernel, the row of `hc bench` and the README's name. A row says
where the implementation lives (a module, imported on use: nothing here imports
torch or tilelang), its public call, whether it is a tilelang kernel (a CUDA
GPU and tilelang needed), whether `hc bench` may compare the others with it,
and its older spellings. A tilelang kernel's module also says which stream
counts it has a build for (`SUPPORTED_HC`), refuses the others in its own words
(`check_supported`), and hands `hc bench` its compiled launch (`timing`).

The site's kernels (issue 24's forward around the split) are registered beside them:

    site_pre    tilelang: rms statistic, projection, split (exact's arithmetic), collapse
    site_write  tilelang: the write-back into the streams

`resolve_site(op, ...)` answers with a SiteImpl: the kernel on a CUDA GPU with
tilelang where it has a build for the shape (hc 4, the bundled configs' dims),
else the eager chain (site_eager.py), saying why.

`resolve_impl(name, device, hc_mult)` answers with a KernelImpl that says what it
chose and why in one line, and runs the op. Choosing imports torch (and, for the
kernels, tries tilelang) but compiles nothing: a kernel is built on the first `run`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from hccli.base.errors import HcError
from hccli.base.extras import install_hint
from hccli.base.vocab import DEFAULT_HC_MULT


@dataclass(frozen=True)
class Impl:
    """One implementation of the op: one row of TABLE."""

    name: str
    says: str  # what it is, for --impl's help ("" where the name says it)
    module: str | None = None  # hccli.kernels.<module>, imported on use; None: a choice among the others
    call: str = ""  # the module's public call: (mixes, hc_scale, hc_base, hc_mult, sinkhorn_iters, eps)
    tilelang: bool = False  # a tilelang kernel: a CUDA GPU and tilelang needed; else any device
    reference: str = ""  # hc bench compares the others with the first reference it times, named so
    aliases: tuple[str, ...] = ()  # older spellings, still accepted


TABLE = (
    Impl("auto", "the exact kernel on a CUDA GPU, else torch"),
    Impl("exact", "bit-identical to block, fast", "hccli.kernels.exact", "hc_split_sinkhorn_exact", tilelang=True),
    Impl("fast", "within 1e-6, fastest", "hccli.kernels.fast", "hc_split_sinkhorn_fast", tilelang=True),
    Impl("block", "the published reference kernel's shape", "hccli.kernels.block", "hc_split_sinkhorn_block",
         tilelang=True, reference="the block kernel (the published reference kernel's shape)", aliases=("tilelang",)),
    Impl("torch", "", "hccli.kernels.torch_ref", "hc_split_sinkhorn_torch", reference="the torch reference"),
)
IMPLS = {i.name: i for i in TABLE}
IMPL_NAMES = tuple(IMPLS)  # every --impl of run-kernel, in the table's order
ALIASES = {alias: i.name for i in TABLE for alias in i.aliases}
# what hc bench times, in its order: the references first (the others compare with the first one timed)
TIMED = tuple(i.name for i in sorted((i for i in TABLE if i.module), key=lambda i: not i.reference))
SITE_OPS = ("site_pre", "site_write")  # the site's tilelang kernels, by name


def canonical(name: str) -> str | None:
    """The table's name for `name` (an older spelling maps to its row), or None for an unknown name."""
    name = ALIASES.get(name, name)
    return name if name in IMPLS else None


def _module(name: str) -> Any:
    return importlib.import_module(IMPLS[name].module)


def function(name: str) -> Callable[..., Any]:
    """The public call of an implementation by name (imports its module, not torch or tilelang)."""
    return getattr(_module(name), IMPLS[name].call)


def supported_hc(name: str) -> tuple[int, ...]:
    """The hc_mult a tilelang kernel has a build for (no tilelang import)."""
    return _module(name).SUPPORTED_HC


def kernel_supports(name: str, hc_mult: int) -> bool:
    return hc_mult in supported_hc(name)


def check_kernel_supports(name: str, hc_mult: int) -> None:
    _module(name).check_supported(hc_mult)


def timing(name: str, hc_mult: int, sinkhorn_iters: int, eps: float, max_tokens: int) -> tuple[Callable[..., Any],
                                                                                             Callable[..., None]]:
    """A tilelang kernel's (prepare, launch) for timing up to max_tokens tokens a call: prepare(mixes, scale,
    base, pre, post, comb) -> the compiled kernel's arguments, made once per input set; launch(*args) runs it
    into pre, post and comb with no argument checks."""
    return _module(name).timing(hc_mult, sinkhorn_iters, eps, max_tokens)


@dataclass(frozen=True)
class KernelImpl:
    name: str  # a row of TABLE (never auto: what auto chose)
    device: str  # "cuda:0", "cpu", ...
    reason: str  # one line: how the choice was made

    def run(self, mixes: Any, scale: Any, base: Any, *op: Any) -> tuple[Any, Any, Any]:
        """(pre, post, comb) as torch tensors on self.device; inputs may be numpy or torch. op: hc_mult,
        sinkhorn_iters, eps, passed to the public call as given (its defaults for those left out)."""
        import torch

        from hccli.kernels.torch_ref import as_float_tensor

        mixes_t = as_float_tensor(mixes, "mixes", dtype=torch.float32, device=self.device)
        scale_t = as_float_tensor(scale, "hc_scale", dtype=torch.float32, device=self.device)
        base_t = as_float_tensor(base, "hc_base", dtype=torch.float32, device=self.device)
        return function(self.name)(mixes_t, scale_t, base_t, *op)


def import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise HcError(f"running the kernel needs torch, which is not installed ({exc}): {install_hint('kernel')}") from None
    return torch


def tilelang_problem() -> str | None:
    """None when tilelang imports, else a short description of why it does not."""
    try:
        import tilelang  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a broken install raises more than ImportError
        text = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {text[0] if text else 'no message'}"
    return None


def normalise_device(torch: Any, device: str | None) -> str | None:
    if device is None:
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise HcError(f"device {device!r} is not a device name; expected cpu, cuda or cuda:N") from None
    if dev.type == "cpu":
        return "cpu"
    if dev.type != "cuda":
        raise HcError(f"device {device!r} is not supported; expected cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise HcError(f"device {device!r} asked for, but torch sees no CUDA device")
    index = 0 if dev.index is None else dev.index
    if index >= torch.cuda.device_count():
        raise HcError(f"device {device!r} asked for, but torch sees {torch.cuda.device_count()} CUDA device(s)")
    return f"cuda:{index}"


def resolve_impl(name: str = "auto", device: str | None = None, hc_mult: int | None = None) -> KernelImpl:
    """Choose the implementation; HcError (exit 2) when the asked-for one cannot run here.

    auto: the exact kernel on a CUDA device when tilelang imports; where exact has
    no build for hc_mult, the block kernel, and where that has none either, the
    torch reference (on CUDA if present, else cpu).
    """
    found = canonical(name)
    if found is None:
        raise HcError(f"implementation {name!r} is unknown; expected one of {', '.join(IMPL_NAMES)}")
    name, row = found, IMPLS[found]
    torch = import_torch()
    dev = normalise_device(torch, device)
    has_cuda = torch.cuda.is_available()

    if row.module and not row.tilelang:
        chosen = dev or ("cuda:0" if has_cuda else "cpu")
        how = "as asked" if dev else ("on the first CUDA device" if has_cuda else "on cpu: no CUDA device")
        return KernelImpl(name, chosen, f"{name}: the reference, {how}")

    if row.tilelang:
        what = f"the {name} kernel"
        if dev == "cpu":
            raise HcError(f"{what} runs on CUDA devices only, and device cpu was asked for")
        if not has_cuda:
            raise HcError(f"{what} needs a CUDA GPU, and torch sees none (use the torch reference)")
        problem = tilelang_problem()
        if problem:
            raise HcError(f"{what} needs tilelang, which does not import ({problem}): {install_hint('kernel')}")
        if hc_mult is not None:
            check_kernel_supports(name, hc_mult)
        return KernelImpl(name, dev or "cuda:0", f"{name}: {what} on {dev or 'cuda:0'}, as asked")

    # auto
    if dev == "cpu":
        return KernelImpl("torch", "cpu", "auto: device cpu asked for, using the torch reference on cpu")
    if not has_cuda:
        return KernelImpl("torch", "cpu", "auto: no CUDA device, using the torch reference on cpu")
    chosen = dev or "cuda:0"
    problem = tilelang_problem()
    if problem:
        return KernelImpl("torch", chosen, f"auto: tilelang does not import ({problem}), using the torch reference on {chosen}")
    if hc_mult is not None and not kernel_supports("exact", hc_mult):
        if kernel_supports("block", hc_mult):
            return KernelImpl("block", chosen, f"auto: the exact kernel has no build for hc_mult {hc_mult}, "
                              f"using the block kernel (bit-identical, slower) on {chosen}")
        return KernelImpl(
            "torch", chosen, f"auto: no tilelang kernel has a build for hc_mult {hc_mult}, using the torch reference on {chosen}"
        )
    return KernelImpl("exact", chosen, f"auto: CUDA device and tilelang present, using the exact kernel on {chosen}")


@dataclass(frozen=True)
class SiteImpl:
    op: str  # "site_pre" or "site_write"
    name: str  # the kernel's name (= op) or "eager"
    device: str
    reason: str  # one line: how the choice was made
    why: str = ""  # where the kernel does not run: the cause alone, for callers with another fallback

    def function(self) -> Any:
        """The callable: site_pre.site_pre / site_write.site_write, or the eager chain's."""
        if self.op == "site_pre":
            if self.name == "eager":
                from hccli.kernels.site_eager import site_pre_eager

                return site_pre_eager
            from hccli.kernels.site_pre import site_pre

            return site_pre
        if self.name == "eager":
            from hccli.kernels.site_eager import site_write_eager

            return site_write_eager
        from hccli.kernels.site_write import site_write

        return site_write


def resolve_site(op: str, device: str | None = None, hc_mult: int = DEFAULT_HC_MULT, dim: int | None = None,
                 stream: str = "bfloat16") -> SiteImpl:
    """The site kernel `op` where it can run (CUDA, tilelang, a build for hc_mult/dim/stream), else the
    eager chain on the same device, with the reason in one line; HcError for an unknown op or device."""
    if op not in SITE_OPS:
        raise HcError(f"site op {op!r} is unknown; expected one of {', '.join(SITE_OPS)}")
    torch = import_torch()
    dev = normalise_device(torch, device)
    if dev == "cpu" or not torch.cuda.is_available():
        why = "device cpu asked for" if dev == "cpu" else "no CUDA device"
        return SiteImpl(op, "eager", "cpu", f"{op}: {why}, using the eager chain on cpu", why)
    chosen = dev or "cuda:0"
    problem = tilelang_problem()
    if problem:
        why = f"tilelang does not import ({problem})"
        return SiteImpl(op, "eager", chosen, f"{op}: {why}, using the eager chain on {chosen}", why)
    from hccli.kernels.site_tl import DEFAULT_PROJ, check_site

    try:  # without a dim, only the stream count and dtype are checked
        check_site(hc_mult, DEFAULT_PROJ.block_dim if dim is None else dim, stream)
    except HcError as exc:
        return SiteImpl(op, "eager", chosen, f"{op}: {exc.message}, using the eager chain on {chosen}", exc.message)
    return SiteImpl(op, op, chosen, f"{op}: the tilelang kernel on {chosen}")

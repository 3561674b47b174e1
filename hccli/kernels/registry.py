"""Pick an implementation of the split-Sinkhorn op: the tilelang kernel or the torch reference.

`resolve_impl("auto" | "tilelang" | "torch", device)` answers with a KernelImpl
that says what it chose and why in one line, and runs the op. Choosing imports
torch (and, for tilelang, tries tilelang) but compiles nothing: the kernel is
built on the first `run`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hccli.errors import HcError

IMPL_NAMES = ("auto", "tilelang", "torch")
INSTALL_HINT = "pip install 'hccli[kernel]'"


@dataclass(frozen=True)
class KernelImpl:
    name: str  # "tilelang" or "torch"
    device: str  # "cuda:0", "cpu", ...
    reason: str  # one line: how the choice was made

    def run(
        self,
        mixes: Any,
        scale: Any,
        base: Any,
        hc_mult: int = 4,
        iters: int = 20,
        eps: float = 1e-6,
    ) -> tuple[Any, Any, Any]:
        """(pre, post, comb) as torch tensors on self.device; inputs may be numpy or torch."""
        import torch

        from hccli.kernels.reference import as_float_tensor, hc_split_sinkhorn_torch

        mixes_t = as_float_tensor(mixes, "mixes", dtype=torch.float32, device=self.device)
        scale_t = as_float_tensor(scale, "hc_scale", dtype=torch.float32, device=self.device)
        base_t = as_float_tensor(base, "hc_base", dtype=torch.float32, device=self.device)
        if self.name == "tilelang":
            from hccli.kernels.tilelang_split import hc_split_sinkhorn_tilelang

            return hc_split_sinkhorn_tilelang(mixes_t, scale_t, base_t, hc_mult, iters, eps)
        return hc_split_sinkhorn_torch(mixes_t, scale_t, base_t, hc_mult, iters, eps)


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise HcError(f"running the kernel needs torch, which is not installed ({exc}): {INSTALL_HINT}") from None
    return torch


def tilelang_problem() -> str | None:
    """None when tilelang imports, else a short description of why it does not."""
    try:
        import tilelang  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a broken install raises more than ImportError
        text = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {text[0] if text else 'no message'}"
    return None


def _normalise_device(torch: Any, device: str | None) -> str | None:
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

    auto: the tilelang kernel on a CUDA device when tilelang imports (and supports
    hc_mult, when given), else the torch reference (on CUDA if present, else cpu).
    """
    if name not in IMPL_NAMES:
        raise HcError(f"implementation {name!r} is unknown; expected one of {', '.join(IMPL_NAMES)}")
    torch = _import_torch()
    dev = _normalise_device(torch, device)
    has_cuda = torch.cuda.is_available()

    if name == "torch":
        chosen = dev or ("cuda:0" if has_cuda else "cpu")
        how = "as asked" if dev else ("on the first CUDA device" if has_cuda else "on cpu: no CUDA device")
        return KernelImpl("torch", chosen, f"torch: the reference, {how}")

    if name == "tilelang":
        if dev == "cpu":
            raise HcError("the tilelang kernel runs on CUDA devices only, and device cpu was asked for")
        if not has_cuda:
            raise HcError("the tilelang kernel needs a CUDA GPU, and torch sees none (use the torch reference)")
        problem = tilelang_problem()
        if problem:
            raise HcError(f"the tilelang kernel needs tilelang, which does not import ({problem}): {INSTALL_HINT}")
        if hc_mult is not None:
            from hccli.kernels.tilelang_split import check_supported

            check_supported(hc_mult)
        return KernelImpl("tilelang", dev or "cuda:0", f"tilelang: the kernel on {dev or 'cuda:0'}, as asked")

    # auto
    if dev == "cpu":
        return KernelImpl("torch", "cpu", "auto: device cpu asked for, using the torch reference on cpu")
    if not has_cuda:
        return KernelImpl("torch", "cpu", "auto: no CUDA device, using the torch reference on cpu")
    chosen = dev or "cuda:0"
    problem = tilelang_problem()
    if problem:
        return KernelImpl("torch", chosen, f"auto: tilelang does not import ({problem}), using the torch reference on {chosen}")
    if hc_mult is not None:
        from hccli.kernels.tilelang_split import SUPPORTED_HC

        if hc_mult not in SUPPORTED_HC:
            return KernelImpl(
                "torch", chosen, f"auto: the tilelang kernel has no build for hc_mult {hc_mult}, using the torch reference on {chosen}"
            )
    return KernelImpl("tilelang", chosen, f"auto: CUDA device and tilelang present, using the tilelang kernel on {chosen}")

"""The serving engines' own mHC kernels beside ours: TileKernels, and vLLM's (and SGLang's) loaded by path. No printing.

`hc bench --peers DIR`: DIR/<engine>/ holds verbatim copies of an engine's kernel files
(DIR/README.md names repository, path and commit of each); nothing of them is vendored
here, and none is a dependency. Their files import their package's plumbing (custom-op
registration, DeepGEMM's availability, cdiv, the platform, the tilelang decorator);
`_PLUMBING` supplies those few names, nothing more: their code runs as written. DeepGEMM
is not on the device machine, so `is_deep_gemm_supported()` is False and vLLM's own
non-DeepGEMM path runs (its tilelang prenorm GEMM, one split).

Each engine is one `Peer` of uniform callables, each calling the engine's own wrapper as
its model code does (their argument order, their allocations, nothing added); `op` is a
SiteOp, the (next) site's weights and constants:
- pre(x, op): V4's own-site pre -> (post, comb, collapsed)
- post(f, residual, post, comb): the write-back -> streams
- fused(f, residual, post, comb, op): site k's write-back and site k+1's V4 pre
  -> (streams, post, comb, collapsed)
- pre_delayed(x, op, pre_mix) / fused_delayed(f, residual, post, comb, op, pre_mix): the
  same with V4.1's delayed pre mix, None where the engine's saved files have none.
Each returns the engine's own result; `outputs` names it ({"post", "comb", "collapsed",
"streams"}, [T, ...] views) for the oracle, outside the timed call.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from hccli.base.errors import HcError

TILEKERNELS, VLLM, SGLANG = "tilekernels", "vllm", "sglang"
ENGINES = (TILEKERNELS, VLLM, SGLANG)
POST_MULT = 2.0  # the published models' post multiplier, which every engine takes as an argument
MAX_PEER_FILE = 1 << 20  # bytes: a kernel file larger than this is not what DIR/README.md names

# engine -> (module name their code imports it by, file under DIR/<engine>/), in load order
FILES: dict[str, tuple[tuple[str, str], ...]] = {
    VLLM: (("vllm.model_executor.kernels.mhc.tilelang_kernels", "tilelang_kernels.py"),
           ("vllm.model_executor.kernels.mhc.tilelang", "tilelang.py")),
    SGLANG: (("sglang.srt.layers.mhc", "mhc.py"),),
}


@dataclass(frozen=True)
class SiteOp:
    """A site's pre weights and the op's constants, as every engine's pre takes them."""

    fn: Any  # float32 [24, 4 * dim]
    scale: Any  # float32 [3]
    base: Any  # float32 [24]
    norm_eps: float
    eps: float  # the pre and the Sinkhorn eps alike (the published models')
    iters: int


@dataclass(frozen=True)
class Peer:
    engine: str
    pre: Callable[..., Any] | None
    post: Callable[..., Any] | None
    fused: Callable[..., Any] | None
    pre_delayed: Callable[..., Any] | None = None
    fused_delayed: Callable[..., Any] | None = None
    modules: tuple[Any, ...] = ()  # the loaded modules, for warming and building their kernels


def outputs(kind: str, got: Any) -> dict[str, Any]:
    """An engine's result of `kind` ("pre", "post", "fused", or their "_delayed" twins) by output name."""
    if kind == "post":
        t = got[0] if got.dim() == 4 else got  # TileKernels' [1, T, 4, dim]
        return {"streams": t}
    names = ("post", "comb", "collapsed") if kind.startswith("pre") else ("streams", "post", "comb", "collapsed")
    named = dict(zip(names, got))
    hc = named["comb"].shape[-1]
    named["post"] = named["post"].reshape(-1, hc)
    named["comb"] = named["comb"].reshape(-1, hc, hc)
    named["collapsed"] = named["collapsed"].reshape(-1, named["collapsed"].shape[-1])
    if "streams" in named:
        named["streams"] = named["streams"].reshape(-1, hc, named["streams"].shape[-1])
    return named


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else 'no message'}"


def tilekernels() -> tuple[Peer | None, str | None]:
    """DeepSeek's TileKernels where `tile_kernels` imports (its ops, as its model code calls them)."""
    try:
        from tile_kernels.modeling.mhc.ops import post as tk_post, pre_big_fuse
    except Exception as exc:  # noqa: BLE001 - absent or broken: its rows are skipped and the reason shown
        return None, f"tile_kernels does not import ({_why(exc)})"
    big_fuse, post_fwd = pre_big_fuse.mhc_pre_big_fuse, tk_post.mhc_post_fwd

    def pre(x: Any, op: SiteOp) -> Any:
        return big_fuse(x, op.fn, op.scale, op.base, op.norm_eps, op.eps, op.eps, POST_MULT, op.iters)

    def post(f: Any, res: Any, p: Any, comb: Any, out: Any = None) -> Any:
        return post_fwd(f.unsqueeze(0), res.unsqueeze(0), p.unsqueeze(0).unsqueeze(-1), comb.unsqueeze(0), out)

    return Peer(TILEKERNELS, pre, post, None, modules=(pre_big_fuse, tk_post)), None


def check_dir(peers_dir: str | Path) -> Path:
    """DIR as given to --peers: an existing directory (a plain one, not a link), else one clear line."""
    p = Path(peers_dir)
    if p.is_symlink() or not p.is_dir():
        raise HcError(f"--peers {str(peers_dir)!r}: expected a directory holding <engine>/ folders of kernel "
                      f"files ({', '.join(FILES)}), {'a link' if p.is_symlink() else 'none there'}")
    return p


def _module(name: str, **names: Any) -> types.ModuleType:
    mod = sys.modules.get(name)
    if mod is None:
        mod = sys.modules[name] = types.ModuleType(name)
        mod.__path__ = []  # a package, so that their dotted imports resolve here
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(_module(parent), child, mod)
    for key, value in names.items():
        setattr(mod, key, value)
    return mod


class _Platform:
    """vLLM's `current_platform`, as far as the saved files ask: CUDA, PDL from sm_90 (the sm_90 build without a GPU)."""

    def is_cuda(self) -> bool:
        return True

    def is_rocm(self) -> bool:
        return False

    def is_cuda_alike(self) -> bool:
        return True

    def is_arch_support_pdl(self) -> bool:
        import torch

        return not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] >= 9


def _no_deep_gemm(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError("DeepGEMM is not installed here; is_deep_gemm_supported() said so")


def _vllm_plumbing() -> None:
    import tilelang
    import tilelang.language as T

    # vLLM's tilelang_jit on CUDA: tilelang.jit with its pass configs (vllm/.../dsl/tilelang_utils.py)
    configs = {tilelang.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: True,
               tilelang.PassConfigKey.TL_DISABLE_TMA_LOWER: True,
               tilelang.PassConfigKey.TL_PTXAS_REGISTER_USAGE_LEVEL: 10}
    platform = _Platform()
    _module("vllm.backends.compute.dsl.tilelang_utils", T=T, tilelang=tilelang,
            tilelang_jit=lambda f: tilelang.jit(pass_configs=configs)(f))
    _module("vllm.backends.platform", current_platform=platform)
    _module("vllm.foundation.utilities.math_utils", cdiv=lambda a, b: -(-a // b))
    # the custom-op registration is torch.compile's plumbing; the bench calls their Python wrappers
    _module("vllm.foundation.utilities.torch_utils", direct_register_custom_op=lambda **kw: None)
    _module("vllm.foundation.utilities.deep_gemm", is_deep_gemm_supported=lambda: False,
            tf32_hc_prenorm_gemm=_no_deep_gemm)


def _files(engine: str, folder: Path) -> list[tuple[str, Path]]:
    """(module name, path) of the engine's files, each a plain file of bounded size; HcError (one line) if not."""
    found = []
    for name, file in FILES[engine]:
        path = folder / file
        if path.is_symlink() or not path.is_file():
            raise HcError(f"{path}: not there, or not a plain file (DIR/README.md names the files each engine needs)")
        if path.stat().st_size > MAX_PEER_FILE:
            raise HcError(f"{path}: {path.stat().st_size:,} bytes, more than a kernel file's {MAX_PEER_FILE:,}")
        found.append((name, path))
    return found


def _load(files: list[tuple[str, Path]]) -> tuple[Any, ...]:
    """Their files as the modules their code imports them by, in order."""
    mods = []
    for name, path in files:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        parent, _, child = name.rpartition(".")
        sys.modules[name] = mod
        setattr(_module(parent), child, mod)
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            del sys.modules[name]  # a half-run module is not left for a later import to find
            raise
        mods.append(mod)
    return tuple(mods)


def vllm(folder: Path) -> Peer:
    files = _files(VLLM, folder)
    _vllm_plumbing()
    kernels, ops = _load(files)

    def pre(x: Any, op: SiteOp) -> Any:
        return ops.mhc_pre_tilelang(x, op.fn, op.scale, op.base, op.norm_eps, op.eps, op.eps, POST_MULT, op.iters)

    def post(f: Any, res: Any, p: Any, comb: Any) -> Any:
        return ops.mhc_post_tilelang(f, res, p.unsqueeze(-1), comb)

    def fused(f: Any, res: Any, p: Any, comb: Any, op: SiteOp) -> Any:
        return ops.mhc_fused_post_pre_tilelang(f, res, p.unsqueeze(-1), comb, op.fn, op.scale, op.base, op.norm_eps,
                                               op.eps, op.eps, POST_MULT, op.iters)

    delayed = getattr(ops, "mhc_pre_delayed_tilelang", None)
    fused_delayed = getattr(ops, "mhc_fused_post_pre_delayed_tilelang", None)
    return Peer(VLLM, pre, post, fused,
                None if delayed is None else _vllm_delayed(delayed),
                None if fused_delayed is None else _vllm_fused_delayed(fused_delayed), (kernels, ops))


def _vllm_delayed(fn_: Callable[..., Any]) -> Callable[..., Any]:
    def pre_delayed(x: Any, op: SiteOp, pre_mix: Any) -> Any:
        return fn_(x, op.fn, op.scale, op.base, op.norm_eps, op.eps, op.eps, POST_MULT, op.iters, pre_mix)[:3]
    return pre_delayed


def _vllm_fused_delayed(fn_: Callable[..., Any]) -> Callable[..., Any]:
    def fused_delayed(f: Any, res: Any, p: Any, comb: Any, op: SiteOp, pre_mix: Any) -> Any:
        return fn_(f, res, p.unsqueeze(-1), comb, op.fn, op.scale, op.base, op.norm_eps, op.eps, op.eps, POST_MULT,
                   op.iters, pre_mix)[:4]
    return fused_delayed


_LOADERS: dict[str, Callable[[Path], Peer]] = {VLLM: vllm}
_LOADED: dict[tuple[str, Path], Peer] = {}  # their modules run once a process: their kernels' JIT caches live there


def load(peers_dir: str | Path | None, engines: tuple[str, ...] = ENGINES) -> tuple[dict[str, Peer], dict[str, str]]:
    """({engine: Peer} of those that load, {engine: why not} of the rest); peers_dir None: only TileKernels."""
    got: dict[str, Peer] = {}
    skipped: dict[str, str] = {}
    if TILEKERNELS in engines:
        peer, why = tilekernels()
        if peer is not None:
            got[TILEKERNELS] = peer
        else:
            skipped[TILEKERNELS] = why or ""
    wanted = [e for e in engines if e != TILEKERNELS]
    if peers_dir is None:
        skipped.update({e: "no --peers DIR given (the engines' kernel files are loaded from there)" for e in wanted})
        return got, skipped
    root = check_dir(peers_dir)
    for engine in wanted:
        folder = root / engine
        if folder.is_symlink() or not (folder / FILES[engine][-1][1]).is_file():
            skipped[engine] = f"no kernel files under {folder}"
        elif engine not in _LOADERS:
            skipped[engine] = f"no loader for {engine}'s files yet (see {root / 'README.md'})"
        else:
            try:
                key = (engine, folder.resolve())
                got[engine] = _LOADED.get(key) or _LOADED.setdefault(key, _LOADERS[engine](folder))
            except HcError as exc:
                skipped[engine] = exc.message
            except Exception as exc:  # noqa: BLE001 - their code failing to load: skipped, and why
                skipped[engine] = f"{engine}'s files do not load ({_why(exc)})"
    return got, skipped


def kernel_keys(peer: Peer, dim: int, norm_eps: float, eps: float, iters: int) -> list[tuple[Any, dict[str, Any]]]:
    """(their tilelang JIT kernel, its compile-time arguments) for each kernel the bench's calls at this
    shape launch: what a warm-up compiles and the sm_90 build check builds."""
    if peer.engine != VLLM:
        return []
    k = peer.modules[0]
    op = dict(hidden_size=dim, rms_eps=norm_eps, hc_pre_eps=eps, hc_sinkhorn_eps=eps, hc_post_mult_value=POST_MULT,
              sinkhorn_repeat=iters, hc_mult=4)
    gemm = dict(hidden_size=dim, hc_mult=4, n_out=24)
    keys = [(k.mhc_pre_big_fuse_tilelang, {**op, "n_splits": 1}), (k.mhc_post_tilelang, dict(hc=4, hidden=dim)),
            (k.hc_prenorm_gemm_tilelang, {**gemm, "n_thr": 1024, "tile_n": 4, "n_splits": 1}),  # < 128 tokens
            (k.hc_prenorm_gemm_tilelang, {**gemm, "n_thr": 512, "tile_n": 12, "n_splits": 1}),  # 128 .. 1023
            (k.hc_prenorm_gemm_block_m_tilelang, {**gemm, "n_thr": 512, "tile_n": 12, "block_m": 2})]
    # the fused FMA kernel of <= 16 tokens, in its tilings (mhc_fused_post_pre_tilelang's choice)
    for tile_n, splits in ((2, 8 if dim <= 4096 else 4), (3, 4)):
        keys.append((k.mhc_fused_tilelang, dict(hc=4, hidden=dim, n_out=24, tile_n=tile_n, n_splits=splits)))
    for splits in (4, 8):
        keys.append((k.mhc_pre_big_fuse_tilelang, {**op, "n_splits": splits}))
    return keys


def build_sm90(peer: Peer, dim: int, norm_eps: float, eps: float, iters: int) -> list[tuple[str, int]]:
    """Lower and compile each of kernel_keys' kernels for sm_90 without a GPU: [(name, the cubin's SM)]."""
    from hccli.kernels import tl_build

    built = []
    for jit, kw in kernel_keys(peer, dim, norm_eps, eps, iters):
        b = tl_build.build(jit.get_tir(**kw), jit.pass_configs, 4, iters, eps)
        built.append((jit.func.__name__ if hasattr(jit.func, "__name__") else str(jit.func), b.sm_arch))
    return built

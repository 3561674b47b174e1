"""Every tilelang kernel lowers and compiles to an sm_90 cubin, on a machine without a GPU.

CI has no GPU but installs tilelang and a CUDA toolkit, so this is where a kernel
that no longer builds is caught. Skipped only where tilelang cannot be imported
and CI is not set; under CI a missing tilelang is a failure.
"""

from __future__ import annotations

import os

import pytest

from hccli.base.errors import HcError


def _tilelang_or_skip():
    try:
        import tilelang
    except Exception as exc:  # noqa: BLE001 - a broken install raises more than ImportError
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but tilelang does not import: {type(exc).__name__}: {exc}")
        pytest.skip(f"tilelang does not import here ({type(exc).__name__}); CI runs this")
    return tilelang


@pytest.fixture(scope="module")
def tilelang():
    return _tilelang_or_skip()


# (hc_mult, sinkhorn_iters, eps): the models' own, the other hc the kernel supports, edge counts
CASES = [(4, 20, 1e-6), (2, 20, 1e-6), (8, 20, 1e-6), (16, 20, 1e-6), (1, 20, 1e-6), (4, 1, 1e-6), (4, 7, 1e-4)]


@pytest.mark.parametrize("hc,iters,eps", CASES)
def test_kernel_compiles_to_an_sm90_cubin(tilelang, hc, iters, eps):
    from hccli.kernels.block import THREADS, build_kernel
    from hccli.kernels.tl_build import cubin_sm_arch

    built = build_kernel(hc, iters, eps)

    assert '"arch":"sm_90"' in built.target.replace(" ", "")
    src = built.source
    assert "__global__" in src and f"__launch_bounds__({THREADS}" in src
    # the precise expf, not the fast-math __expf, and IEEE divisions
    assert "expf(" in src and "__expf" not in src and "__fdividef" not in src
    if iters > 1:
        assert f"< {iters - 1};" in src  # the serial Sinkhorn loop, with its count
    else:
        assert "for (" not in src

    cubin = built.cubin
    assert len(cubin) > 1000 and cubin[:4] == b"\x7fELF"
    assert cubin_sm_arch(cubin) == 90 == built.sm_arch
    assert b".text.hc_split_sinkhorn" in cubin  # the kernel itself, not an empty module


def test_unsupported_hc_is_a_one_line_error(tilelang):
    from hccli.kernels.block import build_kernel

    with pytest.raises(HcError) as info:
        build_kernel(3, 20, 1e-6)
    assert "hc_mult" in info.value.message and "\n" not in info.value.message


def test_cubin_arch_reader():
    from hccli.kernels.tl_build import cubin_sm_arch

    header = bytearray(64)
    header[:5] = b"\x7fELF\x02"
    header[7] = 0x41  # CUDA ELF ABI v2: SM in bits 8-15
    header[48:52] = (0x5A00 | 0x04).to_bytes(4, "little")
    assert cubin_sm_arch(bytes(header)) == 90
    header[7] = 0x33  # the older ABI: SM in bits 0-7
    header[48:52] = (0x00500050).to_bytes(4, "little")
    assert cubin_sm_arch(bytes(header)) == 80
    assert cubin_sm_arch(b"not an elf") == 0


def test_kernel_modules_import_neither_torch_nor_tilelang():
    import subprocess
    import sys

    import pkgutil

    import hccli.kernels

    kernel_modules = tuple(f"hccli.kernels.{m.name}" for m in pkgutil.iter_modules(hccli.kernels.__path__))
    assert {"hccli.kernels.block", "hccli.kernels.exact", "hccli.kernels.fast"} <= set(kernel_modules)
    modules = ("hccli.kernels", *kernel_modules, "hccli.cli.commands.bench", "hccli.cli.render.bench", "hccli.cli.commands.run_kernel")
    code = f"import sys, {', '.join(modules)}; " \
           "print(sorted(m for m in ('torch', 'tilelang', 'tvm') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- the token-per-thread kernels: exact and fast -----------------------------------------

EXACT_CASES = [(4, 20, 1e-6), (2, 20, 1e-6), (8, 20, 1e-6), (1, 20, 1e-6), (4, 1, 1e-6), (4, 7, 1e-4), (4, 20, 0.0)]
FAST_CASES = [(4, 20, 1e-6), (3, 20, 1e-6), (8, 20, 1e-6), (1, 20, 1e-6), (4, 1, 1e-6), (4, 7, 1e-4)]


def _check_cubin(built, iters):
    from hccli.kernels.tl_build import cubin_sm_arch

    assert '"arch":"sm_90"' in built.target.replace(" ", "")
    assert "__global__" in built.source
    if iters > 1:
        assert f"< {iters - 1};" in built.source  # the Sinkhorn loop, with its count
    assert len(built.cubin) > 1000 and cubin_sm_arch(built.cubin) == 90
    assert b".text.hc_split_sinkhorn_tokens" in built.cubin


@pytest.mark.parametrize("hc,iters,eps", EXACT_CASES)
def test_exact_kernel_compiles_to_an_sm90_cubin(tilelang, hc, iters, eps):
    from hccli.kernels.token_kernels import DEFAULT_TILING, build_kernel, shared_reciprocal_is_exact

    built = build_kernel("exact", hc, iters, eps)
    _check_cubin(built, iters)
    src = built.source
    assert f"__launch_bounds__({DEFAULT_TILING.block}" in src
    # the published kernel's arithmetic: precise expf, fused affine step, IEEE division where no shared
    # reciprocal is proved safe, and no fast-math exp
    assert "expf(" in src and "__expf" not in src and "__fdividef" not in src and "__fmaf_rn(" in src
    assert " / " in src  # sigmoid and the softmax fallback
    # the shared reciprocal: the softmax rows always (behind a range check), the Sinkhorn
    # loop only where shared_reciprocal_is_exact holds
    assert "tl::fast_rcp(rs" in src
    shared = shared_reciprocal_is_exact(hc, iters, eps)
    assert ("tl::fast_rcp(d" in src) == shared and (" / d" in src) == (not shared)


@pytest.mark.parametrize("hc,iters,eps", FAST_CASES)
def test_fast_kernel_compiles_to_an_sm90_cubin(tilelang, hc, iters, eps):
    from hccli.kernels.token_kernels import build_kernel

    built = build_kernel("fast", hc, iters, eps)
    _check_cubin(built, iters)
    assert "__expf(" in built.source and "tl::fast_rcp(" in built.source and " / " not in built.source


def test_exact_kernel_moves_16_byte_vectors(tilelang):
    from hccli.kernels.token_kernels import build_kernel

    src = build_kernel("exact", 4, 20, 1e-6).source
    # mixes in as float4 (global -> shared -> registers), pre/post/comb out as float4
    assert src.count("*(float4*)(mixes") == 1 and src.count("*(float4*)(comb") == 1
    assert src.count("*(float4*)(pre") == 1 and src.count("*(float4*)(post") == 1
    assert "__syncthreads()" in src


def test_shared_reciprocal_bound():
    from hccli.kernels.token_kernels import shared_reciprocal_is_exact

    assert shared_reciprocal_is_exact(4, 20, 1e-6)  # the models': bound 2^-97.9 >= 2^-100
    assert shared_reciprocal_is_exact(2, 20, 1e-6) and shared_reciprocal_is_exact(8, 7, 1e-4)
    assert not shared_reciprocal_is_exact(8, 20, 1e-6)  # 8^-39 * 1e-6 underflows the bound
    assert not shared_reciprocal_is_exact(4, 20, 0.0)  # eps 0: entries can reach 0
    assert not shared_reciprocal_is_exact(4, 20, 2.0)
    assert not shared_reciprocal_is_exact(4, 40, 1e-6)


def test_unsupported_hc_for_the_new_kernels_is_a_one_line_error(tilelang):
    from hccli.kernels.token_kernels import build_kernel

    for variant, hc in (("exact", 3), ("exact", 16), ("fast", 9)):
        with pytest.raises(HcError) as info:
            build_kernel(variant, hc, 20, 1e-6)
        assert "hc_mult" in info.value.message and variant in info.value.message and "\n" not in info.value.message


# ---- the site kernels: projection, finish, collapse, write-back -----------------------------

def _bundled_dims():
    from conftest import ALL_CONFIGS

    from hccli.model.config.model import load_config

    return sorted({load_config(p).dim for p in ALL_CONFIGS})


# every dim of the bundled configs, both stream dtypes, both collapses, every split count and both
# tilings (site_tl.DEFAULT_PROJ, and WIDE_PROJ's 128-token blocks) between them
SITE_PROJ_CASES = [(5120, "bfloat16", True, 8, "default"), (5120, "bfloat16", False, 1, "default"),
                   (4096, "bfloat16", True, 16, "default"), (7168, "bfloat16", False, 16, "default"),
                   (64, "bfloat16", True, 1, "default"), (4096, "float32", True, 8, "default"),
                   (64, "float32", False, 1, "default"), (5120, "bfloat16", True, 1, "wide"),
                   (7168, "bfloat16", False, 1, "wide")]
SITE_STREAM_DIMS = [(64, "bfloat16"), (4096, "bfloat16"), (5120, "bfloat16"), (7168, "bfloat16"), (5120, "float32"),
                    (64, "float32")]


def test_site_cases_cover_every_bundled_dim():
    dims = _bundled_dims()
    assert {c[0] for c in SITE_PROJ_CASES} == set(dims) == {d for d, _ in SITE_STREAM_DIMS}
    from hccli.kernels.site_tl import SPLITS, splits_for

    assert {c[3] for c in SITE_PROJ_CASES} == set(SPLITS)
    for dim in dims:
        for stream in ("bfloat16", "float32"):
            assert splits_for(dim, stream)[0] == 1  # every dim has a build


def _site_cubin(built, name):
    from hccli.kernels.tl_build import cubin_sm_arch

    assert '"arch":"sm_90"' in built.target.replace(" ", "")
    assert len(built.cubin) > 1000 and cubin_sm_arch(built.cubin) == 90 == built.sm_arch
    assert f".text.{name}".encode() in built.cubin
    return built.source


@pytest.mark.parametrize("dim,stream,collapse,splits,tiling", SITE_PROJ_CASES)
def test_site_projection_compiles_to_an_sm90_cubin(tilelang, dim, stream, collapse, splits, tiling):
    from hccli.kernels.site_proj import build_kernel
    from hccli.kernels.site_tl import DEFAULT_PROJ, WIDE_PROJ

    op = (20, 1e-6, 1e-20) if splits == 1 else None
    t = WIDE_PROJ if tiling == "wide" else DEFAULT_PROJ
    src = _site_cubin(build_kernel("proj", dim, stream, collapse, splits, t, op), "site_pre_proj")
    # one warp group per 64 tokens of the block
    assert f"__launch_bounds__({t.threads}, 1)" in src and t.threads == 2 * t.block_tokens
    # the tensor cores (one m64n80k16 wgmma per 16 features of the step), fed by TMA into the tiling's
    # rings of x and fn tiles, one mbarrier a tile; bfloat16: the wgmma waited for after the element work
    wgmma = "wgmma_ss<tl::DataType::kBFloat16, tl::DataType::kBFloat16, tl::DataType::kFloat32, 64, 80, 16"
    assert wgmma in src and "tl::tma_load(x_desc" in src and "tl::tma_load(fnp_desc" in src
    assert f"uint64_t xbar_mem[{t.x_stages}];" in src and f"uint64_t fbar_mem[{t.fn_stages}];" in src
    assert ("tl::wait_wgmma<0>();" in src) == (stream == "bfloat16") and "cp_async" not in src
    # float32 streams: three bfloat16 parts, three products per step
    assert src.count(wgmma) >= (3 if stream == "float32" else 1)
    # the collapse with the pre mix from shared memory: every product and sum rounded on its own, as the
    # eager chain's (the in-kernel finish rounds on its own too, so the pre mix's products are what tell)
    assert ("__fmul_rn(((float*)pm)" in src and "__fadd_rn(" in src) == collapse
    # one split: the block finishes its tokens (rms factor, exact's split) instead of writing a workspace
    assert ("rsqrtf(" in src and "expf(" in src) == (splits == 1)


@pytest.mark.parametrize("dim,iters,eps,norm_eps,splits", [(5120, 20, 1e-6, 1e-20, 16), (4096, 1, 1e-4, 1e-6, 8)])
def test_site_finish_compiles_with_exacts_arithmetic(tilelang, dim, iters, eps, norm_eps, splits):
    from hccli.kernels.site_proj import build_kernel
    from hccli.kernels.token_kernels import shared_reciprocal_is_exact

    src = _site_cubin(build_kernel("finish", 4, dim, iters, eps, norm_eps, splits), "site_pre_finish")
    assert "rsqrtf(" in src and "expf(" in src and "__expf" not in src and "__fmaf_rn(" in src
    assert "tl::fast_rcp(rs" in src and ("tl::fast_rcp(d" in src) == shared_reciprocal_is_exact(4, iters, eps)


@pytest.mark.parametrize("dim,stream", SITE_STREAM_DIMS)
def test_site_write_and_collapse_compile(tilelang, dim, stream):
    from hccli.kernels.site_proj import build_kernel

    for kind, name in (("write", "site_write"), ("collapse", "site_collapse")):
        src = _site_cubin(build_kernel(kind, dim, stream), name)
        # every product and sum rounded on its own; asynchronous copies, 16 bytes a thread at the models' dims
        assert "__fmul_rn(" in src and "__fadd_rn(" in src and "cp_async_gs<" in src
        assert ("cp_async_gs<16>" in src) == (dim >= 1024)


def test_site_kernels_refuse_other_shapes_in_one_line(tilelang):
    from hccli.kernels.site_proj import build_kernel

    for args in (("write", 100, "bfloat16"), ("proj", 5120, "float16", True, 1), ("proj", 5120, "bfloat16", True, 3),
                 ("proj", 5120, "bfloat16", True, 1)):  # one split needs the op's parameters to finish
        with pytest.raises(HcError) as info:
            build_kernel(*args)
        assert "\n" not in info.value.message
    with pytest.raises(HcError, match="hc_mult 4 only"):
        build_kernel("finish", 8, 64, 20, 1e-6, 1e-6, 8)

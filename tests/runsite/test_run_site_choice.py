"""`hc run-site`'s choice of implementation, without a GPU: the fused site kernels (site_pre, site_write)
where --impl auto meets a CUDA device with a build for the shape, else the torch path with a note
saying why. A GPU is faked (torch.cuda reports one, tilelang imports) and nothing is launched:
choosing compiles nothing. tests/test_run_site_gpu.py runs the same choices on a real GPU."""

from __future__ import annotations

import pytest
from conftest import SAMPLES

torch = pytest.importorskip("torch")

from hccli.base.errors import HcError  # noqa: E402
from hccli.kernels import registry  # noqa: E402
from hccli.runsite.run import compute_for, default_impl  # noqa: E402


@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(registry, "tilelang_problem", lambda: None)
    return monkeypatch


@pytest.mark.parametrize("impl,device", [("auto", "cuda"), (None, "cuda"), (None, "cuda:0"), ("auto", None)])
@pytest.mark.parametrize("dim,streams", [(64, "bf16"), (5120, "bf16"), (7168, "bf16"), (4096, "f32")])
def test_auto_on_a_gpu_takes_the_site_kernels(fake_gpu, impl, device, dim, streams):
    c = compute_for(impl, device, 4, dim, streams)
    assert (c.path, c.note) == ("site-kernels", None)
    assert c.how.startswith("site kernels on cuda:0: site_pre and site_write") and "exact kernel" in c.how


@pytest.mark.parametrize("hc,dim,streams,why", [
    (2, 64, "bf16", "are built for hc_mult 4 only, got 2"), (8, 64, "bf16", "are built for hc_mult 4 only, got 8"),
    (4, 100, "bf16", "need dim to be a multiple of 64 for bfloat16 streams, got 100"),
    (4, 40, "f32", "need dim to be a multiple of 16 for float32 streams, got 40")])
def test_other_shapes_fall_back_to_the_torch_path_saying_so(fake_gpu, hc, dim, streams, why):
    c = compute_for("auto", "cuda", hc, dim, streams)
    assert c.path == "torch" and c.how.startswith("exact on cuda:0")
    assert c.note == f"the site kernels (site_pre, site_write) did not run on cuda:0: the site kernels {why}; " \
                     "the torch path ran"


def test_what_the_site_kernels_do_not_give_falls_back_saying_so(fake_gpu):
    c = compute_for("auto", "cuda", 4, 64, "bf16", "--save writes every step")
    assert c.path == "torch" and c.note.endswith(": --save writes every step; the torch path ran")
    fake_gpu.setattr(registry, "tilelang_problem", lambda: "ImportError: no tilelang")
    c = compute_for(None, "cuda", 4, 64, "bf16")
    assert c.path == "torch" and "tilelang does not import (ImportError: no tilelang)" in c.note


@pytest.mark.parametrize("impl", ["exact", "block", "fast", "torch"])
def test_a_split_kernel_asked_for_keeps_the_torch_path(fake_gpu, impl):
    c = compute_for(impl, "cuda", 4, 64, "bf16")
    assert (c.path, c.note) == ("torch", None) and c.how.startswith(f"{impl} on cuda:0")


def test_without_a_gpu_nothing_is_passed_over():
    assert default_impl(None, None) == default_impl(None, "cpu") == "numpy" and default_impl("torch", None) == "torch"
    c = compute_for(None, None, 4, 64, "bf16")
    assert (c.path, c.note) == ("numpy", None)
    for device in ("cpu", None):
        c = compute_for("auto", device, 4, 64, "bf16")
        assert (c.path, c.note) == ("torch", None) and "on cpu" in c.how
    with pytest.raises(HcError, match="numpy forward runs on the CPU; give --impl auto"):
        compute_for("numpy", "cuda", 4, 64, "bf16")


def test_the_report_says_what_ran_and_why(hc, monkeypatch):
    from hccli.kernels import site_fused
    from hccli.kernels.site_torch import torch_forward

    r = hc("run-site", str(SAMPLES / "tiny-v4.1.json"), "--tokens", "2", "--impl", "auto", "--json")
    assert r.exit_code == 0 and (r.json()["path"], r.json()["notes"]) == ("torch", []), r.stderr
    assert hc("run-site", str(SAMPLES / "tiny-v4.1.json"), "--json").json()["path"] == "numpy"

    def passed_over(impl, device, hc_mult, dim, streams_dtype, unsupported=None):
        compute, how = torch_forward("torch", "cpu", hc_mult)
        seen.append((impl, dim, streams_dtype, unsupported))
        return site_fused.SitePath("torch", compute, how, "the site kernels did not run: a reason")
    seen = []
    monkeypatch.setattr(site_fused, "choose", passed_over)
    r = hc("run-site", str(SAMPLES / "tiny-v4.1.json"), "--tokens", "2", "--impl", "auto", "--precision", "bf16",
           "--json")
    doc = r.json()
    assert r.exit_code == 0 and doc["path"] == "torch" and doc["notes"] == ["the site kernels did not run: a reason"]
    assert seen[0][:3] == ("auto", 64, "bf16") and seen[0][3].startswith("--precision bf16 rounds")
    r = hc("run-site", str(SAMPLES / "tiny-v4.1.json"), "--tokens", "2", "--impl", "auto")
    assert r.exit_code == 0 and "note: the site kernels did not run: a reason" in r.stdout
    assert "ran: torch on cpu" in r.stdout and seen[-1][3] is None

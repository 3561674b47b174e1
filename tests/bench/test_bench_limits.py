"""hc bench's bounds: token counts, streams, iterations, samples and warm-up calls a run may ask
for, refused in one line before anything is built; a long run shows its progress sample by sample."""

import pytest

torch = pytest.importorskip("torch")

from hccli.base.errors import HcError  # noqa: E402
from hccli.bench import op as bench  # noqa: E402
from hccli.base.limits import (MAX_BENCH_POINTS, MAX_BENCH_REPS, MAX_BENCH_WARMUP,  # noqa: E402
                                  MAX_CPU_BENCH_BYTES, MAX_CPU_BENCH_WORK)


@pytest.fixture
def nothing_built(monkeypatch):
    """A run that gets as far as building anything fails the test (exit 70, not 2)."""
    def built(*a, **kw):
        raise AssertionError("hc bench built its inputs before refusing them")

    monkeypatch.setattr(bench, "copy_bandwidth", built)
    monkeypatch.setattr(bench, "_impl_launchers", built)


@pytest.mark.parametrize("args,needle", [
    # the allocator's error, exit 70, before
    (["--tokens", "1099511627776"], f"--tokens 1099511627776: at hc 4 one token count would hold about "
                                    f"1,899,956,361,232,384 bytes at once; on the CPU hc bench builds at most "
                                    f"{MAX_CPU_BENCH_BYTES:,}"),
    # 3.5 GB allocated, then the end, before
    (["--hc-mult", "64", "--iters", "1000", "--tokens", "65536"], "--tokens 65536: at hc 64 one token count"),
    (["--hc-mult", "64", "--iters", "1000", "--tokens", "100"], f"hc bench runs at most {MAX_CPU_BENCH_WORK:,}, "
                                                                 "here at most 95 tokens in all"),
    # until killed, before
    (["--reps", "1000000000"], f"--reps 1000000000: expected at least 1 and at most {MAX_BENCH_REPS:,}"),
    (["--warmup", "1000000000"], f"--warmup 1000000000: expected at least 0 and at most {MAX_BENCH_WARMUP}"),
    (["--tokens", "1048576", "--reps", str(MAX_BENCH_REPS)], "--tokens 1048576: 1,007 calls a token count "
                                                            "(--reps 1000, --warmup 3) at hc 4 and 20 iterations"),
    (["--reps", str(MAX_BENCH_REPS)], "the default --tokens 1, 64, 4096, 65536: 1,007 calls"),
    (["--tokens", "1"] * (MAX_BENCH_POINTS + 1), f"--tokens given {MAX_BENCH_POINTS + 1} times: expected at most "
                                                 f"{MAX_BENCH_POINTS} token counts a run"),
])
def test_too_much_is_one_line_before_anything_is_built(hc, nothing_built, args, needle):
    r = hc("bench", "--device", "cpu", *args)
    assert (r.exit_code, r.stdout) == (2, ""), r.stderr
    assert r.stderr.startswith("hc: error: ") and r.stderr.count("\n") == 1
    assert needle in r.stderr


@pytest.mark.parametrize("cuda", [False, True])
@pytest.mark.parametrize("hc_mult", [4, 64])
def test_the_most_tokens_the_bytes_bound_names_pass_and_one_more_does_not(cuda, hc_mult):
    with pytest.raises(HcError) as err:
        bench.check_size((1 << 40,), hc_mult, 1, 1, 0, 1, cuda)
    most = int(err.value.message.rsplit("at most ", 1)[1].split()[0].replace(",", ""))
    bench.check_size((most,), hc_mult, 1, 1, 0, 1, cuda)  # reps 1, one iteration: only the bytes can refuse
    with pytest.raises(HcError, match=f"--tokens {most + 1}: "):
        bench.check_size((most + 1,), hc_mult, 1, 1, 0, 1, cuda)


def test_the_most_tokens_the_work_bound_names_pass_and_one_more_does_not():
    with pytest.raises(HcError) as err:
        bench.check_size((4096, 1 << 20), 4, 20, 500, 3, 1, False)
    most = int(err.value.message.rsplit("at most ", 1)[1].split()[0].replace(",", ""))
    bench.check_size((4096, most - 4096), 4, 20, 500, 3, 1, False)
    with pytest.raises(HcError, match="here at most"):
        bench.check_size((4096, most - 4095), 4, 20, 500, 3, 1, False)


def test_the_defaults_pass_on_either_device():
    # the largest default runs: every implementation on a GPU up to 16M tokens, torch on the CPU
    bench.check_size(bench.GPU_TOKENS, 4, 20, 15, 3, 4, True)
    bench.check_size(bench.CPU_TOKENS, 4, 20, 15, 3, 1, False)
    bench.check_size((1 << 20,), 4, 20, 15, 3, 1, False)  # a million tokens on the CPU, with progress


def test_the_core_refuses_what_the_options_refuse():
    for reps, warmup in ((MAX_BENCH_REPS + 1, 3), (15, MAX_BENCH_WARMUP + 1), (0, 3), (15, -1)):
        with pytest.raises(HcError, match=f"reps {reps} / warmup {warmup}: expected reps 1 to"):
            bench.run_bench((1,), ("torch",), device="cpu", reps=reps, warmup=warmup)


def test_progress_is_told_each_sample():
    seen = []
    bench.run_bench((8, 16), ("torch",), device="cpu", sinkhorn_iters=2, reps=3, warmup=0,
                    progress=lambda done, total, what: seen.append((done, total, what)))
    samples = [what for _, _, what in seen if "sample" in what]
    assert samples == [f"torch n={n} sample {k}/3" for n in (8, 16) for k in (1, 2, 3)]
    assert seen[-1] == (2, 2, "done")


def test_any_seed_runs(hc):
    # torch's generators take 64 bits; a larger seed was an internal error
    r = hc("bench", "--device", "cpu", "--tokens", "1", "--reps", "1", "--warmup", "0", "--iters", "1",
           "--seed", str(1 << 70), "--json")
    assert r.exit_code == 0, r.stderr

"""The split op's implementations as one table (kernels/registry.py): what each name is, and that
run-kernel, hc bench, bench --host and the options all answer from it. No GPU, no tilelang needed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from hccli.base.errors import HcError
from hccli.kernels import registry

NAMES = ("auto", "exact", "fast", "block", "torch")  # the table's rows, in its order
KERNELS = ("exact", "fast", "block")  # the tilelang ones
HCCLI = Path(__file__).resolve().parents[2] / "hccli"


def test_the_table_is_the_one_list_of_names():
    assert tuple(i.name for i in registry.TABLE) == registry.IMPL_NAMES == NAMES
    assert registry.TIMED == ("block", "torch", "exact", "fast")  # references first, as bench's rows
    assert registry.ALIASES == {"tilelang": "block"}
    assert tuple(n for n in NAMES if registry.IMPLS[n].tilelang) == KERNELS
    assert [n for n in registry.TIMED if registry.IMPLS[n].reference] == ["block", "torch"]
    assert registry.IMPLS["auto"].module is None
    assert {registry.canonical(n) for n in (*NAMES, "tilelang")} == set(NAMES)
    assert registry.canonical("triton") is None and registry.canonical("") is None


def test_every_row_names_a_module_with_its_call_and_a_kernel_its_builds():
    for name in registry.TIMED:
        fn = registry.function(name)
        assert callable(fn) and fn.__name__ == f"hc_split_sinkhorn_{name}"
    assert registry.supported_hc("block") == (1, 2, 4, 8, 16)
    assert registry.supported_hc("exact") == (1, 2, 4, 8)
    assert registry.supported_hc("fast") == tuple(range(1, 9))
    for name in KERNELS:
        assert registry.kernel_supports(name, 4) and not registry.kernel_supports(name, 32)
        registry.check_kernel_supports(name, 4)


@pytest.mark.parametrize("name,hc,words", [
    ("block", 3, "the block kernel supports hc_mult in 1, 2, 4, 8, 16 (its reduces need a power of two), got 3"),
    ("exact", 16, "the exact kernel supports hc_mult in 1, 2, 4, 8 (bit-identity"),
    ("fast", 9, "the fast kernel supports hc_mult in 1, 2, 3, 4, 5, 6, 7, 8 (the hc x hc matrix"),
])
def test_a_kernel_refuses_a_stream_count_in_its_own_words(name, hc, words):
    with pytest.raises(HcError) as info:
        registry.check_kernel_supports(name, hc)
    assert info.value.message.startswith(words) and "\n" not in info.value.message


def test_the_table_imports_no_kernel_module_nor_torch():
    import subprocess
    import sys

    code = ("import sys, hccli.kernels.registry as r, hccli.cli.kernel_options, hccli.cli.commands.bench; "
            "print(sorted(m for m in sys.modules if m in ('torch', 'tilelang', 'tvm', 'numpy') "
            "or m in {i.module for i in r.TABLE} or m.startswith('hccli.kernels.token')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=HCCLI.parent)
    assert out.stdout.strip() == "[]"


def _string_lists(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            words = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            if len(words & set(NAMES)) >= 2:
                yield node.lineno, sorted(words)
        if isinstance(node, ast.Dict):
            words = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            if len(words & set(NAMES)) >= 2:
                yield node.lineno, sorted(words)


def test_no_other_module_lists_the_names():
    # token_kernels: the template's two variants and their settings, not a list of what runs
    others = {"kernels/registry.py", "kernels/token_kernels.py"}
    found = []
    for path in sorted(HCCLI.rglob("*.py")):
        rel = path.relative_to(HCCLI).as_posix()
        if rel not in others:
            found += [f"{rel}:{line} {words}" for line, words in _string_lists(ast.parse(path.read_text()))]
    assert found == []


def test_no_module_dispatches_on_a_name_but_the_registry():
    pattern = re.compile(r"""(==|!=)\s*["'](exact|fast|block|torch)["']|["'](exact|fast|block|torch)["']\s*(==|!=)""")
    found = []
    for path in sorted((HCCLI / "kernels").glob("*.py")) + sorted((HCCLI / "cli").glob("*.py")):
        rel = path.relative_to(HCCLI).as_posix()
        if rel in ("kernels/registry.py", "kernels/token_kernels.py"):  # the template's two variants
            continue
        found += [f"{rel}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []


# ---- every name through the commands, on a machine without a GPU ------------------------

torch = pytest.importorskip("torch")
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="tests the behaviour without a GPU")


@no_gpu
@pytest.mark.parametrize("name,ran,line", [
    ("auto", "torch", None),
    ("torch", "torch", None),
    ("exact", None, "the exact kernel needs a CUDA GPU, and torch sees none (use the torch reference)"),
    ("fast", None, "the fast kernel needs a CUDA GPU, and torch sees none (use the torch reference)"),
    ("block", None, "the block kernel needs a CUDA GPU, and torch sees none (use the torch reference)"),
    ("tilelang", None, "the block kernel needs a CUDA GPU, and torch sees none (use the torch reference)"),
    ("triton", None, "--impl 'triton' is unknown; expected one of auto, exact, fast, block, torch"),
])
def test_run_kernel_runs_or_refuses_each_name(hc, name, ran, line):
    r = hc("run-kernel", "--impl", name, "--json")
    if ran is None:
        assert (r.exit_code, r.stdout, r.stderr) == (2, "", f"hc: error: {line}\n")
    else:
        assert r.exit_code == 0, r.stderr
        assert r.json()["impl"] == ran and r.json()["device"] == "cpu"


@no_gpu
def test_bench_rows_and_skips_follow_the_table(hc):
    r = hc("bench", "--device", "cpu", "--tokens", "8", "--tokens", "2", "--reps", "1", "--warmup", "0",
           "--iters", "2", "--host", "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert [(x["impl"], x["tokens"]) for x in doc["rows"]] == [("torch", 8), ("torch", 2)]
    assert list(doc["skipped"]) == ["block", "exact", "fast"]
    assert set(doc["skipped"].values()) == {"needs a CUDA GPU"}
    assert doc["reference"] == "the torch reference"
    assert [x["impl"] for x in doc["host"]] == ["torch"] * 3


@pytest.mark.parametrize("args,line", [
    (["--impl", "fastest"], "--impl 'fastest' is unknown to hc bench; expected some of block, torch, exact, fast"),
    (["--impl", "auto"], "--impl 'auto' is unknown to hc bench; expected some of block, torch, exact, fast"),
    (["--impl", "tilelang"], "the block kernel runs on CUDA devices only, and device cpu was asked for"),
])
def test_bench_options_answer_from_the_table(hc, args, line):
    r = hc("bench", "--device", "cpu", *args)
    assert (r.exit_code, r.stdout, r.stderr) == (2, "", f"hc: error: {line}\n")


def test_help_lists_the_table(hc):
    def flat(text: str) -> str:
        return " ".join(text.replace("│", " ").split())

    run_help = flat(hc("run-kernel", "--help").stdout)
    assert ("auto (the exact kernel on a CUDA GPU, else torch), exact (bit-identical to block, fast), fast "
            "(within 1e-6, fastest), block (the published reference kernel's shape) or torch.") in run_help
    assert "block, torch, exact or fast (repeat; default all that can run here)" in flat(hc("bench", "--help").stdout)


# ---- the kernels' checked call (tl_build.launch_checked), its control flow on the CPU ----------

@pytest.mark.parametrize("name", KERNELS)
def test_the_checked_call_launches_on_the_tensors_device_and_returns_the_outputs(monkeypatch, name):
    import contextlib

    from hccli.kernels import block, tl_build, token_launch

    entered = []

    @contextlib.contextmanager
    def device(d):
        entered.append(str(d))
        yield

    def check_launch(what, mixes, scale, base, hc, iters, eps, out, *, flat_comb, align):
        n = mixes.shape[0]
        outputs = (torch.full((n, hc), float("nan")), torch.full((n, hc), float("nan")),
                   torch.full((n, hc, hc), float("nan")))
        dest = (outputs[0], outputs[1], outputs[2].view(n, hc * hc) if flat_comb else outputs[2])
        return tl_build.LaunchArgs(mixes, scale, base, outputs, dest, n)

    def kernel(flat, scale, base, pre, post, comb):
        for i, t in enumerate((pre, post, comb)):
            t.fill_(i + 1.0)

    monkeypatch.setattr(tl_build, "check_launch", check_launch)
    monkeypatch.setattr(torch.cuda, "device", device)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(block, "compiled", lambda *a: kernel)
    monkeypatch.setattr(token_launch, "compiled", lambda *a: kernel)
    monkeypatch.setattr(token_launch, "_READY", {})
    pre, post, comb = registry.function(name)(torch.zeros(3, 24), torch.ones(3), torch.zeros(24), 4, 20, 1e-6)
    assert entered == ["cpu"]  # the tensors' device made current for the launch
    assert (pre == 1).all() and (post == 2).all() and (comb == 3).all() and comb.shape == (3, 4, 4)
    assert list(token_launch._READY) == ([] if name == "block" else [(name, 4, 20, 1e-6, None)])
    entered.clear()
    empty = registry.function(name)(torch.zeros(0, 24), torch.ones(3), torch.zeros(24), 4, 20, 1e-6)
    assert entered == [] and [tuple(t.shape) for t in empty] == [(0, 4), (0, 4), (0, 4, 4)]

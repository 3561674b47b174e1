"""No function of hccli/ takes more than MAX_PARAMS values (an ast scan): past that, a caller can no
longer see which value is which, and a frozen request dataclass (InspectRequest, DiffRequest,
BenchRequest, SiteBenchRequest) names them once, where the command builds it."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "hccli"
MAX_PARAMS = 9

# Functions that keep a flat list, each for a reason of its own:
ALLOWED = {
    # the published kernel's argument list (mixes, scale, base, hc, iters, eps, ...), mirrored so that a
    # port calls the reference, the kernels and their checks the way it calls the kernel
    "hccli/ops/split_np.py:split_sinkhorn",
    "hccli/kernels/site_eager.py:site_pre_eager",
    "hccli/kernels/site_pre.py:_checked",
    "hccli/kernels/tl_build.py:check_launch",
    "hccli/kernels/tl_build.py:launch_checked",
}
# A typer command's parameters are its option declarations; a tilelang body's are its buffers.
ALLOWED_DECORATORS = ("app.command", "T.macro", "T.prim_func")


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
    if names and names[0].arg in ("self", "cls"):
        names = names[1:]
    return len(names)


def _allowed_by_decorator(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    decorators = [d.func if isinstance(d, ast.Call) else d for d in fn.decorator_list]
    return any(ast.unparse(d).startswith(ALLOWED_DECORATORS) for d in decorators)


def too_long(trees) -> list[str]:
    out = []
    for rel, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _params(node) > MAX_PARAMS \
                    and f"{rel}:{node.name}" not in ALLOWED and not _allowed_by_decorator(node):
                out.append(f"{rel}:{node.lineno} {node.name} takes {_params(node)}")
    return out


def _trees():
    for p in sorted(PKG.rglob("*.py")):
        yield p.relative_to(PKG.parent).as_posix(), ast.parse(p.read_text())


def test_no_function_takes_more_than_nine_values():
    assert too_long(_trees()) == []


def test_every_allowed_function_is_still_there_and_still_long():
    # an entry that no longer needs its place leaves the list
    found = {f"{rel}:{n.name}": _params(n) for rel, tree in _trees() for n in ast.walk(tree)
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    assert {name: found.get(name, 0) for name in ALLOWED if found.get(name, 0) <= MAX_PARAMS} == {}


def test_the_scan_sees_what_it_looks_for():
    ten = ", ".join(f"a{i}" for i in range(10))
    nine = ", ".join(f"a{i}" for i in range(9))
    trees = [(rel, ast.parse(text)) for rel, text in {
        "a": f"def f({ten}): ...\n",
        "b": f"class C:\n    def __init__(self, {nine}): ...\n    def g(self, *, {ten}): ...\n",
        "c": f"@app.command('x')\ndef cmd({ten}): ...\n@T.prim_func\ndef k({ten}): ...\n",
        "d": "def h(a, *args, b, c, d, e, f, g, h, i, **kw): ...\n",
    }.items()]
    assert too_long(trees) == ["a:1 f takes 10", "b:3 g takes 10", "d:1 h takes 11"]

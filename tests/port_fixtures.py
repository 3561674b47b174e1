"""Shared helpers for the ports built from real libraries (tests/port/lib_*.py): goldens that
`hc run-site` writes for the tiny V4 and V4.1 checkpoints, a port file written with safetensors'
own serializer, and the one way a test edits a mistake into a library's function: a copy of the
function's own source with one line changed, compiled in the library module's globals.

Editing the library's source, not re-writing its arithmetic, keeps the port the library's: every
other line still runs as shipped. Each edit asserts that the line it changes is there, so a new
library version that moved it fails the test instead of passing without the mistake.
"""

from __future__ import annotations

import functools
import inspect
import textwrap
from pathlib import Path

import numpy as np
from conftest import SAMPLES
from safetensors.numpy import save_file
from site_fixtures import make_golden

from hccli.checkpoint.synth import make_checkpoint


@functools.lru_cache(maxsize=None)
def _checkpoint(config: str, root: str) -> Path:
    out = Path(root) / config.split(".json")[0]
    if not out.exists():
        make_checkpoint(SAMPLES / config, out, seed=1)
    return out


def library_golden(root: Path, config: str, tokens: int, layers: str, seed: int, *args: str) -> Path:
    """hc run-site's golden for the tiny checkpoint of `config` (written once per root)."""
    ckpt = _checkpoint(config, str(root))
    out = Path(root) / f"{ckpt.name}-{tokens}-{layers}-{seed}{''.join(args)}.safetensors"
    if not out.exists():
        make_golden(ckpt, out, "--tokens", str(tokens), "--layers", layers, "--seed", str(seed), *args)
    return out


def save_port(tensors: dict[str, np.ndarray], out: Path) -> Path:
    save_file({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()}, str(out))
    return out


def as_port(tensors: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """Flat port names -> {site key: {name: values}}, as read_port returns them."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for name, a in tensors.items():
        key, _, step = name.rpartition(".")
        out.setdefault(key, {})[step] = np.asarray(a, dtype=np.float32)
    return out


def edited(func, *edits: tuple[str, str]):
    """A copy of `func` (a function or a method) with each (old, new) text replaced in its source
    (every occurrence: the same slip made wherever the line recurs), compiled in the globals of
    the module that defines it."""
    src = textwrap.dedent(inspect.getsource(func))
    for old, new in edits:
        assert old in src, f"{func.__qualname__}: {old!r} is not in its source"
        src = src.replace(old, new)
    glb = dict(func.__globals__)
    exec(compile(src, inspect.getsourcefile(func), "exec"), glb)
    return glb[func.__name__]


"""Shared test helpers: the CLI through Typer's CliRunner, and the sample configs."""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_configs"
PUBLISHED = sorted(p for p in SAMPLES.glob("deepseek-*.json"))
ALL_CONFIGS = sorted(SAMPLES.glob("*.json"))

# The width rule takes COLUMNS when it is set, piped or not: a shell or CI that exports it would
# wrap every CLI test's output. Tests see the piped default unless they set it themselves.
os.environ.pop("COLUMNS", None)


class Result:
    def __init__(self, r):
        self.exit_code = r.exit_code
        self.stdout = r.stdout
        self.stderr = r.stderr
        self.exception = r.exception

    def json(self):
        return json.loads(self.stdout)


def write_sparse_shard(path: Path, entries, pokes=()) -> Path:
    """A shard of (name, dtype, shape) whose data are holes except the (name, offset, bytes)
    poked in: a header may claim gigabytes at the cost of a few KB of disk."""
    from hccli.checkpoint.safetensors.header_types import DTYPES
    from hccli.checkpoint.synth import header_bytes

    sized = [(n, d, tuple(s), math.prod(s) * DTYPES[d] // 8) for n, d, s in entries]
    head = header_bytes(sized, {"format": "pt"})
    starts, at = {}, len(head)
    for n, _, _, nbytes in sized:
        starts[n], at = at, at + nbytes
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(at)
        for name, offset, data in pokes:
            f.seek(starts[name] + offset)
            f.write(data)
    return path


# The child reports its own peak RSS at exit: VmHWM belongs to the memory map that exec made,
# while ru_maxrss carries over what the parent (pytest, torch loaded, say) held when it forked.
_MEASURED = ("import atexit, sys\n"
             "def peak():\n"
             "    with open('/proc/self/status') as f:\n"
             "        kib = next(int(line.split()[1]) for line in f if line.startswith('VmHWM:'))\n"
             "    sys.stderr.write('\\nHC_PEAK_KIB %d\\n' % kib)\n"
             "atexit.register(peak)\n"
             "sys.argv[0] = 'hc'\n"
             "from hccli.cli.app import main\n"
             "main()\n")


def every_command() -> list[list[str]]:
    """Every subcommand path of hc (["inspect"], ["cache", "list"], ...), walked from the app."""
    import typer

    from hccli.cli.app import register

    out = []

    def walk(group, path):
        for name, cmd in sorted(getattr(group, "commands", {}).items()):
            out.append([*path, name])
            walk(cmd, [*path, name])

    walk(typer.main.get_command(register()), [])
    return out


def run_hc_process(*args, env: dict | None = None, timeout: float = 120):
    """`hc ARGS` in a child process: (completed process with the measurement taken out of
    its stderr, seconds, the child's peak RSS in MiB)."""
    root = str(ROOT)
    full_env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {})}
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _MEASURED, *map(str, args)], cwd=root, env=full_env,
                          capture_output=True, text=True, timeout=timeout)
    seconds = time.perf_counter() - t
    err, _, peak = proc.stderr.rpartition("\nHC_PEAK_KIB ")
    proc.stderr = err.rstrip("\n") + ("\n" if err.strip() else "")
    return proc, seconds, int(peak) / 1024


def run_hc(*args: str) -> Result:
    from hccli.cli.app import register

    return Result(CliRunner().invoke(register(), [str(a) for a in args]))


@pytest.fixture
def hc():
    return run_hc


@pytest.fixture(scope="session")
def phantoms(tmp_path_factory):
    """phantoms(release) -> (outdir, make-checkpoint's JSON): the full-scale phantom of
    sample_configs/RELEASE.json, built once for the whole run. Read it, never write into it:
    a test that damages one works on `ckpt_tools.copy` of it (the holes stay holes)."""
    built: dict[str, tuple[Path, dict]] = {}

    def get(release: str) -> tuple[Path, dict]:
        if release not in built:
            out = tmp_path_factory.mktemp("phantom") / release
            r = run_hc("make-checkpoint", SAMPLES / f"{release}.json", out, "--phantom", "--json")
            assert r.exit_code == 0, r.stderr
            built[release] = out, r.json()
        return built[release]

    return get


# --- plots: matplotlib, or the test is skipped; and a spy on what a plot_X function drew ---

@pytest.fixture(scope="session")
def mpl():
    return pytest.importorskip("matplotlib")


@pytest.fixture
def spy(monkeypatch):
    """Calls through to a plot_X function and keeps what it drew, so that a test can
    compare it with the JSON the same command printed."""
    drawn = []

    def install(module: str, name: str):
        import importlib

        mod = importlib.import_module(module)
        real = getattr(mod, name)

        def recording(data, path, **kw):
            drawn.append(real(data, path, **kw))
            return drawn[-1]

        monkeypatch.setattr(mod, name, recording)
        return drawn

    return install


@contextlib.contextmanager
def alarm_watchdog(seconds: int):
    """Fail a test that blocks (a FIFO opened, a loop unbounded) or runs past `seconds`."""
    import signal

    def fail(*_):
        raise TimeoutError(f"blocked or ran for more than {seconds} s")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)

"""`hc inspect` on a phantom V4.1-Flash (48 shards, 510 GB apparent, sparse)
against, in the same run:
  - bare: read each shard's 8-byte length and header, json.loads it;
  - safe_open: list keys and shapes with safetensors.safe_open (it maps each file);
  - hc inspect: the whole command as a user runs it (`--json`, fresh interpreter),
    and its parsing core in-process.
Prints medians, the ratios to the bare parse, and the command's peak memory.

    python benchmarks/bench_inspect.py [--runs 5] [--path PHANTOM_DIR] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def bare(path: Path) -> int:
    n = 0
    for f in sorted(path.glob("*.safetensors")):
        with open(f, "rb") as fh:
            size = int.from_bytes(fh.read(8), "little")
            n += len(json.loads(fh.read(size)))
    return n


def with_safe_open(path: Path) -> tuple[int, int]:
    from safetensors import safe_open

    n, failed = 0, 0
    for f in sorted(path.glob("*.safetensors")):
        try:
            with safe_open(str(f), framework="numpy") as g:
                for k in g.keys():
                    g.get_slice(k).get_shape()
                    n += 1
        except Exception:  # noqa: BLE001 - mapping a 100 GB sparse file can fail; count it
            failed += 1
    return n, failed


def core(path: Path) -> int:
    from hccli.inspect_report import build_inspect

    return build_inspect(path).stored_bytes


def cli(path: Path) -> tuple[float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "hccli", "inspect", str(path), "--json"], check=True,
                         capture_output=True)
    dt = time.perf_counter() - t
    json.loads(out.stdout)
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return dt, max(peak_kb, before)


def timed(fn, *a):
    t = time.perf_counter()
    r = fn(*a)
    return time.perf_counter() - t, r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--path", type=Path)
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()
    tmp = None
    path = args.path
    if path is None:
        from hccli.synth import make_checkpoint

        tmp = tempfile.TemporaryDirectory()
        path = Path(tmp.name) / "v41"
        make_checkpoint(None, path, phantom=True)
    rows: dict[str, list[float]] = {"bare read + json.loads": [], "safetensors.safe_open keys+shapes": [],
                                    "hc inspect core (in-process)": [], "hc inspect --json (command)": []}
    peak = 0
    failed = 0
    for _ in range(args.runs):
        rows["bare read + json.loads"].append(timed(bare, path)[0])
        dt, (_, failed) = timed(with_safe_open, path)
        rows["safetensors.safe_open keys+shapes"].append(dt)
        rows["hc inspect core (in-process)"].append(timed(core, path)[0])
        dt, peak = cli(path)
        rows["hc inspect --json (command)"].append(dt)
    base = statistics.median(rows["bare read + json.loads"])
    print(f"phantom {path}: {len(list(path.glob('*.safetensors')))} shards; python {platform.python_version()}, "
          f"{os.cpu_count()} cpus")
    print(f"{'reader':38} {'median ms':>10} {'vs bare':>8}")
    result = []
    for name, ts in rows.items():
        med = statistics.median(ts)
        result.append({"reader": name, "median_s": med, "ratio_to_bare": med / base})
        print(f"{name:38} {med * 1e3:10.1f} {med / base:8.2f}")
    print(f"safe_open could not open {failed} of the shards (it maps whole files)" if failed else "")
    print(f"hc inspect --json peak memory (max RSS of the command): {peak / 1024:.0f} MB")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"runs": args.runs, "rows": result, "peak_rss_mb": peak / 1024,
                                                   "safe_open_failed_shards": failed}, indent=2))
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()

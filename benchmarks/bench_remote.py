"""`hc inspect hf://...` against the test suite's hub stand-in on 127.0.0.1 serving a
phantom V4.1-Flash: range requests, bytes transferred, time cold, time with
latency added to every answer, and a second (cached) run. Loopback only.

    python benchmarks/bench_remote.py [--latency 0.1] [--path PHANTOM_DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from conftest import run_hc  # noqa: E402
from hub_server import Hub  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=0.1)
    ap.add_argument("--path", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.path
        if path is None:
            from hccli.checkpoint.synth import make_checkpoint

            path = Path(tmp) / "v41"
            make_checkpoint(None, path, phantom=True)
        with Hub({"org/v41": path}) as hub:
            os.environ["HF_ENDPOINT"] = hub.endpoint

            def run(label: str, latency: float, cache: str) -> None:
                hub.faults.latency = latency
                os.environ["HC_CACHE_DIR"] = str(Path(tmp) / cache)
                before = hub.stats.requests
                t = time.perf_counter()
                r = run_hc("inspect", "hf://org/v41", "--json")
                dt = time.perf_counter() - t
                assert r.exit_code == 0, r.stderr
                d = r.json()
                print(f"{label:34} {dt:6.2f} s  {hub.stats.requests - before:4d} range requests  "
                      f"{d['transferred_bytes']:>12,} bytes ({d['transferred_bytes'] / d['stored_bytes']:.5%} of "
                      f"{d['stored_bytes']:,})  {d['remote']['cached_files']} files from the cache")

            run("cold", 0.0, "a")
            run(f"cold, {args.latency} s latency per answer", args.latency, "b")
            run("second run (cache)", 0.0, "b")


if __name__ == "__main__":
    main()

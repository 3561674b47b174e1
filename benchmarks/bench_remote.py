"""`hc inspect hf://...` against the test suite's hub stand-in on 127.0.0.1 serving a
phantom V4.1-Flash: range requests, bytes transferred, time cold, time with
latency added to every answer, and a second (cached) run. Loopback only.

Each run is `hc` in a fresh interpreter, as a user runs it (start-up included). The stand-in is
tests/hub_server.py, which needs nothing but the standard library; nothing here needs pytest.
--quick serves a tiny checkpoint with values (sample_configs/tiny-v4.1.json) and 0.01 s of
latency: seconds, for CI to see that the script still runs; its figures mean nothing.

    python benchmarks/bench_remote.py [--latency 0.1] [--path PHANTOM_DIR] [--json OUT.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from hub_server import Hub  # noqa: E402  tests/hub_server.py: the standard library only

# the child must reach only the stand-in, with no token of the user's and not offline
_DROPPED = ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_DISABLE_IMPLICIT_TOKEN")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=None, help="seconds added to every answer (default 0.1)")
    ap.add_argument("--path", type=Path)
    ap.add_argument("--json", dest="json_out", type=Path)
    ap.add_argument("--quick", action="store_true", help="a tiny checkpoint and 0.01 s latency (CI)")
    args = ap.parse_args()
    latency = args.latency if args.latency is not None else (0.01 if args.quick else 0.1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = args.path
        if path is None:
            from hccli.checkpoint.synth import make_checkpoint

            path = Path(tmp) / "v41"
            if args.quick:
                make_checkpoint(ROOT / "sample_configs" / "tiny-v4.1.json", path)
            else:
                make_checkpoint(None, path, phantom=True)
        with Hub({"org/v41": path}) as hub:
            base_env = {k: v for k, v in os.environ.items() if k not in _DROPPED}
            base_env["HF_ENDPOINT"] = hub.endpoint
            base_env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"

            def run(label: str, latency: float, cache: str) -> None:
                hub.faults.latency = latency
                env = {**base_env, "HC_CACHE_DIR": str(Path(tmp) / cache)}
                before, ranges_before = hub.stats.requests, hub.stats.range_requests
                t = time.perf_counter()
                proc = subprocess.run([sys.executable, "-m", "hccli", "inspect", "hf://org/v41", "--json"],
                                      env=env, capture_output=True, text=True, timeout=600)
                dt = time.perf_counter() - t
                if proc.returncode != 0:
                    raise SystemExit(f"{label}: hc inspect exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
                d = json.loads(proc.stdout)
                requests, ranges = hub.stats.requests - before, hub.stats.range_requests - ranges_before
                rows.append({"run": label, "latency_s": latency, "seconds": dt, "requests": requests,
                             "range_requests": ranges,
                             "transferred_bytes": d["transferred_bytes"], "stored_bytes": d["stored_bytes"],
                             "cached_files": d["remote"]["cached_files"]})
                print(f"{label:34} {dt:6.2f} s  {requests:4d} requests ({ranges} ranges)  "
                      f"{d['transferred_bytes']:>12,} bytes ({d['transferred_bytes'] / d['stored_bytes']:.5%} of "
                      f"{d['stored_bytes']:,})  {d['remote']['cached_files']} files from the cache")

            run("cold", 0.0, "a")
            run(f"cold, {latency} s latency per answer", latency, "b")
            run("second run (cache)", 0.0, "b")
    if args.json_out:
        args.json_out.write_text(json.dumps({"quick": args.quick, "latency_s": latency, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()

"""Start-up time of `hc count-params` against a bare `import typer, rich.console`.

Both are timed in the same run, alternating, as fresh interpreters, after the
package is byte-compiled as an installed one is; prints the medians and the
ratio (goal: within 1.5x). Usage:

    python benchmarks/startup.py [--runs 15] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BASELINE = [sys.executable, "-c", "import typer, rich.console"]
CASES = {
    "count-params (default)": [sys.executable, "-m", "hccli", "count-params"],
    "count-params --json": [sys.executable, "-m", "hccli", "count-params", "--json"],
    "count-params seed selection": [sys.executable, "-m", "hccli", "count-params", "-g", "2-7", "-r", "reuse",
                                    "-s", "attn", "-c", "comb"],
}


def wall(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def compile_package() -> None:
    # pip byte-compiles a regular install; an editable one (or PYTHONDONTWRITEBYTECODE=1)
    # would otherwise make every run recompile hccli from source, which is not what users see.
    import hccli

    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(hccli.__file__).parent)], check=True,
                   env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()
    compile_package()
    for cmd in [BASELINE, *CASES.values()]:  # warm the file cache
        wall(cmd)
    times: dict[str, list[float]] = {"import typer, rich.console": []}
    times.update({k: [] for k in CASES})
    for _ in range(args.runs):
        times["import typer, rich.console"].append(wall(BASELINE))
        for name, cmd in CASES.items():
            times[name].append(wall(cmd))
    base = statistics.median(times["import typer, rich.console"])
    rows = []
    print(f"{'command':32} {'median ms':>10} {'ratio':>7}")
    for name, ts in times.items():
        med = statistics.median(ts)
        rows.append({"command": name, "median_s": med, "ratio": med / base, "runs": len(ts)})
        print(f"{name:32} {med * 1e3:10.1f} {med / base:7.2f}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"python": sys.version.split()[0], "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()

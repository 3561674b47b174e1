"""The model figure of a full-scale V4.1-Flash (43 layers x 2 sites = 86 comb heatmaps),
drawn by the command itself: `hc inspect PHANTOM --plot docs/hc-v41-flash.png`.

Makes a phantom checkpoint (`hc make-checkpoint ... --phantom`, sparse, ~18 MB on
disk) and runs, each in a fresh interpreter as a user runs it, `hc inspect PHANTOM
--json` and `hc inspect PHANTOM --json --plot FILE`, alternately, --runs times.
Prints the median seconds of each and what the plot adds (matplotlib's import
included, which every --plot run pays), checks that every run wrote the same bytes,
and keeps the last figure as docs/hc-v41-flash.png.

    python benchmarks/plot_phantom.py [--runs 3] [--out docs/hc-v41-flash.png] [--quick]

--quick: one run, no warm-up, and the figure kept only where --out says (never over the committed
one): for CI to see that the script still runs; its figures mean nothing, and one run has no other
figure to compare with (--runs 2 gives it one).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "sample_configs" / "deepseek-v4.1-flash.json"
NAME = "deepseek-v4.1-flash-phantom"  # relative, so that the figure's title does not name a temp dir


def hc(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "hccli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, check=True)
    return proc, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=None, help="default 3 (1 with --quick)")
    ap.add_argument("--out", type=Path, help="default docs/hc-v41-flash.png (a temporary file with --quick)")
    ap.add_argument("--quick", action="store_true", help="one run, no warm-up, the figure not kept (CI)")
    args = ap.parse_args()
    runs = args.runs or (1 if args.quick else 3)

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        out = (args.out or (work / "figure.png" if args.quick else ROOT / "docs" / "hc-v41-flash.png")).resolve()
        hc("make-checkpoint", str(CONFIG), NAME, "--phantom", cwd=work)
        if not args.quick:
            hc("inspect", NAME, "--json", cwd=work)  # a first run warms the page cache and font cache
        plain_s, plot_s, figures, note = [], [], [], ""
        for i in range(runs):
            _, s = hc("inspect", NAME, "--json", cwd=work)
            plain_s.append(s)
            target = out if i == runs - 1 else work / f"run{i}.png"
            proc, s = hc("inspect", NAME, "--json", "--plot", str(target), cwd=work)
            plot_s.append(s)
            figures.append(target.read_bytes())
            note = proc.stderr.strip()
    med = statistics.median
    same = all(f == figures[0] for f in figures)
    print(f"{platform.node()} ({os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}), {runs} runs, medians:")
    print(f"  hc inspect {NAME} --plot {out}")
    print(f"  {note}; " + (f"every run wrote the same bytes: {same}" if runs > 1 else "one run: no figure to compare with"))
    print(f"  hc inspect --json            {med(plain_s):6.2f} s")
    print(f"  hc inspect --json --plot     {med(plot_s):6.2f} s")
    print(f"  the plot adds                {med(plot_s) - med(plain_s):6.2f} s  "
          f"(with plot / without = {med(plot_s) / med(plain_s):.2f}x)")
    if not same:
        sys.exit("the figure's bytes differ between runs: the plot is not deterministic")


if __name__ == "__main__":
    main()

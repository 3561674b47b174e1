"""The model figure of a full-scale V4.1-Flash: 43 layers x 2 sites = 86 comb heatmaps.

Makes a phantom checkpoint (`hc make-checkpoint ... --phantom`, sparse, ~18 MB on
disk), reads its HC values as `hc inspect --json` reports them (a fresh
interpreter, as a user runs it), and renders the figure that `hc inspect --plot`
draws from them; writes docs/hc-v41-flash.png. Prints the median seconds of
matplotlib's import, of drawing and of saving, and the whole figure's time beside
the `hc inspect --json` run it would be added to (measured in the same run).

    python benchmarks/plot_phantom.py [--runs 3] [--out docs/hc-v41-flash.png]
"""

from __future__ import annotations

import argparse
import json
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


def hc(*args: str, cwd: Path) -> tuple[str, float]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "hccli", *args], cwd=cwd, env=env, capture_output=True,
                         text=True, check=True).stdout
    return out, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "hc-v41-flash.png")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from hccli.config import load_config
    from hccli.layers import plan_layers

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        hc("make-checkpoint", str(CONFIG), NAME, "--phantom", cwd=work)
        inspect_s = []
        for _ in range(args.runs):
            text, s = hc("inspect", NAME, "--json", cwd=work)
            inspect_s.append(s)
        doc = json.loads(text)
        plan = plan_layers(load_config(work / NAME / "config.json"))

        t = time.perf_counter()
        import matplotlib.backends.backend_agg  # noqa: F401  (what a first plot pays once)
        import matplotlib.figure  # noqa: F401
        import_s = time.perf_counter() - t

        from hccli.plot import plot_style, save_figure
        from hccli.plot.model import ModelFigureData, draw_model, groups_from_plan, sites_from_json

        # the phantom is written in the release layout: its tensors carry DeepSeek's own names
        data = ModelFigureData(doc["path"], "release", None, sites_from_json(doc["hc"]), groups_from_plan(plan))
        draw_s, save_s = [], []
        for i in range(args.runs + 1):
            with plot_style():
                t = time.perf_counter()
                drawn = draw_model(data)
                t2 = time.perf_counter()
                save_figure(drawn.figure, args.out if i == args.runs else work / "x.png")
                t3 = time.perf_counter()
            if i:  # the first round warms fonts and caches
                draw_s.append(t2 - t)
                save_s.append(t3 - t2)
    n = sum(1 for k in drawn.arrays if k.startswith("comb/"))
    w, h = drawn.figure.get_size_inches()
    med = statistics.median
    total = med(draw_s) + med(save_s)
    print(f"{platform.node()} ({os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}), {args.runs} runs, medians:")
    print(f"  {n} comb heatmaps, {len(doc['hc'])} sites, figure {w:g} x {h:g} in -> {args.out}")
    print(f"  matplotlib import (once)   {import_s:6.2f} s")
    print(f"  draw                       {med(draw_s):6.2f} s")
    print(f"  save PNG                   {med(save_s):6.2f} s")
    print(f"  figure (draw + save)       {total:6.2f} s")
    print(f"  hc inspect --json          {med(inspect_s):6.2f} s  (figure / inspect = {total / med(inspect_s):.2f}x)")


if __name__ == "__main__":
    main()

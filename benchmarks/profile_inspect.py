"""Where the time of `hc inspect` goes, step by step, in process (the breakdown
benchmarks/NOTES.md gives). Each command runs in a fresh interpreter, as a user runs it, with
timers wrapped around the steps; medians over the runs. Steps nest (open_checkpoint holds the
index and the headers; verify holds the inventory and its checks), so columns do not add up.

    python benchmarks/profile_inspect.py [--runs 5] [--path PHANTOM_DIR] [--json OUT.json] [--quick]

Without --path a full-scale phantom V4.1-Flash is made in a temporary directory first. --quick is
one run of each command (CI: the steps are still there and still called; the figures mean nothing).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from phantom import phantom_checkpoint  # benchmarks/phantom.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {"--json": ["--json"], "--verify --json": ["--verify", "--json"], "rich": []}

# (module, attribute, label): functions timed in the child
STEPS = [
    ("hccli.inspecting.report", "open_checkpoint", "open (all of it)"),
    ("hccli.checkpoint.opening", "parse_index", "  the index"),
    ("hccli.checkpoint.opening", "_read_headers", "  48 headers"),
    ("hccli.checkpoint.opening", "names_unique", "  name uniqueness"),
    ("hccli.checkpoint.opening", "detect", "  dialect"),
    ("hccli.checkpoint.opening", "find_sites", "  HC sites"),
    ("hccli.inspecting.report", "totals_from_columns", "totals"),
    ("hccli.inspecting.report", "read_hc_entries", "HC values and the op"),
    ("hccli.checkpoint.verify.checks", "verify", "verify (all of it)"),
    ("hccli.checkpoint.verify.agree", "index_agrees", "  the index against the headers"),
    ("hccli.checkpoint.verify.facts", "_sites", "  HC sites and the NaN/Inf scan"),
    ("hccli.model.inventory", "build_inventory", "  the config's inventory"),
    ("hccli.checkpoint.verify.agree", "positions", "  inventory comparison"),
    ("hccli.checkpoint.verify.placement", "placement_findings", "  placement check"),
    ("hccli.cli.output", "emit_json", "JSON text"),
    ("hccli.cli.output", "show", "rich rendering"),
]

CHILD = """
import importlib, json, sys, time
t0 = time.perf_counter()
steps, spent, calls = json.loads(sys.argv[1]), {}, {}
import hccli.cli.app as app
for mod, attr, label in steps:
    owner = importlib.import_module(mod)
    *path, name = attr.split(".")
    for part in path:
        owner = getattr(owner, part)
    def timed(*a, __f=getattr(owner, name), __label=label, **k):
        t = time.perf_counter()
        try:
            return __f(*a, **k)
        finally:
            spent[__label] = spent.get(__label, 0.0) + time.perf_counter() - t
            calls[__label] = calls.get(__label, 0) + 1
    setattr(owner, name, timed)
spent["start-up (typer, ours, the timed modules)"] = time.perf_counter() - t0
sys.argv = ["hc", "inspect", *sys.argv[2:]]
app._end = lambda *a, **k: None  # report after the run instead of leaving at once
try:
    app.main()
except SystemExit:
    pass
spent["whole run (start-up included)"] = time.perf_counter() - t0
spent.update({label + " n": n for label, n in calls.items()})
sys.stderr.write("\\nPROFILE " + json.dumps(spent) + "\\n")
"""


def child(args: list[str]) -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(STEPS), *args], cwd=ROOT,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600)
    line = next((ln for ln in proc.stderr.splitlines() if ln.startswith("PROFILE ")), None)
    if line is None:
        raise SystemExit(f"hc inspect {' '.join(args)} gave no profile: {proc.stderr[-500:]}")
    return json.loads(line[len("PROFILE "):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=None, help="default 5 (1 with --quick)")
    ap.add_argument("--path", type=Path)
    ap.add_argument("--json", dest="json_out", type=Path, help="medians in seconds, per step and command")
    ap.add_argument("--quick", action="store_true", help="one run of each command (CI)")
    args = ap.parse_args()
    args.runs = args.runs or (1 if args.quick else 5)
    path, tmp = phantom_checkpoint(args.path)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in COMMANDS}
    for _ in range(args.runs):
        for name, extra in COMMANDS.items():  # alternating, as bench_inspect.py does
            t = time.perf_counter()
            runs[name].append(child([str(path), *extra]))
            print(f"  {name}: {time.perf_counter() - t:.2f} s", file=sys.stderr)
    labels = ["start-up (typer, ours, the timed modules)"] + [label for *_, label in STEPS] + \
        ["whole run (start-up included)"]
    print(f"{path}: {args.runs} runs each, medians in ms (in process; steps nest)")
    print(f"{'step':46} " + " ".join(f"{name:>15}" for name in COMMANDS))
    medians: dict[str, dict[str, float]] = {name: {} for name in COMMANDS}
    for label in labels:
        cells = []
        for name in COMMANDS:
            values = [r[label] for r in runs[name] if label in r]
            if values:
                medians[name][label] = statistics.median(values)
            cell = f"{statistics.median(values) * 1e3:.1f}" if values else "-"
            if values and label.endswith("[calls]"):  # the median number of calls beside the time
                cell += f" [{statistics.median(r.get(label + ' n', 0) for r in runs[name]):g}]"
            cells.append(f"{cell:>15}")
        print(f"{label:46} " + " ".join(cells))
    if args.json_out:
        args.json_out.write_text(json.dumps({"path": str(path), "runs": args.runs, "median_s": medians}, indent=2))
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()

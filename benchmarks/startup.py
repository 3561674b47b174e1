"""Start-up time of `hc count-params` against a bare `import typer, rich.console`.

Both are timed in the same run, alternating, as fresh interpreters, after the
package is byte-compiled as an installed one is; prints the medians and the
ratio against the goal (issue 37: within 1.2x; issue 14 asked 1.3x), in wall time
and, beside it, in CPU time (user + system), which a shared machine's load moves
far less, and the best run of each beside the medians. Beside them, the floor: a plain
script that imports typer and rich and prints count-params' own tables (the rows of its
--json, taken at the start) with rich as plainly as a user would, doing nothing else;
its ratio is what rich's tables alone cost over the bare import. Usage:

    python benchmarks/startup.py [--runs 15] [--json OUT.json] [--quick]

--quick: one round and no warm-up, for CI to see that every command still starts; its figures
mean nothing.
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
GOAL = 1.2  # issue 37: count-params within 1.2x of the bare import
CASES = {
    "count-params (default)": [sys.executable, "-m", "hccli", "count-params"],
    "count-params --json": [sys.executable, "-m", "hccli", "count-params", "--json"],
    "count-params selection": [sys.executable, "-m", "hccli", "count-params", "-g", "2-7", "-r", "reuse",
                                    "-s", "attn", "-c", "comb"],
}


FLOOR = "rich tables alone (floor)"


def floor_code() -> str:
    """The floor's script: count-params' default tables (titles, columns, rows, the lines
    between them) as literals, printed by rich, with nothing computed."""
    doc = json.loads(subprocess.run([*CASES["count-params --json"]], capture_output=True, check=True).stdout)
    per = doc["per_site"]["attn"]
    site = [[k, per["detail"][k], f"{v:,}"] for k, v in per["params"].items()] + [["site total", "", f"{per['total']:,}"]]
    groups = [[g["label"], str(g["layers"]), g["description"], f"{g['hc_params']:,}"] for g in doc["groups"]]
    c, tp = doc["config"], doc["text_path"]
    return f"""\
import typer, rich.console
from rich.table import Table
console = rich.console.Console()
console.print({c["path"] + ": " + str(c["n_layers"]) + " layers, dim " + str(c["dim"])!r})
t = Table(title="One attention or FFN site (per layer)")
for name in ("component", "calculation", "parameters"):
    t.add_column(name)
for row in {site!r}:
    t.add_row(*row)
console.print(t)
t = Table(title="Layer groups")
for name in ("group", "layers", "what", "HC parameters"):
    t.add_column(name)
for row in {groups!r}:
    t.add_row(*row)
console.print(t)
console.print({"Text path HC parameters: " + format(tp["hc_params"], ",") + " in " + str(tp["sites"]) + " sites"!r})
"""


def wall(cmd: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one fresh process."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    dt = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed")
    return dt, usage.ru_utime + usage.ru_stime


def compile_package() -> None:
    # pip byte-compiles a regular install; an editable one (or PYTHONDONTWRITEBYTECODE=1)
    # would otherwise make every run recompile hccli from source, which is not what users see.
    import hccli

    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(hccli.__file__).parent)], check=True,
                   env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=None, help="default 15 (1 with --quick)")
    ap.add_argument("--json", dest="json_out")
    ap.add_argument("--quick", action="store_true", help="one round, no warm-up (CI)")
    args = ap.parse_args()
    args.runs = args.runs or (1 if args.quick else 15)
    compile_package()
    for cmd in [] if args.quick else [BASELINE, *CASES.values()]:  # warm the file cache
        wall(cmd)
    cmds = {"import typer, rich.console": BASELINE, FLOOR: [sys.executable, "-c", floor_code()], **CASES}
    times: dict[str, list[float]] = {k: [] for k in cmds}
    cpu: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(args.runs):
        for name, cmd in cmds.items():
            dt, cpu_s = wall(cmd)
            times[name].append(dt)
            cpu[name].append(cpu_s)
    base = statistics.median(times["import typer, rich.console"])
    base_cpu = statistics.median(cpu["import typer, rich.console"])
    best_base = min(times["import typer, rich.console"])
    rows = []
    print(f"{'command':32} {'median ms':>10} {'ratio':>7} {'best ms':>8} {'best ratio':>10} {'CPU ms':>8}"
          f" {'CPU ratio':>9}  goal {GOAL}x")
    for name, ts in times.items():
        med, med_cpu = statistics.median(ts), statistics.median(cpu[name])
        rows.append({"command": name, "median_s": med, "ratio": med / base, "best_s": min(ts),
                     "best_ratio": min(ts) / best_base, "cpu_median_s": med_cpu, "cpu_ratio": med_cpu / base_cpu,
                     "goal": GOAL if name in CASES else None, "runs": len(ts)})
        mark = "" if name not in CASES else "  goal ok" if med / base <= GOAL else "  goal not met"
        print(f"{name:32} {med * 1e3:10.1f} {med / base:7.2f} {min(ts) * 1e3:8.1f} {min(ts) / best_base:10.2f}"
              f" {med_cpu * 1e3:8.1f} {med_cpu / base_cpu:9.2f}{mark}")
    floor = statistics.median(times[FLOOR])
    over = statistics.median(times["count-params (default)"]) - floor
    print(f"rich's tables alone: {floor / base:.2f}x the bare import; count-params (default) is {over * 1e3:.1f} ms"
          f" over them (its own imports, config, counting), {(floor + over) / floor:.2f}x the floor")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"python": sys.version.split()[0], "quick": args.quick, "rows": rows,
                       "floor_code": cmds[FLOOR][2]}, f, indent=2)


if __name__ == "__main__":
    main()

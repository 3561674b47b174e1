"""`hc inspect` on the full-scale phantom V4.1-Flash (48 shards, 96,085 tensors, sparse)
against the floor of issue #14, in one run:

  floor:             python -c "import typer, rich.console, json, struct, sys; <read + json.loads
                     every header>"
  --json:            hc inspect PATH --json              goal <= 1.3x the floor
  --verify --json:   hc inspect PATH --verify --json     goal <= 2.0x
  rich:              hc inspect PATH                     goal <= 1.8x
  peak RSS of each command                               goal < 150 MB

Every command is a fresh interpreter, as a user runs it; the commands alternate within each
round and the medians are compared. The package is byte-compiled first, as an installed one is.
Wall time is the goal's measure; CPU time (user + system of the process, its threads and the
children it forks and waits for, checkpoint/beside.py) is printed beside it: it moves less with
the load, and it shows what running work beside costs in all. `paired` is the median of each
round's ratio to that round's floor, a second reading of the wall ratio that a drifting load moves
less.

    python benchmarks/bench_inspect.py [--runs 7] [--path PHANTOM_DIR] [--json OUT.json] [--no-fork-rows]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from phantom import phantom_checkpoint  # benchmarks/phantom.py, beside this script

from startup import compile_package

FLOOR_CODE = """\
import typer, rich.console, json, struct, sys, glob
n = 0
for name in sorted(glob.glob(sys.argv[1] + "/*.safetensors")):
    with open(name, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        n += len(json.loads(f.read(size)))
print(n)
"""
GOALS = {"--json": 1.3, "--verify --json": 2.0, "rich": 1.8}
RSS_GOAL_MB = 150


def commands(path: Path, no_fork: bool = False) -> dict[str, list[str]]:
    hc = [sys.executable, "-m", "hccli", "inspect", str(path)]
    out = {"floor": [sys.executable, "-c", FLOOR_CODE, str(path)], "--json": [*hc, "--json"],
           "--verify --json": [*hc, "--verify", "--json"], "rich": hc}
    if no_fork:  # the same commands with every step in one process (env execs hc: the same process)
        nf = ["env", "HC_NO_FORK=1", *hc]
        out.update({"--json, no fork": [*nf, "--json"], "--verify --json, no fork": [*nf, "--verify", "--json"],
                    "rich, no fork": nf})
    return out


def run(cmd: list[str]) -> tuple[float, float, float, int]:
    """Wall seconds, CPU seconds, peak RSS (MB) and exit code of one fresh process; its output
    is discarded (rich then renders as for a pipe)."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    dt = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.stderr and proc.stderr.close()
    if proc.returncode not in (0, 1):  # 1: --verify findings, still a full run
        raise SystemExit(f"{' '.join(cmd[:6])}... exited {proc.returncode}: {err.strip()[-500:]}")
    kb = usage.ru_maxrss / (1024 if sys.platform == "darwin" else 1)  # bytes on macOS, KiB on Linux
    return dt, usage.ru_utime + usage.ru_stime, kb / 1024, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--path", type=Path, help="a phantom checkpoint (default: make one in a temporary dir)")
    ap.add_argument("--json", dest="json_out")
    ap.add_argument("--no-fork-rows", action="store_true",
                    help="also time each hc command with HC_NO_FORK=1 (no work beside, checkpoint/beside.py)")
    args = ap.parse_args()
    path, tmp = phantom_checkpoint(args.path)
    compile_package()
    cmds = commands(path, args.no_fork_rows)
    for cmd in cmds.values():  # warm the file cache and the byte-compiled modules
        run(cmd)
    times: dict[str, list[float]] = {k: [] for k in cmds}
    cpu: dict[str, list[float]] = {k: [] for k in cmds}
    rss: dict[str, float] = {k: 0.0 for k in cmds}
    codes: dict[str, int] = {}
    for i in range(args.runs):
        # Alternate, and rotate the order so that no command always follows the same one.
        names = list(cmds)
        for name in names[i % len(names):] + names[: i % len(names)]:
            dt, cpu_s, mb, codes[name] = run(cmds[name])
            times[name].append(dt)
            cpu[name].append(cpu_s)
            rss[name] = max(rss[name], mb)
    floor = statistics.median(times["floor"])
    floor_cpu = statistics.median(cpu["floor"])
    n_shards = len(list(path.glob("*.safetensors")))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    print(f"phantom {path}: {n_shards} shards; python {platform.python_version()}, {os.cpu_count()} cpus, "
          f"{args.runs} alternating runs, medians; load average after: {load}")
    print(f"{'command':26} {'median ms':>10} {'min ms':>8} {'ratio':>6} {'goal':>6} {'paired':>7} {'CPU ms':>8}"
          f" {'CPU ratio':>9} {'peak RSS MB':>12}")
    rows = []
    for name, ts in times.items():
        med, med_cpu = statistics.median(ts), statistics.median(cpu[name])
        goal = GOALS.get(name)
        # each round's time over the same round's floor, the median of those: a second reading that
        # a load which drifts across the run moves less (the goal is judged on `ratio`)
        paired = statistics.median(t / f for t, f in zip(ts, times["floor"]))
        rows.append({"command": name, "median_s": med, "min_s": min(ts), "ratio_to_floor": med / floor,
                     "paired_ratio": paired, "goal": goal, "cpu_median_s": med_cpu,
                     "cpu_ratio_to_floor": med_cpu / floor_cpu, "peak_rss_mb": rss[name], "exit_code": codes[name],
                     "runs": ts, "cpu_runs": cpu[name]})
        mark = "" if goal is None else ("  ok" if med / floor <= goal else "  over")
        print(f"{name:26} {med * 1e3:10.1f} {min(ts) * 1e3:8.1f} {med / floor:6.2f} {'' if goal is None else goal:>6}"
              f" {paired:7.2f} {med_cpu * 1e3:8.1f} {med_cpu / floor_cpu:9.2f} {rss[name]:12.1f}{mark}")
    worst = max(rss[k] for k in GOALS)
    print(f"peak RSS of the hc commands: {worst:.0f} MB (goal < {RSS_GOAL_MB} MB)")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({
            "python": platform.python_version(), "cpus": os.cpu_count(), "runs": args.runs, "shards": n_shards,
            "floor_code": FLOOR_CODE, "rows": rows, "rss_goal_mb": RSS_GOAL_MB, "load_average_after": load},
            indent=2))
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()

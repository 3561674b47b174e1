"""`hc inspect` on the full-scale phantom V4.1-Flash (48 shards, 96,085 tensors, sparse) against
two references measured in the same run:

  floor (a):  python -c "import typer, rich.console, ...; <read + json.loads every header>"
  peer (b):   the same start, then safetensors' own reader doing inspect's reading:
              safe_open + get_slice(name).get_shape() for every tensor of every shard
  --json:            hc inspect PATH --json              must <= 1.3x (b), goal <= 1.0x (b)
  --verify --json:   hc inspect PATH --verify --json     must <= 2.2x (b), goal <= 1.5x (b)
  rich:              hc inspect PATH (to a pipe)         must <= 1.6x (b), goal <= 1.2x (b)
  peak RSS of each hc command                            must < 150 MB

The musts are issue 22's, the goals issue 37's. Every command is a fresh interpreter, as a user
runs it; the commands alternate within each round (the order rotated from round to round) and
medians are compared. The package is byte-compiled first, as an installed one is. Wall time is
the measure; CPU time (user + system) is printed beside it, as it moves less with the load of a
shared machine. `paired` is the median of each round's ratio to that round's peer, a second
reading that a load drifting through the run moves less; the spread is the interquartile range
of those per-round ratios.

    python benchmarks/bench_inspect.py [--runs 15] [--path PHANTOM_DIR] [--old TREE] [--json OUT.json] [--quick]

--old TREE: a second source tree of hccli (a checkout of the code before a change) whose three
commands join the same rounds as "old --json", "old --verify --json" and "old rich": its hccli is
copied to a temporary directory and byte-compiled there (nothing is written into TREE), and run
from there (PYTHONPATH): the A/B in one run.
--quick: one round and no warm-up round, for CI to see that every command still runs and the
document keeps its rows; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from phantom import phantom_checkpoint  # benchmarks/phantom.py, beside this script

from startup import compile_package

_START = "import typer, rich.console, json, struct, sys, glob\n"
FLOOR_CODE = _START + """\
n = 0
for name in sorted(glob.glob(sys.argv[1] + "/*.safetensors")):
    with open(name, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        n += len(json.loads(f.read(size)))
print(n)
"""
PEER_CODE = _START + """\
from safetensors import safe_open
n = 0
for name in sorted(glob.glob(sys.argv[1] + "/*.safetensors")):
    with safe_open(name, "np") as f:
        for key in f.keys():
            n += len(f.get_slice(key).get_shape())
print(n)
"""
MUSTS = {"--json": 1.3, "--verify --json": 2.2, "rich": 1.6}  # over the peer (b): issue 22's
GOALS = {"--json": 1.0, "--verify --json": 1.5, "rich": 1.2}  # issue 37's
RSS_MUST_MB = 150


def commands(path: Path, old: Path | None = None) -> dict[str, list[str]]:
    hc = [sys.executable, "-m", "hccli", "inspect", str(path)]
    out = {"floor": [sys.executable, "-c", FLOOR_CODE, str(path)],
           "peer": [sys.executable, "-c", PEER_CODE, str(path)],
           "--json": [*hc, "--json"], "--verify --json": [*hc, "--verify", "--json"], "rich": hc}
    if old is not None:
        out.update({f"old {name}": out[name] for name in MUSTS})
    return out


def old_copy(tree: Path, into: Path) -> dict[str, str]:
    """The old tree's hccli copied into `into` and byte-compiled there, as an installed package
    is; the environment its commands run in (that copy first on the path)."""
    shutil.copytree(tree / "hccli", into / "hccli", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(into / "hccli")], check=True,
                   env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""}, stdout=subprocess.DEVNULL)
    return {**os.environ, "PYTHONPATH": str(into), "HC_BENCH_CWD": str(into)}


def run(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float, int]:
    """Wall seconds, CPU seconds, peak RSS (MB) and exit code of one fresh process; its output
    is discarded (rich then renders as for a pipe)."""
    t = time.perf_counter()
    # (`python -m` puts the working directory first on the path: the old tree's commands run in its copy)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                            cwd=env["HC_BENCH_CWD"] if env else None)
    _, status, usage = os.wait4(proc.pid, 0)
    dt = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.stderr and proc.stderr.close()
    if proc.returncode not in (0, 1):  # 1: --verify findings, still a full run
        raise SystemExit(f"{' '.join(cmd[:6])}... exited {proc.returncode}: {err.strip()[-500:]}")
    kb = usage.ru_maxrss / (1024 if sys.platform == "darwin" else 1)  # bytes on macOS, KiB on Linux
    return dt, usage.ru_utime + usage.ru_stime, kb / 1024, proc.returncode


def quartiles(xs: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return q[0], q[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=None, help="default 15 (1 with --quick)")
    ap.add_argument("--path", type=Path, help="a phantom checkpoint (default: make one in a temporary dir)")
    ap.add_argument("--old", type=Path, help="a second hccli source tree, timed in the same rounds (the A/B)")
    ap.add_argument("--json", dest="json_out")
    ap.add_argument("--quick", action="store_true", help="one round, no warm-up (CI)")
    args = ap.parse_args()
    args.runs = args.runs or (1 if args.quick else 15)
    path, tmp = phantom_checkpoint(args.path)
    compile_package()
    cmds = commands(path, args.old)
    old_dir = tempfile.TemporaryDirectory() if args.old is not None else None
    old_env = old_copy(args.old, Path(old_dir.name)) if old_dir is not None else None
    envs = {name: old_env if name.startswith("old ") else None for name in cmds}
    for name in [] if args.quick else cmds:  # warm the file cache and the byte-compiled modules
        run(cmds[name], envs[name])
    times: dict[str, list[float]] = {k: [] for k in cmds}
    cpu: dict[str, list[float]] = {k: [] for k in cmds}
    rss: dict[str, float] = {k: 0.0 for k in cmds}
    codes: dict[str, int] = {}
    names = list(cmds)
    for i in range(args.runs):
        for name in names[i % len(names):] + names[: i % len(names)]:
            dt, cpu_s, mb, codes[name] = run(cmds[name], envs[name])
            times[name].append(dt)
            cpu[name].append(cpu_s)
            rss[name] = max(rss[name], mb)
    floor, peer = statistics.median(times["floor"]), statistics.median(times["peer"])
    floor_cpu, peer_cpu = statistics.median(cpu["floor"]), statistics.median(cpu["peer"])
    n_shards = len(list(path.glob("*.safetensors")))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    print(f"phantom {path}: {n_shards} shards; python {platform.python_version()}, {os.cpu_count()} cpus, "
          f"{args.runs} alternating runs, medians; load average after: {load}")
    print(f"{'command':20} {'median ms':>9} {'IQR ms':>13} {'/floor':>6} {'/peer':>6} {'paired':>6}"
          f" {'paired IQR':>11} {'must':>5} {'goal':>5} {'CPU ms':>7} {'CPU/peer':>8} {'RSS MB':>7}")
    rows = []
    for name, ts in times.items():
        med, med_cpu = statistics.median(ts), statistics.median(cpu[name])
        per_round = [t / p for t, p in zip(ts, times["peer"])]
        paired = statistics.median(per_round)
        lo, hi = quartiles(ts)
        plo, phi = quartiles(per_round)
        must, goal = MUSTS.get(name.removeprefix("old ")), GOALS.get(name.removeprefix("old "))
        old_row = times.get(f"old {name}")
        rows.append({"command": name, "median_s": med, "iqr_s": [lo, hi], "ratio_to_floor": med / floor,
                     "ratio_to_peer": med / peer, "paired_ratio_to_peer": paired, "paired_iqr": [plo, phi],
                     "must": must, "goal": goal, "cpu_median_s": med_cpu, "cpu_ratio_to_peer": med_cpu / peer_cpu,
                     "cpu_ratio_to_floor": med_cpu / floor_cpu, "peak_rss_mb": rss[name],
                     "exit_code": codes[name], "runs": ts, "cpu_runs": cpu[name],
                     **({"ratio_to_old": med / statistics.median(old_row)} if old_row else {})})
        mark = ""
        if must is not None:
            mark = "  must ok" if med / peer <= must else "  OVER MUST"
            mark += ", goal ok" if med / peer <= goal else ", goal not met"
        print(f"{name:20} {med * 1e3:9.1f} {lo * 1e3:6.1f}-{hi * 1e3:<6.1f} {med / floor:6.2f} {med / peer:6.2f}"
              f" {paired:6.2f} {plo:5.2f}-{phi:<5.2f} {must or '':>5} {goal or '':>5} {med_cpu * 1e3:7.1f}"
              f" {med_cpu / peer_cpu:8.2f} {rss[name]:7.1f}{mark}")
    worst = max(rss[k] for k in MUSTS)
    print(f"peak RSS of the hc commands: {worst:.0f} MB (must < {RSS_MUST_MB} MB)")
    for r in rows:
        if "ratio_to_old" in r:
            print(f"{r['command']}: {r['ratio_to_old']:.2f}x the old tree's median")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({
            "python": platform.python_version(), "cpus": os.cpu_count(), "runs": args.runs, "quick": args.quick,
            "shards": n_shards, "old": str(args.old) if args.old else None,
            "floor_code": FLOOR_CODE, "peer_code": PEER_CODE, "rows": rows, "rss_must_mb": RSS_MUST_MB,
            "load_average_after": load}, indent=2))
    for made in (tmp, old_dir):
        if made is not None:
            made.cleanup()


if __name__ == "__main__":
    main()

"""The value path on the full-scale phantom V4.1-Flash (48 shards, sparse) against plain loops
measured in the same run (issue 37):

  peer:        safe_open(A/B shard, "pt") + get_tensor + torch.equal, each selected tensor
  peer bytes:  each selected tensor's bytes read by its data_offsets (open, seek, read) and compared
  diff:        hc diff A B --values all --layers 0 --json           must >= 1.0x the peer's rate, goal 1.5x
  stats peer:  safe_open(A shard, "pt") + get_tensor + min, max, mean, std of the finite values
               and the count of the others, each HC tensor (fn, base, scale)
  stats:       hc inspect A --stats --json                          must >= 1.0x the stats peer's rate
  peak RSS of each hc command                                        must < 1 GB

B is a sparse copy of A (cp --sparse=always -r) with one byte changed: the last of the largest
selected tensor, so that one tensor differs; every command must say which one, or the run stops.
Every command is a fresh interpreter, as a user runs it; the commands alternate within each round
and medians are compared. Rates are GB a side over the whole process's wall time (start-up,
imports, headers included); each peer also times its own loop, and `loop GB/s` is that rate, the
peer without its start-up. Full runs read every command once first, so that each reads both sides
from a warm page cache (the files are holes: warm or cold, nothing comes from the disk, but a
cold read zero-fills page-cache pages).

    python benchmarks/bench_values.py [--runs 5] [--path PHANTOM_DIR] [--json OUT.json] [--quick]

--quick: one round, no warm-up, and layer 0's attention only (`--site attn`: 17 tensors, 129 MB a
side), for CI to see that every command still runs; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from phantom import phantom_checkpoint  # benchmarks/phantom.py, beside this script

from startup import compile_package

PEER_CODE = """\
import json, sys, time
import torch
from safetensors import safe_open
a, b, prefixes = sys.argv[1], sys.argv[2], tuple(sys.argv[3:])
start = time.perf_counter()
weight_map = json.load(open(f"{a}/model.safetensors.index.json"))["weight_map"]
files = {}
for name, file in weight_map.items():
    if name.startswith(prefixes):
        files.setdefault(file, []).append(name)
compared, differ = 0, []
for file, names in sorted(files.items()):
    with safe_open(f"{a}/{file}", "pt") as fa, safe_open(f"{b}/{file}", "pt") as fb:
        for name in names:
            x, y = fa.get_tensor(name), fb.get_tensor(name)
            compared += x.numel() * x.element_size()
            if not torch.equal(x, y):
                differ.append(name)
print(json.dumps({"loop_s": time.perf_counter() - start, "bytes": compared, "differ": differ}))
"""
PEER_BYTES_CODE = """\
import json, struct, sys, time
a, b, prefixes = sys.argv[1], sys.argv[2], tuple(sys.argv[3:])
start = time.perf_counter()
weight_map = json.load(open(f"{a}/model.safetensors.index.json"))["weight_map"]
files = {}
for name, file in weight_map.items():
    if name.startswith(prefixes):
        files.setdefault(file, []).append(name)
compared, differ = 0, []
for file, names in sorted(files.items()):
    with open(f"{a}/{file}", "rb") as fa, open(f"{b}/{file}", "rb") as fb:
        sides = []
        for f in (fa, fb):
            (size,) = struct.unpack("<Q", f.read(8))
            sides.append((f, 8 + size, json.loads(f.read(size))))
        for name in names:
            data = []
            for f, base, header in sides:
                begin, end = header[name]["data_offsets"]
                f.seek(base + begin)
                data.append(f.read(end - begin))
            compared += len(data[0])
            if data[0] != data[1]:
                differ.append(name)
print(json.dumps({"loop_s": time.perf_counter() - start, "bytes": compared, "differ": differ}))
"""
STATS_PEER_CODE = """\
import json, sys, time
import torch
from safetensors import safe_open
a, prefixes = sys.argv[1], tuple(sys.argv[2:])
start = time.perf_counter()
weight_map = json.load(open(f"{a}/model.safetensors.index.json"))["weight_map"]
files = {}
for name, file in weight_map.items():
    if name.startswith(prefixes) and name.rsplit("_", 1)[-1] in ("fn", "base", "scale") and "hc_" in name:
        files.setdefault(file, []).append(name)
read, stats = 0, {}
for file, names in sorted(files.items()):
    with safe_open(f"{a}/{file}", "pt") as f:
        for name in names:
            x = f.get_tensor(name)
            read += x.numel() * x.element_size()
            x = x.double()
            finite = x[torch.isfinite(x)]
            stats[name] = (finite.min().item(), finite.max().item(), finite.mean().item(),
                           finite.std(unbiased=False).item(), x.numel() - finite.numel())
print(json.dumps({"loop_s": time.perf_counter() - start, "bytes": read, "tensors": len(stats)}))
"""
MUST, GOAL = 1.0, 1.5  # hc's rate over its peer's
RSS_MUST_MB = 1024


def selection(quick: bool) -> tuple[list[str], list[str]]:
    """(hc's selection flags, the tensor-name prefixes the peers select the same tensors by)."""
    if quick:
        return ["--layers", "0", "--site", "attn"], ["layers.0.attn.", "layers.0.attn_norm.", "layers.0.hc_attn_"]
    return ["--layers", "0"], ["layers.0."]


def commands(a: Path, b: Path, quick: bool) -> dict[str, list[str]]:
    flags, prefixes = selection(quick)
    stats_prefixes = ["layers.0."] if quick else [""]
    hc = [sys.executable, "-m", "hccli"]
    return {"peer": [sys.executable, "-c", PEER_CODE, str(a), str(b), *prefixes],
            "peer bytes": [sys.executable, "-c", PEER_BYTES_CODE, str(a), str(b), *prefixes],
            "diff": [*hc, "diff", str(a), str(b), "--values", "all", *flags, "--json"],
            "stats peer": [sys.executable, "-c", STATS_PEER_CODE, str(a), *stats_prefixes],
            "stats": [*hc, "inspect", str(a), "--stats", *(["--layers", "0"] if quick else []), "--json"]}


def run_measured(cmd: list[str]) -> tuple[float, float, float, int, dict]:
    """Wall seconds, CPU seconds, peak RSS (MB), exit code and the JSON it printed, of one
    fresh process."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    dt = time.perf_counter() - t
    proc.stdout.close()
    proc.stderr.close()
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):  # 1: diff found the tensor that differs
        raise SystemExit(f"{' '.join(cmd[:6])}... exited {code}: {err.decode(errors='replace')[-500:]}")
    kb = usage.ru_maxrss / (1024 if sys.platform == "darwin" else 1)  # bytes on macOS, KiB on Linux
    return dt, usage.ru_utime + usage.ru_stime, kb / 1024, code, json.loads(out)


def second_side(a: Path, prefixes: list[str], where: Path) -> tuple[Path, str]:
    """A sparse copy of A with the last byte of its largest selected tensor changed: (B, that name)."""
    b = where / "b"
    subprocess.run(["cp", "--sparse=always", "-r", str(a), str(b)], check=True)
    weight_map = json.loads((a / "model.safetensors.index.json").read_text())["weight_map"]
    best = None
    for file in sorted({f for n, f in weight_map.items() if n.startswith(tuple(prefixes))}):
        with open(b / file, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        for name, entry in header.items():
            if name != "__metadata__" and name.startswith(tuple(prefixes)):
                begin, end = entry["data_offsets"]
                if best is None or end - begin > best[0]:
                    best = (end - begin, name, file, 8 + size + end - 1)
    _, name, file, last = best
    with open(b / file, "r+b") as f:
        f.seek(last)
        old = f.read(1)
        f.seek(last)
        f.write(b"\x01" if old != b"\x01" else b"\x02")
    return b, name


def check_agreement(name: str, doc: dict, changed: str) -> None:
    """Every command saw the one tensor that differs, and the same bytes as the others."""
    if name in ("peer", "peer bytes"):
        got = doc["differ"]
    elif name == "diff":
        got = [v["name"] for v in doc["values"] if v["status"] != "equal"] + \
              [s["name"] for s in doc["sites"] if s["status"] != "equal"]
    else:
        return
    if got != [changed]:
        raise SystemExit(f"{name}: expected exactly {changed!r} to differ, got {got[:5]}")


def gigabytes(name: str, doc: dict) -> float:
    """GB of values one side read, as the command says."""
    if name == "diff":
        return doc["bytes_read_a"] / 1e9
    if name == "stats":
        return doc["stats_bytes_read"] / 1e9
    return doc["bytes"] / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=None, help="default 5 (1 with --quick)")
    ap.add_argument("--path", type=Path, help="a phantom checkpoint (default: make one in a temporary dir); "
                                              "never written to")
    ap.add_argument("--json", dest="json_out")
    ap.add_argument("--quick", action="store_true", help="one round, no warm-up, layer 0's attention (CI)")
    args = ap.parse_args()
    args.runs = args.runs or (1 if args.quick else 5)
    a, tmp = phantom_checkpoint(args.path)
    work = tempfile.TemporaryDirectory()
    _, prefixes = selection(args.quick)
    b, changed = second_side(a, prefixes, Path(work.name))
    compile_package()
    cmds = commands(a, b, args.quick)
    for cmd in [] if args.quick else cmds.values():  # every side in the page cache, for every command
        run_measured(cmd)
    times: dict[str, list[float]] = {k: [] for k in cmds}
    cpu: dict[str, list[float]] = {k: [] for k in cmds}
    loops: dict[str, list[float]] = {k: [] for k in cmds}
    rss: dict[str, float] = {k: 0.0 for k in cmds}
    gb: dict[str, float] = {}
    names = list(cmds)
    for i in range(args.runs):
        for name in names[i % len(names):] + names[: i % len(names)]:
            dt, cpu_s, mb, _, doc = run_measured(cmds[name])
            check_agreement(name, doc, changed)
            times[name].append(dt)
            cpu[name].append(cpu_s)
            rss[name] = max(rss[name], mb)
            gb[name] = gigabytes(name, doc)
            if "loop_s" in doc:
                loops[name].append(doc["loop_s"])
    load = " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    print(f"phantom {a}: B = a sparse copy with {changed!r} changed in its last byte; python "
          f"{platform.python_version()}, {os.cpu_count()} cpus, {args.runs} alternating runs, medians, "
          f"{'no warm-up (cold or warm: as the cache was)' if args.quick else 'warm page cache'}; "
          f"load average after: {load}")
    print(f"{'command':11} {'GB a side':>9} {'median s':>8} {'GB/s':>6} {'loop GB/s':>9} {'x peer':>6} "
          f"{'x loop':>6} {'must':>5} {'goal':>5} {'CPU s':>6} {'RSS MB':>7}")
    rows = []
    for name, ts in times.items():
        peer = "stats peer" if name.startswith("stats") else "peer"
        med, med_cpu = statistics.median(ts), statistics.median(cpu[name])
        rate = gb[name] / med
        peer_rate = gb[peer] / statistics.median(times[peer])
        loop_rate = gb[peer] / statistics.median(loops[peer])
        own_loop = gb[name] / statistics.median(loops[name]) if loops[name] else None
        must, goal = (MUST, GOAL) if name in ("diff", "stats") else (None, None)
        rows.append({"command": name, "argv": cmds[name][1:] if name in ("diff", "stats") else None,
                     "gb_a_side": gb[name], "median_s": med, "gbps": rate, "loop_gbps": own_loop,
                     "ratio_to_peer": rate / peer_rate, "ratio_to_peer_loop": rate / loop_rate,
                     "must": must, "goal": goal, "cpu_median_s": med_cpu, "peak_rss_mb": rss[name],
                     "runs": ts, "cpu_runs": cpu[name], "loop_runs": loops[name]})
        mark = ""
        if must is not None:
            mark = "  must ok" if rate / peer_rate >= must else "  UNDER MUST"
            mark += ", goal ok" if rate / peer_rate >= goal else ", goal not met"
        own = f"{own_loop:9.2f}" if own_loop is not None else f"{'':9}"
        print(f"{name:11} {gb[name]:9.3f} {med:8.2f} {rate:6.2f} {own} {rate / peer_rate:6.2f} "
              f"{rate / loop_rate:6.2f} {must or '':>5} {goal or '':>5} {med_cpu:6.2f} {rss[name]:7.0f}{mark}")
    worst = max(rss["diff"], rss["stats"])
    print(f"peak RSS of the hc commands: {worst:.0f} MB (must < {RSS_MUST_MB} MB); the peers' count the pages "
          "safetensors maps")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({
            "python": platform.python_version(), "cpus": os.cpu_count(), "runs": args.runs, "quick": args.quick,
            "changed": changed, "peer_code": PEER_CODE, "peer_bytes_code": PEER_BYTES_CODE,
            "stats_peer_code": STATS_PEER_CODE, "rows": rows, "rss_must_mb": RSS_MUST_MB,
            "load_average_after": load}, indent=2))
    work.cleanup()
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()

"""The walk of `verify()` through the package's modules (issue 34): which rooms one verification
stays in, and how often it goes back to a room it has already left.

A tiny-v4.1 release checkpoint is written, one of its shards removed, and it is opened with the
config of another model (tiny-v4's, named as --config names one, so it is used as given): every
root cause verify knows (a gone shard, a config of another model) and the findings that follow
from them. sys.setprofile follows every Python call and return inside `verify()`; the room at
each event is the module of the innermost frame that is hccli's own (a call into the standard
library stays in the room that made it). Consecutive events in one room are one stay.

    python benchmarks/verify_walk.py [--quick] [--json OUT.json] [--steps N]

Prints the stays, the distinct rooms and the returns (stays in a room already left: stays less
rooms), and among those the relays: calls into a room already left that none of the callers on
the stack is in (a return to a waiting caller is not one: it is where the walk came from); then
the rooms by stays. The verify room's figure is the walk of first calls with every module outside
checkpoint/verify/ left out: the relay between verification's own modules. --steps N also prints
the first N stays in order. --quick is the same walk (it is already small) without the table: CI
sees that the script still runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = str(ROOT / "hccli")
VERIFY_ROOM = "hccli.checkpoint.verify."
GONE_SHARD = "model-00003-of-00014.safetensors"


def damaged(tmp: Path):
    """The checkpoint the walk verifies: tiny-v4.1 with a shard gone, held to tiny-v4's config."""
    from hccli.checkpoint.opening import open_checkpoint
    from hccli.checkpoint.synth import make_checkpoint

    path = tmp
    make_checkpoint(ROOT / "sample_configs" / "tiny-v4.1.json", path)
    (path / GONE_SHARD).unlink()
    return open_checkpoint(path, config=ROOT / "sample_configs" / "tiny-v4.hf.json")


def room_of(frame) -> str | None:
    """The hccli module a frame runs in (None outside the package)."""
    name = frame.f_code.co_filename
    if not name.startswith(PACKAGE):
        return None
    return name[len(ROOT.as_posix()) + 1:-3].replace("/", ".")


def walk(fn, *args, every: bool = False):
    """(what fn returned, the rooms of its calls in order, one entry a stay). The walk follows the
    first call of each function and what that call calls (a function called again, in a loop say,
    goes where it went before: the walk does not count the loop's turns); every: each call."""
    stays: list[str] = []
    relays = [0]  # calls into a room already left that no frame the walk is in belongs to
    followed: list = []  # the frames the walk is in, fn's outermost
    seen: set = set()

    def enter(frame) -> None:
        room = room_of(frame)
        if not stays or stays[-1] != room:
            stays.append(room)

    def caller(frame):
        frame = frame.f_back
        while frame is not None and room_of(frame) is None:
            frame = frame.f_back
        return frame

    def profile(frame, event, _arg):
        if event == "call":
            if not followed:
                followed.append(frame)
                enter(frame)
            elif room_of(frame) is not None and caller(frame) is followed[-1] and (
                    every or frame.f_code not in seen):
                seen.add(frame.f_code)
                room = room_of(frame)
                if room in stays and room not in map(room_of, followed):
                    relays[0] += 1
                followed.append(frame)
                enter(frame)
        elif event == "return" and len(followed) > 1 and frame is followed[-1]:
            followed.pop()
            enter(followed[-1])

    sys.setprofile(profile)
    try:
        result = fn(*args)
    finally:
        sys.setprofile(None)
    return result, stays, relays[0]


def figures(stays: list[str], relays: int) -> dict:
    rooms = Counter(stays)
    return {"stays": len(stays), "rooms": len(rooms), "returns": len(stays) - len(rooms), "relays": relays,
            "by_room": dict(rooms.most_common()), "order": stays}


def measure() -> dict:
    from hccli.checkpoint.verify.checks import verify

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        # a first verification of a checkpoint opened the same way: the lazy imports run outside
        # the walk, and each walk's checkpoint has none of its tables cached yet
        verify(damaged(Path(tmp) / "warm"))
        for name, every in (("first calls", False), ("every call", True)):
            found, stays, relays = walk(verify, damaged(Path(tmp) / name.replace(" ", "-")), every=every)
            out[name] = {"findings": len(found), **figures(stays, relays)}
        # the same walk seen from the verification room alone: its modules' stays, the rest left out
        own = [r for r in out["first calls"]["order"] if r.startswith(VERIFY_ROOM)]
        own = [r for i, r in enumerate(own) if not i or own[i - 1] != r]
        out["verify room"] = {"findings": out["first calls"]["findings"], **figures(own, 0)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the walk without the table (CI)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--steps", type=int, default=0, help="print the first N stays in order")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    got = measure()
    for name, w in got.items():
        relays = f", {w['relays']:,} of them calls into a room no caller on the stack is in" if w["relays"] else ""
        print(f"verify(), {name}: {w['findings']} findings; {w['stays']:,} stays in {w['rooms']} rooms, "
              f"{w['returns']:,} returns to a room already left{relays}")
    if not args.quick:
        print("rooms of the walk of first calls, by stays:")
        for room, n in got["first calls"]["by_room"].items():
            print(f"  {n:6,}  {room}")
    if args.steps:
        for name in ("first calls", "verify room"):
            print(f"{name}: " + " -> ".join(r.removeprefix("hccli.") for r in got[name]["order"][:args.steps]))
    if args.json:
        args.json.write_text(json.dumps({"quick": args.quick, "walks": got}, indent=1))


if __name__ == "__main__":
    main()

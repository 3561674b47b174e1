"""The JSON documents of an earlier revision against the working tree's: count-params of every
sample config (plain, --model, --by-layer), and, for each tiny config's checkpoint, inspect
(--json, --verify, a name/layer selection, --hc-layer, --dtype) and run-kernel --config.

Both trees write their checkpoints to the same path, so a document differs only where the code
does. Prints how many are byte-identical; for the others, the keys only the new document has, and
whether every value the old one has is unchanged. Exit 1 if any old value changed or went away.

    python benchmarks/compare_docs.py REV [--against REV2] [--keep DIR] [--quick]

--against REV2 takes the new documents from that revision instead of the working tree. --quick
writes 3 documents instead of 57 (count-params of tiny-v4.1; inspect --json and --verify of its
checkpoint): seconds, for CI to see that the script still runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINY = ("tiny-v4.1", "tiny-v4.1.hf", "tiny-v4.hf")


def _has_hc_layer(tree: Path) -> bool:
    return any('"--hc-layer"' in p.read_text() for p in (tree / "hccli").rglob("*.py"))


def commands(tree: Path, ck: Path, quick: bool = False) -> dict[str, list[str]]:
    out = {}
    configs = [tree / "sample_configs" / "tiny-v4.1.json"] if quick else sorted((tree / "sample_configs").glob("*.json"))
    for c in configs:  # named from the tree, as the documents say
        for mode, extra in (("", []), ("model-", ["--model"]), ("layer-", ["--by-layer"]))[:1 if quick else 3]:
            out[f"count-{mode}{c.stem}"] = ["count-params", f"sample_configs/{c.name}", "--json", *extra]
    for t in TINY[:1] if quick else TINY:
        p = str(ck / t)
        out[f"{t}/inspect"] = ["inspect", p, "--json"]
        out[f"{t}/verify"] = ["inspect", p, "--verify", "--json"]
        if quick:
            continue
        # each tree in its own spelling: issue 36 made --layer --layers and --hc-layer N --layers N --hc
        old = _has_hc_layer(tree)
        out[f"{t}/select"] = ["inspect", p, "--name", "*.hc_attn_*", "--layer" if old else "--layers", "1-2", "--json"]
        out[f"{t}/hc-layer"] = ["inspect", p, *(["--hc-layer", "1"] if old else ["--layers", "1", "--hc"]), "--json"]
        out[f"{t}/dtype"] = ["inspect", p, "--dtype", "F32", "--json"]
        out[f"{t}/run-kernel"] = ["run-kernel", "--config", f"sample_configs/{t}.json", "--json"]
    return out


def checkout(rev: str, at: Path) -> Path:
    at.mkdir()
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(at)], input=archive, check=True)
    return at


def documents(tree: Path, ck: Path, quick: bool = False) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(tree))

    def hc(*args: str) -> str:
        return subprocess.run([sys.executable, "-m", "hccli", *args], cwd=tree, env=env, capture_output=True,
                              text=True, timeout=300).stdout

    shutil.rmtree(ck, ignore_errors=True)
    ck.mkdir(parents=True)
    for t in TINY[:1] if quick else TINY:
        hc("make-checkpoint", f"sample_configs/{t}.json", str(ck / t))
    docs = {name: hc(*args) for name, args in commands(tree, ck, quick).items()}
    shutil.rmtree(ck)
    return docs


def keys(o: object, at: str = "") -> set[str]:
    """Every key path in a document (a list's by its first item)."""
    if isinstance(o, dict):
        return set().union(*({f"{at}/{k}"} | keys(v, f"{at}/{k}") for k, v in o.items()))
    if isinstance(o, list) and o:
        return keys(o[0], at + "[]")
    return set()


def old_values(new: object, old: object) -> object:
    """new with only the keys old has, so that it equals old exactly when no old value changed."""
    if isinstance(new, dict) and isinstance(old, dict):
        return {k: old_values(v, old[k]) for k, v in new.items() if k in old}
    if isinstance(new, list) and isinstance(old, list) and len(new) == len(old):
        return [old_values(a, b) for a, b in zip(new, old)]
    return new


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("rev")
    ap.add_argument("--against", metavar="REV2", help="the new documents from REV2 (default: the working tree)")
    ap.add_argument("--keep", type=Path, help="write both sets of documents here")
    ap.add_argument("--quick", action="store_true", help="3 documents of tiny-v4.1 (CI)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        before = checkout(args.rev, Path(tmp) / "before")
        after = checkout(args.against, Path(tmp) / "after") if args.against else ROOT
        ck = Path(tmp) / "ck"
        old, new = documents(before, ck, args.quick), documents(after, ck, args.quick)
    same, added, changed = 0, {}, []
    for name, text in old.items():
        if args.keep:
            for side, docs in (("before", old), ("now", new)):
                f = args.keep / side / f"{name.replace('/', '-')}.json"
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(docs.get(name, ""))
        if not text.strip() or not (new.get(name) or "").strip():  # a command that failed writes nothing
            changed.append(f"{name}: no document on one side")
            continue
        if text == new.get(name):
            same += 1
            continue
        try:
            a, b = json.loads(text), json.loads(new.get(name) or "null")
        except ValueError:
            changed.append(f"{name}: not JSON on one side")
            continue
        for k in keys(b) - keys(a):
            added[k] = added.get(k, 0) + 1
        if old_values(b, a) != a:
            changed.append(name)
    print(f"{len(old)} documents, {same} byte-identical; keys only in the new ones: "
          f"{', '.join(f'{k} ({n})' for k, n in sorted(added.items())) or 'none'}")
    print(f"old values changed or gone: {', '.join(changed) or 'none'}")
    return 1 if changed else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Print a short table from `hc bench --op site-* --json` files (the device run's last lines).

    python3 benchmarks/site_summary.py pre.json write.json chain.json

A site-chain file's rows give x ours (our pair's time over the row's) in place of the
roundings and bit-identity of the other site ops.
"""

from __future__ import annotations

import json
import sys


def main(paths: list[str]) -> int:
    for path in paths:
        try:
            doc = json.load(open(path))
        except (OSError, ValueError) as exc:
            print(f"{path}: {exc}")
            continue
        print(f"{doc['op']} dim {doc['dim']} {doc['stream']}, copy {doc['copy_gbps']:.0f} GB/s, "
              f"{doc['bytes_per_token']} B/token; skipped: {doc['skipped']}")
        for r in doc["rows"]:
            errs = " ".join(f"{k}={v:.2g}" for k, v in r["max_err"].items())
            if "x_ours" in r:  # site-chain
                tail = "x ours " + ("-" if r["x_ours"] is None else f"{r['x_ours']:.2f}")
            else:
                ulps = " ".join(f"{k}={v:.2g}rnd" for k, v in r["ulps"].items())
                ident = "" if not r["identical"] else ("ident" if all(r["identical"].values())
                                                       else f"DIFF{r['identical']}")
                tail = f"{ulps} {ident}"
            print(f"{r['tokens']:>6} {r['impl']:<11} {r['collapse'] or '-':<7} {r['ms'] * 1e3:9.1f}us "
                  f"{r['tokens_per_s'] / 1e6:8.2f}M {r['pct_copy']:5.1f}% {errs} {tail}")
        for h in doc.get("host", []):
            print(f"host {h['tokens']:>4} {h['impl']:<20} raw {h['raw_us']} call {h['call_us']:.1f} "
                  f"alloc {h['alloc_us']:.1f} ratio {h['call_vs_raw']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

#!/bin/bash
# Device-only: the site kernels' check-and-time run, in stages, from the project's root with PYTHONPATH set
# (the tilelang site, TileKernels' source where wanted). Full logs and JSON under $OUT; short table last.
#
#   bash benchmarks/site_device.sh [cache] warm test explore pre write chain
#
# chain: hc bench --op site-chain with the serving engines' kernel files of .device/peers (bench/peers.py;
# not in git: carried to the device machine beside .device/TileKernels);
# cache: restore ../tlcache.tar.xz (tilelang's kernel cache from an earlier run) when present;
# each stage has its own time limit so that the whole run ends inside the device's 10 minutes; at most
# 8 files come back (the device returns 8: run explore or savecache apart from chain).
out=${OUT:-/tmp/site-out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu \
  --format=csv > "$out/err.log" 2>&1
for stage in "$@"; do
  t0=$(date +%s)
  case $stage in
    cache) [ -f ../tlcache.tar.xz ] && mkdir -p ~/.tilelang && tar -xJf ../tlcache.tar.xz -C ~ ;;
    warm) timeout 240 python3 benchmarks/site_warm.py > "$out/warm.log" 2>&1; tail -3 "$out/warm.log" ;;
    test) timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider -o addopts="" tests/kernels/test_site_kernels_gpu.py \
            tests/runsite/test_run_site_gpu.py tests/bench/test_peers_gpu.py > "$out/pytest.log" 2>&1; grep -E "passed|failed|Error|assert" "$out/pytest.log" | tail -25 ;;
    explore) timeout 90 python3 benchmarks/site_explore.py --json "$out/explore.json" 2>> "$out/err.log" | tail -40 ;;
    pre) timeout 150 python3 -m hccli bench --op site-pre --host --peers .device/peers --json > "$out/pre.json" 2>> "$out/err.log" ;;
    write) timeout 80 python3 -m hccli bench --op site-write --host --json > "$out/write.json" 2>> "$out/err.log" ;;
    chain) timeout 240 python3 -m hccli bench --op site-chain --peers .device/peers --json > "$out/chain.json" \
             2>> "$out/err.log" ;;
    savecache) tar -cf - -C ~ .tilelang/cache | xz -T8 -3 > "$out/tlcache.tar.xz"
               [ "$(stat -c %s "$out/tlcache.tar.xz")" -lt 16000000 ] || rm -f "$out/tlcache.tar.xz" ;;
  esac
  echo "stage $stage: $(( $(date +%s) - t0 )) s"
done
python3 benchmarks/site_summary.py "$out/pre.json" "$out/write.json" "$out/chain.json" 2>/dev/null | tail -80

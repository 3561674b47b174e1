#!/usr/bin/env bash
# What users install, tried as they would: the sdist and the wheel built from it, the wheel
# installed with its dependencies into a fresh environment outside the checkout, every
# command run from a folder outside it. count-params, inspect, diff, run-site, check-port
# and cache run with no torch at all; torch's CPU build comes in only for run-kernel and bench.
# Every command is printed before it runs; the first failure ends the script, naming it.
set -euo pipefail
SRC="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
PIP_FLAGS=(-q --disable-pip-version-check)
W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT
SECONDS=0
case "$W/" in "$SRC"/*) echo "wheel smoke: $W lies inside the checkout" >&2; exit 1;; esac

fail() { echo "wheel smoke: FAILED: $*" >&2; exit 1; }
step() { echo "+ [${SECONDS}s] $*" >&2; "$@" || fail "$* (exit $?)"; }
# the same, its output shown only when it fails (the --help pages)
quiet() {
  echo "+ [${SECONDS}s] $*" >&2
  local out
  local code=0
  out="$("$@" 2>&1)" || code=$?
  [ "$code" -eq 0 ] || { printf '%s\n' "$out" >&2; fail "$* (exit $code)"; }
}
# runs a command and checks that its standard output holds a text
expect() {
  local want="$1"; shift
  echo "+ [${SECONDS}s] $*  (expecting: $want)" >&2
  local out
  out="$("$@")" || fail "$* (exit $?)"
  grep -qF -- "$want" <<<"$out" || { printf '%s\n' "$out" >&2; fail "$*: no '$want' in its output"; }
}

echo "== wheel smoke: building the sdist, and the wheel from it" >&2
step "$PY" -m venv "$W/builder"
step "$W/builder/bin/pip" install "${PIP_FLAGS[@]}" build
step "$W/builder/bin/python" -m build --outdir "$W/dist" "$SRC"
sdists=("$W"/dist/hccli-*.tar.gz)
wheels=("$W"/dist/hccli-*.whl)
[ ${#sdists[@]} -eq 1 ] && [ -f "${sdists[0]}" ] || fail "no single sdist in $W/dist"
[ ${#wheels[@]} -eq 1 ] && [ -f "${wheels[0]}" ] || fail "no single wheel in $W/dist"
# every module of the source tree and every bundled config is in the wheel built from the sdist
step "$W/builder/bin/python" - "$SRC" "${wheels[0]}" <<'EOF'
import pathlib, sys, zipfile
src, wheel = pathlib.Path(sys.argv[1]), sys.argv[2]
want = {p.relative_to(src).as_posix() for p in (src / "hccli").rglob("*.py")}
want |= {f"hccli/sample_configs/{p.name}" for p in (src / "sample_configs").glob("*.json")}
missing = sorted(want - set(zipfile.ZipFile(wheel).namelist()))
if missing:
    sys.exit(f"the wheel lacks {len(missing)} of the source tree's files: {', '.join(missing[:20])}")
print(f"the wheel holds all {len(want)} modules and configs of the source tree", file=sys.stderr)
EOF

echo "== wheel smoke: installing the wheel into a fresh environment, no torch" >&2
step "$PY" -m venv "$W/venv"
step "$W/venv/bin/pip" install "${PIP_FLAGS[@]}" "${wheels[0]}"
step "$W/venv/bin/python" -c "import importlib.util, sys; sys.exit('torch is installed' if importlib.util.find_spec('torch') else 0)"
mkdir "$W/run"
cd "$W/run"
export PATH="$W/venv/bin:$PATH"
export HC_CACHE_DIR="$W/cache"  # `hc cache list` looks at a cache of its own, not the machine's
hash -r
[ "$(command -v hc)" = "$W/venv/bin/hc" ] || fail "hc is not the wheel's console script: $(command -v hc)"
# the installed package, not the checkout, is what runs
step "$W/venv/bin/python" -c "import hccli, sys; sys.exit(0 if hccli.__file__.startswith('$W/venv/') else f'hccli imported from {hccli.__file__}')"

quiet hc --help
expect "hc 0." hc --version
mapfile -t commands < <("$W/venv/bin/python" - <<'EOF'
import click, typer
from hccli.cli.app import register

def walk(group, prefix):
    for name, cmd in sorted(group.commands.items()):
        yield prefix + name
        if isinstance(cmd, click.Group):
            yield from walk(cmd, prefix + name + " ")

print("\n".join(walk(typer.main.get_command(register()), "")))
EOF
)
[ ${#commands[@]} -ge 9 ] || fail "only ${#commands[@]} commands listed by the app: ${commands[*]}"
for c in "${commands[@]}"; do
  # shellcheck disable=SC2086 # "cache list" is two words
  quiet hc $c --help
done

CONFIGS="$("$W/venv/bin/python" -c "import hccli.sample_configs as s, os; print(os.path.dirname(s.__file__))")"
TINY="$CONFIGS/tiny-v4.1.json"
[ -f "$TINY" ] || fail "the bundled tiny config is not at $TINY"
expect "HC parameters" hc count-params
expect "Stream combination (attn): 17 x 5 layers = 85" \
  hc count-params --group 2-7 --role reuse --site attn --component comb
expect '"logical_params"' hc count-params "$CONFIGS/deepseek-v4-pro.json" --model --json
step hc make-checkpoint "$TINY" tiny
step hc count-params "$TINY"
step hc inspect tiny
step hc inspect tiny --verify
step hc inspect tiny --json
step hc diff tiny tiny --limit 4
step hc run-site tiny --layers 0-1 --save golden.safetensors
step hc check-port golden.safetensors --golden golden.safetensors
step hc cache list
# without torch the kernel commands say what to install, in one line, exit 2
set +e
err="$(hc run-kernel --device cpu 2>&1 >/dev/null)"; code=$?
set -e
echo "+ hc run-kernel --device cpu  (no torch: expecting exit 2) -> $code: $err" >&2
[ "$code" -eq 2 ] && [ "$(wc -l <<<"$err")" -eq 1 ] && grep -q "^hc: error: .*torch" <<<"$err" \
  || fail "run-kernel without torch: exit $code, stderr: $err"

echo "== wheel smoke: torch's CPU build, for run-kernel and bench" >&2
# 2.13.0 as .ci/run pins it: the CPU build this machine kind keeps on disk
step "$W/venv/bin/pip" install "${PIP_FLAGS[@]}" torch==2.13.0
step hc run-kernel --checkpoint tiny --layers 2 --site ffn --device cpu
step hc run-kernel --device cpu --tokens 8 --json
step hc bench --device cpu --tokens 64 --reps 2 --warmup 1
echo "== wheel smoke: passed in ${SECONDS} s" >&2

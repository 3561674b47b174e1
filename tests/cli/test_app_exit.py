"""The console entry point's start and end: a successful inspect or count-params, and a diff that
answered (0, or 1: a value changed), ends without the interpreter's teardown, yet flushes everything and runs the atexit functions; errors keep
their codes; the GC and BLAS settings it makes stay within the hc process."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys

import pytest
from conftest import ROOT, SAMPLES

from hccli.checkpoint.synth import make_checkpoint

# The child reports, from an atexit function, what it saw; then the entry point runs.
_CHILD = ("import atexit, gc, os, sys\n"
          "def report():\n"
          "    sys.stderr.write('\\nAT_EXIT blas=%s gc=%s\\n' % (os.environ.get('OPENBLAS_NUM_THREADS'),\n"
          "                     gc.isenabled()))\n"
          "atexit.register(report)\n"
          "class Late:\n"  # says so when the interpreter's teardown frees it
          "    def __del__(self):\n"
          "        sys.stderr.write('TEARDOWN\\n')\n"
          "sys.modules['late'] = Late()\n"
          "sys.argv[0] = 'hc'\n"
          "from hccli.cli.app import main\n"
          "main()\n")


def _hc(*args, env=None):
    full = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                            "MKL_NUM_THREADS")}
    full.update(PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-c", _CHILD, *map(str, args)], capture_output=True, text=True,
                          check=False, timeout=120, cwd=ROOT, env=full)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_checkpoint(SAMPLES / "tiny-v4.1.json", tmp_path_factory.mktemp("ck") / "tiny").outdir


def test_a_quick_exit_still_writes_everything_and_runs_atexit(tiny):
    r = _hc("inspect", tiny, "--json", "--tensors")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # whole: the buffered tail was flushed before the process ended
    assert doc["tensors"] == len(doc["tensor_list"]) > 0
    assert "AT_EXIT blas=1 gc=False" in r.stderr  # one BLAS thread; no GC pass in an inspect run
    assert "TEARDOWN" not in r.stderr
    r = _hc("count-params", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["text_path"]["sites"] > 0
    assert "AT_EXIT blas=None" in r.stderr  # only inspect touches the BLAS setting


def _one_value_changed(src, dst):
    """A copy of src with the last byte of its first shard's largest non-HC tensor changed: (dst, name)."""
    shutil.copytree(src, dst)
    shard = sorted(dst.glob("*.safetensors"))[0]
    with open(shard, "r+b") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        name, entry = max(((n, e) for n, e in header.items() if n != "__metadata__" and ".hc_" not in n),
                          key=lambda kv: kv[1]["data_offsets"][1] - kv[1]["data_offsets"][0])
        f.seek(8 + size + entry["data_offsets"][1] - 1)
        old = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(b"\x01" if old != b"\x01" else b"\x02")
    return dst, name


def test_a_diff_that_answered_ends_quickly_with_its_own_code(tiny, tmp_path):
    b, name = _one_value_changed(tiny, tmp_path / "b")
    r = _hc("diff", tiny, b, "--values", "all", "--json")
    assert r.returncode == 1, r.stderr  # the answer's code, not the quick exit's 0
    doc = json.loads(r.stdout)
    assert [v["name"] for v in doc["values"] if v["status"] != "equal"] == [name]
    assert "AT_EXIT blas=None gc=False" in r.stderr and "TEARDOWN" not in r.stderr
    r = _hc("diff", tiny, tiny, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["exit_code"] == 0 and "TEARDOWN" not in r.stderr
    r = _hc("diff", tiny, tmp_path / "nothing-here", "--json")
    assert r.returncode == 2 and "TEARDOWN" in r.stderr  # an error ends normally


def test_the_users_thread_count_is_kept(tiny):
    r = _hc("inspect", tiny, "--json", env={"OMP_NUM_THREADS": "3"})
    assert r.returncode == 0 and "AT_EXIT blas=None" in r.stderr
    r = _hc("inspect", tiny, "--json", env={"OPENBLAS_NUM_THREADS": "2"})
    assert r.returncode == 0 and "AT_EXIT blas=2" in r.stderr


def test_failures_keep_their_exit_codes_and_end_normally(tiny, tmp_path):
    r = _hc("inspect", tmp_path / "nothing-here", "--json")
    assert r.returncode == 2 and r.stdout == "" and "AT_EXIT" in r.stderr and "Traceback" not in r.stderr
    assert "TEARDOWN" in r.stderr
    r = _hc("count-params", "--layers", "99")
    assert r.returncode == 2 and "--layers 99" in r.stderr and "AT_EXIT" in r.stderr


def test_importing_the_app_leaves_a_library_users_gc_alone():
    code = ("import gc\n"
            "from hccli.cli.app import register\n"
            "on = gc.isenabled()\n"
            "register()\n"
            "gc.disable()\n"
            "register(['inspect'])\n"
            "print(on, gc.isenabled())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.split() == ["True", "False"], out.stderr

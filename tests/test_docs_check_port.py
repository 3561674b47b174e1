"""docs/check-port.md's worked example runs as written: each console block, one shell session,
in a fresh folder beside the repository's sample configs and docs; every output line the
page shows (but `...`) must be a line of what the block printed."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import ROOT


def _blocks(text: str) -> list[tuple[list[str], list[str]]]:
    out = []
    for block in re.findall(r"```console\n(.*?)```", text, re.S):
        commands, shown = [], []
        for line in block.splitlines():
            if line.startswith("$ "):
                commands.append(line[2:])
            elif line.strip() and line.strip() != "...":
                shown.append(line.strip())
        out.append((commands, shown))
    return out


def test_the_worked_example_runs_as_written(tmp_path):
    blocks = _blocks((ROOT / "docs" / "check-port.md").read_text())
    assert len(blocks) >= 3 and all(c for c, _ in blocks)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "hc").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m hccli "$@"\n')
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    for name in ("sample_configs", "docs"):
        (work / name).symlink_to(ROOT / name)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    for commands, shown in blocks:
        done = subprocess.run(["bash", "-c", "\n".join(commands)], cwd=work, env=env, capture_output=True,
                              text=True, timeout=600)
        lines = {line.strip() for line in (done.stdout + done.stderr).splitlines()}
        missing = [s for s in shown if s not in lines]
        assert not missing, (commands, missing, done.stdout[-2000:], done.stderr[-2000:])

"""The checkpoint the inspect benchmarks read: --path, or a full-scale phantom V4.1-Flash (48 shards,
96,085 tensors, data as holes: a few MB on disk) made in a temporary directory."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def phantom_checkpoint(path: Path | None) -> tuple[Path, tempfile.TemporaryDirectory | None]:
    """(the checkpoint, the temporary directory to clean up when one was made)."""
    if path is not None:
        return path, None
    tmp = tempfile.TemporaryDirectory()
    made = Path(tmp.name) / "v41"
    subprocess.run([sys.executable, "-m", "hccli", "make-checkpoint", str(ROOT / "sample_configs" /
                    "deepseek-v4.1-flash.json"), str(made), "--phantom"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    return made, tmp

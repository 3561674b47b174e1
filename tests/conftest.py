"""Shared test helpers: the CLI through Typer's CliRunner, and the sample configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_configs"
PUBLISHED = sorted(p for p in SAMPLES.glob("deepseek-*.json"))
ALL_CONFIGS = sorted(SAMPLES.glob("*.json"))


class Result:
    def __init__(self, r):
        self.exit_code = r.exit_code
        self.stdout = r.stdout
        self.stderr = r.stderr
        self.exception = r.exception

    def json(self):
        return json.loads(self.stdout)


def run_hc(*args: str) -> Result:
    from hccli.cli.app import register

    return Result(CliRunner().invoke(register(), [str(a) for a in args]))


@pytest.fixture
def hc():
    return run_hc

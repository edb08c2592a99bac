"""Shared fixtures: a helper that runs train.py as a user would, and the registries filled."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import hparams  # noqa: F401  (registers the sets)
import rl  # noqa: F401  (fills the registries)

ROOT = Path(__file__).resolve().parents[1]


def run_train(*args: str, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    """Run `python train.py ARGS` from the repository root and capture its output."""
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, **kwargs)


@pytest.fixture
def train_cli():
    return run_train

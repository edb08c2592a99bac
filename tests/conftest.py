"""Shared fixtures: a helper that runs train.py as a user would, and the registries filled."""

from __future__ import annotations

import os
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


def fill_rollout(name: str, overrides: str = ""):
    """An on-policy agent of set `name` whose rollout the Collector has just filled (seed 0), before its update."""
    from rl.collector import Collector
    from rl.envs import make_env
    from rl.registry import hparams as sets
    from rl.trainer import build_agent, seed_everything

    hp = sets[name]()
    if overrides:
        hp.parse(overrides)
    seed_everything(0)
    env = make_env(hp)
    agent = build_agent(hp, env, 0)
    collector = Collector(env, agent, seed=0)
    while not agent.memory.full:
        collector.step()
    env.close()
    return agent


def agent_of(name: str, **settings):
    """An agent of set `name` with `settings`, built as train.py builds it (seed 0); its env closed."""
    from rl.envs import make_env
    from rl.registry import hparams as sets
    from rl.trainer import build_agent

    hp = sets[name]().update(settings)
    env = make_env(hp)
    try:
        return build_agent(hp, env, seed=0)
    finally:
        env.close()


@pytest.fixture
def build():
    return agent_of


@pytest.fixture
def faulty(tmp_path, monkeypatch):
    """The envs of tests/envs/faulty_envs.py, written into this test's tmp_path and importable (`module:EnvId`)."""
    from tests.envs.faulty_envs import forget, write_faulty_envs

    envs = write_faulty_envs(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield envs
    forget(envs)


@pytest.fixture
def filled_rollout():
    return fill_rollout


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which appends the group to each test's id
def pytest_collection_modifyitems(config, items):
    """`-m "not slow"` is the quick inner loop: learning tests and the tests on a Ray cluster are slow. Under
    pytest-xdist (`-n 2 --dist loadgroup`, the README's command) tests go to whichever worker is free, one by one, but
    those of one group: the tests on the Ray cluster, which one child pytest runs (tests/parallel/conftest.py), are one
    group, and so are the container tests (one docker image), so that neither is started twice. The slow tests are
    put first (pytest-xdist hands out the largest group first) so that the two workers end together on quick ones."""
    for item in items:
        cluster, container = "ray_cluster" in getattr(item, "fixturenames", ()), item.get_closest_marker("container")
        if item.get_closest_marker("learning") or container or cluster:
            item.add_marker(pytest.mark.slow)
        if cluster or container:
            item.add_marker(pytest.mark.xdist_group("ray_cluster" if cluster else "container"))
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: each file's order kept


UNGROUPED = pytest.StashKey[str]()  # why the xdist groups were lost in this worker


def pytest_collection_finish(session):
    """pytest-xdist's loadgroup keeps a group on one worker by appending `@group` to its tests' ids in each worker;
    with pytest 9.2 the append is silently lost (pytest-xdist#1386: requirements-dev.txt keeps pytest below 9.2), and
    each worker would start its own Ray child and docker image: the grouped tests fail in one line instead."""
    if session.config.getoption("loadgroup", default=False):  # a worker of -n N --dist loadgroup
        if any(i.get_closest_marker("xdist_group") and "@" not in i.nodeid for i in session.items):
            session.config.stash[UNGROUPED] = (f"pytest-xdist's loadgroup did not group this test (pytest "
                                               f"{pytest.__version__}, pytest-xdist#1386): pip install 'pytest<9.2'")


def pytest_runtest_setup(item):
    if UNGROUPED in item.config.stash and item.get_closest_marker("xdist_group"):
        pytest.fail(item.config.stash[UNGROUPED], pytrace=False)


if os.environ.get("PYTEST_XDIST_WORKER"):  # two workers on two cores: one torch thread each, as train.py runs
    import torch

    torch.set_num_threads(1)


"""Checkpoints and JSON records stay sound when what they are given is not: NaN and inf (in an evaluation record, in
an agent's weights, as an evaluation's score), a full disk in the middle of a write, the temporary files a killed
save leaves, and files that are empty, foreign or hold impossible counters."""

from __future__ import annotations

import errno
import json
import math
import os

import numpy as np
import pytest
import torch

from rl.checkpoint import (
    BestKeeper,
    best_path,
    checkpoint_dir,
    list_checkpoints,
    load_checkpoint,
    load_newest,
    nonfinite,
    read,
    read_best,
    save,
    save_best,
    snapshot,
    write_json,
)
from rl.envs import make_env
from rl.errors import ConfigError, RunStopped
from rl.registry import hparams as sets
from rl.trainer import build_agent


@pytest.fixture(scope="module")
def agent():
    """A real DQN agent on CartPole (built, not trained: a few milliseconds)."""
    hp = sets["dqn_cartpole"]()
    env = make_env(hp)
    torch.manual_seed(0)
    built = build_agent(hp, env, seed=0)
    yield built
    env.close()


def one_line(exc: BaseException) -> str:
    """The message of a user-facing error, checked to be one line with no chained traceback under it."""
    text = str(exc)
    assert "\n" not in text and exc.__cause__ is None, text
    assert exc.__context__ is None or exc.__suppress_context__, text
    return text


def refuse_nan(name):
    raise ValueError(f"strict readers reject {name}")


# ------------------------------------------------------------------------------------------------------ JSON records
def test_json_record_with_nan_is_strict_json(tmp_path):
    path = tmp_path / "eval.json"
    write_json(path, {"mean_return": float("nan"), "returns": [1.0, float("inf"), np.float32("-inf"), np.float64(2.5)],
                      "best": {"mean_return": np.float64("nan"), "step": np.int64(300)}}, indent=2)
    record = json.loads(path.read_text(), parse_constant=refuse_nan)  # a bare NaN/Infinity would raise here
    assert record == {"mean_return": None, "returns": [1.0, None, None, 2.5],
                      "best": {"mean_return": None, "step": 300}}


def test_json_record_on_a_full_disk_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "eval.json"
    write_json(path, {"mean_return": 1.0})

    def full_disk(self, text, *args, **kwargs):
        with open(self, "w") as f:
            f.write(text[:5])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(type(path), "write_text", full_disk)
    with pytest.raises(RunStopped) as caught:
        write_json(path, {"mean_return": 2.0})
    message = one_line(caught.value)
    assert "eval.json" in message and "No space left on device" in message and "previous eval.json is kept" in message
    assert json.loads(path.read_text()) == {"mean_return": 1.0}
    assert [p.name for p in tmp_path.iterdir()] == ["eval.json"]  # no temporary file left


# -------------------------------------------------------------------------------------------------- writing checkpoints
def test_full_disk_during_save_removes_the_temporary_file_and_keeps_the_old_checkpoints(tmp_path, monkeypatch, agent):
    state = snapshot(agent, include_memory=False)
    save(tmp_path, 100, state)
    before = (checkpoint_dir(tmp_path) / f"ckpt_{100:012d}.pt").read_bytes()
    real_save = torch.save

    def full_disk(obj, f, *args, **kwargs):  # some bytes reach the file, then the disk is full
        real_save({"partial": torch.zeros(64)}, f)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(RunStopped) as caught:
        save(tmp_path, 200, state)
    message = one_line(caught.value)
    assert "checkpoint at step 200" in message and "No space left on device" in message
    assert "previous checkpoints are kept" in message and "ckpt_000000000100.pt" in message
    assert [p.name for p in checkpoint_dir(tmp_path).iterdir()] == ["ckpt_000000000100.pt"]
    assert (checkpoint_dir(tmp_path) / "ckpt_000000000100.pt").read_bytes() == before


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_a_real_write_error_is_reported_with_its_reason(tmp_path, agent):
    """/dev/full fails every write with ENOSPC, as a full disk does; torch's writer reports a write that fails in the
    middle of a large state (past the file's buffer) only as "unexpected pos"."""
    from rl.checkpoint import _atomic_save

    folder = checkpoint_dir(tmp_path)
    folder.mkdir()
    (folder / ".best.pt.tmp").symlink_to("/dev/full")
    state = {**snapshot(agent, include_memory=False), "large": torch.zeros(100_000)}
    with pytest.raises(RunStopped) as caught:
        _atomic_save(state, folder / "best.pt", "best.pt of step 7", "nothing kept")
    assert "No space left on device" in one_line(caught.value)
    assert list(folder.iterdir()) == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_a_write_error_that_torch_reports_as_unexpected_pos_is_named(tmp_path, monkeypatch, agent):
    """torch's writer catches the OSError of a failed write and raises its own RuntimeError, which names no reason
    (as on a disk that fills up in the middle of a checkpoint): the OS's error is what the message says."""
    folder = checkpoint_dir(tmp_path)
    folder.mkdir()
    (folder / f".ckpt_{100:012d}.pt.tmp").symlink_to("/dev/full")

    def save_as_torch_does(obj, f, *args, **kwargs):
        try:
            f.write(b"\0" * 1_000_000)  # larger than the file's buffer: straight to /dev/full, which refuses it
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 896 vs 824") from None

    monkeypatch.setattr(torch, "save", save_as_torch_does)
    monkeypatch.setattr("rl.checkpoint.STALE", "no stale files")  # keep the symlink this test writes through
    with pytest.raises(RunStopped) as caught:
        save(tmp_path, 100, snapshot(agent, include_memory=False))
    message = one_line(caught.value)
    assert "No space left on device" in message and "unexpected pos" not in message
    assert list(folder.iterdir()) == []


def test_stale_temporary_file_is_removed_by_the_next_save(tmp_path, agent):
    folder = checkpoint_dir(tmp_path)
    folder.mkdir()
    stale = folder / f".ckpt_{100:012d}.pt.tmp"
    stale.write_bytes(b"half a checkpoint, its save killed")
    save(tmp_path, 200, snapshot(agent, include_memory=False))
    assert sorted(p.name for p in folder.iterdir()) == ["ckpt_000000000200.pt"]


def test_nonfinite_weights_are_never_saved(tmp_path, agent):
    state = snapshot(agent, include_memory=False)
    assert nonfinite(state) is None
    save(tmp_path, 100, state)
    name, weight = next(iter(state["agent"]["networks"].items()))
    key = next(k for k, t in weight.items() if t.is_floating_point())
    broken = {**state, "agent": {**state["agent"], "networks": {**state["agent"]["networks"], name: {
        **weight, key: torch.full_like(weight[key], float("nan"))}}}}
    assert nonfinite(broken) == f"agent.networks.{name}.{key}"
    with pytest.raises(RunStopped) as caught:
        save(tmp_path, 200, broken)
    message = one_line(caught.value)
    assert f"agent.networks.{name}.{key}" in message and "step 200" in message
    assert "ckpt_000000000100.pt is kept" in message
    assert [s for s, _ in list_checkpoints(tmp_path)] == [100]
    with pytest.raises(RunStopped, match="not saved as best.pt"):
        save_best(tmp_path, 200, 10.0, broken)
    assert not best_path(tmp_path).exists()


def test_nonfinite_looks_at_optimizer_state_and_not_at_stored_experience():
    state = {"agent": {"networks": {"q": {"w": torch.ones(3)}},
                       "optimizers": {"q": {"exp_avg_sq": torch.tensor([1.0, float("inf")]), "steps": 3}},
                       "memory": {"obs": torch.full((4,), float("nan"))}},
             "episode_stats": {"returns": [float("nan")]}}
    assert nonfinite(state) == "agent.optimizers.q.exp_avg_sq"
    state["agent"]["optimizers"]["q"]["exp_avg_sq"] = torch.ones(2)
    assert nonfinite(state) is None  # a NaN observation or reward in the replay memory is data


# ------------------------------------------------------------------------------------------------------------- best.pt
class Evaluated:
    """What BestKeeper.offer reads of an agent: its state and its step count."""

    def __init__(self, agent, env_steps):
        self.agent, self.env_steps = agent, env_steps

    def state_dict(self, include_memory=True):
        return self.agent.state_dict(include_memory=include_memory)


@pytest.mark.parametrize("scores", [[(100, 20.0), (200, float("nan"))], [(100, float("nan")), (200, 20.0)],
                                    [(100, float("inf")), (200, 20.0)]])
def test_a_nonfinite_evaluation_is_never_the_best(tmp_path, agent, scores):
    keeper = BestKeeper(tmp_path)
    taken = [keeper.offer(Evaluated(agent, step), [score, score]) for step, score in scores]
    assert taken == [math.isfinite(score) for _, score in scores]
    best = read_best(tmp_path)
    assert (best["step"], best["mean_return"]) == next((s, r) for s, r in scores if math.isfinite(r))


def test_a_best_pt_with_a_nonfinite_score_is_treated_as_absent(tmp_path, agent, capsys):
    keeper = BestKeeper(tmp_path)
    keeper.offer(Evaluated(agent, 100), [5.0])
    state = torch.load(best_path(tmp_path), weights_only=True)
    torch.save({**state, "mean_return": float("nan")}, best_path(tmp_path))  # as an older rl wrote it
    assert read_best(tmp_path) is None
    assert "mean return is nan" in capsys.readouterr().err
    assert BestKeeper(tmp_path).offer(Evaluated(agent, 200), [1.0])  # the next evaluation replaces it
    assert read_best(tmp_path)["step"] == 200


# ------------------------------------------------------------------------------------------------------------- reading
def test_zero_byte_checkpoint_says_so(tmp_path, agent, capsys):
    save(tmp_path, 100, snapshot(agent, include_memory=False))
    empty = checkpoint_dir(tmp_path) / f"ckpt_{200:012d}.pt"
    empty.write_bytes(b"")
    assert load_newest(tmp_path)[1].name == "ckpt_000000000100.pt"
    assert "ckpt_000000000200.pt (empty file (0 bytes: its write was cut off))" in capsys.readouterr().err
    with pytest.raises(ConfigError) as caught:
        load_checkpoint(tmp_path, str(empty))
    assert "empty file (0 bytes: its write was cut off)" in one_line(caught.value)


def test_pickled_objects_are_named_in_one_sentence(tmp_path):
    path = tmp_path / "foreign.pt"
    torch.save({"complete": True, "agent": {}, "extra": Evaluated(None, 0)}, path)
    with pytest.raises(ConfigError) as caught:
        load_checkpoint(tmp_path, str(path))
    message = one_line(caught.value)
    assert "holds pickled Python objects" in message and "weights_only loading refuses" in message
    assert "rl never unpickles code" in message and "Evaluated" in message


def test_long_messages_are_cut_between_words(tmp_path):
    from rl.checkpoint import _short

    text = _short(RuntimeError("word " * 60))
    assert len(text) <= len("RuntimeError: ") + 120 and text.endswith("word...")


def test_negative_counters_are_skipped_as_corrupt(tmp_path, agent, capsys):
    state = snapshot(agent, include_memory=False)
    save(tmp_path, 100, state)
    crafted = {**state, "agent": {**state["agent"], "counters": {**state["agent"]["counters"], "env_steps": -500}}}
    save(tmp_path, 200, crafted)
    found, path = load_newest(tmp_path)
    assert path.name == "ckpt_000000000100.pt" and found["step"] == 100
    assert "ckpt_000000000200.pt (negative env_steps -500)" in capsys.readouterr().err
    with pytest.raises(ConfigError) as caught:
        load_checkpoint(tmp_path, str(checkpoint_dir(tmp_path) / "ckpt_000000000200.pt"))
    assert "negative env_steps -500" in one_line(caught.value)
    torch.save({**state, "complete": True, "step": -3}, tmp_path / "step.pt")
    with pytest.raises(ValueError, match="negative step -3"):
        read(tmp_path / "step.pt")

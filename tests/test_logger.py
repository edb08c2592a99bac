"""The logger's progress.csv over a resumed run: the history up to the checkpoint, one running wall clock."""

from __future__ import annotations

import csv
import time

import pytest

import rl.logger
from rl.logger import Logger


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(rl.logger, "time", fake)
    return fake


def rows(folder) -> list[tuple[float, float]]:
    with open(folder / "progress.csv", newline="") as f:
        return [(float(r["env_steps"]), float(r["wall_time_s"])) for r in csv.DictReader(f)]


def sitting(folder, clock, start: int, steps: list[int], seconds_per_row: float = 1.0) -> Logger:
    logger = Logger(folder, 100, start, quiet=True)
    for step in steps:
        clock.now += seconds_per_row
        logger.log(step, {"charts/episode_return_mean": step / 10})
    logger.close()
    return logger


def test_a_resumed_run_keeps_its_history_to_the_checkpoint_and_continues_its_clock(tmp_path, clock):
    sitting(tmp_path, clock, 0, [10, 20, 30])  # checkpoint at 20, stopped after logging 30
    clock.now += 500.0  # the machine was elsewhere between the sittings
    resumed = sitting(tmp_path, clock, 20, [30, 40])
    assert rows(tmp_path) == [(10, 1.0), (20, 2.0), (30, 3.0), (40, 4.0)]
    clock.now += 2.0
    assert resumed.wall_time_s() == pytest.approx(6.0)  # what eval.json reports: the run's time, every sitting


def test_a_file_whose_clock_restarted_at_each_resume_is_read_and_rewritten_as_one_clock(tmp_path, clock):
    (tmp_path / "progress.csv").write_text("env_steps,wall_time_s,episode_return_mean\n"
                                           "10,1.0,1\n20,2.0,2\n30,3.0,3\n"  # checkpoint at 20, killed after 30
                                           "30,0.5,7\n40,1.5,8\n")  # logged by the resumed process, as before
    sitting(tmp_path, clock, 40, [50])
    assert rows(tmp_path) == [(10, 1.0), (20, 2.0), (30, 2.5), (40, 3.5), (50, 4.5)]


def test_tensorboard_forgets_the_steps_done_again(tmp_path, clock):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sitting(tmp_path, clock, 0, [10, 20, 30])
    # TensorBoard reads a folder's event files in name order: events.out.tfevents.<second>.<host>.<pid>.<counter>.
    # Resumed sittings are processes seconds apart; two in one second of one process (this test) order by the
    # counter as text, and ".10" sorts before ".9" (a flake in CI): the second sitting begins a second later
    time.sleep(1.05)
    sitting(tmp_path, clock, 20, [30, 40])
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [e.step for e in events.Scalars("charts/episode_return_mean")] == [10, 20, 30, 40]


def test_steps_per_s_leaves_out_the_time_spent_evaluating(tmp_path, clock):
    logger = Logger(tmp_path, 100, 0, quiet=True)
    clock.now += 1.0
    assert logger.log(10, {})["charts/steps_per_s"] == pytest.approx(10.0)
    clock.now += 1.0 + 4.0  # 1 s training, then a 4 s evaluation
    logger.left_out(4.0)
    row = logger.log(20, {"eval/return_mean": 1.0})
    assert row["charts/steps_per_s"] == pytest.approx(10.0)  # the training's rate, not 10 steps in 5 s
    assert row["wall_time_s"] == pytest.approx(6.0)  # the wall clock keeps the evaluation
    logger.close()


def test_the_final_rows_steps_per_s_leaves_out_stopping_the_workers(tmp_path, monkeypatch):
    """The last row came after the workers stopped and the last checkpoint: Breakout's said 77 steps/s for a run
    training at 3,000 (its 500 steps over 6.5 s of stopping 7 workers and saving)."""
    import rl.run

    slow = rl.run._closing

    def closing(*args):
        time.sleep(3.0)  # as long as 7 workers take to stop
        slow(*args)

    monkeypatch.setattr(rl.run, "_closing", closing)
    with rl.make("dqn_cartpole", tmp_path, "train_steps=250,log_interval=100,eval_interval=0,eval_episodes=1") as run:
        run.train()
    with open(tmp_path / "progress.csv", newline="") as f:
        last = list(csv.DictReader(f))[-1]
    assert float(last["env_steps"]) == 250
    assert float(last["steps_per_s"]) > 50 / 2.0  # 50 steps of training, not 50 steps in over 3 s


def test_a_row_at_the_last_rows_step_keeps_its_rate(tmp_path, clock):
    """The final evaluation's row comes at the step of the last training row when the log interval divides the
    budget: Hopper's ended on "0 steps/s"."""
    logger = Logger(tmp_path, 20, 0, quiet=True)
    clock.now += 2.0
    logger.log(20, {})
    clock.now += 5.0
    assert logger.log(20, {"eval/return_mean": 1.0})["charts/steps_per_s"] == pytest.approx(10.0)

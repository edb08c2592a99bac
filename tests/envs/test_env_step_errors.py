"""An env whose `step` raises ends a one-process run in one line naming the env, its exception and the agent step
(rl/collector.py), exit status 2 through train.py, whichever vector engine steps it."""

from __future__ import annotations

import warnings

import pytest

from rl.checkpoint import list_checkpoints
from rl.registry import hparams as sets
from tests.envs.faulty_envs import FAIL_AT


@pytest.mark.parametrize("vector_mode", ["sync", "async"])
def test_an_env_that_raises_mid_run_is_one_line_and_exit_2(tmp_path, capsys, faulty, vector_mode):
    """Bugs caught: the env's exception escaping train.py as a traceback (exit 1), its second line printed, and
    (async) gymnasium logging the env process's traceback as warnings around the line."""
    import train

    num_envs = sets["ppo_cartpole"]().num_envs
    with warnings.catch_warnings(record=True) as logged:
        warnings.simplefilter("always")
        status = train.main(["--hparams", "ppo_cartpole", "--env", faulty.diverging, "--output_dir",
                             str(tmp_path / "run"), "--train_steps", "5000", "--hparam_override",
                             f"eval_interval=0,vector_mode={vector_mode}"])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    raised = (f"the env {faulty.diverging!r} raised SimulatorError: the simulation diverged at step {FAIL_AT} at "
              f"agent step {(FAIL_AT - 1) * num_envs}")
    assert err.startswith(f"error: {raised}"), err
    saved = (FAIL_AT - 1) * num_envs  # the steps before it are checkpointed (rl/run.py), then the run ends
    assert f"saved a checkpoint at step {saved}" in err, err
    assert [step for step, _ in list_checkpoints(tmp_path / "run")] == [saved]
    assert not [w for w in logged if "ERROR" in str(w.message)], [str(w.message) for w in logged]

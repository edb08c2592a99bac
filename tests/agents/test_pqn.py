"""PQN (rl/agents/pqn.py): its Q(lambda) returns against their definition on a rollout with a termination and a
truncation inside, its loss by hand, its RAdam against torch's, its LayerNorm networks, the agent's update, an exact
resume, and whole runs of `pqn_cartpole` (checkpointed and resumed) and `pqn_atari` (a tiny budget) through train.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from rl.agents.flat_radam import FlatRAdam
from rl.checkpoint import load_newest, restore, save, snapshot
from rl.collector import Collector
from rl.envs import make_env
from rl.errors import ConfigError
from rl.grad_comp.pqn import pqn
from rl.memory.q_lambda import fill_q_lambda
from rl.memory.rollout import RolloutBatch, RolloutMemory
from rl.models.layer_norm import LayerNormMLP, LayerNormNatureCNN
from rl.registry import hparams as sets
from rl.trainer import build_agent

GAMMA, LAM = 0.9, 0.65
# max_a Q of each observation (an observation is its id). 100 and 101 are final observations of ended episodes: the
# truncated one's value must be bootstrapped from, the terminated one's never
VALUE = {0: 1.0, 1: 2.0, 2: 3.0, 3: -7.0, 4: 4.0, 5: 6.0, 6: 0.5, 100: 5.0, 101: 50.0,
         10: 0.2, 11: 0.4, 12: -1.0, 13: 1.5, 14: 2.5, 15: 3.5, 16: -2.0}
# env 0: truncated at step 2 (final observation 100, then a new episode from 3), terminated at step 4 (final
# observation 101, then a new episode from 5); env 1: terminated at step 1, then one episode to the rollout's end
OBS = [[0, 1, 2, 3, 4, 5], [10, 11, 12, 13, 14, 15]]
NEXT_OBS = [[1, 2, 100, 4, 101, 6], [11, 101, 13, 14, 15, 16]]
TERMINATED = [[0, 0, 0, 0, 1, 0], [0, 1, 0, 0, 0, 0]]
TRUNCATED = [[0, 0, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0]]
REWARDS = [[1.0, 0.5, 2.0, -1.0, 3.0, 1.5], [0.25, 1.0, -0.5, 2.0, 0.75, 1.25]]


def max_q_of(obs: torch.Tensor, hidden=None) -> torch.Tensor:
    return torch.tensor([VALUE[int(o)] for o in obs.flatten()])


def rollout() -> RolloutMemory:
    mem = RolloutMemory(6, 2, (1,), np.float32)
    for t in range(6):
        column = [OBS[0][t], OBS[1][t]]
        mem.add(np.array(column, np.float32)[:, None], np.zeros(2, np.int64), np.array([REWARDS[0][t], REWARDS[1][t]]),
                np.array([NEXT_OBS[0][t], NEXT_OBS[1][t]], np.float32)[:, None],
                np.array([TERMINATED[0][t], TERMINATED[1][t]]), np.array([TRUNCATED[0][t], TRUNCATED[1][t]]),
                torch.tensor([VALUE[c] for c in column]), torch.zeros(2))
    return mem


def by_definition(env: int, t: int) -> float:
    """The lambda-return as the lambda-weighted mean of n-step returns, up to the first step m that ends the episode
    or the rollout: (1 - lambda) sum_{n < m} lambda^(n-1) G(n) + lambda^(m-1) G(m), where G(n) sums n discounted
    rewards and bootstraps from max Q of the n-th step's real next observation unless that step terminated."""
    end = t
    while end < 5 and not (TERMINATED[env][end] or TRUNCATED[env][end]):
        end += 1
    m = end - t + 1
    total = 0.0
    for n in range(1, m + 1):
        last = t + n - 1
        g = sum(GAMMA**k * REWARDS[env][t + k] for k in range(n))
        g += GAMMA**n * (1 - TERMINATED[env][last]) * VALUE[NEXT_OBS[env][last]]
        total += ((1 - LAM) * LAM ** (n - 1) if n < m else LAM ** (m - 1)) * g
    return total


def test_q_lambda_returns_follow_their_definition_through_terminations_and_truncations():
    """Bugs caught: termination and truncation treated the same (the truncated step not bootstrapping, or the
    terminated one bootstrapping), a truncated episode bootstrapping from the next episode's first observation
    (-7.0) instead of its own final one (5.0), a trace running on into the next episode, and the rollout's last step
    not bootstrapping from its next observation."""
    mem = rollout()
    fill_q_lambda(mem, mem.values[:6].clone(), max_q_of, GAMMA, LAM)
    expected = torch.tensor([[by_definition(env, t) for env in range(2)] for t in range(6)])
    torch.testing.assert_close(mem.returns[:6], expected)
    assert float(mem.returns[2, 0]) == pytest.approx(2.0 + GAMMA * 5.0)  # truncated: its own final observation
    assert float(mem.returns[4, 0]) == pytest.approx(3.0)  # terminated: no bootstrap
    torch.testing.assert_close(mem.advantages[:6], mem.returns[:6] - mem.values[:6])


def test_pqn_loss_is_the_mean_squared_error_of_the_taken_actions():
    """Bug caught: a loss on the wrong action's Q-value, or gradient reaching the actions not taken."""
    q = torch.tensor([[1.0, 2.0], [3.0, -1.0], [0.5, 0.0]], requires_grad=True)
    batch = RolloutBatch(obs=None, actions=torch.tensor([1, 0, 1]), old_log_probs=None, old_values=None,
                         advantages=None, returns=torch.tensor([3.0, 1.0, -2.0]))
    loss, info = pqn(q, batch)
    assert float(loss.detach()) == pytest.approx((1.0 + 4.0 + 4.0) / 3)
    assert float(info["losses/q_values"]) == pytest.approx((2.0 + 3.0 + 0.0) / 3)
    loss.backward()
    torch.testing.assert_close(q.grad, torch.tensor([[0.0, -2.0], [4.0, 0.0], [0.0, 4.0]]) / 3)
    assert pqn(q, batch, diagnostics=False)[1] == {}


def test_flat_radam_takes_torch_radams_steps():
    """Bug caught: the rectified step taken from the first step (RAdam is momentum SGD while rho_t <= 5, its first
    5 steps at beta2 = 0.999), or a wrong rectification or bias correction after that."""
    torch.manual_seed(0)
    ours, theirs = torch.nn.Linear(5, 3), torch.nn.Linear(5, 3)
    theirs.load_state_dict(ours.state_dict())
    flat = FlatRAdam(ours, lr=1e-2)
    reference = torch.optim.RAdam(theirs.parameters(), lr=1e-2, foreach=False)
    for step in range(12):
        x = torch.randn(8, 5)
        flat.zero_grad()
        ours(x).square().mean().backward()
        flat.step()
        reference.zero_grad()
        theirs(x).square().mean().backward()
        reference.step()
        for p, q in zip(ours.parameters(), theirs.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=f"step {step + 1}")


def test_layer_norm_torsos_normalise_their_layers():
    """Bug caught: a torso without its LayerNorms: CleanRL's Atari network has 1,727,392 parameters in its torso, and
    with zero biases a normalised MLP's features do not depend on the scale of its input (a plain one's grow with
    it)."""
    cnn = LayerNormNatureCNN((4, 84, 84))
    assert sum(p.numel() for p in cnn.parameters()) == 1_727_392
    assert cnn(torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)).shape == (2, 512)
    mlp = LayerNormMLP(4, [120, 84])
    with torch.no_grad():
        for layer in mlp.layers:
            layer.bias.zero_()
    x = torch.randn(16, 4)
    torch.testing.assert_close(mlp(3 * x), mlp(300 * x), rtol=1e-4, atol=1e-4)
    assert mlp(x).shape == (16, 84) and float((mlp(x) > 0).float().mean()) > 0.2


def test_the_update_learns_from_acting_time_values_in_epochs_of_minibatches(filled_rollout):
    """The rollout keeps max_a Q of each observation as the network gave it when acting, and an update takes
    epochs x (rollout / batch_size) gradient steps. Bugs caught: the chosen action's Q-value stored instead of the
    max (epsilon explores at the start), an epoch or minibatch skipped."""
    agent = filled_rollout("pqn_cartpole", "num_steps=16,batch_size=16,epochs=3")
    mem = agent.memory
    with torch.no_grad():
        q = agent.q(mem.obs[:16].flatten(0, 1)).view(16, 4, 2)
    torch.testing.assert_close(mem.values[:16], q.amax(-1))
    assert (q.argmax(-1) != mem.actions[:16]).any()  # epsilon 1 at the start: many actions are not the greedy one
    info = agent.update()
    assert agent.grad_steps == 3 * (16 * 4 // 16) and agent.updates == 1 and len(agent.memory) == 0
    assert {"losses/td_loss", "losses/q_values", "charts/epsilon", "charts/learning_rate"} <= set(info)


def test_pqn_runs_in_one_process():
    """Collection or gradient workers are refused in one line at start (the agent takes no worker's rollouts)."""
    hp = sets["pqn_cartpole"]().parse("num_workers=2")
    env = make_env(sets["pqn_cartpole"]())
    with pytest.raises(ConfigError, match="num_workers=0"):
        build_agent(hp, env, 0)
    env.close()


def test_a_restored_pqn_continues_identically(tmp_path):
    """Restored from a checkpoint at an update's end, PQN acts and learns as the one that never stopped. Bug
    caught: the exploration or shuffling generator, or RAdam's step count, left out of the checkpoint."""
    from tests.test_resume_identical import Lockstep

    hp = sets["pqn_cartpole"]().parse("num_steps=16,batch_size=32,epochs=2,train_steps=2000")
    env = make_env(hp)
    original = build_agent(hp, env, seed=0)
    lockstep = Lockstep(original)
    collector = Collector(env, lockstep, seed=0)
    for _ in range(48):  # three updates, the last at this step: the checkpoint holds an empty rollout
        collector.step()
        original.update()
    save(tmp_path, original.env_steps, snapshot(original))
    torch.manual_seed(99)
    restored = build_agent(hp, env, seed=99)
    restore(restored, load_newest(tmp_path)[0])
    assert restored.optimizer.steps == original.optimizer.steps == 3 * 2 * 2
    lockstep.agents.append(restored)
    losses = []
    for _ in range(48):  # both see the same observations and must choose the same actions
        collector.step()
        a, b = original.update(), restored.update()
        if a:
            assert float(a["losses/td_loss"]) == float(b["losses/td_loss"])
            losses.append(float(a["losses/td_loss"]))
    env.close()
    assert len(losses) == 3
    assert torch.equal(original.optimizer.param, restored.optimizer.param)


def test_pqn_cartpole_checkpoints_and_resumes(tmp_path, train_cli):
    """Through train.py: a run stops mid-rollout with a checkpoint and a second command continues it to the larger
    budget (its partial rollout restored, cut where the envs restart)."""
    out = tmp_path / "pqn"
    args = ("--hparams", "pqn_cartpole", "--output_dir", str(out), "--eval_episodes", "2", "--hparam_override",
            "num_steps=32,eval_interval=0,checkpoint_interval=320,log_interval=128")
    res = train_cli(*args, "--train_steps", "320")  # 2.5 rollouts of 4 envs x 32 steps
    assert res.returncode == 0, res.stderr[-3000:]
    state = torch.load(out / "checkpoints" / f"ckpt_{320:012d}.pt", weights_only=True)
    assert state["agent"]["memory"]["pos"] == 16 and state["agent"]["counters"]["updates"] == 2
    res = train_cli(*args, "--train_steps", "640")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resuming from step 320" in res.stdout
    assert json.loads((out / "eval.json").read_text())["env_steps"] == 640
    state = torch.load(out / "checkpoints" / f"ckpt_{640:012d}.pt", weights_only=True)
    assert state["agent"]["counters"]["updates"] == 5  # the restored half rollout finished, then two more


def atari_roms_present() -> bool:
    try:
        from ale_py import roms
    except ImportError:
        return False
    return "pong" in roms.get_all_rom_ids()


@pytest.mark.skipif(not atari_roms_present(), reason="needs ale-py and its Pong ROM")
def test_pqn_atari_builds_and_updates_with_a_tiny_budget(tmp_path, train_cli):
    """The Atari set with 4 envs instead of 128: LayerNorm Nature CNN, uint8 frames in the rollout, two updates."""
    out = tmp_path / "pong"
    res = train_cli("--hparams", "pqn_atari", "--output_dir", str(out), "--train_steps", "64", "--eval_episodes", "1",
                    "--hparam_override", "num_envs=4,num_steps=8,batch_size=16,epochs=1,eval_interval=0,"
                    "max_episode_steps=40,checkpoint_interval=64,log_interval=32")
    assert res.returncode == 0, res.stderr[-3000:]
    state = torch.load(out / "checkpoints" / f"ckpt_{64:012d}.pt", weights_only=True)
    assert state["agent"]["counters"]["updates"] == 2 and state["agent"]["counters"]["grad_steps"] == 2 * 2
    assert "torso.norms.0.weight" in state["agent"]["networks"]["q"]  # the LayerNorm Nature CNN
    assert json.loads((out / "eval.json").read_text())["env_steps"] == 64

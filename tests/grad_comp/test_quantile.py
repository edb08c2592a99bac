"""QR-DQN: the quantile Huber loss against hand computations, its minimiser, the `qrdqn` and `double_qrdqn` losses on
table networks, the DQN agent's assembly check, and train.py runs with the DQN family's options: n-step returns
with prioritized replay, and Ape-X's collection workers."""

from __future__ import annotations

import json

import pytest
import torch

from rl.errors import ConfigError
from rl.grad_comp.quantile import quantile_fractions, quantile_huber
from rl.memory.replay import Transitions
from rl.registry import grad_comp
from rl.registry import hparams as sets


def test_fractions_are_the_midpoints():
    assert torch.allclose(quantile_fractions(4), torch.tensor([0.125, 0.375, 0.625, 0.875]))


def test_quantile_huber_loss_by_hand():
    """Atoms [0, 1] (fractions 0.25, 0.75), targets [2, -0.5]; u = target - atom:
    atom 0: u = 2 -> 0.25 (2 - 0.5) = 0.375;     u = -0.5 -> 0.75 (0.5 * 0.25) = 0.09375
    atom 1: u = 1 -> 0.75 (0.5 * 1)  = 0.375;    u = -1.5 -> 0.25 (1.5 - 0.5) = 0.25
    Bug caught: the fractions flipped (1 - tau, or |1{u < 0} - tau| read as tau for negative u), which gives atom 0
    1.125, 0.03125 and atom 1 0.125, 0.75."""
    pairs = quantile_huber(torch.tensor([[0.0, 1.0]]), torch.tensor([[2.0, -0.5]]))
    assert torch.allclose(pairs, torch.tensor([[[0.375, 0.09375], [0.375, 0.25]]]))
    assert torch.isclose(pairs.sum(-2).mean(), torch.tensor(0.546875))


def test_quantile_huber_is_quadratic_inside_kappa_and_linear_outside():
    u = torch.tensor([[0.5, 1.0, 3.0]])
    single = quantile_huber(torch.zeros(1, 1), u)[0, 0] / 0.5  # one atom: tau = 0.5
    assert torch.allclose(single, torch.tensor([0.125, 0.5, 2.5]))


def test_atoms_settle_at_the_quantiles_of_their_fractions():
    """Minimising the loss over samples of U(0, 100) puts atom i at 100 (2i + 1) / 8 (the Huber region, |u| <= 1,
    is 2% of the range). Bug caught: fractions in the wrong order or the wrong sign, which sorts the atoms the
    other way round or sends them to the ends."""
    targets = torch.linspace(0, 100, 2001).unsqueeze(0)
    atoms = torch.full((1, 4), 50.0, requires_grad=True)
    opt = torch.optim.Adam([atoms], lr=1.0)
    for _ in range(600):
        opt.zero_grad()
        quantile_huber(atoms, targets).sum(-2).mean().backward()
        opt.step()
    assert torch.allclose(atoms.detach(), torch.tensor([[12.5, 37.5, 62.5, 87.5]]), atol=1.5), atoms


class TableQuantiles(torch.nn.Module):
    """Atoms [B, A, N] from a fixed table [S, A, N] indexed by the observation's value; Q is their mean."""

    def __init__(self, table):
        super().__init__()
        self.table = torch.nn.Parameter(torch.tensor(table))

    def quantiles(self, obs):
        return self.table[obs.long().view(-1)]

    def forward(self, obs):
        return self.quantiles(obs).mean(-1)


def batch(reward=0.5, discount=0.5, terminated=0.0, weights=None):
    one = torch.ones(1)
    return Transitions(obs=torch.zeros(1), actions=one.long(), rewards=one * reward, next_obs=one,
                       terminated=one * terminated, truncated=0 * one, discounts=one * discount,
                       weights=None if weights is None else torch.tensor(weights), indices=one.long())


# state 0: action 1's atoms [0, 1]; state 1 (next): action 0 [0, 0] (mean 0), action 1 [1, 3] (mean 2)
TARGET_TABLE = [[[9.0, 9.0], [0.0, 1.0]], [[0.0, 0.0], [1.0, 3.0]]]


def test_qrdqn_loss_by_hand():
    """Target atoms r + d Z(s', a*) = 0.5 + 0.5 [1, 3] = [1, 2] (a* = 1, the target's best mean); atoms [0, 1]:
    atom 0: u = 1 -> 0.25 * 0.5 = 0.125, u = 2 -> 0.25 * 1.5 = 0.375; atom 1: u = 0 -> 0, u = 1 -> 0.75 * 0.5 = 0.375;
    summed over the atoms, averaged over the targets: (0.125 + 0.75) / 2 = 0.4375. Bugs caught: a mean over the
    atoms instead of their sum (a factor N), or a* picked otherwise than by the target's mean (argmin; the online
    network's, double Q's)."""
    net = TableQuantiles(TARGET_TABLE)
    loss, info = grad_comp["qrdqn"](net, TableQuantiles(TARGET_TABLE), batch(), "huber")
    assert torch.isclose(loss, torch.tensor(0.4375))
    assert torch.allclose(info["td_error"], torch.tensor([0.4375]))
    loss.backward()
    # atom 0 (tau 0.25) is below both targets: its gradient pushes it up (negative), atom 1 is between them
    assert net.table.grad[0, 1, 0] < 0 and net.table.grad[0, 0].abs().sum() == 0


def test_termination_ignores_the_next_state_and_weights_scale_the_loss():
    """Terminated: the target atoms are [r, r] = [0.5, 0.5]; atom 0: u = 0.5 -> 0.25 * 0.125, atom 1: u = -0.5 ->
    0.25 * 0.125, per target; summed: 0.0625. An importance weight of 2 doubles it (td_error stays unweighted)."""
    table = TableQuantiles(TARGET_TABLE)
    loss, info = grad_comp["qrdqn"](table, table, batch(terminated=1.0, weights=[2.0]), "huber")
    assert torch.isclose(loss, torch.tensor(0.125)) and torch.allclose(info["td_error"], torch.tensor([0.0625]))


def test_double_qrdqn_lets_the_online_network_pick():
    """The online network prefers action 0 at s' (its atoms [5, 5]); the target evaluates it: [0, 0] -> target
    atoms [0.5, 0.5], the loss 0.0625 as under termination. `qrdqn` would pick action 1 (the target's best)."""
    online = TableQuantiles([[[9.0, 9.0], [0.0, 1.0]], [[5.0, 5.0], [0.0, 0.0]]])
    loss, _ = grad_comp["double_qrdqn"](online, TableQuantiles(TARGET_TABLE), batch(), "huber")
    assert torch.isclose(loss, torch.tensor(0.0625))
    loss, _ = grad_comp["qrdqn"](online, TableQuantiles(TARGET_TABLE), batch(), "huber")
    assert torch.isclose(loss, torch.tensor(0.4375))


def test_the_dqn_agent_refuses_networks_the_loss_cannot_read(build):
    """Bug caught: the quantile losses registered without their declaration, so that `model=q_network` starts and
    fails at the first update with an AttributeError."""
    with pytest.raises(ConfigError, match="model=quantile_network"):
        build("qrdqn_cartpole", model="q_network")
    with pytest.raises(ConfigError, match="model=c51_network"):
        build("qrdqn_cartpole", grad_comp="c51")
    agent = build("qrdqn_cartpole", dueling=True, noisy=True, grad_comp="double_qrdqn")
    assert agent.q.quantiles(torch.zeros(3, 4)).shape == (3, 2, 10)


def test_qrdqn_cartpole_is_the_zoos_entry():
    hp = sets["qrdqn_cartpole"]()
    assert (hp.num_quantiles, hp.lr, hp.batch_size, hp.train_freq, hp.gradient_steps) == (10, 2.3e-3, 64, 256, 128)
    assert hp.adam_eps == pytest.approx(0.01 / 64) and hp.max_grad_norm == 0
    atari = sets["qrdqn_atari"]()
    assert (atari.env_type, atari.torso, atari.train_steps, atari.exploration_fraction) == (
        "atari", "nature_cnn", 10_000_000, 0.025)
    assert (atari.buffer_size, atari.lr, atari.num_quantiles) == (1_000_000, 5e-5, 200)


# ---------------------------------------------------------------------------------------------------- train.py
TINY = "learning_starts=100,buffer_size=2000,train_freq=20,gradient_steps=2,eval_interval=0,checkpoint_interval=200"


def test_qrdqn_trains_with_n_step_returns_and_prioritized_replay(tmp_path, train_cli):
    out = tmp_path / "run"
    res = train_cli("--hparams", "qrdqn_cartpole", "--output_dir", str(out), "--train_steps", "400",
                    "--eval_episodes", "1", "--hparam_override",
                    f"{TINY},n_step=3,memory=prioritized,grad_comp=double_qrdqn,log_interval=200")
    assert res.returncode == 0, res.stderr[-3000:]
    ev = json.loads((out / "eval.json").read_text())
    assert ev["env_steps"] == 400 and len(ev["returns"]) == 1
    recorded = json.loads((out / "hparams.json").read_text())
    assert "prioritized" in json.dumps(recorded) and '"n_step": 3' in json.dumps(recorded)
    assert "qrdqn_loss" in (out / "progress.csv").read_text()


def test_qrdqn_trains_with_a_collection_worker(tmp_path, train_cli):
    """Ape-X's arrangement: the DQN agent learns, one worker process acts with its published weights."""
    out = tmp_path / "run"
    res = train_cli("--hparams", "qrdqn_cartpole", "--output_dir", str(out), "--train_steps", "400",
                    "--num_workers", "1", "--eval_episodes", "1", "--hparam_override",
                    f"{TINY},worker_steps=25,log_interval=200")
    assert res.returncode == 0, res.stderr[-3000:]
    ev = json.loads((out / "eval.json").read_text())
    assert ev["env_steps"] == 400
    assert "qrdqn_loss" in (out / "progress.csv").read_text()

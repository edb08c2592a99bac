"""The loss contracts (rl/grad_comp/contracts.py, docs/extending.md): a loss declares its kind at registration, an
agent class names the kinds it calls, and a loss of another kind, or one that cannot take its kind's call, is refused
at start in one line, before anything is written. A loss of each family registered here, outside rl/, trains through
rl.make; a TD loss whose diagnostics hold no `td_error` trains without prioritized replay and is refused with it."""

from __future__ import annotations

import collections

import pytest
import torch

import hparams  # noqa: F401  (registers the sets)
import rl
from rl.errors import ConfigError, RunStopped
from rl.grad_comp.contracts import CONTRACTS, check_loss
from rl.registry import ALL, LOSS_KINDS, grad_comp
from rl.registry import hparams as sets

calls: collections.Counter = collections.Counter()  # each loss's calls, by registered name


def contract_td(q_net, target_net, batch, loss="mse", *, diagnostics=True):
    """Q-learning's squared TD error, as docs/extending.md's TD example."""
    calls["contract_td"] += 1
    q = q_net(batch.obs).gather(1, batch.actions.long().view(-1, 1)).squeeze(1)
    with torch.no_grad():
        target = batch.rewards + batch.discounts * (1.0 - batch.terminated) * target_net(batch.next_obs).amax(1)
    error = target - q
    squared = error.square() if batch.weights is None else batch.weights * error.square()
    value = squared.mean()
    return value, ({"losses/my_td": value.detach(), "td_error": error.detach()} if diagnostics else {})


def contract_pg(log_probs, entropy, values, batch, *, vf_coef=0.5, diagnostics=True, **_):
    """REINFORCE with a baseline, as docs/extending.md's policy-gradient example."""
    calls["contract_pg"] += 1
    adv = (batch.advantages - batch.advantages.mean()) / (batch.advantages.std() + 1e-8)
    policy_loss = -(log_probs * adv).mean()
    loss = policy_loss + vf_coef * (values - batch.returns).square().mean()
    return loss, ({"losses/my_policy_loss": policy_loss.detach()} if diagnostics else {})


def contract_ac(actor, critics, target_actor, target_critics, batch, *, update_actor=True, **_):
    """DDPG's loss with clipped double Q, as docs/extending.md's actor-critic example."""
    calls["contract_ac"] += 1
    with torch.no_grad():
        next_q = target_critics(batch.next_obs, target_actor(batch.next_obs)).min(0).values
        target = batch.rewards + batch.discounts * (1.0 - batch.terminated) * next_q
    error = critics(batch.obs, batch.actions) - target  # [K, B]
    loss = 0.5 * error.square().mean(-1).sum()
    info = {"losses/my_critic_loss": loss.detach(), "td_error": error.detach().abs().mean(0)}
    if update_actor:
        loss = loss - critics(batch.obs, actor(batch.obs), detach=True, first=True)[0].mean()
    return loss, info


def silent_td(q_net, target_net, batch, loss="mse", *, diagnostics=True):
    """contract_td's loss with no diagnostics at all: no td_error for prioritized replay."""
    value, _ = contract_td(q_net, target_net, batch, loss, diagnostics=diagnostics)
    calls["silent_td"] += 1
    return value, {}


def no_diagnostics_parameter(q_net, target_net, batch, loss):
    """A TD loss that cannot be called as one: DQN passes `diagnostics=`."""
    raise AssertionError("never called: refused at start")


def contract_vtrace(log_probs, entropy, values, batch, **settings):
    """pg's formula, registered with kind vtrace: trained on V-trace targets."""
    return grad_comp["pg"](log_probs, entropy, values, batch, **settings)


REGISTERED = {"contract_td": (contract_td, dict(kind="td")),
              "contract_pg": (contract_pg, dict(kind="policy_gradient")),
              "contract_ac": (contract_ac, dict(kind="actor_critic")),
              "silent_td": (silent_td, dict(kind="td")),
              "silent_td_declared": (silent_td, dict(kind="td", per_sample_error=False)),
              "uncallable_td": (no_diagnostics_parameter, dict(kind="td")),
              "distributional_td": (contract_td, dict(kind="td", distributional=True)),
              "contract_vtrace": (contract_vtrace, dict(kind="vtrace"))}


@pytest.fixture(scope="module", autouse=True)
def losses():
    """This module's losses, registered from outside rl/ and removed after (the registry lives for the session)."""
    for name, (fn, declared) in REGISTERED.items():
        grad_comp.register(name, **declared)(fn)
    yield
    for name in REGISTERED:
        grad_comp.unregister(name)


QUICK = {"train_steps": 300, "eval_interval": 0, "eval_episodes": 1, "checkpoint_interval": 0}
FAMILIES = {
    "contract_td": ("dqn_cartpole", {"learning_starts": 100, "train_freq": 50, "gradient_steps": 4}),
    "contract_pg": ("vpg_cartpole", {"num_envs": 2, "num_steps": 50}),
    "contract_ac": ("td3_pendulum", {"learning_starts": 100, "hidden_sizes": [32, 32], "batch_size": 32}),
}


def test_every_kind_has_a_contract_and_every_set_a_loss_its_agent_calls():
    """Bug caught: a kind without its Protocol, a built-in loss or agent without a kind, or a shipped set whose loss
    its agent does not call (the start-up check would refuse a set that ships)."""
    assert set(CONTRACTS) == set(LOSS_KINDS)
    assert all(grad_comp.kind_of(name) in LOSS_KINDS for name in grad_comp)
    assert all(set(cls.LOSS_KINDS) <= set(LOSS_KINDS) for cls in (ALL["agents"][name] for name in ALL["agents"]))
    for name in sets.names():
        hp = sets[name]()
        check_loss(hp.grad_comp, hp.agent, ALL["agents"][hp.agent], hp.memory, ALL["memory"][hp.memory])


@pytest.mark.parametrize("loss", sorted(FAMILIES))
def test_a_loss_of_each_family_registered_outside_rl_trains_through_rl_make(loss, tmp_path):
    """Bug caught: a loss's kind not reaching its agent (refused, or called the wrong way), or the agent not
    calling the registered loss it was given."""
    set_name, settings = FAMILIES[loss]
    calls.clear()
    with rl.make(set_name, tmp_path / "run", overrides={**QUICK, **settings, "grad_comp": loss}) as run:
        result = run.train()
    assert result["env_steps"] == 300 and len(result["returns"]) == 1
    assert calls[loss] > 0 and set(calls) == {loss}


@pytest.mark.parametrize("set_name, loss, agent, takes", [
    ("ppo_cartpole", "td", "ppo", "a policy_gradient or vtrace loss: valid: a2c, contract_pg, contract_vtrace, pg, "
                                  "ppo_clip, vtrace"),
    ("dqn_cartpole", "ppo_clip", "dqn", "a td loss: valid: c51, contract_td, distributional_td, double_c51, "
                                        "double_qrdqn, double_td, qrdqn, silent_td, silent_td_declared, td, "
                                        "uncallable_td"),
    ("td3_pendulum", "sac", "td3", "an actor_critic loss: valid: contract_ac, ddpg, td3"),
])
def test_a_loss_of_another_kind_is_refused_at_start_in_one_line(set_name, loss, agent, takes, capsys, tmp_path):
    """`--hparam_override grad_comp=td` on a PPO set: exit 2, one line naming the loss's kind, the agent's and the
    losses of that kind, nothing written. Bug caught: the start-up check looking at names only (a TypeError or a
    wrong computation at the first update instead), or a refusal after the run folder was made."""
    import train

    out = tmp_path / "run"
    status = train.main(["--hparams", set_name, "--output_dir", str(out), "--hparam_override",
                         f"grad_comp={loss},train_steps=300"])
    err = capsys.readouterr().err
    kind = grad_comp.kind_of(loss)
    assert status == 2
    assert err == f"error: grad_comp {loss!r} is a {kind} loss; agent {agent!r} takes {takes}\n"
    assert not out.exists()


def test_a_loss_that_cannot_take_its_kinds_call_is_refused_at_start(tmp_path):
    """Bug caught: a registration trusted without reading the loss's parameters (a TypeError at the first update)."""
    with pytest.raises(ConfigError, match="grad_comp 'uncallable_td' is registered as a td loss but cannot take its "
                                          "call .*TDLoss.*unexpected keyword argument 'diagnostics'"):
        rl.make("dqn_cartpole", tmp_path / "run", overrides={**QUICK, "grad_comp": "uncallable_td"})
    assert not (tmp_path / "run").exists()


def test_a_td_loss_without_td_error_trains_without_prioritized_replay(tmp_path):
    """Diagnostics of `{}` are a TD loss's right: uniform replay never reads td_error. Bug caught: the agent reading
    td_error where nothing asks for it (a KeyError)."""
    calls.clear()
    settings = {**QUICK, **FAMILIES["contract_td"][1], "grad_comp": "silent_td", "memory": "replay"}
    with rl.make("dqn_cartpole", tmp_path / "run", overrides=settings) as run:
        assert run.train()["env_steps"] == 300
    assert calls["silent_td"] > 0


def test_prioritized_replay_refuses_a_td_loss_without_td_error(tmp_path):
    """Declared without per-sample errors: refused at start, nothing written. Undeclared: refused at its first update
    in one line, before the step moves any weight. Bug caught: a priority update from a loss that gives none (a
    KeyError in a traceback), or a declaration the start-up check does not read."""
    settings = {**QUICK, **FAMILIES["contract_td"][1], "memory": "prioritized"}
    with pytest.raises(ConfigError, match="^grad_comp 'silent_td_declared' gives no per-sample error \\('td_error' "
                                          "in its diagnostics\\), and memory 'prioritized' updates its priorities "
                                          "from one: .*per_sample_error=False"):
        rl.make("dqn_cartpole", tmp_path / "declared", overrides={**settings, "grad_comp": "silent_td_declared"})
    assert not (tmp_path / "declared").exists()
    calls.clear()
    with rl.make("dqn_cartpole", tmp_path / "run", overrides={**settings, "grad_comp": "silent_td"}) as run:
        before = [p.detach().clone() for p in run.agent.q.parameters()]
        with pytest.raises(RunStopped, match="^grad_comp 'silent_td' gives no per-sample error"):
            run.train()
        assert calls["silent_td"] == 1
        assert all(torch.equal(a, b) for a, b in zip(before, run.agent.q.parameters()))


def test_what_a_loss_declares_is_what_its_agent_does(build):
    """A distributional TD loss needs a distributional network, whatever its name; a loss of kind vtrace has the
    on-policy agents compute V-trace targets, whatever its name. Bug caught: the agents telling losses apart by
    their names (`"c51" in hp.grad_comp`, `grad_comp == "vtrace"`) or by attributes on the function."""
    with pytest.raises(ConfigError, match="grad_comp=distributional_td needs a distributional network"):
        build("dqn_cartpole", grad_comp="distributional_td")
    assert build("dqn_cartpole", grad_comp="distributional_td", model="c51_network").loss_targets is None
    assert build("dqn_cartpole", grad_comp="td").loss_targets is grad_comp.declared("td")["targets"]
    assert build("ppo_cartpole", grad_comp="contract_vtrace").vtrace
    assert not build("ppo_cartpole", grad_comp="contract_pg").vtrace

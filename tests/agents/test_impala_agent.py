"""elite_buffer_vtrace's agent (agent=impala, rl/agents/impala.py) on real CartPole rollouts: the fill-in gate, batches
composed by ratio (one per queue share of fresh sequences), sequences that never cross an episode start unflagged and
bootstrap a truncation from its final observation, CLEAR's and LASER's terms on hand-made logits, an exact resume
(buffers, counters, annealed lambda, a prepared batch), and its settings' errors."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from rl.agents.impala import ImpalaAgent
from rl.collector import Collector
from rl.envs import make_env
from rl.errors import ConfigError
from rl.grad_comp.vtrace import categorical_kl, laser_mask, vtrace, vtrace_targets
from rl.memory.rollout import RolloutBatch
from rl.registry import hparams as sets

T = 5
REPLAY = '[{"type":"queue","capacity":1,"sample_ratio":0.5},{"type":"standard","capacity":50,"sample_ratio":0.5}]'
ELITE = ('[{"type":"custom","capacity":50,"sample_ratio":0.5,"dist_function":"ln_norm",'
         '"sample_strategy":"elite_sampling","lambda_batch_multiplier":3,"alfa_annealing_factor":2.0},'
         '{"type":"queue","capacity":1,"sample_ratio":0.5}]')


class Recording(ImpalaAgent):
    """Keeps every transition it observes and every batch it learns from (for the checks below)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.trace, self.batches = [], []

    def observe(self, obs, actions, rewards, next_obs, terminated, truncated) -> None:
        self.trace.append((obs.copy(), next_obs.copy(), terminated | truncated))
        super().observe(obs, actions, rewards, next_obs, terminated, truncated)

    def learn(self, batch):
        self.batches.append(batch)
        return super().learn(batch)


def settings(replay: str = REPLAY, **extra):
    hp = sets["impala_cartpole"]()
    hp.agent, hp.replay_parameters, hp.num_workers = "impala", replay, 0
    hp.num_envs, hp.num_steps, hp.batch_rollouts = 2, T, 4
    hp.max_episode_steps = 13  # truncations inside the sequences
    hp.feature_head = "elite" in replay
    for key, value in extra.items():
        setattr(hp, key, value)
    return hp


def run(hp, steps: int, agent=None, seed: int = 0, cls=Recording):
    """`steps` vector steps of CartPole with the agent learning as train.py's loop does."""
    env = make_env(hp)
    if agent is None:
        agent = cls(hp, env.single_observation_space, env.single_action_space, hp.num_envs, seed=seed)
    collector = Collector(env, agent, seed=seed)
    for _ in range(steps):
        collector.step()
        agent.update()
    env.close()
    return agent


def test_training_waits_for_the_fill_in_amount_then_learns_one_batch_per_queue_share():
    agent = run(settings(), 4 * T * 10)  # 80 sequences: 2 envs x 40 rollouts
    # standard 50: fill-in max(0.2 x 50, 10 x 4) = 40 sequences; the queue's share is 2 fresh sequences a batch
    stored = 80
    assert agent.updates == (stored - 40) // 2 + 1
    assert all(b.obs.shape[:2] == (T + 1, 4) for b in agent.batches)
    first = run(settings(), 19 * T)  # 38 sequences stored: not yet
    assert first.updates == 0 and not first.batches


def test_each_batch_is_the_queue_share_then_the_replayed_share_in_the_listed_order():
    agent = run(settings(), 4 * T * 8)
    rollouts = [np.stack([o for o, _, _ in agent.trace[i:i + T]]) for i in range(0, len(agent.trace), T)]
    stored = {r[:, e].tobytes() for r in rollouts for e in range(2)}
    last = agent.batches[-1]
    for b in range(2):  # queue first (listed first): the newest rollout, env 0 then env 1 (FIFO)
        np.testing.assert_array_equal(last.obs[:T, b].numpy(), rollouts[-1][:, b])
    for b in range(2, 4):  # then the standard buffer's share: stored sequences, drawn at random
        assert last.obs[:T, b].numpy().tobytes() in stored
    replayed = {agent.batches[i].obs[:T, b].numpy().tobytes() for i in range(len(agent.batches)) for b in (2, 3)}
    assert len(replayed) > 4  # not the same few sequences every time


def test_sequences_never_cross_an_episode_start_unflagged_and_bootstrap_from_the_final_observation():
    agent = run(settings(), 4 * T * 12)
    trace = agent.trace
    steps = {}  # each env's acted observation -> (its real next observation, done)
    for obs, next_obs, done in trace:
        for e in range(len(done)):
            steps[obs[e].tobytes()] = (next_obs[e], bool(done[e]))
    checked_final = 0
    for batch in agent.batches:
        finals = {(int(t), int(b)): i for i, (t, b) in enumerate(batch.final_at.tolist())}
        for b in range(batch.obs.shape[1]):
            for t in range(T):
                real_next, done = steps[batch.obs[t, b].numpy().tobytes()]
                assert bool(batch.dones[t, b]) == done
                if done and t < T - 1:  # the next row starts another episode: bootstrap from the final obs
                    np.testing.assert_array_equal(batch.final_obs[finals[(t, b)]].numpy(), real_next)
                    checked_final += 1
                else:
                    np.testing.assert_array_equal(batch.obs[t + 1, b].numpy(), real_next)
    assert checked_final > 0  # truncations inside sequences were met


def test_clear_and_laser_terms_on_hand_made_logits():
    torch.manual_seed(0)
    n, A = 6, 3
    logits = torch.randn(n, A, requires_grad=True)
    behaviour = logits.detach() + torch.tensor([[0.0, 0, 0], [2, 0, 0], [0, 0, 0], [0, 3, 0], [0, 0, 0], [0, 0, 0]])
    kl = categorical_kl(logits, behaviour)
    p, q = torch.softmax(logits.detach(), -1), torch.softmax(behaviour, -1)
    torch.testing.assert_close(kl.detach(), (p * (p / q).log()).sum(-1))
    assert kl[0].abs() < 1e-6 and kl[1] > 0.1 and kl[3] > 0.1
    mask = laser_mask(kl, 0.1)
    assert mask.tolist() == [1, 0, 1, 0, 1, 1] and laser_mask(kl, 0.0) is None
    values = torch.tensor([0.5, 1.0, -1.0, 2.0, 0.0, 0.3], requires_grad=True)
    old_values = torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    batch = RolloutBatch(None, torch.zeros(n, dtype=torch.long), torch.zeros(n), old_values, torch.zeros(n),
                         torch.zeros(n))
    log_probs = torch.log_softmax(logits, -1)[:, 0]
    base, _ = vtrace(log_probs, None, values, batch, vf_coef=1.0)
    masked, info = vtrace(log_probs, None, values, batch, vf_coef=1.0, mask=mask)
    torch.testing.assert_close(masked, (values.detach() * mask).square().mean())  # masked steps' errors drop out
    assert base > masked
    cloned, info = vtrace(log_probs, None, values, batch, vf_coef=0.0, policy_kl=kl, clear_policy_coef=0.05,
                          clear_value_coef=0.005)
    expected = 0.05 * kl.detach().mean() + 0.005 * torch.linalg.vector_norm(old_values - values.detach()) / n
    torch.testing.assert_close(cloned.detach(), expected)
    cloned.backward()
    assert logits.grad.abs().sum() > 0  # policy cloning trains the policy towards mu
    # elite_buffer_vtrace's V-trace: (v_s - V_s) = delta_s + gamma c_s mask_s (v_{s+1} - V_{s+1}): a masked step has no
    # advantage and carries no trace from the steps after it
    r, v = torch.ones(4, 1), torch.zeros(4, 1)
    zeros = torch.zeros(4, 1)
    vs, adv = vtrace_targets(zeros, v, v, r, zeros, zeros, 0.9, mask=torch.tensor([[1.0], [0.0], [1.0], [1.0]]))
    assert adv[1, 0] == 0 and adv[0, 0] > 0
    torch.testing.assert_close(vs[:2, 0], torch.tensor([1.9, 1.0]))  # unmasked: 1 + 0.9 + 0.81 + ... (3.44, 2.71)


@pytest.mark.parametrize("caching", [False, True])
def test_a_resumed_agent_composes_and_learns_exactly_as_the_uninterrupted_one(caching):
    half = run(settings(ELITE, replay_caching=caching, lr_scheduler_steps=20), 4 * T * 8, seed=3)
    assert half.updates > 3 and half._lambda() < 3.0  # training and annealing had begun
    buf = io.BytesIO()
    torch.save(half.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    hp2 = settings(ELITE, replay_caching=caching, lr_scheduler_steps=20)
    env = make_env(hp2)
    resumed = Recording(hp2, env.single_observation_space, env.single_action_space, 2, seed=3)
    env.close()
    resumed.load_state_dict(state)
    # both continue on the same stream of transitions
    for agent in (half, resumed):
        agent.batches = []
        env = make_env(hp2)
        collector = Collector(env, agent, seed=11)
        for _ in range(4 * T * 4):
            collector.step()
            agent.update()
        env.close()
    assert resumed.updates == half.updates and len(resumed.batches) == len(half.batches) > 0
    for a, b in zip(half.batches, resumed.batches):
        torch.testing.assert_close(a.obs, b.obs, rtol=0, atol=0)
    torch.testing.assert_close(resumed.optimizer.param, half.optimizer.param, rtol=0, atol=0)
    assert resumed._lambda() == half._lambda()


def test_the_agent_without_its_memory_leaves_the_replayed_sequences_out_and_still_evaluates():
    """best.pt and evaluation take the agent without its memory: elite_buffer_vtrace's replay is gigabytes at full
    capacity."""
    agent = run(settings(ELITE), 4 * T * 8, seed=3)
    sizes = {}
    for memory in (True, False):
        buf = io.BytesIO()
        torch.save(agent.state_dict(include_memory=memory), buf)
        sizes[memory] = buf.tell()
    assert agent.state_dict()["sequence_replay"]["buffers"] is not None
    assert agent.state_dict(include_memory=False)["sequence_replay"]["buffers"] is None
    assert sizes[False] < sizes[True] / 2
    env = make_env(settings(ELITE))
    fresh = Recording(settings(ELITE), env.single_observation_space, env.single_action_space, 2, seed=5)
    env.close()
    fresh.load_state_dict(agent.state_dict(include_memory=False))
    torch.testing.assert_close(fresh.optimizer.param, agent.optimizer.param, rtol=0, atol=0)


def test_its_settings_are_checked():
    env = make_env(settings())
    spaces = env.single_observation_space, env.single_action_space
    env.close()
    with pytest.raises(ConfigError, match="grad_comp=vtrace"):
        ImpalaAgent(settings(grad_comp="a2c"), *spaces, 2)
    with pytest.raises(ConfigError, match="feature_head=True"):
        ImpalaAgent(settings(ELITE, feature_head=False), *spaces, 2)
    with pytest.raises(ConfigError, match="sum to 1"):
        ImpalaAgent(settings('[{"type":"queue","capacity":1,"sample_ratio":0.7}]'), *spaces, 2)

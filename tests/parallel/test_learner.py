"""The learner of the Scheme against a scripted transport: what it does with each shipment, with no process started.

Each test names the one-line bug it catches: async rollouts handed over as fresh (no importance correction), Ape-X
workers writing over each other's rows, a restarted worker's rows left open, statistics taken from whichever worker
shipped last, stale data kept past max_policy_lag."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rl.agents.base import Agent
from rl.agents.scheme import RowSource
from rl.errors import ConfigError
from rl.parallel.spec import Shipment
from rl.registry import agents
from rl.registry import hparams as sets
from tests.parallel.scripted import ACTIONS, EPISODES, OBS, make_learner, rows_shipment


def rollout_shipment(learner, transport, worker: int, version: int, statistics=None) -> Shipment:
    buffer = transport.make_buffer(transport.specs[worker])
    g = torch.Generator().manual_seed(worker)
    buffer.obs.copy_(torch.randn(buffer.obs.shape, generator=g))
    buffer.next_obs.copy_(torch.randn(buffer.obs.shape, generator=g))
    buffer.log_probs.fill_(-0.7)
    buffer.pos = buffer.num_steps
    steps = buffer.num_steps * buffer.num_envs
    return Shipment("rollout", worker, version, steps, EPISODES, statistics or {}, data=buffer)


def test_an_async_rollout_carries_its_policy_lag_into_the_learners_rollout():
    """Bug caught: the learner writing every rollout as fresh (lag 0), so V-trace never rescores stale data."""
    learner, agent, transport = make_learner("ppo_cartpole", "num_workers=2,num_envs=2,num_steps=8,vtrace=true")
    agent.updates = 3  # the learner has made 3 updates since the weights that acted this rollout (version 1)
    transport.queue.append(rollout_shipment(learner, transport, worker=1, version=1))
    learner.step()
    assert agent.memory.policy_lag.tolist() == [2, 2, 0, 0] and agent.memory.stale
    assert learner.clock["scheme/policy_lag"] == 2.0
    transport.queue.append(rollout_shipment(learner, transport, worker=0, version=3))
    learner.step()  # the batch is full: learned, the rollout spent, the new weights published as version 4
    assert agent.updates == 4 and transport.published[-1][1] == 4
    assert not agent.memory.stale


def test_max_policy_lag_drops_older_data_and_keeps_newer():
    """Bug caught: a shipment older than max_policy_lag learned from anyway."""
    learner, agent, transport = make_learner("ppo_cartpole",
                                             "num_workers=2,num_envs=2,num_steps=8,max_policy_lag=1")
    agent.updates = 5
    transport.queue.extend([rollout_shipment(learner, transport, 0, version=3),
                            rollout_shipment(learner, transport, 1, version=4)])
    learner.step()
    learner.step()
    assert learner.clock["scheme/dropped"] == 1
    assert agent.memory.columns_written == 2  # only worker 1's columns went in
    assert len(transport.released) == 2  # the dropped shipment's buffer is given back too


def stored_rewards(memory) -> np.ndarray:
    return np.asarray(memory.rewards[:len(memory)]).ravel()


def test_apex_workers_fill_their_own_rows():
    """Bug caught: every worker's transitions observed into rows 0..N-1, so one n-step window joins two workers'
    streams (a return mixing rewards 1 and 100)."""
    learner, agent, transport = make_learner("apex_dqn_cartpole", "num_envs=2,n_step=3,learning_starts=100000")
    g = agent.hp.gamma
    transport.queue.extend([rows_shipment(0, 5, 2, reward=1.0), rows_shipment(1, 5, 2, reward=100.0)])
    learner.step()
    learner.step()
    rewards = stored_rewards(agent.memory)
    whole = 1 + g + g * g
    assert len(rewards) == 2 * 2 * 3  # each row's windows emitted 3 whole 3-step transitions of 5 steps
    assert np.allclose(np.sort(rewards), [whole] * 6 + [100 * whole] * 6)


def test_a_restarted_worker_closes_its_rows_as_truncated():
    """Bug caught: a restarted worker's rows keep their n-step windows, so a transition's return includes the next
    episode's reward."""
    learner, agent, transport = make_learner("apex_dqn_cartpole", "num_envs=2,n_step=3,learning_starts=100000")
    g = agent.hp.gamma
    transport.queue.append(rows_shipment(1, 2, 2, reward=1.0))  # 2 steps: windows open, nothing stored yet
    learner.step()
    assert len(agent.memory) == 0
    transport.lost.append(1)  # worker 1 was restarted: its next rows are a new episode
    transport.queue.append(rows_shipment(1, 3, 2, reward=1000.0))
    learner.step()
    rewards = stored_rewards(agent.memory)
    before = sorted(r for r in rewards if r < 1000)
    assert np.allclose(before, [1.0, 1.0, 1 + g, 1 + g])  # the closed windows: truncated partial returns
    assert all(r < 1000 or np.isclose(r, 1000 * (1 + g + g * g)) for r in rewards)


def test_normalisation_statistics_of_every_worker_are_merged_and_published():
    """Bug caught: the learner taking the statistics of whichever worker shipped last."""
    from rl.agents.normalize import RunningMeanStd

    learner, agent, transport = make_learner("ppo_cartpole", "num_workers=2,num_envs=2,num_steps=8,"
                                                             "normalize_obs=true")
    data = [np.random.default_rng(w).normal(w * 10, 1 + w, (64, 4)) for w in range(2)]
    shipments = []
    for w in range(2):
        rms = RunningMeanStd((4,))
        rms.update(data[w])
        shipments.append(rollout_shipment(learner, transport, w, 0, statistics={"obs": rms.take_fresh()}))
    transport.queue.extend(shipments)
    learner.step()
    learner.step()
    union = np.concatenate(data)
    learned = agent.normalizers()["obs"]
    np.testing.assert_allclose(learned.mean, union.mean(0), rtol=1e-3)
    np.testing.assert_allclose(learned.var, union.var(0), rtol=1e-3)
    state, _ = transport.published[-1]
    np.testing.assert_allclose(state["stat.obs.mean"].numpy(), union.mean(0), rtol=1e-3)


@pytest.mark.parametrize("name", ["ppo_cartpole", "dqn_cartpole"])
def test_a_worker_agent_acts_with_the_published_state(name):
    """The acting state round-trips: weights, statistics and the step count reach a worker's agent."""
    hp = sets[name]()
    hp.parse("normalize_obs=true" if name == "ppo_cartpole" else "")
    a = agents[hp.agent](hp, OBS, ACTIONS, 1, seed=0)
    b = agents[hp.agent](hp.copy(), OBS, ACTIONS, 1, seed=1)
    a.env_steps = 1234
    for m in a.normalizers().values():
        m.update(np.random.default_rng(0).normal(3, 2, (32, *m.mean.shape)))
    a.statistics_changed()
    b.load_acting_state(a.acting_state())
    obs = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)
    assert np.array_equal(a.act(obs, deterministic=True), b.act(obs, deterministic=True))
    assert b.env_steps == 1234
    for k, m in a.normalizers().items():
        np.testing.assert_array_equal(b.normalizers()[k].mean, m.mean)


# ---------------------------------------------------------------------------------------------------- the agent's seam
class EpisodeListAgent(RowSource, Agent):
    """A replay agent whose memory is no replay memory at all: each env row's rewards as a list of episodes. The
    learner must feed it through the agent interface alone (take_rows, close_rows, env steps counted by observe)."""

    def __init__(self, hp, obs_space, action_space, num_envs: int, seed: int = 0):
        super().__init__(hp, obs_space, action_space, num_envs, seed)
        self.net = torch.nn.Linear(4, 2)
        self.memory = {row: [[]] for row in range(num_envs)}  # row -> its episodes' rewards
        self.update_calls = 0

    def act(self, obs, deterministic=False):
        return np.zeros(len(obs), np.int64)

    def observe(self, obs, actions, rewards, next_obs, terminated, truncated, rows=None) -> None:
        for row, reward, ended in zip(rows, rewards, np.logical_or(terminated, truncated), strict=True):
            self.memory[int(row)][-1].append(float(reward))
            if ended:
                self.memory[int(row)].append([])
        self.env_steps += len(rewards)

    def close_rows(self, rows) -> None:
        for row in rows:
            if self.memory[int(row)][-1]:
                self.memory[int(row)].append([])

    def update(self) -> dict:
        self.update_calls += 1
        return {"test/update_calls": self.update_calls}

    def networks(self) -> dict:
        return {"net": self.net}

    def optimizers(self) -> dict:
        return {}


class WholeRolloutsAgent(agents["ppo"]):
    """An on-policy agent whose learner keeps the workers' rollouts whole, as a list, and learns from every two."""

    def __init__(self, hp, obs_space, action_space, num_envs: int, seed: int = 0):
        super().__init__(hp, obs_space, action_space, num_envs, seed)
        self.memory: list[tuple[int, int]] = []  # no RolloutMemory: (policy lag, env steps) of each rollout taken
        self.learned: list[list[tuple[int, int]]] = []

    def rollout_layout(self):
        return self.model.hidden_shape, {}  # the workers' rollouts are plain ones

    def take_rollout(self, rollout, lag: int, steps: int) -> bool:
        assert rollout.num_envs == 2 and rollout.full
        self.memory.append((lag, steps))
        self.env_steps += steps
        return len(self.memory) == 2

    def update(self) -> dict:
        self.learned.append(list(self.memory))
        self.memory.clear()
        self.updates += 1
        return {"test/learned": len(self.learned)}


@pytest.fixture
def registered():
    """Test agents registered for the learner's settings (its mode is chosen from the registered class)."""
    names = {"episode_list_test": EpisodeListAgent, "whole_rollouts_test": WholeRolloutsAgent}
    for name, cls in names.items():
        agents.register(name)(cls)
    yield
    for name in names:
        agents.unregister(name)


def test_an_agent_with_a_memory_of_its_own_shape_takes_rows_through_its_interface(registered):
    """Bug caught: the learner writing the replay memory itself (`agent.memory.close_rows`, observe into rows of its
    choosing) instead of the agent's take_rows/close_rows: this agent's memory has neither."""
    learner, agent, transport = make_learner("apex_dqn_cartpole", "agent=episode_list_test,num_envs=2,"
                                                                  "max_policy_lag=2")
    assert isinstance(agent, EpisodeListAgent)
    transport.queue.extend([rows_shipment(0, 3, 2, reward=1.0), rows_shipment(1, 2, 2, reward=100.0)])
    learner.step()
    learner.step()
    assert agent.memory == {0: [[1.0] * 3], 1: [[1.0] * 3], 2: [[100.0] * 2], 3: [[100.0] * 2]}
    assert agent.env_steps == 3 * 2 + 2 * 2 and agent.update_calls == 5  # an update after each vector step
    transport.lost.append(1)  # worker 1 restarted: its rows' episodes end there
    transport.queue.append(rows_shipment(1, 1, 2, reward=7.0))
    learner.step()
    assert agent.memory[2] == [[100.0] * 2, [7.0]] and agent.memory[0] == [[1.0] * 3]
    agent.updates = 5  # a shipment of version 0 is now 5 updates old: dropped, and its worker's rows closed
    transport.queue.append(rows_shipment(0, 1, 2, reward=9.0))
    learner.step()
    assert learner.clock["scheme/dropped"] == 1
    assert agent.memory[0] == [[1.0] * 3, []] and agent.memory[2] == [[100.0] * 2, [7.0]]
    assert agent.env_steps == 3 * 2 + 2 * 2 + 1 * 2  # the dropped shipment's steps are not counted


def test_an_on_policy_agent_with_a_memory_of_its_own_shape_takes_rollouts_through_its_interface(registered):
    """Bug caught: the learner writing columns into `agent.memory` (RolloutMemory.write_columns) or deciding from
    `memory.full` when to learn, instead of asking the agent (take_rollout): this agent keeps a list."""
    learner, agent, transport = make_learner("ppo_cartpole", "agent=whole_rollouts_test,num_workers=2,num_envs=2,"
                                                             "num_steps=8")
    agent.updates = 2
    transport.queue.extend([rollout_shipment(learner, transport, 0, version=1),
                            rollout_shipment(learner, transport, 1, version=2)])
    learner.step()
    assert agent.learned == [] and transport.published[-1][1] == 0  # one rollout in: nothing learned or published
    learner.step()
    assert agent.learned == [[(1, 16), (0, 16)]]  # both rollouts, with their policy lags and steps
    assert agent.env_steps == 32 and transport.published[-1][1] == 3


def test_the_scheme_roles_are_declared_by_the_agents_that_take_them():
    """Bug caught: the on-policy agents not inheriting RolloutSource (the learner would send them replay rows), the
    replay agents not inheriting RowSource, or the rows, rollout and gradient methods put back on Agent, where every
    agent would carry methods it can only refuse."""
    from rl.agents.scheme import GradientSource, RolloutSource, RowSource

    for name in ("vpg", "a2c", "ppo", "impala"):
        assert issubclass(agents[name], RolloutSource) and issubclass(agents[name], GradientSource)
        assert not issubclass(agents[name], RowSource)
    for name in ("dqn", "ddpg", "td3", "sac"):
        assert issubclass(agents[name], RowSource) and not issubclass(agents[name], (RolloutSource, GradientSource))
    assert not any(hasattr(Agent, m) for m in ("take_rows", "close_rows", "take_rollout", "rollout_ready",
                                               "ship_rollout", "rollout_layout", "minibatch_gradients",
                                               "gradient_size", "apply_gradients", "EXPERIENCE"))


def test_the_workers_role_follows_what_the_agent_declares_it_takes(registered):
    """Bug caught: the learner choosing rows or rollouts by the agent's base class (OnPolicyAgent) instead of the
    mixin it declares, so an on-policy agent built on Agent itself would be sent replay rows; or an agent that
    declares neither sent either."""
    from rl.agents.scheme import RolloutSource
    from rl.parallel.learner import worker_specs

    class DeclaredRollouts(RolloutSource, Agent):  # never built: the roles are worked out from the class
        pass

    class Neither(Agent):
        pass

    agents.register("neither_test")(Neither)
    try:
        with pytest.raises(ConfigError, match="agent 'neither_test' learns from no collection worker .*: set "
                                              "num_workers=0, or an agent that does: a2c, .*dqn"):
            worker_specs(sets["apex_dqn_cartpole"]().parse("agent=neither_test"), 0, "shm")
    finally:
        agents.unregister("neither_test")

    agents.register("declared_rollouts_test")(DeclaredRollouts)
    try:
        roles = {name: {s.role for s in worker_specs(sets["apex_dqn_cartpole"]().parse(f"agent={name}"), 0, "shm")}
                 for name in ("episode_list_test", "whole_rollouts_test", "declared_rollouts_test")}
    finally:
        agents.unregister("declared_rollouts_test")
    assert roles == {"episode_list_test": {"rows"}, "whole_rollouts_test": {"rollouts"},
                     "declared_rollouts_test": {"rollouts"}}


def test_the_learner_takes_its_and_its_workers_settings_from_the_agents_class(registered):
    """Bug caught: the learner working a family's settings out itself (naming the families) instead of asking the
    agent's class: this class's own answers must be the ones used, beside the replay, on-policy and sequence-replay
    families' own (a small worker memory, a batch of batch_rollouts columns, one rollout at a time)."""
    from rl.parallel.learner import learner_hparams, worker_specs

    class OwnSettings(EpisodeListAgent):
        @classmethod
        def learner_envs(cls, hp) -> int:
            return 3

        @classmethod
        def worker_settings(cls, hp, rank: int, count: int):
            w = super().worker_settings(hp, rank, count)
            w.seed = 100 + rank
            return w

    agents.register("own_settings_test")(OwnSettings)
    try:
        hp = sets["apex_dqn_cartpole"]().parse("agent=own_settings_test,num_workers=2,buffer_size=50000")
        specs = worker_specs(hp, 0, "shm")
        assert learner_hparams(hp).num_envs == 3 and [s.hp.seed for s in specs] == [100, 101]
    finally:
        agents.unregister("own_settings_test")
    assert all(s.hp.buffer_size == 1000 and s.hp.device == "cpu" for s in specs)  # RowSource's, then the class's
    assert {s.hp.exploration_final_eps for s in specs} == {hp.exploration_final_eps}  # Ape-X's epsilons are DQN's
    apex = sets["apex_dqn_cartpole"]().parse("num_workers=2")
    assert len({s.hp.exploration_final_eps for s in worker_specs(apex, 0, "shm")}) == 2
    ppo = sets["ppo_cartpole"]().parse("num_workers=2,num_envs=4,batch_rollouts=0")
    assert learner_hparams(ppo).num_envs == 8 and learner_hparams(ppo.parse("batch_rollouts=4")).num_envs == 4
    impala = sets["impala_cartpole"]().parse("agent=impala,col_communication=sync")  # sync: any batch_rollouts
    assert learner_hparams(impala).num_envs == (impala.worker_envs or impala.num_envs)
    with pytest.raises(ConfigError, match=r"batch_rollouts \(6\) must be a multiple of the envs per worker \(4\)"):
        learner_hparams(ppo.parse("batch_rollouts=6"))


def test_the_learner_refuses_an_agent_that_lacks_its_workers_mixin():
    """Bug caught: the learner dispatching rows to any agent (replay-row methods back on Agent, or no `isinstance`
    check): an on-policy agent handed replay rows would fail deep in a worker's first shipment, not in one line."""
    from rl.envs.episode_stats import EpisodeStats
    from rl.parallel.learner import Learner, learner_hparams
    from rl.parallel.roles import make_worker
    from tests.parallel.scripted import ScriptedTransport

    hp = sets["apex_dqn_cartpole"]()
    ppo = agents["ppo"](learner_hparams(sets["ppo_cartpole"]()), OBS, ACTIONS, 1, seed=0)
    with pytest.raises(ConfigError, match=r"agent 'dqn' \(OnPolicyAgent\) is no RowSource .*role is 'rows'"):
        Learner(hp, (OBS, ACTIONS), ppo, EpisodeStats(1), seed=0, make_worker=make_worker,
                transport=ScriptedTransport())

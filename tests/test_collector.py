"""rl/collector.py, the one stepping loop: what it hands to `observe` at episode ends, under both autoreset modes.

Same-step autoreset (Sync/AsyncVectorEnv, the same-step native CartPole): the step that ends an episode returns the
next episode's reset observation, and the collector must hand over `info["final_obs"]` instead, then act on the reset
observation. Next-step autoreset (gymnasium's own vector CartPole, a SyncVectorEnv in NEXT_STEP mode): the step after
an episode's end only resets that env, and the collector must drop that row. Either way no handed transition spans two
episodes, and the episode statistics count each episode's real steps. CartPole makes both checkable from the
observations alone: a reset draws every state variable from U(-0.05, 0.05), and an episode terminates only once the
cart or the pole is out of bounds.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import hparams  # noqa: F401  (fills the hparams registry)
from rl.collector import Collector
from rl.envs import make_env
from rl.envs.episode_stats import EpisodeStats
from rl.errors import RunStopped
from rl.registry import hparams as sets

N, STEPS, LIMIT = 3, 200, 15  # envs, vector steps, time limit (random CartPole episodes end both ways)
RESET_BOUND = 0.05  # CartPole's reset state: U(-0.05, 0.05) in every variable
X_LIMIT, THETA_LIMIT = 2.4, 12 * 2 * np.pi / 360  # CartPole terminates beyond these


def is_reset_obs(obs) -> bool:
    return bool(np.abs(obs).max() <= RESET_BOUND)


def is_terminal_obs(obs) -> bool:
    return bool(abs(obs[0]) > X_LIMIT or abs(obs[2]) > THETA_LIMIT)


class RandomAgent:
    """Uniform random actions; logs, in order, what it acted on and which envs it was told to reset."""

    def __init__(self, events: list, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.events = events
        self.acted: list[np.ndarray] = []

    def act(self, obs):
        self.acted.append(obs.copy())
        return self.rng.integers(0, 2, len(obs))

    def observe(self, *transition):
        raise AssertionError("the tests hand the collector their own observe")

    def reset_episodes(self, dones):
        self.events.append(("reset", dones.copy()))


class Recorder(gym.vector.VectorWrapper):
    """Keeps what every `env.step` returned: actions, next obs, terminated, truncated, final obs by env index."""

    def __init__(self, env):
        super().__init__(env)
        self.steps: list[tuple] = []

    def step(self, actions):
        next_obs, rewards, terminated, truncated, info = out = self.env.step(actions)
        final = {}
        if "final_obs" in info:
            final = {int(i): np.array(info["final_obs"][i]) for i in np.flatnonzero(info["_final_obs"])}
        self.steps.append((np.array(actions), next_obs.copy(), terminated.copy(), truncated.copy(), final))
        return out


def recording(events: list):
    """An `observe` that logs copies of every call's arguments."""
    def observe(obs, actions, rewards, next_obs, terminated, truncated):
        events.append(("observe", tuple(np.array(x, copy=True) for x in (obs, actions, rewards, next_obs, terminated,
                                                                          truncated))))
    return observe


def cartpole_hp(env_id: str, vector_mode: str):
    hp = sets["ppo_cartpole"]()
    hp.env, hp.num_envs, hp.vector_mode, hp.max_episode_steps = env_id, N, vector_mode, LIMIT
    return hp


def next_step_env(engine: str):
    if engine == "native":  # gymnasium's numpy CartPole, through rl.envs (CartPole-v1's own id gets the same-step one)
        from gymnasium.envs.classic_control.cartpole import CartPoleEnv, CartPoleVectorEnv

        if "NextStepCartPole-v1" not in gym.registry:
            gym.register("NextStepCartPole-v1", entry_point=CartPoleEnv, vector_entry_point=CartPoleVectorEnv,
                         max_episode_steps=500)
        return make_env(cartpole_hp("NextStepCartPole-v1", "native"))
    return gym.make_vec("CartPole-v1", N, vectorization_mode="sync", max_episode_steps=LIMIT,
                        vector_kwargs={"autoreset_mode": AutoresetMode.NEXT_STEP})


def run(env, steps: int = STEPS):
    """A Collector over `env` (wrapped in a Recorder) for `steps` steps: (collector, recorder, agent, events,
    per-step counts, per-step `valid` masks)."""
    env = Recorder(env)
    events: list = []
    agent = RandomAgent(events)
    collector = Collector(env, agent, seed=0, observe=recording(events), stats=EpisodeStats(N, window=10_000))
    counts, valid = [], []
    for _ in range(steps):
        events.append(("step", None))
        counts.append(collector.step())
        valid.append(collector.valid.copy())
    return collector, env, agent, events, counts, valid


def per_step(events: list) -> list[dict]:
    """The events grouped by collector step: {"observe": [args, ...], "reset": [mask, ...]}."""
    steps: list[dict] = []
    for kind, value in events:
        if kind == "step":
            steps.append({"observe": [], "reset": []})
        else:
            steps[-1][kind].append(value)
    return steps


def check_resets(events: list, ended: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """Every finished episode is reported to `reset_episodes` exactly once, after its last transition was observed
    and before its env's next one is; no other env is ever reported."""
    pending = np.zeros(N, bool)
    rows_of_step = iter(ended)
    for kind, value in events:
        if kind == "observe":
            rows, ends = next(rows_of_step)
            assert not pending[rows].any(), "a transition was observed before the agent was told its episode ended"
            pending[rows[ends]] = True
        elif kind == "reset":
            assert not (value & ~pending).any(), "reset_episodes named an env whose episode had not ended"
            pending &= ~value
    assert next(rows_of_step, None) is None


# ---------------------------------------------------------------------------------------------------- same step
@pytest.mark.parametrize("vector_mode", ["sync", "native"])
def test_same_step_autoreset_hands_over_the_final_observation(vector_mode):
    env = make_env(cartpole_hp("CartPole-v1", vector_mode))
    assert vector_mode != "sync" or isinstance(env, gym.vector.SyncVectorEnv)
    collector, rec, agent, events, counts, valid = run(env)
    assert collector.same_step
    assert counts == [N] * STEPS and sum(counts) == STEPS * N  # every env's row is a transition
    assert all(v.all() for v in valid)
    steps = per_step(events)
    assert [len(s["observe"]) for s in steps] == [1] * STEPS
    acted = [*agent.acted, collector.obs]  # what each step acted on, then what the next one will
    finished: list[list[int]] = [[] for _ in range(N)]
    flat_finished: list[int] = []
    running = np.zeros(N, int)
    ended = []
    for t, (step, (actions_env, raw_next, term, trunc, final)) in enumerate(zip(steps, rec.steps)):
        obs, actions, rewards, next_obs, terminated, truncated = step["observe"][0]
        assert np.array_equal(obs, acted[t]) and np.array_equal(actions, actions_env)
        assert np.array_equal(terminated, term) and np.array_equal(truncated, trunc)
        assert np.array_equal(acted[t + 1], raw_next)  # the next call's obs is the env's: reset obs where one ended
        dones = term | trunc
        ended.append((np.arange(N), dones))
        running += 1
        for i in range(N):
            if dones[i]:
                assert np.array_equal(next_obs[i], final[i]), "an ending episode's next_obs must be info's final obs"
                assert not np.array_equal(next_obs[i], raw_next[i]), "not the reset observation"
                assert is_reset_obs(raw_next[i]) and not is_reset_obs(next_obs[i])
                if term[i]:
                    assert is_terminal_obs(next_obs[i])
                else:
                    assert running[i] == LIMIT  # truncated by the time limit
                finished[i].append(int(running[i]))
                flat_finished.append(int(running[i]))
                running[i] = 0
            else:
                assert np.array_equal(next_obs[i], raw_next[i])  # the episode goes on from here
                assert not is_terminal_obs(next_obs[i])
    ends = np.array([d for _, d in ended])
    rec_term = np.array([s[2] for s in rec.steps])
    rec_trunc = np.array([s[3] for s in rec.steps])
    assert (rec_term & ~rec_trunc).any() and (rec_trunc & ~rec_term).any(), "episodes must end both ways"
    assert ends.sum() >= 3 * N
    check_resets(events, ended)

    stats = collector.stats
    assert stats.episodes == len(flat_finished) == ends.sum()
    assert list(stats.recent_lengths) == flat_finished
    assert list(stats.recent_returns) == [float(n) for n in flat_finished]  # CartPole pays 1 a step
    assert np.array_equal(stats.lengths, running)
    for i in range(N):
        assert sum(finished[i]) + stats.lengths[i] == STEPS
    collector.close()


# ---------------------------------------------------------------------------------------------------- next step
@pytest.mark.parametrize("engine", ["native", "sync"])
def test_next_step_autoreset_drops_the_reset_step(engine):
    collector, rec, agent, events, counts, valid = run(next_step_env(engine))
    assert not collector.same_step
    steps = per_step(events)
    acted = [*agent.acted, collector.obs]
    prev_done = np.zeros(N, bool)
    last: dict[int, tuple[np.ndarray, bool]] = {}  # env -> (next_obs of its last handed transition, it ended there)
    finished: list[list[int]] = [[] for _ in range(N)]
    flat_finished: list[int] = []
    running = np.zeros(N, int)
    dropped = np.zeros(N, int)
    ended = []
    for t, (step, (actions_env, raw_next, term, trunc, _)) in enumerate(zip(steps, rec.steps)):
        kept = ~prev_done
        assert np.array_equal(valid[t], kept), "`valid` must mark the rows handed over: all but the reset steps"
        assert counts[t] == kept.sum()
        assert len(step["observe"]) == (1 if kept.any() else 0)
        for i in np.flatnonzero(prev_done):  # the dropped row: from the final obs to the next episode's reset obs
            assert np.array_equal(acted[t][i], last[i][0]) and last[i][1]
            assert is_reset_obs(raw_next[i]) and not term[i] and not trunc[i]
            dropped[i] += 1
        if kept.any():
            obs, actions, rewards, next_obs, terminated, truncated = step["observe"][0]
            assert all(len(x) == kept.sum() for x in (obs, actions, rewards, next_obs, terminated, truncated))
            assert np.array_equal(obs, acted[t][kept]) and np.array_equal(actions, actions_env[kept])
            assert np.array_equal(next_obs, raw_next[kept])
            assert np.array_equal(terminated, term[kept]) and np.array_equal(truncated, trunc[kept])
            assert (rewards == 1.0).all()  # CartPole's reward of a real step (the reset step's is 0)
            rows = np.flatnonzero(kept)
            ended.append((rows, terminated | truncated))
            for row, i in enumerate(rows):
                if i in last:  # a transition starts where its env's previous one ended, or at a fresh reset
                    prev_next, prev_ended = last[i]
                    if prev_ended:
                        assert is_reset_obs(obs[row]) and not np.array_equal(obs[row], prev_next)
                    else:
                        assert np.array_equal(obs[row], prev_next)
                else:
                    assert is_reset_obs(obs[row])
                done = bool(terminated[row] or truncated[row])
                assert not is_terminal_obs(obs[row]), "a transition must not start from a terminal state"
                running[i] += 1
                if terminated[row]:
                    assert is_terminal_obs(next_obs[row])
                elif truncated[row]:
                    assert running[i] == LIMIT
                if done:
                    finished[i].append(int(running[i]))
                    flat_finished.append(int(running[i]))
                    running[i] = 0
                last[i] = (next_obs[row], done)
        prev_done = term | trunc
    assert dropped.sum() >= 3 * N, "episodes must end and their reset steps be dropped"
    assert sum(counts) == STEPS * N - dropped.sum()
    assert sum(len(s["observe"][0][0]) for s in steps if s["observe"]) == sum(counts)
    check_resets(events, ended)

    stats = collector.stats
    assert stats.episodes == len(flat_finished)
    assert list(stats.recent_lengths) == flat_finished  # the reset steps are not counted
    assert list(stats.recent_returns) == [float(n) for n in flat_finished]
    assert np.array_equal(stats.lengths, running)
    for i in range(N):
        assert sum(finished[i]) + stats.lengths[i] + dropped[i] == STEPS
    collector.close()


# ---------------------------------------------------------------------------------------------------- env errors
class Diverging(gym.Env):
    """Raises at its `fail_at`-th step, with a message of two lines (as simulators' errors often are)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, fail_at: int = 5, render_mode=None):
        self.fail_at, self.t = fail_at, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t >= self.fail_at:
            raise ZeroDivisionError(f"contact solver diverged at step {self.t}\nstate: nan nan")
        return np.zeros(2, np.float32), 1.0, False, False, {}


class CountingAgent(RandomAgent):
    """A random agent that counts its env steps, as the agents do."""

    def __init__(self, env_id: str):
        super().__init__([])
        self.hp = sets["ppo_cartpole"]()
        self.hp.env = env_id
        self.env_steps = 0

    def observe(self, obs, *rest):
        self.env_steps += len(obs)


@pytest.mark.parametrize("vector_mode", ["sync", "async"])
def test_an_env_whose_step_raises_stops_the_run_in_one_line(vector_mode):
    """Bugs caught: the env's exception escaping as itself (a traceback out of train.py), its message's second line
    kept, the original not chained (a debugger could not reach the env's frame), and AsyncVectorEnv logging the env
    process's traceback as warnings on stderr around the one line."""
    if "DivergingLine-v0" not in gym.registry:
        gym.register("DivergingLine-v0", entry_point=Diverging, max_episode_steps=100)
    env = make_env(cartpole_hp("DivergingLine-v0", vector_mode))
    assert isinstance(env, gym.vector.AsyncVectorEnv if vector_mode == "async" else gym.vector.SyncVectorEnv)
    agent = CountingAgent("DivergingLine-v0")
    collector = Collector(env, agent, seed=0)
    for _ in range(4):
        collector.step()
    with warnings.catch_warnings(record=True) as logged:
        warnings.simplefilter("always")
        with pytest.raises(RunStopped) as info:
            collector.step()
    assert [str(w.message) for w in logged] == []
    assert str(info.value) == ("the env 'DivergingLine-v0' raised ZeroDivisionError: contact solver diverged at step "
                               f"5 at agent step {4 * N}")
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    if vector_mode == "async":  # the env process's traceback stays with the exception, for a developer
        note = "".join(getattr(info.value.__cause__, "__notes__", []))
        assert "Traceback" in note and "in step" in note and "\x1b[" not in note, note
    collector.close()


def test_an_env_error_without_a_message_or_an_agent_counter_still_reads():
    """The env's own type name when it gives no message, and no step where the agent keeps no count (a test's
    agent). Bug caught: 'raised ValueError: ValueError', or an AttributeError raised instead of the env's error."""
    class Silent(Diverging):
        def step(self, action):
            raise ValueError()

    env = gym.vector.SyncVectorEnv([lambda: Silent()], autoreset_mode=AutoresetMode.SAME_STEP)
    collector = Collector(env, RandomAgent([]), seed=0)
    with pytest.raises(RunStopped, match=r"^the env 'Silent' raised ValueError$"):
        collector.step()
    collector.close()

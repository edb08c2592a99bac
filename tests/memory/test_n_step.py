"""N-step returns: hand-computed cases across termination and truncation, several envs against a brute-force
reference, next-step autoreset rows, storage in every memory, and the flush on resume."""

import numpy as np
import pytest
import torch

from rl.memory.n_step import NStepWindow
from rl.memory.replay import ReplayMemory

G = 0.5


def step(window, t, reward, term=False, trunc=False):
    """One transition of a single env: obs t -> t + 1, action t."""
    return window.add(np.array([[t]], np.float32), np.array([t]), np.array([reward]), np.array([[t + 1]], np.float32),
                      np.array([term]), np.array([trunc]))


def test_full_windows_emit_the_n_step_return():
    w = NStepWindow(3, G)
    assert step(w, 0, 1.0) is None and step(w, 1, 2.0) is None
    out = step(w, 2, 3.0)
    assert out["rewards"].tolist() == [1 + G * 2 + G * G * 3]
    assert out["obs"][:, 0].tolist() == [0] and out["next_obs"][:, 0].tolist() == [3]
    assert out["discounts"].tolist() == [G ** 3] and not out["terminated"][0] and not out["truncated"][0]
    out = step(w, 3, 4.0)
    assert out["rewards"].tolist() == [2 + G * 3 + G * G * 4] and out["obs"][0, 0] == 1


@pytest.mark.parametrize("kind", ["terminated", "truncated"])
def test_episode_end_flushes_the_window_without_crossing_it(kind):
    w = NStepWindow(3, G)
    step(w, 0, 1.0)
    out = step(w, 1, 2.0, term=kind == "terminated", trunc=kind == "truncated")
    assert out["obs"][:, 0].tolist() == [0, 1]
    assert out["rewards"].tolist() == [1 + G * 2, 2]
    assert out["discounts"].tolist() == [G ** 2, G]
    assert out["next_obs"][:, 0].tolist() == [2, 2]  # the final observation, for both
    assert out[kind].tolist() == [True, True]
    other = "truncated" if kind == "terminated" else "terminated"
    assert out[other].tolist() == [False, False]
    out = step(w, 10, 5.0)  # the next episode starts an empty window
    assert out is None and w.length.tolist() == [1]


def reference(episodes, n, gamma):
    """Brute force: obs -> (return, next_obs, terminated, truncated, discount) of every n-step transition, from each
    env's list of steps (obs, reward, terminated, truncated, next_obs)."""
    out = {}
    for steps in episodes.values():
        for t, (obs, _, _, _, _) in enumerate(steps):
            ret, k = 0.0, 0
            for j in range(t, min(t + n, len(steps))):
                ret += gamma ** k * steps[j][1]
                k += 1
                if steps[j][2] or steps[j][3]:
                    break
            last = steps[t + k - 1]
            if k == n or last[2] or last[3]:
                out[obs] = (ret, last[4], bool(last[2]), bool(last[3]), gamma ** k)
    return out


def test_many_envs_random_episode_ends_match_brute_force():
    rng = np.random.default_rng(0)
    num_envs, n, T = 3, 4, 60
    w = NStepWindow(n, 0.9)
    episodes = {e: [] for e in range(num_envs)}
    got = {}
    for t in range(T):
        obs = np.arange(t * num_envs, (t + 1) * num_envs, dtype=np.float32).reshape(-1, 1)  # unique ids
        rewards = rng.normal(size=num_envs).astype(np.float32)
        term = rng.random(num_envs) < 0.1
        trunc = ~term & (rng.random(num_envs) < 0.1)
        next_obs = obs + 1000
        for e in range(num_envs):
            episodes[e].append((float(obs[e, 0]), float(rewards[e]), term[e], trunc[e], float(next_obs[e, 0])))
        out = w.add(obs, np.zeros(num_envs), rewards, next_obs, term, trunc)
        if out is not None:
            for o, r, no, te, tr, d in zip(out["obs"][:, 0], out["rewards"], out["next_obs"][:, 0],
                                           out["terminated"], out["truncated"], out["discounts"]):
                assert float(o) not in got  # each transition leaves once
                got[float(o)] = (float(r), float(no), bool(te), bool(tr), float(d))
    want = reference(episodes, n, 0.9)
    assert set(got) == set(want) and w.length.sum() > 0  # items still in a window are in neither
    assert any(v[2] for v in got.values()) and any(v[3] for v in got.values())  # both kinds of end happened
    for o, (r, no, te, tr, d) in got.items():
        wr, wno, wte, wtr, wd = want[o]
        assert r == pytest.approx(wr, abs=1e-5) and d == pytest.approx(wd, rel=1e-6)
        assert (no, te, tr) == (wno, wte, wtr)


def test_next_step_autoreset_rows_map_to_envs_that_did_not_just_end():
    w = NStepWindow(2, G)
    obs = np.array([[0], [100]], np.float32)
    w.add(obs, np.zeros(2), np.ones(2), obs + 1, np.array([True, False]), np.zeros(2, bool))  # env 0 ends
    out = w.add(obs[1:] + 1, np.zeros(1), np.array([2.0]), obs[1:] + 2, np.zeros(1, bool), np.zeros(1, bool))
    assert out["obs"][:, 0].tolist() == [100] and out["rewards"].tolist() == [1 + G * 2]  # env 1's window
    assert w.length.tolist() == [0, 1]
    with pytest.raises(ValueError):
        w.add(obs[:1], np.zeros(1), np.ones(1), obs[:1], np.zeros(1, bool), np.zeros(1, bool))


def test_replay_memory_stores_n_step_items_with_their_discounts():
    mem = ReplayMemory(10, (1,), np.float32, gamma=G, n_step=3)
    for t in range(4):
        mem.add(np.array([[t]], np.float32), np.array([t]), np.array([1.0]), np.array([[t + 1]], np.float32),
                np.array([t == 3]), np.array([False]))
    assert len(mem) == 4  # 0 left as a full window, 1, 2 and 3 at the termination
    assert mem.rewards[:4].tolist() == [1.75, 1.75, 1.5, 1.0]
    assert mem.discounts[:4].tolist() == [G ** 3, G ** 3, G ** 2, G]
    assert mem.terminated[:4].tolist() == [0, 1, 1, 1]  # item 1's window reaches the end
    batch = mem.gather(np.arange(4))
    assert torch.equal(batch.discounts, torch.tensor([G ** 3, G ** 3, G ** 2, G]))


def test_one_step_memory_keeps_gamma_as_the_discount():
    mem = ReplayMemory(4, (1,), np.float32, gamma=0.9)
    mem.add(np.zeros((2, 1), np.float32), np.zeros(2), np.ones(2), np.zeros((2, 1), np.float32), np.zeros(2, bool),
            np.zeros(2, bool))
    assert mem.window is None and torch.allclose(mem.sample(4).discounts, torch.full((4,), 0.9))


def test_resume_stores_episodes_in_flight_as_truncated():
    a = ReplayMemory(10, (1,), np.float32, gamma=G, n_step=3)
    for t in range(2):
        a.add(np.array([[t]], np.float32), np.array([t]), np.array([1.0]), np.array([[t + 1]], np.float32),
              np.array([False]), np.array([False]))
    assert len(a) == 0
    b = ReplayMemory(10, (1,), np.float32, gamma=G, n_step=3)
    b.load_state_dict(a.state_dict())
    assert len(b) == 2 and b.truncated[:2].tolist() == [1, 1] and b.terminated[:2].tolist() == [0, 0]
    assert b.rewards[:2].tolist() == [1.5, 1.0] and b.next_obs[:2, 0].tolist() == [2, 2]
    assert b.window.length.tolist() == [0]

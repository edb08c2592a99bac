"""Frame-stacked replay (rl/memory/frames.py): on real breakout streams, a memory storing each frame once holds and
samples exactly what a memory storing whole stacks does (resets, life losses, wrap-around, n-step, every sampler);
lost frames are never sampled; about 7.2 KB a transition; checkpoints round-trip without copying the frames."""

import io

import gymnasium as gym
import numpy as np
import pytest
import torch

from hparams.dqn import dqn_cartpole
from rl.memory.frames import BLANK
from rl.memory.replay import ReplayMemory
from rl.registry import memory

SHAPE = (4, 84, 84)
KINDS = ["replay", "prioritized", "attentive", "queue"]


def play(steps: int, life_loss_info: bool, seed: int = 0) -> list[tuple]:
    """`steps` batched transitions of 2 breakout envs under random actions, with true next observations (same-step
    autoreset: a finished env's final observation is in info["final_obs"]). 5% of the other steps are flagged
    terminated while the game and its stack go on, as terminal_on_life_loss does."""
    ale_py = pytest.importorskip("ale_py")
    env = ale_py.AtariVectorEnv("breakout", 2, autoreset_mode="SameStep", num_threads=1,
                                life_loss_info=life_loss_info)
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        actions = rng.integers(0, env.single_action_space.n, 2)
        nxt, rewards, terminated, truncated, info = env.step(actions)
        done = terminated | truncated
        true_next = nxt.copy()
        if done.any():
            true_next[done] = info["final_obs"][done]
        flagged = ~done & (rng.random(2) < 0.05)
        out.append((obs, actions, rewards.astype(np.float32), true_next, terminated | flagged, truncated))
        obs = nxt
    env.close()
    return out


@pytest.fixture(scope="module")
def games():
    """Whole games: each ends in a reset to a zero-padded stack."""
    return play(400, life_loss_info=False)


@pytest.fixture(scope="module")
def lives():
    """ALE's life_loss_info: an episode ends at each lost life, and neither its final nor its next observation
    continues the previous stack frame by frame."""
    return play(250, life_loss_info=True)


def pair(kind: str, capacity: int = 64, n_step: int = 1, seed: int = 3):
    """(whole-stack memory, frame memory) of one kind with the same settings and seed."""
    make = memory[kind]
    options = dict(gamma=0.9, seed=seed, n_step=n_step, total_steps=1000)
    return (make(capacity, SHAPE, np.uint8, **options),
            make(capacity, SHAPE, np.uint8, frames=True, num_envs=2, **options))


def assert_same_content(ref: ReplayMemory, mem: ReplayMemory, idx: np.ndarray | None = None) -> None:
    """The items at `idx` (all held by default) are the same in both memories, pixel for pixel."""
    idx = np.arange(ref.size) if idx is None else idx
    assert mem.size == ref.size and not mem._lost(idx).any()
    assert np.array_equal(mem._pixels(mem.obs[idx]), ref.obs[idx])
    assert np.array_equal(mem._pixels(mem.next_obs[idx]), ref.next_obs[idx])
    for f in ("actions", "rewards", "terminated", "truncated", "discounts"):
        assert np.array_equal(getattr(mem, f)[idx], getattr(ref, f)[idx])


def feed(ref: ReplayMemory, mem: ReplayMemory, steps: list[tuple], full_every: int = 10) -> None:
    """Add `steps` to both memories; after every add compare the items it wrote (resets, life losses and n-step
    flushes included), and every `full_every` adds everything held (frames the ring reused would show there)."""
    for i, step in enumerate(steps):
        before = mem.pos
        ref.add(*step)
        mem.add(*step)
        assert_same_content(ref, mem, (before + np.arange((mem.pos - before) % mem.capacity)) % mem.capacity)
        if i % full_every == full_every - 1:
            assert_same_content(ref, mem)
    assert_same_content(ref, mem)


def assert_same_batches(a, b) -> None:
    for name, x, y in zip(a._fields, a, b):
        assert (x is None and y is None) or torch.equal(x, y), name


def test_the_streams_hold_resets_life_losses_and_continuing_dones(games, lives):
    blank_start = [(o[e, :-1] == 0).all() for o, *_ in games[1:] for e in range(2)]
    assert sum(blank_start) >= 2  # games ended and restarted from zero-padded stacks
    breaks = [not np.array_equal(o[e, :-1], prev[3][e, 1:])
              for prev, (o, *_) in zip(lives, lives[1:]) for e in range(2) if prev[4][e] or prev[5][e]]
    assert sum(breaks) >= 5  # lost lives whose next stack does not shift


@pytest.mark.parametrize("n_step", [1, 3])
@pytest.mark.parametrize("stream", ["games", "lives"])
def test_frame_memory_holds_what_a_stack_memory_does(stream, n_step, request):
    steps = request.getfixturevalue(stream)
    ref, mem = pair("replay", n_step=n_step)
    feed(ref, mem, steps)
    assert len(steps) * 2 > 4 * ref.capacity  # the ring wrapped several times


@pytest.mark.parametrize("kind", KINDS)
def test_every_sampler_draws_the_same_batches(lives, kind):
    ref, mem = pair(kind, n_step=3)
    for start in range(0, len(lives), 50):
        feed(ref, mem, lives[start: start + 50], full_every=50)
        assert_same_batches(ref.sample(16), mem.sample(16))


def test_about_one_frame_per_transition(games):
    _, mem = pair("replay")
    for step in games:
        mem.add(*step)
    dones = sum(int((t[4] | t[5]).sum()) for t in games)
    restarts = sum(not np.array_equal(now[0][e], before[3][e])
                   for before, now in zip(games, games[1:]) for e in range(2))
    assert dones > restarts + 10  # most dones are flagged life losses whose stack goes on: they share its frames
    assert mem.added < mem.store.next_id <= mem.added + 4 * (2 + restarts)
    assert mem.store.next_id < 1.02 * mem.added


def test_bytes_per_transition():
    mem = ReplayMemory(100_000, SHAPE, np.uint8, frames=True, num_envs=8, n_step=3)  # allocated, never touched
    per_item = mem.nbytes / mem.capacity
    assert 84 * 84 < per_item <= 7300  # 7056 a frame + 1% + ids (64) + the other fields (24)
    stacks = ReplayMemory(1, SHAPE, np.uint8).nbytes
    assert stacks > 7.5 * per_item


def lossy(kind: str, capacity: int = 8, adds: int = 30):
    """(stack memory, frame memory) fed one-step episodes of unrelated random stacks: 8 new frames a transition, so
    the frame ring (capacity + 40 frames) holds the frames of only the newest 6 of the 8 transitions."""
    options = dict(gamma=0.9, seed=3, total_steps=1000)
    ref = memory[kind](capacity, SHAPE, np.uint8, **options)
    mem = memory[kind](capacity, SHAPE, np.uint8, frames=True, num_envs=1, **options)
    rng = np.random.default_rng(0)
    for i in range(adds):
        obs, nxt = rng.integers(1, 256, (2, 1, *SHAPE), dtype=np.uint8)
        step = (obs, np.array([i]), np.array([float(i)], np.float32), nxt, np.array([True]), np.array([False]))
        ref.add(*step)
        mem.add(*step)
    return ref, mem


@pytest.mark.parametrize("kind", KINDS)
def test_transitions_whose_frames_were_overwritten_are_never_sampled(kind):
    ref, mem = lossy(kind)
    assert mem.store.capacity == 48 and mem.store.next_id == 30 * 8
    lost = mem._lost(np.arange(8))
    assert sorted(mem.rewards[lost].tolist()) == [22.0, 23.0]  # the two oldest held
    if kind == "attentive":
        mem.set_reference(np.zeros((1, *SHAPE), np.uint8))
    batch = mem.sample(64)
    kept = batch.indices.numpy()
    assert not lost[kept].any()
    assert np.array_equal(batch.obs.numpy(), ref.obs[kept])
    assert np.array_equal(batch.next_obs.numpy(), ref.next_obs[kept])
    if kind == "queue":  # the freshest first, cycling through the usable six
        assert batch.rewards[:7].tolist() == [29.0, 28.0, 27.0, 26.0, 25.0, 24.0, 29.0]
    else:  # attentive keeps the candidates nearest the reference: some of them
        usable = {24.0, 25.0, 26.0, 27.0, 28.0, 29.0}
        assert set(batch.rewards.tolist()) <= usable and (kind == "attentive" or set(batch.rewards.tolist()) == usable)


def test_blank_frames_take_no_slot_and_decode_to_zeros():
    mem = ReplayMemory(4, SHAPE, np.uint8, frames=True)
    obs = np.zeros((1, *SHAPE), np.uint8)
    obs[0, -1] = 7
    nxt = np.concatenate([obs[:, 1:], np.full((1, 1, 84, 84), 9, np.uint8)], 1)
    mem.add(obs, np.array([0]), np.array([0.0], np.float32), nxt, np.array([False]), np.array([False]))
    assert mem.obs[0].tolist() == [BLANK, BLANK, BLANK, 0] and mem.next_obs[0].tolist() == [BLANK, BLANK, 0, 1]
    assert np.array_equal(mem.sample(1).obs.numpy(), obs) and np.array_equal(mem.sample(1).next_obs.numpy(), nxt)


def round_trip(mem):
    buffer = io.BytesIO()
    torch.save(mem.state_dict(), buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("kind, n_step", [("replay", 1), ("prioritized", 3), ("attentive", 1)])
def test_checkpoint_round_trip_resumes_identically(games, kind, n_step):
    ref, mem = pair(kind, n_step=n_step)
    feed(ref, mem, games[:150], full_every=150)
    ref.sample(8), mem.sample(8)
    state = mem.state_dict()
    assert state["frames"]["frames"].data_ptr() == mem.store.frames.ctypes.data  # a view: saving copies no frame
    ref2, mem2 = pair(kind, n_step=n_step, seed=99)
    ref2.load_state_dict(round_trip(ref))
    mem2.load_state_dict(round_trip(mem))
    assert_same_content(ref2, mem2)
    feed(ref2, mem2, games[150:], full_every=50)  # resumed: every env starts a fresh stack
    resumed = mem2.sample(32)
    assert_same_batches(ref2.sample(32), resumed)
    if n_step == 1:  # nothing was in flight: the original memory, going on, samples the same batch
        for step in games[150:]:
            mem.add(*step)
        assert_same_batches(mem.sample(32), resumed)


def test_mismatched_checkpoints_and_batches_are_refused(games):
    ref, mem = pair("replay")
    mem.add(*games[0])
    ref.add(*games[0])
    with pytest.raises(ValueError, match="frame storage"):
        ref.load_state_dict(mem.state_dict())
    with pytest.raises(ValueError, match="frame store holds"):
        pair("replay", capacity=65)[1].load_state_dict(mem.state_dict())
    with pytest.raises(ValueError, match="sized for 2 envs"):
        mem.add(*(np.concatenate([x, x]) for x in games[1]))


@pytest.mark.parametrize("settings, framed", [
    ({}, True),
    ({"replay_frames": False}, False),
    ({"env_type": "gym"}, False),
    ({"memory": "mixed", "replay_parameters": '[{"type": "queue", "capacity": 4, "sample_ratio": 0.5}, '
                                              '{"type": "prioritized", "capacity": 100, "sample_ratio": 0.5}]'}, True),
])
def test_build_stores_frames_for_atari_frame_stacks(settings, framed):
    hp = dqn_cartpole()
    hp.update({"env_type": "atari", "buffer_size": 100, "num_envs": 2, **settings})
    mem = memory[hp.memory].build(hp, gym.spaces.Box(0, 255, SHAPE, np.uint8), gym.spaces.Discrete(4))
    for buffer in getattr(mem, "buffers", [mem]):
        assert (buffer.store is not None) == framed
        assert buffer.store is None or buffer.store.num_envs == 2
    vector = memory["replay"].build(hp, gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2))
    assert vector.store is None

"""Sequence replay (rl/memory/sequences.py, sequence_store.py, sequence_buffers.py): stored rollouts come back
exactly (frame stacks rebuilt from frames kept once, across resets inside a sequence), never cross an episode start
unflagged and bootstrap a truncation from its final observation; queue removal and FIFO order, uniform with
replacement, sampling counters, elite insertion and sampling, attentive ranking, composition by ratio in listed order,
fill-in gating and checkpoint round trips."""

import io

import numpy as np
import pytest
import torch

from rl.memory.elite_sampling import EliteSampler
from rl.memory.replay_parameters import parse_replay_parameters
from rl.memory.sequence_buffers import CustomBuffer, QueueBuffer, SequenceBuffer, build_buffers, compose
from rl.memory.sequence_store import SequenceStore, naive_bytes_per_step
from rl.memory.sequences import Sequences, next_values

S, H, T, F = 4, 6, 5, 3


class Space:
    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, np.dtype(dtype)


def frame(env: int, episode: int, count: int) -> np.ndarray:
    """A frame naming its env, episode and per-env frame number (never all zero)."""
    f = np.zeros((H, H), np.uint8)
    f[0, 0], f[0, 1], f[0, 2], f[0, 3] = env + 1, episode + 1, count % 256, count // 256
    return f


def ident(stack: np.ndarray) -> np.ndarray:
    """(env, episode, count) of each frame of stacks [..., S, H, H]; -1s for a blank (zero) frame."""
    env, ep = stack[..., 0, 0].astype(int) - 1, stack[..., 0, 1].astype(int) - 1
    return np.stack([env, ep, stack[..., 0, 2].astype(int) + 256 * stack[..., 0, 3].astype(int)], -1)


def play(steps: int, envs: int = 2, end_p: float = 0.15, pad: str = "repeat", seed: int = 0):
    """`steps` batched steps of `envs` frame-stacking envs with episodes ending at random (half terminated, half
    truncated), same-step autoreset: next_obs is the real next (final) stack. A reset stack repeats its first frame
    (pad "repeat") or pads it with zero frames (pad "zero"). Returns time-major arrays."""
    rng = np.random.default_rng(seed)
    obs, nxt = np.zeros((2, steps, envs, S, H, H), np.uint8)
    term, trunc = np.zeros((2, steps, envs), bool)
    for e in range(envs):
        count, ep = 0, 0

        def reset(e, ep):
            nonlocal count
            count += 1
            first = frame(e, ep, count)
            pad_frame = first if pad == "repeat" else np.zeros_like(first)
            return np.stack([pad_frame] * (S - 1) + [first])

        cur = reset(e, ep)
        for t in range(steps):
            obs[t, e] = cur
            count += 1
            nxt[t, e] = np.concatenate([cur[1:], frame(e, ep, count)[None]])
            if rng.random() < end_p:
                (term if rng.random() < 0.5 else trunc)[t, e] = True
                ep += 1
                cur = reset(e, ep)
            else:
                cur = nxt[t, e]
    return obs, nxt, term, trunc


def sequences(obs, nxt, term, trunc, t0: int, feature: float = 0.0, reward: float = 0.0, feature_dim: int = F):
    """The rollout of steps t0..t0+T of every env as `Sequences`."""
    sl = slice(t0, t0 + T)
    n = obs.shape[1]
    steps = np.arange(t0, t0 + T, dtype=np.float32)[:, None].repeat(n, 1)
    return Sequences(obs[sl], nxt[sl], np.zeros((T, n), np.int64), np.full((T, n), reward, np.float32), steps,
                     steps + 0.5, term[sl], term[sl] | trunc[sl], np.full((T, n, feature_dim), feature, np.float32))


def spec(text: str):
    return parse_replay_parameters(text)


def standard(capacity: int = 8, batch_size: int = 2, **kw) -> SequenceBuffer:
    s = spec(f'[{{"type": "standard", "capacity": {capacity}, "sample_ratio": 1}}]')[0]
    return SequenceBuffer(s, T, (S, H, H), np.uint8, batch_size, feature_dim=F, **kw)


# ------------------------------------------------------------------ integrity


@pytest.mark.parametrize("pad", ["repeat", "zero"])
def test_stacks_rebuilt_exactly_across_resets(pad):
    obs, nxt, term, trunc = play(6 * T, pad=pad)
    assert (term | trunc)[: 6 * T].any()
    buf = standard(capacity=12)
    for r in range(6):
        buf.add(sequences(obs, nxt, term, trunc, r * T))
    for r in range(6):
        batch = buf.gather([2 * r, 2 * r + 1])  # slot 2r + e holds env e's rollout r
        sl = slice(r * T, (r + 1) * T)
        assert torch.equal(batch.obs[:T], torch.from_numpy(obs[sl]))
        assert torch.equal(batch.obs[T], torch.from_numpy(nxt[sl][-1]))  # the bootstrap: next_obs of the last step
        dones = (term | trunc)[sl]
        t, b = np.nonzero(dones[:-1])
        assert batch.final_at.tolist() == np.stack([t, b], 1).tolist()
        assert torch.equal(batch.final_obs, torch.from_numpy(nxt[sl][t, b]))  # every ended step's final stack
        assert torch.equal(batch.dones, torch.from_numpy(dones.astype(np.float32)))
        assert torch.equal(batch.terminated, torch.from_numpy(term[sl].astype(np.float32)))


def test_no_sequence_crosses_an_episode_start_unflagged():
    obs, nxt, term, trunc = play(40 * T, envs=2, end_p=0.2, seed=3)
    buf = standard(capacity=80, batch_size=10)
    for r in range(40):
        buf.add(sequences(obs, nxt, term, trunc, r * T))
    batch = buf.gather(buf.sample(64, np.random.default_rng(0)))
    ids = ident(batch.obs.numpy())  # [T+1, k, S, 3]
    episode_changes = ids[1:, :, -1, 1] != ids[:-1, :, -1, 1]
    assert episode_changes.any()
    assert (batch.dones.numpy()[episode_changes] == 1).all()
    # no done: the next stack continues this one by one new frame of the same episode
    cont = batch.dones.numpy() == 0
    assert (ids[1:, :, :-1][cont] == ids[:-1, :, 1:][cont]).all()
    assert (ids[1:, :, -1, 2][cont] == ids[:-1, :, -1, 2][cont] + 1).all()
    # a truncation bootstraps from its final stack: same episode, one frame on, wherever it sits in the sequence
    finals = {(int(t), int(b)): batch.final_obs[i].numpy() for i, (t, b) in enumerate(batch.final_at)}
    truncated = np.argwhere((batch.dones.numpy() == 1) & (batch.terminated.numpy() == 0))
    assert len(truncated) and any(t == T - 1 for t, _ in truncated) and any(t < T - 1 for t, _ in truncated)
    for t, b in truncated:
        final = finals[(t, b)] if t < T - 1 else batch.obs[T, b].numpy()
        here, there = ident(batch.obs[t, b].numpy()), ident(final)
        assert (there[:-1] == here[1:]).all() and there[-1, 1] == here[-1, 1] and there[-1, 2] == here[-1, 2] + 1


def test_next_values_bootstrap_from_final_observations():
    values = torch.arange(12.0).reshape(4, 3)  # V(obs) [T+1 = 4, k = 3]
    out = next_values(values, torch.tensor([-1.0, -2.0]), torch.tensor([[0, 2], [1, 0]]))
    expected = values[1:].clone()
    expected[0, 2], expected[1, 0] = -1.0, -2.0
    assert torch.equal(out, expected)


def test_frames_kept_once_and_overflow_freed():
    obs, nxt, term, trunc = play(2 * T, envs=1, end_p=0.0)
    store = SequenceStore(2, T, (S, H, H), np.uint8, feature_dim=F)
    item = sequences(obs, nxt, term, trunc, 0)
    store.write(np.array([0]), {k: np.swapaxes(np.asarray(v), 0, 1) for k, v in item._asdict().items()
                                if v is not None})
    assert len(np.unique(np.concatenate([store.obs_ids[0], store.next_ids[0]]))) == T + S  # no reset: T + S frames
    obs2, nxt2, term2, trunc2 = play(T, envs=1, end_p=0.5, seed=1)
    assert (term2 | trunc2)[:-1].any()
    fields = {k: np.swapaxes(np.asarray(v), 0, 1) for k, v in sequences(obs2, nxt2, term2, trunc2, 0)._asdict().items()
              if v is not None}
    store.write(np.array([1]), fields)
    assert (store.extra_owner == 1).any()  # resets need more than the slot's block
    batch = store.gather([0, 1])
    assert torch.equal(batch.obs[:T, 1], torch.from_numpy(obs2[:, 0]))
    store.write(np.array([1]), {k: v for k, v in fields.items()} | {"obs": obs[None, :T, 0], "next_obs":
                                                                     nxt[None, :T, 0]})
    assert not (store.extra_owner == 1).any()  # overwriting the slot frees its overflow rows


def test_vector_observations_round_trip():
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(T, 3, 4)).astype(np.float32)
    nxt = np.concatenate([obs[1:], rng.normal(size=(1, 3, 4)).astype(np.float32)])
    dones = np.zeros((T, 3), bool)
    dones[1, 2] = True
    nxt[1, 2] = 9.0  # the final observation differs from the next step's (reset) one
    s = spec('[{"type": "standard", "capacity": 4, "sample_ratio": 1}]')[0]
    buf = SequenceBuffer(s, T, (4,), np.float32, 2, feature_dim=F)
    z = np.zeros((T, 3), np.float32)
    buf.add(Sequences(obs, nxt, z.astype(np.int64), z, z, z, dones, dones, np.zeros((T, 3, F))))
    batch = buf.gather([0, 1, 2])
    assert torch.equal(batch.obs[:T], torch.from_numpy(obs)) and torch.equal(batch.obs[T], torch.from_numpy(nxt[-1]))
    assert batch.final_at.tolist() == [[1, 2]] and (batch.final_obs == 9.0).all()


def test_pong_bytes_per_step():
    """Pong (84x84 uint8 stacks of 4, T = 10, 512 float32 features): frames once per item against T+1 stacks."""
    store = SequenceStore(10, 10, (4, 84, 84), np.uint8, feature_dim=512)
    frames = (10 * (10 + 4) + 1) * 84 * 84 / (10 * 10)  # 9885 B: 14 frames an item, and the blank row
    ids = 2 * 4 * 4  # obs and next_obs id stacks, int32
    other = 8 + 4 * 3 + 2 + 512 * 4  # action, reward/log_prob/value, flags, features
    assert store.bytes_per_step() == pytest.approx(frames + ids + other)
    assert naive_bytes_per_step((4, 84, 84), np.uint8, 10) == pytest.approx(11 * 4 * 7056 / 10)  # 31046 B


# ------------------------------------------------------------------ buffers


def test_queue_fifo_and_removal():
    s = spec('[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, '
             '{"type": "standard", "capacity": 100, "sample_ratio": 0.5}]')[0]
    obs, nxt, term, trunc = play(4 * T, envs=1)
    q = QueueBuffer(s, T, (S, H, H), np.uint8, batch_size=6, feature_dim=F)  # a share of 3 from a capacity-1 queue
    for r in range(4):
        assert q.ready(6) == (r >= 3)
        q.add(sequences(obs, nxt, term, trunc, r * T, reward=r))
        assert len(q) == min(r + 1, 3)
    assert q.ready(6) and q.store.slots == 3
    got = q.gather(q.sample(3))
    assert got.rewards[0].tolist() == [1, 2, 3]  # the oldest held first; rollout 0 was dropped when it overflowed
    assert len(q) == 0 and not q.ready(6)
    with pytest.raises(ValueError):
        q.sample(1)


def test_standard_uniform_with_replacement():
    buf = standard(capacity=8)
    obs, nxt, term, trunc = play(3 * T, envs=2)
    for r in range(3):
        buf.add(sequences(obs, nxt, term, trunc, r * T))
    assert len(buf) == 6
    idx = buf.sample(50, np.random.default_rng(7))
    assert idx.tolist() == np.random.default_rng(7).choice(6, 50).tolist()
    assert len(np.unique(idx)) < 50  # with replacement
    for r in range(3, 6):  # circular: the oldest are overwritten once full
        buf.add(sequences(*play(T, envs=2, seed=r), 0, reward=r))
    assert len(buf) == 8 and buf.gather([0, 1, 2, 3]).rewards[0].tolist() == [4, 4, 5, 5]


def custom(extra: str = "", capacity: int = 6, batch_size: int = 4, **kw) -> CustomBuffer:
    s = spec(f'[{{"type": "custom", "capacity": {capacity}, "sample_ratio": 1, "dist_function": "ln_norm"{extra}}}]')
    return CustomBuffer(s[0], T, (S, H, H), np.uint8, batch_size, feature_dim=F, **kw)


def fill(buf, rollouts: int, features=None):
    for r in range(rollouts):
        f = 0.0 if features is None else features[r]
        buf.add(sequences(*play(T, envs=1, seed=r), 0, feature=f, reward=r))


def zero_features(obs):
    return torch.zeros(obs.shape[0], obs.shape[1], F)


def test_counters_start_at_one_and_count_every_draw():
    buf = custom()
    fill(buf, 4)
    assert buf.counters[:4].tolist() == [1, 1, 1, 1]
    idx = buf.sample(20, np.random.default_rng(1))
    expected = 1 + np.bincount(idx, minlength=6)[:4]
    assert buf.counters[:4].tolist() == expected.tolist() and expected.max() > 2  # duplicates counted each time


def test_elite_insertion_evicts_the_most_off_policy_and_resets_its_counter():
    buf = custom(', "insert_strategy": "elite_insertion", "elite_batch_size": 6')
    fill(buf, 6, features=[1.0, 5.0, 2.0, 0.5, 3.0, 4.0])  # distance to zero target features: |f| * sqrt(T F)
    buf.sample(12, np.random.default_rng(0))
    assert (buf.counters > 1).any()
    calls = []

    def features_for(obs):
        calls.append(obs.shape[1])
        return zero_features(obs)

    buf.add(sequences(*play(T, envs=1, seed=9), 0, feature=0.0, reward=99), features_for=features_for)
    assert calls == [6]  # every candidate's distance in one batched call
    assert buf.gather([1]).rewards[0].item() == 99  # slot 1 (features 5.0) evicted
    assert buf.counters[1] == 1
    with pytest.raises(ValueError):
        buf.add(sequences(*play(T, envs=1), 0))  # a full elite-insertion buffer needs the current features


def test_off_policy_scores_the_acted_observations_step_by_step():
    """The target features come from the T acted observations, aligned with the stored behaviour features of the
    same steps; the bootstrap observation is not scored (published: [:, :-1])."""
    buf = custom()
    obs, nxt, term, trunc = play(T, envs=1, end_p=0.0, seed=3)
    counts = ident(obs[:, 0])[:, -1, 2].astype(np.float32)  # the newest frame's number at each acted step
    item = sequences(obs, nxt, term, trunc, 0)
    buf.add(item._replace(features=np.repeat(counts[:, None, None], F, 2)))
    seen = []

    def features_for(o):  # each observation's newest frame number, as the feature vector
        seen.append(o.shape[0])
        return torch.from_numpy(ident(o.numpy())[..., -1, 2].astype(np.float32))[..., None].expand(*o.shape[:2], F)

    assert buf.off_policy(np.array([0]), features_for).tolist() == [0.0]
    assert seen == [T]


def test_elite_sampling_ranks_the_pool_with_one_batched_call():
    extra = (', "sample_strategy": "elite_sampling", "lambda_batch_multiplier": 3, "alfa_annealing_factor": 1.0, '
             '"elite_sampling_strategy": "strategy1"')
    buf = custom(extra, capacity=6, batch_size=2, lr_scheduler_steps=100)
    features = [3.0, 0.1, 2.0, 0.2, 5.0, 4.0]
    fill(buf, 6, features=features)
    calls = []

    def features_for(obs):
        calls.append(obs.shape[1])
        return zero_features(obs)

    rng, twin = np.random.default_rng(5), np.random.default_rng(5)
    idx = buf.sample(2, rng, features_for=features_for)
    pool = twin.choice(6, int(buf.sampler.lam * 2))  # the first draw, lambda annealed once: 2.98 * 2 -> 5
    assert calls == [len(np.unique(pool))]
    ref = EliteSampler(2, 3, 1.0, 100, "strategy1")
    dist = np.abs(np.array(features))[pool] * np.sqrt(T * F)
    assert idx.tolist() == ref.select(pool, dist, np.ones(len(pool), int)).tolist()
    ranked = sorted(np.unique(pool), key=lambda i: features[i])
    assert set(idx.tolist()) <= set(ranked[:2])  # the most on-policy first
    # logged: the chosen sequences' mean distance and the pool's, every draw counted
    chosen = np.abs(np.array(features))[idx] * np.sqrt(T * F)
    assert buf.diagnostics == pytest.approx({"selected_distance": chosen.mean(), "pool_distance": dist.mean()})


def test_attentive_sampling_ranks_most_similar_to_the_newest_last_acted_state():
    """The query is the newest rollout's last acted state (T - 1): elite_buffer_vtrace drops the bootstrap one's
    features."""
    extra = ', "sample_strategy": "attentive_sampling", "lambda_batch_multiplier": 6, "elite_sampling_strategy": ' \
            '"strategy1"'
    buf = custom(extra, capacity=6, batch_size=1, lr_scheduler_steps=1000)
    obs, nxt, term, trunc = play(6 * T, envs=1, end_p=0.3, seed=0)
    for r in range(6):
        buf.add(sequences(obs, nxt, term, trunc, r * T))

    seen = []

    def features_for(obs):  # the episode of the newest frame: rollouts of later episodes look alike
        seen.append(obs)
        return obs[..., -1, 0, 1].float()[..., None].expand(*obs.shape[:2], F).clone()

    newest = features_for(buf.store.gather_obs(np.array([5])))[:, 0, 0]
    idx = buf.sample(1, np.random.default_rng(0), features_for=features_for)
    query = seen[-1][0, -1]  # one pass: the candidates' acted states, then the query
    acted, bootstrap = buf.store.gather_obs(np.array([5]))[T - 1:, 0]
    assert torch.equal(query, acted) and not torch.equal(query, bootstrap)
    uniq = np.unique(np.random.default_rng(0).choice(6, int(buf.sampler.lam)))
    cand = features_for(buf.store.gather_obs(uniq))[:-1, :, 0].T  # [u, T]

    def nearest(query):
        return int(uniq[int((cand - query).norm(dim=1).argmin())])

    assert nearest(newest[T - 1]) != nearest(newest[0])
    assert idx.tolist() == [nearest(newest[T - 1])]


# ------------------------------------------------------------------ composition, gating, checkpoints

TWO = '[{"type": "queue", "capacity": 1, "sample_ratio": 0.3}, {"type": "standard", "capacity": 50, ' \
      '"sample_ratio": 0.7}]'


def test_compose_by_ratio_in_listed_order_only_when_ready():
    specs = spec(TWO)
    bufs = build_buffers(specs, Space((S, H, H), np.uint8), T, batch_size=10, feature_dim=F)
    rng = np.random.default_rng(0)
    obs, nxt, term, trunc = play(100 * T, envs=1, seed=2)
    for r in range(50):
        assert compose(bufs, 10, rng) is None  # standard starts at min(50, max(0.2 * 50, 10 * 10)) = 50
        for b in bufs:
            b.add(sequences(obs, nxt, term, trunc, r * T, reward=1000 + r if b.spec.type == "queue" else r))
    assert len(bufs[1]) == 50 and bufs[0].ready(10) and bufs[1].ready(10)
    batch = compose(bufs, 10, rng)
    assert batch.obs.shape[:2] == (T + 1, 10)
    assert (batch.rewards[0, :3] >= 1000).all() and (batch.rewards[0, 3:] < 1000).all()  # queue's 3, then 7
    assert batch.rewards[0, :3].tolist() == [1047, 1048, 1049]
    b = batch.final_at[:, 1]
    assert len(b) == 0 or (batch.dones[batch.final_at[:, 0], b] == 1).all()  # final_at offsets follow the order
    assert compose(bufs, 10, rng) is None  # the queue's rollouts were taken


def test_fill_in_gating_at_the_threshold():
    buf = standard(capacity=200, batch_size=2)  # max(0.2 * 200, 10 * 2) = 40
    for r in range(39):
        buf.add(sequences(*play(T, envs=1, seed=r), 0))
    assert not buf.ready(2)
    buf.add(sequences(*play(T, envs=1, seed=99), 0))
    assert buf.ready(2)


def test_state_dict_round_trip_samples_identically():
    extra = (', "sample_strategy": "elite_sampling", "lambda_batch_multiplier": 4, "alfa_annealing_factor": 1.0, '
             '"insert_strategy": "elite_insertion", "elite_batch_size": 3')
    a = custom(extra, capacity=5, batch_size=2, lr_scheduler_steps=10, seed=1)
    feats = np.random.default_rng(0).random(40)

    def features_for(obs):
        return obs[:, :, -1, 0, 2].float()[..., None].expand(*obs.shape[:2], F) / 50

    rng = np.random.default_rng(3)
    for r in range(8):
        a.add(sequences(*play(T, envs=1, end_p=0.5, seed=r), 0, feature=feats[r]), features_for=features_for)
        a.sample(2, rng, features_for=features_for)
    blob = io.BytesIO()
    torch.save({"buffer": a.state_dict(), "rng": rng.bit_generator.state}, blob)
    blob.seek(0)
    state = torch.load(blob, weights_only=True)
    b = custom(extra, capacity=5, batch_size=2, lr_scheduler_steps=10, seed=2)
    b.load_state_dict(state["buffer"])
    rng_b = np.random.default_rng(0)
    rng_b.bit_generator.state = state["rng"]
    for r in range(8, 14):
        item = sequences(*play(T, envs=1, end_p=0.5, seed=r), 0, feature=feats[r])
        slot_a, slot_b = a.add(item, features_for=features_for), b.add(item, features_for=features_for)
        ia, ib = a.sample(2, rng, features_for=features_for), b.sample(2, rng_b, features_for=features_for)
        assert slot_a.tolist() == slot_b.tolist() and ia.tolist() == ib.tolist()
        ga, gb = a.gather(ia), b.gather(ib)
        assert all(torch.equal(x, y) for x, y in zip(ga[:-1], gb[:-1]))
    assert a.counters.tolist() == b.counters.tolist() and a.sampler.lam == b.sampler.lam

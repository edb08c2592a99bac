"""The on-policy agents (vpg, a2c, ppo) through their API and through train.py: update schedule, recurrent state,
exact continuation from a checkpoint, the flat Adam, normalisation, action selection, and learning."""

from __future__ import annotations

import io
import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl.agents.normalize import ObsNormalizer, RewardNormalizer, RunningMeanStd
from rl.collector import Collector
from rl.envs import make_env
from rl.errors import ConfigError
from rl.evaluation import evaluate
from rl.registry import act_select
from rl.registry import hparams as sets
from rl.trainer import build_agent, seed_everything

ON_POLICY_SETS = ["vpg_cartpole", "a2c_cartpole", "ppo_cartpole", "ppo_gru_cartpole", "ppo_pendulum",
                  "ppo_halfcheetah_bullet"]


def make(name: str, overrides: str = "", seed: int = 0):
    hp = sets[name]()
    if overrides:
        hp.parse(overrides)
    seed_everything(seed)
    torch.set_num_threads(hp.torch_threads)  # as a run does: small networks are fastest on one thread
    env = make_env(hp)
    return hp, env, build_agent(hp, env, seed)


def play(agent, env, seed: int, steps: int, record: list | None = None) -> Collector:
    """The training loop of rl/run.py (SingleProcess: a Collector step, then agent.update) for `steps` vector steps
    from `env.reset(seed=seed)`; `record` receives each step's (actions, update diagnostics)."""
    taken: list = []

    def observe(obs, actions, *transition):
        taken.append(actions.copy())
        agent.observe(obs, actions, *transition)

    collector = Collector(env, agent, seed, observe=observe)
    for _ in range(steps):
        collector.step()
        out = agent.update()
        if record is not None:
            record.append((taken[-1], out))
    return collector


@pytest.mark.parametrize("name", ["vpg_cartpole", "a2c_cartpole", "ppo_cartpole"])
def test_update_learns_exactly_when_the_rollout_is_full(name):
    hp, env, agent = make(name, "num_steps=4,num_envs=2,batch_size=4")
    record: list = []
    play(agent, env, 0, 8, record)
    updated = [bool(out) for _, out in record]
    assert updated == [False, False, False, True] * 2
    info = record[3][1]
    assert {"losses/policy_loss", "losses/value_loss", "losses/approx_kl", "losses/explained_variance",
            "charts/learning_rate"} <= set(info)
    assert agent.env_steps == 16 and agent.grad_steps == 2 * hp.epochs * (1 if hp.batch_size == 0 else 2)
    env.close()


def test_linear_decay_of_lr_and_clip_range():
    hp, env, agent = make("ppo_cartpole", "num_steps=4,num_envs=2,train_steps=16")
    record: list = []
    play(agent, env, 0, 4, record)
    info = record[-1][1]
    assert info["charts/learning_rate"] == pytest.approx(1e-3 * (1 - 8 / 16))
    assert info["charts/clip_range"] == pytest.approx(0.2 * (1 - 8 / 16))
    env.close()


def test_recurrent_hidden_state_resets_at_episode_ends_and_replays_exactly():
    hp, env, agent = make("ppo_gru_cartpole", "num_envs=3,num_steps=40,recurrent_seq_len=0")
    seen = {}

    def observe(obs, actions, rewards, next_obs, terminated, truncated):  # the hidden state before the resets
        agent.observe(obs, actions, rewards, next_obs, terminated, truncated)
        seen["before"], seen["dones"] = agent.hidden.clone(), terminated | truncated

    collector = Collector(env, agent, seed=0, observe=observe)
    done_log = []
    for _ in range(40):
        collector.step()  # observe, then reset_episodes where an episode ended
        before, dones = seen["before"], seen["dones"]
        if dones.any():
            assert (agent.hidden[dones] == 0).all()  # a new episode starts from the zero state
            assert torch.equal(agent.hidden[~dones], before[~dones])
        done_log.append(dones.astype(np.float32))
    assert np.sum(done_log[:-1]) > 0, "some CartPole episode must end in 40 random-policy steps"
    mem = agent.memory
    assert mem.starts[0].tolist() == [1.0, 1.0, 1.0]
    assert np.array_equal(mem.starts[1:].numpy(), np.stack(done_log[:-1]))  # stored: where each episode began
    # replaying the stored sequences from the rollout's first hidden state reproduces what acting computed
    with torch.no_grad():
        _, values = agent.model.forward_sequence(mem.obs, mem.hidden[0], mem.starts)
    assert torch.allclose(values, mem.values.flatten(), atol=1e-5)
    # and without the resets it would not
    with torch.no_grad():
        _, no_reset = agent.model.forward_sequence(mem.obs, mem.hidden[0], torch.zeros_like(mem.starts))
    assert not torch.allclose(no_reset, mem.values.flatten(), atol=1e-5)
    env.close()


@pytest.mark.parametrize("seq_len", [8, 0])
def test_recurrent_minibatches_replay_acting_exactly_across_chunks_and_episode_starts(seq_len):
    """Before the first gradient step, every minibatch the update replays (8-step chunks from the stored hidden
    states, or whole rollouts) must give the log-probabilities and values computed when acting, and the bootstrap
    V(real_next_obs, next_hidden) must be the next step's acting value wherever the episode goes on."""
    hp, env, agent = make("ppo_gru_cartpole", f"num_envs=4,num_steps=48,recurrent_seq_len={seq_len},batch_size=64,"
                                                  "normalize_obs=false")  # fixed inputs: acting and replay compare
    collector = Collector(env, agent, seed=1)
    for _ in range(hp.num_steps):  # the training loop, stopped before the update
        collector.step()
    mem = agent.memory
    inside = mem.starts[1:].bool() & (torch.arange(1, hp.num_steps) % 8 != 0).unsqueeze(1)
    assert inside.any(), "some episode must start inside a chunk"
    with torch.no_grad():
        _, next_values, _ = agent.model(mem.next_obs.flatten(0, 1), mem.next_hidden.flatten(0, 1))
    next_values = next_values.view(hp.num_steps, -1)
    goes_on = mem.dones[:-1] == 0
    assert torch.allclose(next_values[:-1][goes_on], mem.values[1:][goes_on], atol=1e-6)
    mem.compute_advantages(next_values, hp.gamma, hp.gae_lambda)
    batches = list(mem.minibatches(hp.batch_size, torch.Generator().manual_seed(0), seq_len))
    assert sum(len(b.returns) for b in batches) == len(mem)
    with torch.no_grad():
        for b in batches:
            log_probs, _, values = agent._evaluate(b, need_entropy=False)
            assert torch.allclose(log_probs, b.old_log_probs, atol=1e-6)
            assert torch.allclose(values, b.old_values, atol=1e-6)
            if seq_len:  # chunks that start mid-episode need their stored state: zeros would not replay them
                _, zeroed = agent.model.forward_sequence(b.obs, torch.zeros_like(b.hidden), b.starts)
                assert not torch.allclose(zeroed, b.old_values, atol=1e-6)
    env.close()


@pytest.mark.parametrize("name, overrides", [("ppo_cartpole", "num_steps=8,num_envs=2,batch_size=8"),
                                             ("ppo_gru_cartpole", "num_steps=8,num_envs=2,batch_size=8"),
                                             ("ppo_pendulum", "num_steps=8,num_envs=2,batch_size=8,"
                                                              "normalize_obs=true,normalize_reward=true")])
def test_checkpoint_round_trip_continues_identically(name, overrides):
    hp, env, agent = make(name, overrides)
    play(agent, env, 0, 20)  # two updates, then 4 steps into the third rollout
    buffer = io.BytesIO()
    torch.save(agent.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    torch.manual_seed(99)
    env_b = make_env(hp)
    clone = build_agent(hp, env_b, seed=123)  # other seeds: everything that matters must come from the state
    clone.load_state_dict(state)
    agent.load_state_dict(state)  # both go on as a resumed run does, with fresh episodes
    rec_a, rec_b = [], []
    play(agent, env, 7, 16, rec_a)
    play(clone, env_b, 7, 16, rec_b)
    assert sum(bool(info) for _, info in rec_a) == 2
    for (a, info_a), (b, info_b) in zip(rec_a, rec_b):
        assert np.array_equal(a, b)
        assert info_a.keys() == info_b.keys()
    assert all(torch.equal(p, q) for p, q in zip(agent.model.parameters(), clone.model.parameters()))
    assert clone.env_steps == agent.env_steps and clone.grad_steps == agent.grad_steps
    env.close()
    env_b.close()


def test_running_mean_std_and_normalisers_round_trip():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, (n, 2)) for n in (5, 17, 1, 40)]
    rms = RunningMeanStd((2,), epsilon=0.0)
    for b in batches:
        rms.update(b)
    everything = np.concatenate(batches)
    assert np.allclose(rms.mean, everything.mean(0)) and np.allclose(rms.var, everything.var(0))
    norm = ObsNormalizer((2,), clip=5.0)
    for b in batches:
        out = norm(b, update=True)
    assert np.abs(out).max() <= 5.0 and out.dtype == np.float32
    again = ObsNormalizer((2,), clip=5.0)
    again.load_state_dict(norm.state_dict())
    assert np.array_equal(again(batches[0]), norm(batches[0]))
    rn = RewardNormalizer(2, gamma=0.9)
    scaled = [rn(np.array([10.0, -10.0]), np.array([False, True])) for _ in range(50)]
    assert np.sign(scaled[-1]).tolist() == [1.0, -1.0] and abs(scaled[-1][0]) < 10.0
    assert rn.returns[1] == 0.0  # the return restarts where an episode ended


def test_action_selection():
    box = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    hp = sets["ppo_pendulum"]()
    params = (torch.tensor([[5.0], [-0.5]]), torch.tensor([-20.0]))  # std ~ 2e-9: samples are the means
    for bounds, expected in (("clip", [2.0, -0.5]), ("tanh", [2 * np.tanh(5.0), 2 * np.tanh(-0.5)]),
                             ("none", [5.0, -0.5])):
        hp.action_bounds = bounds
        step = act_select["gaussian"].build(hp, box, seed=0)(params)
        assert np.allclose(step.env_actions[:, 0], expected, atol=1e-5)
        assert np.allclose(step.actions.numpy()[:, 0], [5.0, -0.5], atol=1e-5)  # stored unbounded
        det = act_select["deterministic_gaussian"].build(hp, box)(params)
        assert np.allclose(det.env_actions[:, 0], expected, atol=1e-5)
    hp = sets["ppo_cartpole"]()
    cat = act_select["categorical"].build(hp, gym.spaces.Discrete(3), seed=0)
    logits = torch.log(torch.tensor([[0.2, 0.5, 0.3]])).expand(20_000, 3)
    step = cat(logits)
    freq = np.bincount(step.env_actions, minlength=3) / 20_000
    assert np.allclose(freq, [0.2, 0.5, 0.3], atol=0.015)
    assert torch.allclose(step.log_probs, torch.log(torch.tensor([0.2, 0.5, 0.3]))[step.actions])
    greedy = act_select["deterministic_categorical"].build(hp, gym.spaces.Discrete(3))
    assert greedy(logits[:2]).env_actions.tolist() == [1, 1]
    with pytest.raises(ConfigError, match="act_select=gaussian"):
        act_select["categorical"].build(hp, box)


def test_next_step_autoreset_envs_are_refused():
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv, CartPoleVectorEnv

    if "NextStepCartPole-v1" not in gym.registry:  # gymnasium's own vector CartPole: next-step autoreset
        gym.register("NextStepCartPole-v1", entry_point=CartPoleEnv, vector_entry_point=CartPoleVectorEnv,
                     max_episode_steps=500)
    hp = sets["ppo_cartpole"]()
    hp.env, hp.vector_mode = "NextStepCartPole-v1", "native"
    with pytest.raises(ConfigError, match="same-step autoreset"):
        build_agent(hp, make_env(hp, vector_mode="sync"), seed=0)


def test_masked_cartpole_hides_the_velocities():
    env = gym.make("CartPoleNoVel-v1")
    obs, _ = env.reset(seed=0)
    full = gym.make("CartPole-v1")
    full_obs, _ = full.reset(seed=0)
    assert obs.shape == (2,) and np.allclose(obs, full_obs[[0, 2]])
    assert env.spec.max_episode_steps == 500


# ---------------------------------------------------------------------------------------------------- train.py
SMALL = "num_steps=16,batch_size=32,eval_interval=0,checkpoint_interval=200,log_interval=100"


@pytest.mark.parametrize("name", ON_POLICY_SETS)
def test_each_set_trains_end_to_end(tmp_path, train_cli, name):
    extra = ",num_envs=2" if name == "ppo_halfcheetah_bullet" else ""
    out = tmp_path / name
    res = train_cli("--hparams", name, "--output_dir", str(out), "--train_steps", "320", "--eval_episodes", "1",
                    "--hparam_override", SMALL + extra)
    assert res.returncode == 0, res.stderr[-3000:]
    ev = json.loads((out / "eval.json").read_text())
    assert ev["env_steps"] >= 320 and len(ev["returns"]) == 1
    assert "policy_loss" in (out / "progress.csv").read_text().splitlines()[0]


def test_resume_mid_rollout(tmp_path, train_cli):
    out = tmp_path / "run"
    args = ["--hparams", "ppo_cartpole", "--output_dir", str(out), "--eval_episodes", "1", "--hparam_override",
            "checkpoint_interval=200,log_interval=100,eval_interval=0"]
    assert train_cli(*args, "--train_steps", "400").returncode == 0  # 400 = 1 update of 256 + 144 in the rollout
    res = train_cli(*args, "--train_steps", "800")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resuming from step 400" in res.stdout
    assert json.loads((out / "eval.json").read_text())["env_steps"] == 800


# ---------------------------------------------------------------------------------------------------- learning
def train_and_evaluate(name: str, steps: int, overrides: str = "", seed: int = 0, episodes: int = 10) -> float:
    hp, env, agent = make(name, f"train_steps={steps}" + (f",{overrides}" if overrides else ""), seed)
    play(agent, env, seed, steps // hp.num_envs)
    env.close()
    return float(np.mean(evaluate(agent, hp, episodes, seed=seed + 10_000)))


# Measured over seeds 0-5 on this project's 2-core machine: ppo_cartpole at 40k evaluated 500 on all six; a2c_cartpole
# at 30k 444 / 272 / 322 / 189 / 191 / 438 (a random policy scores about 22).
@pytest.mark.learning
def test_ppo_cartpole_reaches_475():
    assert train_and_evaluate("ppo_cartpole", 40_000) >= 475


@pytest.mark.learning
def test_a2c_cartpole_improves_clearly_over_random():
    assert train_and_evaluate("a2c_cartpole", 30_000) >= 100  # a random policy scores about 22


@pytest.mark.learning
def test_gru_beats_feed_forward_on_masked_cartpole():
    """At 30k steps the GRU set evaluates 445 here (seed 0) and 462 / 384 / 215 / 500 / 325 on seeds 1-5; before its
    settings followed the zoo's (normalised observations and rewards, the GRU on the observation) it scored 126 on
    seed 0. A feed-forward PPO, blind to the velocities, scores about 50."""
    recurrent = train_and_evaluate("ppo_gru_cartpole", 30_000)
    feed_forward = train_and_evaluate("ppo_cartpole", 30_000, "env=CartPoleNoVel-v1")
    assert recurrent >= 300 and recurrent > feed_forward + 30, (recurrent, feed_forward)


def test_stacked_gru_matches_torch_gru_cells():
    from rl.models.actor_critic import StackedGRU

    torch.manual_seed(0)
    stacked = StackedGRU(2, 3, 4)
    cells = [torch.nn.GRUCell(3, 4) for _ in range(2)]
    with torch.no_grad():
        for k, cell in enumerate(cells):
            stacked.weight_ih[k] = cell.weight_ih.T
            stacked.weight_hh[k] = cell.weight_hh.T
            stacked.bias_ih[k, 0] = cell.bias_ih
            stacked.bias_hh[k, 0] = cell.bias_hh
    x, h = torch.randn(2, 5, 3), torch.randn(2, 5, 4)
    out = stacked.cell(stacked.input_gates(x), h)
    for k, cell in enumerate(cells):
        assert torch.allclose(out[k], cell(x[k], h[k]), atol=1e-6)

"""Atari sets (env_type=atari: ale-py's vector env, rl/envs/atari.py), Pong by default; `--env
BreakoutNoFrameskip-v4` (or any Atari id) works with each.

- `ppo_atari`: PyTorchRL's PPO experiment (Table 1 of Bou et al. 2022 and its training script), after Schulman et al.
  (2017): Adam 2.5e-4 and clip 0.1 both decayed linearly to 0, 8 envs x 128 steps, 4 minibatches, 3 epochs, entropy
  0.01, value coefficient 1.0, GAE 0.95, gradient norm 0.5, 10M agent steps, Nature CNN shared by policy and value.
  (Table 1 prints clip 0.15; the script that ran the experiment passes clip_param=0.1, which this set follows.)
- `ppo_atari_impala`: the same with the IMPALA CNN (Espeholt et al. 2018).
- `dqn_atari`: rl-baselines3-zoo's DQN for Atari (hyperparams/dqn.yml `atari`), Nature CNN.

All use the DeepMind preprocessing with a lost life ending the learning episode (SB3's AtariWrapper and OpenAI
baselines do the same); scores are whole games, unclipped. Evaluation samples from the policy (PPO) or keeps the
final epsilon (DQN) as Atari evaluations do: a greedy agent can stall in games that need FIRE after a lost life.
"""

from hparams.dqn import dqn
from hparams.on_policy import ppo
from rl.hparams import HParams
from rl.registry import hparams


def _atari(hp: HParams) -> HParams:
    """The env and run settings every Atari set shares."""
    hp.env, hp.env_type = "PongNoFrameskip-v4", "atari"
    hp.frame_skip, hp.frame_stack, hp.noop_max = 4, 4, 30
    hp.terminal_on_life_loss, hp.reward_clipping = True, True
    hp.torso = "nature_cnn"
    hp.torch_threads = 2  # convolutions on a batch: both cores pay (the small MLP sets keep 1)
    hp.device = "auto"  # a GPU where there is one
    hp.eval_deterministic = False
    hp.eval_episodes = 8
    hp.test_episodes = 10
    hp.log_interval = 8192
    return hp


@hparams.register
def ppo_atari() -> HParams:
    """PyTorchRL's PPO on PongNoFrameskip-v4 (its Table 1, clip 0.1 as its script runs it)."""
    hp = _atari(ppo())
    hp.train_steps = 10_000_000
    hp.num_envs, hp.num_steps = 8, 128
    hp.batch_size = 8 * 128 // 4  # 4 minibatches
    hp.epochs = 3
    hp.lr, hp.lr_decay = 2.5e-4, True
    hp.clip_range, hp.clip_decay = 0.1, True
    hp.gamma, hp.gae_lambda = 0.99, 0.95
    hp.ent_coef, hp.vf_coef = 0.01, 1.0
    hp.max_grad_norm = 0.5
    hp.shared_torso = True  # one CNN for policy and value, as in Schulman et al. (2017)
    hp.precision = "bf16"  # CNN under bf16 autocast where the hardware has it (heads stay fp32): 2.4x, AVX-512 BF16
    hp.activation = "relu"
    hp.eval_interval = 250_000
    hp.checkpoint_interval = 100_000
    return hp


@hparams.register
def ppo_atari_impala() -> HParams:
    """`ppo_atari` with the IMPALA CNN (Espeholt et al. 2018; `fixup_init=true` for PyTorchRL's Fixup variant)."""
    hp = ppo_atari()
    hp.torso = "impala_cnn"
    return hp


@hparams.register
def dqn_atari() -> HParams:
    """rl-baselines3-zoo's DQN for Atari: 100k replay (each frame stored once: replay_frames), 100k steps of
    warm-up, a gradient step every 4 env steps, target copied every 1000, epsilon 1 -> 0.01 over 10% of 10M."""
    hp = _atari(dqn())
    hp.train_steps = 10_000_000
    hp.buffer_size = 100_000
    hp.lr, hp.batch_size = 1e-4, 32
    hp.learning_starts = 100_000
    hp.target_update_interval = 1_000
    hp.train_freq, hp.gradient_steps = 4, 1
    hp.exploration_fraction, hp.exploration_final_eps = 0.1, 0.01
    hp.max_grad_norm = 10.0
    hp.eval_interval = 250_000
    hp.checkpoint_interval = 250_000
    # the CNN under bf16 autocast in NHWC where the hardware has it, as the other Pong sets (the Q head, TD targets
    # and loss stay fp32; rl-baselines3-zoo trains in fp32): a gradient step 1.7x faster on AMX (docs/performance.md)
    hp.precision, hp.channels_last = "bf16", True
    return hp

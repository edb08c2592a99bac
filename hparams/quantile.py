"""Quantile-regression sets: QR-DQN (Dabney et al. 2018) from the DQN family and TQC (Kuznetsov et al. 2020) from
SAC's, with sb3-contrib's defaults (QRDQN, TQC) and rl-baselines3-zoo's tuned settings (hyperparams/qrdqn.yml,
hyperparams/tqc.yml).

- `qrdqn`: sb3-contrib's QRDQN defaults: 200 quantiles, lr 5e-5, Adam's epsilon 0.01 / batch size (the paper's
  0.01 / 32), no gradient clipping, 1M buffer, target copied every 10k steps, epsilon 1 -> 0.01 over 0.5% of the run.
- `qrdqn_cartpole`: the zoo's CartPole-v1 entry (DQN's tuned settings, 10 quantiles).
- `qrdqn_atari`: the zoo's `atari` entry: 10M steps, 50k of warm-up, epsilon over 2.5% (250k steps), the rest
  sb3-contrib's defaults (1M buffer, lr 5e-5, 200 quantiles), on the Atari env settings of `dqn_atari`.
- `tqc`: sb3-contrib's TQC defaults: SAC's settings with 2 critics of 25 quantiles, 2 dropped per critic.
- `tqc_pendulum`: the zoo's Pendulum-v1 entry (20k steps, lr 1e-3).
- `tqc_halfcheetah_bullet`, `tqc_hopper_bullet`: the zoo's PyBullet entries (the same as its SAC ones: gSDE with
  log_std_init -3, 400x300, lr 7.3e-4, 8 gradient steps every 8 env steps; Hopper drops 5 per critic and decays lr
  linearly), with the TimeFeatureWrapper, as the SAC PyBullet sets of hparams/continuous.py have.
"""

from hparams.atari import dqn_atari
from hparams.continuous import sac, zoo_bullet_sac
from hparams.dqn import dqn, dqn_cartpole
from rl.hparams import HParams, at_least
from rl.registry import hparams


# ------------------------------------------------------------------------------------------------ QR-DQN
def as_qrdqn(hp: HParams, num_quantiles: int = 200) -> HParams:
    """A DQN set made QR-DQN: the quantile network and loss, and sb3-contrib's QRDQN optimisation (no clipping;
    Adam's epsilon 0.01 / batch_size, which `adam_for_batch` sets once the batch size is known)."""
    hp.model, hp.grad_comp = "quantile_network", "qrdqn"
    d = hp.section("quantiles")
    d("num_quantiles", num_quantiles, "quantile_network: atoms per action, atom i the quantile of fraction "
      "(2i + 1) / 2N (QR-DQN's N)", bound=at_least(1))
    hp.max_grad_norm = 0.0
    return hp


def adam_for_batch(hp: HParams) -> HParams:
    """sb3-contrib's QRDQN optimiser: Adam's epsilon 0.01 / batch_size (the QR-DQN paper's 0.01 / 32)."""
    hp.adam_eps = 0.01 / hp.batch_size
    return hp


@hparams.register
def qrdqn() -> HParams:
    """sb3-contrib's QRDQN defaults."""
    hp = as_qrdqn(dqn())
    hp.lr = 5e-5
    hp.buffer_size = 1_000_000
    hp.learning_starts = 100
    hp.batch_size = 32
    hp.tau, hp.gamma = 1.0, 0.99
    hp.train_freq, hp.gradient_steps = 4, 1
    hp.target_update_interval = 10_000
    hp.exploration_fraction, hp.exploration_initial_eps, hp.exploration_final_eps = 0.005, 1.0, 0.01
    return adam_for_batch(hp)


@hparams.register
def qrdqn_cartpole() -> HParams:
    """rl-baselines3-zoo hyperparams/qrdqn.yml, CartPole-v1 (tuned): its DQN CartPole settings (`dqn_cartpole`) with 10
    quantiles, and sb3-contrib's QRDQN optimiser (no clipping, Adam's epsilon 0.01 / batch size)."""
    return adam_for_batch(as_qrdqn(dqn_cartpole(), num_quantiles=10))


@hparams.register
def qrdqn_atari() -> HParams:
    """rl-baselines3-zoo hyperparams/qrdqn.yml `atari` on `dqn_atari`'s env settings (Pong by default): 10M steps,
    50k of warm-up, epsilon 1 -> 0.01 over 2.5% of the run; sb3-contrib's defaults for the rest: a 1M buffer (each
    frame stored once: replay_frames), lr 5e-5, 200 quantiles, batch 32, a gradient step every 4 env steps, target
    copied every 10k, no gradient clipping. Nature CNN with the quantile head on its 512 features."""
    hp = as_qrdqn(dqn_atari())
    hp.train_steps = 10_000_000
    hp.buffer_size = 1_000_000
    hp.lr, hp.batch_size = 5e-5, 32
    hp.learning_starts = 50_000
    hp.target_update_interval = 10_000
    hp.train_freq, hp.gradient_steps = 4, 1
    hp.exploration_fraction, hp.exploration_initial_eps, hp.exploration_final_eps = 0.025, 1.0, 0.01
    hp.num_quantiles = 200
    hp.eval_interval = 250_000
    hp.checkpoint_interval = 250_000
    return adam_for_batch(hp)


# ------------------------------------------------------------------------------------------------ TQC
def as_tqc(hp: HParams) -> HParams:
    """A SAC set made TQC: quantile critics and the truncated loss, the rest of its settings kept (the zoo's TQC
    entries are its SAC ones)."""
    hp.agent, hp.critic, hp.grad_comp = "tqc", "quantile_critics", "tqc"
    d = hp.section("quantiles")
    d("num_quantiles", 25, "quantile_critics: atoms per critic (TQC's M)", bound=at_least(2))
    d("num_critics", 2, "quantile_critics: critics in the mixture (TQC's N)", bound=at_least(1))
    d("top_quantiles_to_drop_per_net", 2, "TQC: the target drops the largest this x num_critics atoms of the "
      "critics' pooled mixture (TQC's d; below num_quantiles)", bound=at_least(0))
    return hp


@hparams.register
def tqc() -> HParams:
    """sb3-contrib's TQC: SAC's settings and actor, K = 2 critics of N = 25 atoms, the top 2 of each dropped."""
    return as_tqc(sac())


@hparams.register
def tqc_pendulum() -> HParams:
    """rl-baselines3-zoo hyperparams/tqc.yml, Pendulum-v1: 20k steps, lr 1e-3."""
    hp = tqc()
    hp.env = "Pendulum-v1"
    hp.train_steps = 20_000
    hp.lr = 1e-3
    return hp


def zoo_bullet_tqc(env: str, lr_decay: bool = False, drop_per_net: int = 2) -> HParams:
    """rl-baselines3-zoo hyperparams/tqc.yml's `pybullet-defaults`: its SAC PyBullet settings
    (hparams/continuous.py `zoo_bullet_sac`: gSDE, the TimeFeatureWrapper, 400x300, lr 7.3e-4, 8 gradient steps every
    8 env steps after 10k random ones) with TQC's critics."""
    hp = as_tqc(zoo_bullet_sac(env, lr_decay))
    hp.top_quantiles_to_drop_per_net = drop_per_net
    return hp


@hparams.register
def tqc_halfcheetah_bullet() -> HParams:
    """rl-baselines3-zoo hyperparams/tqc.yml, HalfCheetahBulletEnv-v0."""
    return zoo_bullet_tqc("HalfCheetahBulletEnv-v0")


@hparams.register
def tqc_hopper_bullet() -> HParams:
    """rl-baselines3-zoo hyperparams/tqc.yml, HopperBulletEnv-v0: the defaults with lr decaying linearly to 0
    (`lin_7.3e-4`) and 5 atoms dropped per critic."""
    return zoo_bullet_tqc("HopperBulletEnv-v0", lr_decay=True, drop_per_net=5)

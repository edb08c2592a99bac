"""DQN family sets: `dqn` (base), CartPole sets with rl-baselines3-zoo's tuned settings, and their variants."""

from hparams.base import base, off_policy
from rl.hparams import HParams
from rl.registry import hparams


@hparams.register
def dqn() -> HParams:
    hp = off_policy(base())
    hp.agent, hp.model, hp.memory, hp.act_select, hp.grad_comp = "dqn", "q_network", "replay", "epsilon_greedy", "td"
    d = hp.define
    d("exploration_fraction", 0.1, "fraction of train_steps over which epsilon decays")
    d("exploration_initial_eps", 1.0, "epsilon at the start")
    d("exploration_final_eps", 0.05, "epsilon after the decay")
    d("dueling", False, "use a dueling head (value + advantage streams)")
    d("loss", "huber", "TD loss: huber or mse")
    hp.target_update_interval = 10_000
    hp.lr = 1e-4
    hp.batch_size = 32
    hp.max_grad_norm = 10.0
    return hp


@hparams.register
def dqn_cartpole() -> HParams:
    """rl-baselines3-zoo's tuned DQN for CartPole-v1 (hyperparams/dqn.yml)."""
    hp = dqn()
    hp.env = "CartPole-v1"
    hp.train_steps = 50_000
    hp.lr = 2.3e-3
    hp.batch_size = 64
    hp.buffer_size = 100_000
    hp.learning_starts = 1_000
    hp.gamma = 0.99
    hp.target_update_interval = 10
    hp.train_freq = 256
    hp.gradient_steps = 128
    hp.exploration_fraction = 0.16
    hp.exploration_final_eps = 0.04
    hp.hidden_sizes = [256, 256]
    hp.eval_interval = 10_000
    hp.checkpoint_interval = 10_000
    return hp


@hparams.register
def ddqn_cartpole() -> HParams:
    """Double DQN: the online network picks the bootstrap action."""
    hp = dqn_cartpole()
    hp.grad_comp = "double_td"
    return hp


@hparams.register
def dueling_dqn_cartpole() -> HParams:
    """Dueling double DQN."""
    hp = ddqn_cartpole()
    hp.dueling = True
    return hp

"""DQN family sets: `dqn` (base), CartPole sets with rl-baselines3-zoo's tuned settings, and their variants."""

from hparams.base import base, off_policy
from rl.hparams import FINITE, PROBABILITY, HParams, at_least, one_of
from rl.registry import hparams


def apex_workers(hp: HParams) -> bool:
    return hp.num_workers > 0


def noisy(hp: HParams) -> bool:
    return hp.noisy


def distributional(hp: HParams) -> bool:
    return hp.model == "c51_network"


@hparams.register
def dqn() -> HParams:
    hp = off_policy(base())
    hp.agent, hp.model, hp.memory, hp.act_select, hp.grad_comp = "dqn", "q_network", "replay", "epsilon_greedy", "td"
    d = hp.section("dqn")
    d("exploration_fraction", 0.1, "fraction of train_steps over which epsilon decays", bound=PROBABILITY)
    d("exploration_initial_eps", 1.0, "epsilon at the start", bound=PROBABILITY)
    d("exploration_final_eps", 0.05, "epsilon after the decay", bound=PROBABILITY)
    d = hp.section("ape-x", when=apex_workers)
    d("worker_epsilon", 0.0, "Ape-X (Horgan et al. 2018): with collection workers, worker i of N explores with its own "
      "fixed epsilon worker_epsilon ** (1 + worker_epsilon_alpha * i / (N - 1)) (Ape-X: 0.4); 0: every worker "
      "follows the learner's linear schedule", bound=PROBABILITY)
    d("worker_epsilon_alpha", 7.0, "Ape-X: how far the workers' fixed epsilons spread below worker_epsilon (the "
      "last worker's is worker_epsilon ** (1 + alpha))", bound=at_least(0))
    d = hp.section("dqn")
    d("dueling", False, "use a dueling head (value + advantage streams)")
    d("loss", "huber", "TD loss: huber or mse", bound=one_of("huber", "mse"))
    d = hp.section("noisy nets", when=noisy)
    d("noisy", False, "noisy linear layers in the Q head (Fortunato et al. 2018); pair with act_select=greedy")
    d("noisy_sigma0", 0.5, "noisy layers: initial noise scale sigma0 (sigma = sigma0 / sqrt(fan_in))",
      bound=at_least(0))
    d = hp.section("c51", when=distributional)
    d("num_atoms", 51, "c51_network: atoms of the return distribution", bound=at_least(2))
    d("v_min", -10.0, "c51_network: smallest return on the support", bound=FINITE)
    d("v_max", 10.0, "c51_network: largest return on the support", bound=FINITE)
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


@hparams.register
def noisy_dqn_cartpole() -> HParams:
    """Noisy DQN (Fortunato et al. 2018): learned parameter noise explores, actions are greedy (no epsilon)."""
    hp = dqn_cartpole()
    hp.noisy = True
    hp.act_select = "greedy"
    return hp


@hparams.register
def rainbow_cartpole() -> HParams:
    """Rainbow (Hessel et al. 2018) on CartPole: double + dueling + prioritized replay + 3-step returns + noisy
    nets + C51 (support [0, 100]: CartPole's rewards are +1, so returns lie in [0, 1 / (1 - gamma)])."""
    hp = dqn_cartpole()
    hp.model, hp.grad_comp, hp.memory, hp.act_select = "c51_network", "double_c51", "prioritized", "greedy"
    hp.dueling = True
    hp.noisy = True
    hp.n_step = 3
    hp.v_min, hp.v_max = 0.0, 100.0
    hp.train_steps = 20_000  # greedy 500 from about 6k steps at seed 0 (the learning test uses 12k)
    return hp

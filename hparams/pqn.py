"""PQN sets (Gallici et al. 2025, "Simplifying Deep Temporal Difference Learning"; rl/agents/pqn.py): no replay
memory, no target network, LayerNorm in the Q-network, many envs, Q(lambda) returns, RAdam.

- `pqn_cartpole`: CleanRL's pqn.py on CartPole-v1 (4 envs x 128 steps, 4 minibatches, 4 epochs, RAdam 2.5e-4
  decayed linearly, epsilon 1 -> 0.05 over half the run, lambda 0.65, gradient norm 10, 120-84 units with LayerNorm,
  500k steps; CleanRL reports 495 +- 7).
- `pqn_atari`: the paper's Atari configuration (purejaxql's pqn_atari.yaml) as CleanRL's pqn_atari_envpool.py runs
  it: 128 envs x 32 steps, 2 epochs of 32 minibatches (128 transitions each), RAdam 2.5e-4 decayed linearly to 0
  (CleanRL's anneal_lr; purejaxql keeps it constant: `lr_decay=false`), epsilon 1 -> 0.001 over 10% of 10M agent
  steps, gamma 0.99, lambda 0.65, gradient norm 10, the Nature CNN with LayerNorm after each conv and the dense layer,
  DeepMind preprocessing with a lost life ending the learning episode and rewards clipped.
"""

from hparams.atari import _atari
from hparams.base import base
from rl.hparams import PROBABILITY, HParams, at_least, between, one_of
from rl.registry import hparams


def pqn() -> HParams:
    """PQN's settings (not registered: the sets below pick an env)."""
    hp = base()
    hp.agent, hp.model, hp.torso = "pqn", "q_network", "layer_norm_mlp"
    hp.memory, hp.act_select, hp.grad_comp = "rollout", "epsilon_greedy", "pqn"
    d = hp.section("pqn")
    d("num_steps", 128, "rollout length per env: an update learns from num_steps x num_envs transitions",
      bound=at_least(1))
    d("batch_size", 128, "minibatch size in transitions (0: the whole rollout)", bound=at_least(0))
    d("epochs", 4, "passes over each rollout", bound=at_least(1))
    d("q_lambda", 0.65, "Q(lambda)'s lambda: 0 gives one-step Q-learning targets, 1 Monte Carlo returns up to the "
      "rollout's end", bound=between(0, 1))
    d("lr_decay", True, "decay the learning rate linearly to 0 over train_steps")
    d("optimizer", "radam", "radam (RAdam, as PQN's code uses) or adam; adam_eps is either's epsilon",
      bound=one_of("radam", "adam"))
    d("ortho_init", True, "orthogonal weights (gain sqrt(2)) and zero biases in every layer, as CleanRL's layer_init")
    d("dueling", False, "a dueling head (value + advantage streams) instead of one Q head")
    d = hp.section("exploration")
    d("exploration_fraction", 0.5, "fraction of train_steps over which epsilon decays", bound=PROBABILITY)
    d("exploration_initial_eps", 1.0, "epsilon at the start", bound=PROBABILITY)
    d("exploration_final_eps", 0.05, "epsilon after the decay", bound=PROBABILITY)
    hp.lr, hp.adam_eps, hp.gamma, hp.max_grad_norm = 2.5e-4, 1e-8, 0.99, 10.0
    hp.checkpoint_memory = True  # the partial rollout, needed to continue the update exactly
    return hp


@hparams.register
def pqn_cartpole() -> HParams:
    """CleanRL's pqn.py on CartPole-v1."""
    hp = pqn()
    hp.env = "CartPole-v1"
    hp.vector_mode = "auto"  # gymnasium's numpy CartPole, resetting in the same step (rl/envs/cartpole_vector.py)
    hp.num_envs, hp.num_steps, hp.batch_size, hp.epochs = 4, 128, 128, 4
    hp.hidden_sizes, hp.activation = [120, 84], "relu"
    hp.train_steps = 500_000
    hp.eval_interval = hp.checkpoint_interval = 50_000
    return hp


@hparams.register
def pqn_atari() -> HParams:
    """The paper's PQN on PongNoFrameskip-v4 (purejaxql's pqn_atari.yaml: 128 envs)."""
    hp = _atari(pqn())
    hp.torso = "layer_norm_nature_cnn"
    hp.train_steps = 10_000_000
    hp.num_envs, hp.num_steps = 128, 32
    hp.batch_size, hp.epochs = 128 * 32 // 32, 2  # 32 minibatches
    hp.lr, hp.lr_decay = 2.5e-4, True
    hp.exploration_fraction, hp.exploration_final_eps = 0.1, 0.001
    hp.precision = "bf16"  # as ppo_atari: the CNN under bf16 autocast where the hardware has it (LayerNorm in fp32)
    hp.eval_interval = 250_000
    hp.checkpoint_interval = 100_000
    return hp

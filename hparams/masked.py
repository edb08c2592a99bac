"""Sets for envs with action masks and Dict observations: PPO and DQN on PickItems (rl/envs/pick_items.py), whose
offer of legal actions is told only by the mask, and PPO on its Dict-observation twin (the multi-input torso).

`mask_actions=false` turns the mask off (neither applied nor read): on PickItems the same PPO then scores about 0.3
instead of 5.5, the demonstration that the mask is what it learns from (docs/training.md, "Action masks and Dict
observations").
"""

from hparams.dqn import dqn
from hparams.on_policy import ppo
from rl.hparams import HParams
from rl.registry import hparams


def masked(hp: HParams) -> HParams:
    """The settings of a set whose env may give an action mask (`info["action_mask"]` or a Dict observation's
    `action_mask` entry)."""
    d = hp.section("action masks")
    d("mask_actions", True, "honour the env's action mask: illegal actions get probability 0 (policy agents) or the "
      "lowest Q-value and no random draw (Q agents); false: the mask is neither applied nor read")
    return hp


def _pick_items(hp: HParams, env: str = "PickItems-v0") -> HParams:
    hp.env = env
    hp.num_envs = 8
    hp.eval_interval = 10_000
    hp.eval_episodes = 50  # episodes are 8 steps: cheap, and 50 of them average out the draws of values
    hp.checkpoint_interval = 10_000
    hp.log_interval = 2_000
    return hp


@hparams.register
def ppo_masked_pick_items() -> HParams:
    """PPO on PickItems-v0 with its action mask (info["action_mask"]): about 5.5 of the best policy's 5.6 in 40k
    steps, where a random legal policy scores 4.0."""
    hp = _pick_items(masked(ppo()))
    hp.train_steps = 40_000
    hp.num_steps, hp.batch_size, hp.epochs = 64, 128, 10
    hp.gamma, hp.gae_lambda = 0.95, 0.95
    hp.lr = 1e-3
    hp.ent_coef = 0.01
    return hp


@hparams.register
def ppo_masked_pick_items_dict() -> HParams:
    """PPO on PickItemsDict-v0: the mask inside a Dict observation whose other entries (a vector, a MultiBinary, a
    Discrete) go through the multi-input torso (rl/models/multi_input.py)."""
    hp = ppo_masked_pick_items()
    hp.env = "PickItemsDict-v0"
    return hp


@hparams.register
def dqn_masked_pick_items() -> HParams:
    """DQN on PickItems-v0 with its action mask: epsilon-greedy draws among the legal items and the bootstrap takes
    the max over the next step's legal ones."""
    hp = _pick_items(masked(dqn()))
    hp.train_steps = 40_000
    hp.lr = 1e-3
    hp.gamma = 0.95
    hp.batch_size = 64
    hp.buffer_size = 40_000
    hp.learning_starts = 1_000
    hp.train_freq, hp.gradient_steps = 8, 2
    hp.target_update_interval = 500
    hp.exploration_fraction, hp.exploration_final_eps = 0.3, 0.02
    hp.hidden_sizes = [128, 128]
    return hp

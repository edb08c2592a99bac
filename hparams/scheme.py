"""Sets of the Scheme's named architectures (rl/parallel; docs/scheme.md maps PyTorchRL's Table 4 onto settings).

- `impala`: elite_buffer_vtrace's V-trace actor-critic (its README's command: `--batch_size=10 --r_f_steps=10
  --worker_count=2 --envs_per_worker=2`) with a constant learning rate of 4.8e-4, IMPALA's (deepmind/scalable_agent),
  not elite_buffer_vtrace's (8e-4 decayed with power 2 to 1e-5: the `*_seaquest` / `*_breakout` sets below);
  elite_buffer_vtrace's RMSprop epsilon 0.01, gradient norm clip 40, entropy 0.01, value 0.5 x 1/2 on the squared error
  (its `agent/algorithms/v_trace.py`). These epsilon and clip are for its loss SUMMED over the k = r_f_steps x
  batch_size elements of a batch, stepped by torch.optim.RMSprop (alpha 0.99, not centered), whose epsilon sits outside
  the square root: p -= lr g / (sqrt(v) + eps). Our `vtrace` loss is the MEAN over the same elements, its loss / k, so
  its gradient is g / k, v becomes v / k^2 and sqrt(v) becomes sqrt(v) / k; the step lr (g / k) / (sqrt(v) / k + eps')
  equals elite_buffer_vtrace's lr g / (sqrt(v) + eps) exactly when eps' = eps / k, and a global-norm clip commutes with
  the scale (clip(g / k, c / k) = clip(g, c) / k), so c' = c / k. The sets give elite_buffer_vtrace's values as
  `summed_eps` 0.01 and `summed_clip` 40 and the agent divides them by the k of the run, whatever overrides `num_steps`
  or `batch_rollouts` (k = 10 x 10: 1e-4 and 0.4); the learning rate needs no change (RMSprop divides the scale out),
  and centering would not change the rule (v - m^2 scales by 1 / k^2 too). With TF's convention (epsilon inside the
  root) the rescale would be eps / k^2 instead. This set learns from fresh rollouts only; elite_buffer_vtrace's replay,
  elite replay and CLEAR are the Pong sets below.
- `impala_pong`, `elite_impala_pong`, `attentive_impala_pong`: elite_buffer_vtrace's agent (agent=impala,
  rl/agents/impala.py) with its replay, elite replay and attentive replay on Pong; `impala_cartpole`: `impala` on
  CartPole, fresh rollouts only (agent a2c with the vtrace loss). The Pong sets use the Nature CNN (9.3M multiply-adds a
  frame stack) and IMPALA's constant lr 4.8e-4, not elite_buffer_vtrace's network and schedule: its own network
  (`model/network.py`, `torso=elite_cnn`) is three 3x3 convolutions of 64 (stride 3), 64 (stride 2) and 128 (stride 2)
  channels and a 512-wide ReLU layer that its elite replay reads as the feature vector, on raw 0-255 pixels: 13.0M
  multiply-adds, 1.4 times the Nature CNN's. The IMPALA CNN (`--hparam_override torso=impala_cnn`) is 5 times the Nature
  CNN's compute per frame and ran this set at 119 agent steps/s on 2 cores, against about 730 with the Nature CNN.
- `appo_atari`: the Sample Factory 2 APPO configuration for Atari (rollout 128, 4 epochs, clip 0.1, Adam eps 1e-5, value
  0.5, GAE 0.95, V-trace rho = c = 1, Nature CNN, linear decay) with Sample Factory's own Atari defaults
  (`sf_examples/atari/atari_params.py`) where that configuration's values do not learn Pong in the first million steps:
  minibatches of 256 (16 gradient steps per 1024 agent steps), Adam 2.5e-4, entropy 0.01, gradient clip 0.5. Its
  batch_size 1024 x num_batches_per_epoch 8 x 4 epochs is 4 steps per 1024 agent steps, a throughput setting for its 32
  envs and 2B steps; `ppo_atari` takes 12 and `impala_pong` about 10. With it (and its entropy 4.68e-4, lr 3.03e-4, no
  clipping) `appo_atari` was still at random play after 1.12M steps (-20.4, entropy 0.67); entropy 0.01 alone did not
  change its course (entropy 1.698 at 155k against 1.739); with these settings it left random play (-19.3 at 900k,
  benchmarks/pong_learning.py). The configuration also asks for normalize_returns, which Sample Factory refuses with
  V-trace ("Normalized returns are not supported with vtrace!", cfg verification) and which the agent refuses too:
  standardised (zero-mean) V-trace targets, unpredictable early on, teach the shared torso to output a constant by
  shrinking its features (mean feature norm 5.7 -> 0.8 in 30 updates on Pong), and the policy head that reads them stays
  uniform (entropy 1.789 of 1.792 at 1M steps). Pong's rewards are clipped to +-1: the returns need no rescaling.
- `a3c_cartpole`: ChainerRL's A3C (Mnih et al. 2016): 200-200 MLP, t_max 5, RMSprop, 2 asynchronous gradient workers.
- `apex_dqn_cartpole`: Ape-X (Horgan et al. 2018): `dqn_cartpole` fed by 2 asynchronous collection workers into a
  prioritized memory with 3-step returns; worker i of N explores with its own fixed epsilon 0.4 ** (1 + 7 i / (N - 1))
  (`worker_epsilon`, `worker_epsilon_alpha`: 0.4 and 0.4^8 = 0.00066 for 2 workers) instead of the learner's schedule.
"""

import json

from hparams.atari import _atari
from hparams.dqn import dqn_cartpole
from hparams.on_policy import _cartpole, a2c, ppo
from rl.hparams import HParams
from rl.memory.replay_parameters import parse_replay_parameters
from rl.registry import hparams


@hparams.register
def impala() -> HParams:
    """elite_buffer_vtrace's V-trace agent: 2 workers x 2 envs, batches of 10 sequences of r_f_steps 10, RMSprop."""
    hp = a2c()
    hp.grad_comp = "vtrace"
    hp.num_workers, hp.num_envs = 2, 2
    hp.num_steps, hp.batch_rollouts = 10, 10  # r_f_steps, batch_size
    hp.epochs, hp.batch_size, hp.normalize_advantage = 1, 0, False
    # elite_buffer_vtrace sums its loss over the k = r_f_steps x batch_size elements of a batch; our `vtrace` loss is
    # their mean, its loss / k: gradients and RMSprop's sqrt(v) are k times smaller, so the agent divides torch's eps
    # (outside the sqrt) and the global-norm clip by k, recomputed from whatever num_steps and batch size the run has
    # (tests/grad_comp/test_impala_optimizer_scale.py)
    hp.optimizer, hp.lr, hp.rmsprop_alpha = "rmsprop", 4.8e-4, 0.99  # lr: IMPALA's; elite_buffer_vtrace's is 8e-4
    hp.summed_eps, hp.summed_clip = 0.01, 40.0  # elite_buffer_vtrace's RMSprop eps and clip
    hp.ent_coef = 0.01
    hp.vf_coef = 0.25  # elite_buffer_vtrace: 0.5 x 1/2 (v - V)^2; our value loss is the unhalved squared error
    hp.gamma = 0.99
    hp.col_communication = "async"
    return hp


# elite_buffer_vtrace's --replay_parameters: its first command, its elite command, and the attentive variant of the
# elite one
UNIFORM_REPLAY = ('[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, '
                 '{"type": "standard", "capacity": 1000, "sample_ratio": 0.5}]')
ELITE_REPLAY = ('[{"type": "custom", "capacity": 1000, "sample_ratio": 0.5, "dist_function": "ln_norm", '
                '"sample_strategy": "elite_sampling", "lambda_batch_multiplier": 6, "alfa_annealing_factor": 2.0}, '
                '{"type": "queue", "capacity": 1, "sample_ratio": 0.5}]')
ATTENTIVE_REPLAY = ELITE_REPLAY.replace("elite_sampling", "attentive_sampling")


def _elite_buffer_vtrace(hp: HParams, replay: str) -> HParams:
    """elite_buffer_vtrace's agent (agent=impala): batches of batch_rollouts sequences composed from `replay`'s
    buffers, with CLEAR's cloning terms on (elite_buffer_vtrace's defaults, 0.05 and 0.005)."""
    hp.agent, hp.replay_parameters = "impala", replay
    hp.clear_policy_coef, hp.clear_value_coef = 0.05, 0.005
    hp.feature_head = any(getattr(spec, "sample_strategy", None) or getattr(spec, "insert_strategy", None)
                          for spec in parse_replay_parameters(replay))  # ranked buffers read the features
    return hp


def _pong(hp: HParams) -> HParams:
    """On PongNoFrameskip-v4 with the Nature CNN (not elite_buffer_vtrace's network: `elite_cnn`)."""
    hp = _atari(hp)
    hp.torso = "nature_cnn"
    hp.activation = "relu"
    hp.shared_torso = True
    hp.train_steps = 10_000_000
    hp.worker_envs = 2
    hp.eval_interval, hp.checkpoint_interval = 250_000, 100_000
    hp.torch_threads = 1  # the learner keeps one core, the workers share the other (2-core machine)
    # bfloat16 autocast where the CPU has it (AMX/AVX512-BF16; float32 elsewhere) or on a GPU, and NHWC convs: a
    # learner step of 10 x 11 frames 67 -> 24 ms on one core, a 29-sequence elite ranking 70 -> 25 ms
    hp.precision, hp.channels_last = "bf16", True
    return hp


@hparams.register
def impala_pong() -> HParams:
    """elite_buffer_vtrace's first command on Pong: `impala` with its replay, half fresh (queue 1) and half replayed
    (standard 1000) sequences a batch, and CLEAR."""
    return _elite_buffer_vtrace(_pong(impala()), UNIFORM_REPLAY)


@hparams.register
def elite_impala_pong() -> HParams:
    """elite_buffer_vtrace's elite command on Pong: half the batch elite-sampled from a custom buffer of 1000
    (ln_norm distances of the feature vectors, a pool of lambda = 6 x 5 annealed to 1 over 2 x lr_scheduler_steps
    batches, strategy3), half fresh. On Breakout and Seaquest (the games elite_buffer_vtrace reports): --env
    BreakoutNoFrameskip-v4."""
    return _elite_buffer_vtrace(_pong(impala()), ELITE_REPLAY)


@hparams.register
def attentive_impala_pong() -> HParams:
    """`elite_impala_pong` with elite_buffer_vtrace's modified attentive replay (after Sun et al. 2020's Attentive
    Experience Replay): the candidates most similar to the newest rollout's last acted observation first."""
    return _elite_buffer_vtrace(_pong(impala()), ATTENTIVE_REPLAY)


# elite_buffer_vtrace's published experiment (`multi_train.py`, the script behind its README's figures, with
# option_flags.py's defaults where it sets none): the freshest sequences and a buffer of 10,000, in that order; the
# ratio is the one the figure's file name gives (breakout_..._ratio_5_5, seaquest_..._ratio_8_2), read in the listed
# order
EXPERIMENT_CAPACITY = 10_000
EXPERIMENT_RATIOS = {"seaquest": (0.8, 0.2), "breakout": (0.5, 0.5)}  # (queue, replay)
SAMPLINGS = {
    "uniform": {"type": "standard"},
    "elite": {"type": "custom", "dist_function": "ln_norm", "sample_strategy": "elite_sampling",
              "lambda_batch_multiplier": 6, "alfa_annealing_factor": 2.0, "elite_sampling_strategy": "strategy3"},
    # the ablation: strategy 3 with random distances, so only the sampling counter ranks (not elite_buffer_vtrace's)
    "counter": {"type": "custom", "dist_function": "random", "sample_strategy": "elite_sampling",
                "lambda_batch_multiplier": 6, "alfa_annealing_factor": 2.0, "elite_sampling_strategy": "strategy3"},
}


def experiment_replay(game: str, sampling: str) -> str:
    """The `replay_parameters` of elite_buffer_vtrace's experiment on `game` with `sampling` (uniform, elite or
    counter)."""
    queue, replay = EXPERIMENT_RATIOS[game]
    buffers = [{"type": "queue", "capacity": 1, "sample_ratio": queue},
               {**SAMPLINGS[sampling], "capacity": EXPERIMENT_CAPACITY, "sample_ratio": replay}]
    return json.dumps(buffers)


def _experiment(game: str, sampling: str) -> HParams:
    """elite_buffer_vtrace's experiment on `game`: its network, schedule and settings; the sets of one game differ only
    in `replay_parameters` (and the feature head that ranking needs)."""
    hp = _elite_buffer_vtrace(_atari(impala()), experiment_replay(game, sampling))
    hp.env = f"{game.capitalize()}NoFrameskip-v4"
    hp.torso, hp.shared_torso, hp.activation = "elite_cnn", True, "relu"
    hp.pi_init_gain = 0.001  # fc2's normalized columns of norm 0.001; the value head's 1.0 is ours already
    hp.num_workers, hp.num_envs, hp.worker_envs = 7, 5, 5  # --worker_count, --envs_per_worker
    hp.num_steps, hp.batch_rollouts = 50, 10  # r_f_steps, batch_size
    hp.lr, hp.lr_end_value, hp.lr_decay, hp.lr_decay_power = 8e-4, 1e-5, True, 2.0
    hp.lr_scheduler_steps = 70_000
    hp.replay_caching = True  # --caching
    hp.training_fill_in_factor = 0.2
    hp.train_steps = 3_000_000  # 12M frames, the figures' range
    # ours, not elite_buffer_vtrace's: greedy evaluations for rliable's statistics, the volatility probe, bf16 forward
    # passes as the Pong sets, and one checkpoint kept (the buffers make it about 5 GB)
    hp.eval_deterministic, hp.eval_interval, hp.eval_episodes = True, 100_000, 8
    hp.probe_size = 256
    hp.torch_threads = 1
    hp.precision, hp.channels_last = "bf16", True
    hp.checkpoint_interval, hp.keep_checkpoints = 200_000, 1
    return hp


@hparams.register
def elite_impala_seaquest() -> HParams:
    """elite_buffer_vtrace's Seaquest experiment, elite arm: queue 1 @0.8 + custom 10000 @0.2 (ln_norm, strategy3,
    lambda 6, alfa 2), T 50, batch 10, 7 workers x 5 envs, elite_cnn, lr 8e-4 -> 1e-5 (power 2) over 70,000 batches,
    caching."""
    return _experiment("seaquest", "elite")


@hparams.register
def uniform_impala_seaquest() -> HParams:
    """`elite_impala_seaquest` with uniform sampling: standard 10000 @0.2, elite_buffer_vtrace's "normal replay"."""
    return _experiment("seaquest", "uniform")


@hparams.register
def counter_impala_seaquest() -> HParams:
    """The ablation: `elite_impala_seaquest` with random distances, so strategy 3 ranks by the sampling counter only
    (least replayed first, ties at random)."""
    return _experiment("seaquest", "counter")


@hparams.register
def elite_impala_breakout() -> HParams:
    """elite_buffer_vtrace's Breakout experiment, elite arm: `elite_impala_seaquest`'s settings with queue 1 @0.5 +
    custom 10000 @0.5."""
    return _experiment("breakout", "elite")


@hparams.register
def uniform_impala_breakout() -> HParams:
    """`elite_impala_breakout` with uniform sampling: standard 10000 @0.5."""
    return _experiment("breakout", "uniform")


@hparams.register
def impala_cartpole() -> HParams:
    """`impala` sized for CartPole-v1: a quick learner, tested to learn within 60k steps."""
    hp = _cartpole(impala())
    hp.num_envs, hp.num_steps, hp.batch_rollouts = 4, 16, 8
    hp.optimizer, hp.lr = "adam", 3e-3
    hp.adam_eps, hp.summed_eps = 1e-5, 0.0
    hp.max_grad_norm, hp.summed_clip = 0.5, 0.0
    hp.ent_coef = 0.0
    hp.vf_coef = 0.5
    hp.train_steps = 60_000
    hp.eval_interval = 10_000  # its policy still swings at 60k steps (no entropy bonus, no decay): look often
    return hp


@hparams.register
def appo_atari() -> HParams:
    """Sample Factory's APPO on PongNoFrameskip-v4 (the Sample Factory 2 APPO configuration, with SF's Atari
    minibatches, rate, entropy and clip): 8 envs x 128 steps a batch of 1024, 4 minibatches, 4 epochs, V-trace against
    the learner's policy, Nature CNN, 2 collection workers."""
    hp = _atari(ppo())
    hp.num_workers, hp.num_envs = 2, 4
    hp.num_steps, hp.batch_rollouts = 128, 8
    hp.batch_size, hp.epochs = 256, 4  # Sample Factory's Atari default; the configuration: 1024 (module docstring)
    hp.clip_range, hp.clip_decay = 0.1, False
    hp.lr, hp.lr_decay, hp.adam_eps = 2.5e-4, True, 1e-5  # the configuration: 3.03e-4
    hp.vf_coef, hp.ent_coef = 0.5, 0.01  # the configuration's entropy: 4.68e-4
    hp.gamma, hp.gae_lambda = 0.99, 0.95
    hp.max_grad_norm = 0.5  # the configuration: 0 (none)
    hp.vtrace, hp.vtrace_rho, hp.vtrace_c = True, 1.0, 1.0
    hp.normalize_returns = False  # the configuration's True: refused with V-trace by Sample Factory and the agent
    hp.shared_torso = True
    hp.activation = "relu"
    hp.precision = "bf16"
    hp.train_steps = 10_000_000
    hp.eval_interval, hp.checkpoint_interval = 250_000, 100_000
    return hp


@hparams.register
def a3c_cartpole() -> HParams:
    """ChainerRL's A3C example on CartPole: 200-200 MLP, t_max 5, RMSprop (lr 7e-4, alpha 0.99), entropy 0.01, 2
    asynchronous gradient workers each on its own env."""
    hp = _cartpole(a2c())
    hp.hidden_sizes = [200, 200]
    hp.num_envs, hp.num_steps = 1, 5
    # ChainerRL's RMSprop epsilon 0.1 is for its loss summed over the rollout; ours is the mean, with gradients
    # t_max times smaller, and at 0.1 it barely moved (best evaluation 60 and 109 over 200k steps, 2 seeds)
    hp.optimizer, hp.lr, hp.adam_eps, hp.rmsprop_alpha = "rmsprop", 7e-4, 1e-5, 0.99
    hp.ent_coef, hp.vf_coef = 0.01, 0.5
    hp.gae_lambda, hp.normalize_advantage = 1.0, False
    hp.num_grad_workers, hp.grad_communication = 2, "async"
    hp.train_steps = 200_000
    return hp


@hparams.register
def apex_dqn_cartpole() -> HParams:
    """`dqn_cartpole` as Ape-X: 2 asynchronous collection workers with fixed epsilons of their own, prioritized
    replay, 3-step returns."""
    hp = dqn_cartpole()
    hp.memory, hp.n_step = "prioritized", 3
    hp.worker_epsilon, hp.worker_epsilon_alpha = 0.4, 7.0  # Ape-X's per-actor exploration
    hp.num_workers, hp.col_communication, hp.worker_steps = 2, "async", 32
    return hp

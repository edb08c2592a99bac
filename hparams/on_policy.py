"""On-policy sets: VPG, A2C and PPO family bases (Stable-Baselines3's defaults), CartPole sets with
rl-baselines3-zoo's tuned settings, Pendulum, a recurrent PPO on the velocity-masked CartPole, and PyBullet's
HalfCheetah.

`batch_size` is the minibatch size in transitions (0: the whole rollout); a recurrent minibatch holds whole env
sequences, batch_size // num_steps of them. The zoo's continuous entries use gSDE exploration, which is not
implemented here: those sets use a plain Gaussian with the zoo's other settings.
"""

from hparams.base import base, has_collection_workers
from rl.hparams import FINITE, HParams, above, at_least, between, one_of
from rl.registry import hparams


def clips(hp: HParams) -> bool:
    """PPO's clipped objective (and APPO's, the V-trace loss): VPG's and A2C's losses take no clip."""
    return hp.grad_comp not in ("pg", "a2c")


def stops_on_kl(hp: HParams) -> bool:
    return hp.target_kl > 0


def clips_values(hp: HParams) -> bool:
    return hp.clip_range_vf > 0


def ortho(hp: HParams) -> bool:
    return hp.ortho_init


def normalizes_obs(hp: HParams) -> bool:
    return hp.normalize_obs


def normalizes_reward(hp: HParams) -> bool:
    return hp.normalize_reward


def normalizes_returns(hp: HParams) -> bool:
    return hp.normalize_returns


def gaussian_policy(hp: HParams) -> bool:
    return hp.act_select in ("gaussian", "deterministic_gaussian")


def recurrent(hp: HParams) -> bool:
    return hp.recurrent


def other_optimizer(hp: HParams) -> bool:
    return hp.optimizer != "adam"


def uses_vtrace(hp: HParams) -> bool:
    return hp.vtrace or hp.grad_comp == "vtrace" or hp.agent == "impala"


def is_impala(hp: HParams) -> bool:
    return hp.agent == "impala"


def has_features(hp: HParams) -> bool:
    return hp.feature_head


def on_policy() -> HParams:
    """Settings every on-policy agent shares (not registered: it names no algorithm)."""
    hp = base()
    hp.model, hp.memory, hp.act_select, hp.torso = "actor_critic", "rollout", "categorical", "mlp"
    d = hp.section("on-policy")
    d("batch_size", 64, "minibatch size in transitions (0: the whole rollout; a recurrent minibatch holds "
      "batch_size // num_steps env sequences)", bound=at_least(0))
    d("num_steps", 2048, "rollout length per env: an update learns from num_steps x num_envs transitions",
      bound=at_least(1))
    d("gae_lambda", 0.95, "GAE lambda: 1 gives Monte Carlo returns, 0 one-step TD advantages", bound=between(0, 1))
    d("epochs", 10, "passes over each rollout", bound=at_least(1))
    d = hp.section("ppo", when=clips)
    d("clip_range", 0.2, "PPO's ratio clip epsilon", bound=above(0))
    d = hp.section("value clip", when=clips_values)
    d("clip_range_vf", 0.0, "clip of the value change around the old values (0: unclipped value loss)",
      bound=at_least(0))
    d = hp.section("on-policy")
    d("ent_coef", 0.0, "entropy bonus coefficient", bound=at_least(0))
    d("vf_coef", 0.5, "value loss coefficient", bound=at_least(0))
    d("normalize_advantage", True, "standardise advantages in each minibatch")
    d = hp.section("kl stop", when=stops_on_kl)
    d("target_kl", 0.0, "stop an update's epochs once approx KL exceeds 1.5 x this (0: off)", bound=at_least(0))
    d = hp.section("on-policy")
    d("lr_decay", False, "decay the learning rate linearly to 0 over train_steps (agent impala: polynomially, "
      "lr_decay_power, to lr_end_value over lr_scheduler_steps batches)")
    d = hp.section("ppo", when=clips)
    d("clip_decay", False, "decay clip_range linearly to 0 over train_steps")
    d = hp.section("policy network")
    d("shared_torso", False, "one torso for policy and value (False: two separate torsos)")
    d("ortho_init", True, "orthogonal initialisation (gains sqrt(2), 0.01 policy, 1 value)")
    d = hp.section("orthogonal init", when=ortho)
    d("pi_init_gain", 0.01, "ortho_init: the policy head's gain, each output's weights of norm this "
      "(elite_buffer_vtrace's normalized_columns_initializer: 0.001)", bound=above(0))
    d = hp.section("gaussian policy", when=gaussian_policy)
    d("log_std_init", 0.0, "initial log-std of the Gaussian policy (Box actions)", bound=FINITE)
    d("action_bounds", "clip", "how a Gaussian action meets the Box: clip, tanh (squash and rescale) or none",
      bound=one_of("clip", "tanh", "none"))
    d = hp.section("recurrent", when=recurrent)
    d("recurrent", False, "add a GRU after the torso; its hidden state resets at episode starts")
    d("recurrent_hidden_size", 64, "GRU hidden size (with recurrent=True)", bound=at_least(1))
    d("recurrent_seq_len", 0, "replayed sequence length: BPTT truncated to this many steps (0: whole rollouts)",
      bound=at_least(0))
    d = hp.section("observation normalisation", when=normalizes_obs)
    d("normalize_obs", False, "standardise observations by running statistics (checkpointed)")
    d("clip_obs", 10.0, "normalised observations are clipped to +-this", bound=above(0))
    d = hp.section("reward normalisation", when=normalizes_reward)
    d("normalize_reward", False, "scale rewards by the running std of the discounted return (checkpointed)")
    d("clip_reward", 10.0, "normalised rewards are clipped to +-this", bound=above(0))
    d = hp.section("return normalisation", when=normalizes_returns)
    d("normalize_returns", False, "the value head learns returns standardised by running statistics (Sample "
      "Factory's normalize_returns; checkpointed)")
    d = hp.section("optimizer", when=other_optimizer)
    d("optimizer", "adam", "adam, or rmsprop (IMPALA's; adam_eps is its epsilon, rmsprop_alpha its decay)",
      bound=one_of("adam", "rmsprop"))
    d("rmsprop_alpha", 0.99, "RMSprop's smoothing constant (optimizer=rmsprop)", bound=between(0, 1, high_open=True))
    d("summed_eps", 0.0, "the optimizer's epsilon as given for a loss SUMMED over a batch "
      "(elite_buffer_vtrace's RMSprop 0.01): the agent uses it / the elements its mean loss averages (num_steps x "
      "batch sequences), replacing adam_eps (0: off, adam_eps as set)", bound=at_least(0))
    d("summed_clip", 0.0, "the gradient-norm clip as given for a loss SUMMED over a batch "
      "(elite_buffer_vtrace's 40): the agent uses it / the elements its mean loss averages, replacing max_grad_norm "
      "(0: off)", bound=at_least(0))
    # asynchronous collection (num_workers > 0): the policy lag and its corrections
    d = hp.section("v-trace", when=uses_vtrace)
    d("vtrace", False, "advantages and value targets by V-trace (Espeholt et al. 2018) against the learner's current "
      "policy instead of GAE: corrects the lag of asynchronous workers (grad_comp=vtrace sets it)")
    d("vtrace_rho", 1.0, "V-trace's rho-bar: clip of the importance ratio in the value targets", bound=above(0))
    d("vtrace_c", 1.0, "V-trace's c-bar: clip of the importance ratio that carries the trace", bound=above(0))
    d("vtrace_pg_rho", 1.0, "V-trace's clip of the importance ratio in the policy-gradient advantage "
      "(elite_buffer_vtrace's c_const)", bound=above(0))
    # elite_buffer_vtrace's V-trace agent (agent=impala): sequence replay, CLEAR, LASER
    d = hp.section("impala", when=is_impala)
    d("training_fill_in_factor", 0.2, "impala: training starts when every replay buffer holds max(this x capacity, "
      "10 x batch_rollouts) sequences", bound=between(0, 1))
    d("lr_end_value", 0.0, "impala with lr_decay: the rate decays polynomially (power lr_decay_power) to this over "
      "lr_scheduler_steps batches", bound=between(0, 1))
    d("lr_decay_power", 1.0, "impala with lr_decay: the power of the polynomial decay, lr_end_value + (lr - "
      "lr_end_value) (1 - batches / lr_scheduler_steps)^power (elite_buffer_vtrace: 2)", bound=above(0))
    d("lr_scheduler_steps", 10000, "impala: batches over which lr decays (lr_decay) and elite sampling's lambda "
      "anneals (with alfa_annealing_factor)", bound=at_least(1))
    d("clear_policy_coef", 0.0, "impala: CLEAR's policy cloning, + this x mean KL(pi || mu) (Rolnick et al. 2019: "
      "0.05)", bound=at_least(0))
    d("clear_value_coef", 0.0, "impala: CLEAR's value cloning, + this x ||V_mu - V||_2 / batch elements (0.005)",
      bound=at_least(0))
    d("laser_kl_threshold", 0.0, "impala: LASER's trust-region mask, steps with KL(pi || mu) >= this leave the "
      "V-trace targets and the loss (Schmitt et al. 2019: 0.3; 0 = off)", bound=at_least(0))
    d("probe_size", 0, "impala: observations in the fixed probe set (spread over the first batch learned from) on "
      "which the KL between consecutive policies is measured, volatility/policy_kl (0: off)", bound=at_least(0))
    d("probe_interval", 1, "impala: updates between probe-set KL measurements (1: every update, one probe pass each; "
      "n > 1: two passes every n updates)", bound=at_least(1))
    d("replay_caching", False, "impala: prepare the next replayed batch in a background thread while the learner "
      "steps (elite_buffer_vtrace's caching)")
    # elite experience replay (elite_buffer_vtrace): per-step feature vectors from the model
    d = hp.section("features", when=has_features)
    d("feature_head", False, "the model also gives feature vectors: the policy torso's activation (before any GRU), "
      "through the scaling layer if feature_scaling_layer")
    d("feature_scaling_layer", True, "features through elite_buffer_vtrace's untrained Linear(torso width -> "
      "feature_size) (False: the torso's activation itself, its width)")
    d("feature_size", 512, "width of the feature vectors with feature_scaling_layer (elite_buffer_vtrace's "
      "feature_out_layer_size)", bound=at_least(0))
    d = hp.section("collection workers", when=has_collection_workers)
    d("batch_rollouts", 0, "with workers: env trajectories of num_steps in one learner update (0: num_workers x "
      "worker envs)", bound=at_least(0))
    hp.activation = "tanh"
    hp.max_grad_norm = 0.5
    hp.adam_eps = 1e-5
    hp.checkpoint_memory = True  # the partial rollout: small, and needed to continue the update exactly
    return hp


@hparams.register
def ppo() -> HParams:
    """SB3's PPO defaults."""
    hp = on_policy()
    hp.agent, hp.grad_comp = "ppo", "ppo_clip"
    hp.batch_size = 64
    return hp


@hparams.register
def a2c() -> HParams:
    """SB3's A2C defaults (with Adam instead of RMSprop): 5-step rollouts, one gradient step each."""
    hp = on_policy()
    hp.agent, hp.grad_comp = "a2c", "a2c"
    hp.num_steps, hp.epochs, hp.batch_size = 5, 1, 0
    hp.gae_lambda = 1.0
    hp.lr = 7e-4
    hp.normalize_advantage = False
    return hp


@hparams.register
def vpg() -> HParams:
    """Vanilla policy gradient with a GAE baseline: one gradient step per long rollout (Spinning Up's VPG)."""
    hp = on_policy()
    hp.agent, hp.grad_comp = "vpg", "pg"
    hp.num_steps, hp.epochs, hp.batch_size = 1000, 1, 0
    hp.gae_lambda = 0.97
    hp.lr = 1e-3
    return hp


def _cartpole(hp: HParams) -> HParams:
    hp.env = "CartPole-v1"
    hp.num_envs = 8
    hp.vector_mode = "auto"  # gymnasium's numpy CartPole, resetting in the same step (rl/envs/cartpole_vector.py)
    hp.eval_interval = 50_000  # each greedy evaluation plays 10 episodes of up to 500 steps
    hp.checkpoint_interval = 25_000
    return hp


@hparams.register
def ppo_cartpole() -> HParams:
    """rl-baselines3-zoo's PPO for CartPole-v1 (hyperparams/ppo.yml)."""
    hp = _cartpole(ppo())
    hp.train_steps = 100_000
    hp.num_steps, hp.batch_size, hp.epochs = 32, 256, 20
    hp.gae_lambda, hp.gamma = 0.8, 0.98
    hp.ent_coef = 0.0
    hp.lr, hp.lr_decay = 1e-3, True
    hp.clip_range, hp.clip_decay = 0.2, True
    return hp


@hparams.register
def a2c_cartpole() -> HParams:
    """rl-baselines3-zoo's A2C for CartPole-v1 (8 envs, ent_coef 0; SB3's defaults otherwise)."""
    hp = _cartpole(a2c())
    hp.train_steps = 500_000
    hp.ent_coef = 0.0
    return hp


@hparams.register
def vpg_cartpole() -> HParams:
    """VPG on CartPole-v1: 8 envs x 64 steps per gradient step."""
    hp = _cartpole(vpg())
    hp.train_steps = 200_000
    hp.num_steps = 64
    hp.lr = 3e-3
    hp.gamma = 0.99
    return hp


@hparams.register
def ppo_gru_cartpole() -> HParams:
    """PPO with a GRU on CartPoleNoVel-v1 (velocities masked): rl-baselines3-zoo's tuned recurrent PPO
    (hyperparams/ppo_lstm.yml), a GRU for its LSTM.

    The zoo's entry sets `normalize: true` (VecNormalize of observations and rewards, with gamma 0.98): both are
    needed here (either alone: 0/10 and 1/10 seeds reach 475 at 100k, both: 7/10). Unnormalised, the pole angle
    (+-0.21 rad) barely moves the GRU's gates, and the value loss on returns up to 50 takes most of the 0.5 gradient
    norm clip, shrinking the policy's steps. The GRU reads the observation itself, as sb3-contrib's LSTM does: an
    MLP torso before it learned less reliably (3/5 seeds)."""
    hp = ppo_cartpole()
    hp.env = "CartPoleNoVel-v1"
    hp.recurrent, hp.recurrent_hidden_size, hp.recurrent_seq_len = True, 64, 8
    hp.normalize_obs = hp.normalize_reward = True
    hp.hidden_sizes = []  # no torso: the GRU's input is the normalised observation
    hp.activation = "relu"
    hp.ortho_init = False
    return hp


@hparams.register
def ppo_pendulum() -> HParams:
    """PPO on Pendulum-v1 (the zoo's settings without gSDE)."""
    hp = ppo()
    hp.env = "Pendulum-v1"
    hp.act_select = "gaussian"
    hp.num_envs = 4
    hp.train_steps = 200_000
    hp.num_steps, hp.batch_size, hp.epochs = 1024, 64, 10
    hp.gae_lambda, hp.gamma = 0.95, 0.9
    hp.lr = 1e-3
    hp.clip_range = 0.2
    hp.eval_interval = hp.checkpoint_interval = 20_000
    return hp


@hparams.register
def ppo_halfcheetah_bullet() -> HParams:
    """rl-baselines3-zoo's PPO for HalfCheetahBulletEnv-v0 (without gSDE; SB3 reports about 2000-2800 at 2M)."""
    hp = ppo()
    hp.env = "HalfCheetahBulletEnv-v0"
    hp.act_select = "gaussian"
    hp.num_envs = 16
    hp.train_steps = 2_000_000
    hp.num_steps, hp.batch_size, hp.epochs = 512, 128, 20
    hp.gae_lambda, hp.gamma = 0.9, 0.99
    hp.lr, hp.clip_range = 3e-5, 0.4
    hp.max_grad_norm, hp.vf_coef = 0.5, 0.5
    hp.normalize_obs = hp.normalize_reward = True
    hp.log_std_init, hp.ortho_init = -2.0, False
    hp.activation, hp.hidden_sizes = "relu", [256, 256]
    hp.eval_interval = hp.checkpoint_interval = 100_000
    return hp

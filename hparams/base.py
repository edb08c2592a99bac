"""`base()`: the settings every run reads, and the sections that some runs read (an Atari env's, the Scheme's
workers', Ray's), each setting with one line of help. Families extend it with sections of their own.

A section's `when` says which runs read it (rl/hparams.py): a run's hparams.json and its printed settings hold only
those sections, and any section holding a value other than its default.
"""

from rl.agents.base import DEVICE_NAMES, is_device_name
from rl.hparams import PROBABILITY, HParams, above, at_least, between, each, either, one_of, where

# Upper bounds on what would hang or wreck a run rather than run it: an evaluation of 10^30 episodes never ends, a
# learning rate above 1 throws the weights to inf in a few steps, and ints travel to numpy, torch and ale-py as fixed
# width integers. Each is far beyond any set's value.
MOST_EPISODES = 10_000  # an evaluation or test of this many games is already hours on Atari
MOST_STEPS = 10**12  # env steps in a run: a million times 1M, a year of Atari at 30k steps/s
MOST_INTERVAL = 10**10  # env steps between evaluations, checkpoints or log rows; minutes between checkpoints
# seeds: the run's, plus offsets (evaluation + 10_000 + episode, test + 20_000, rank x 7919, worker 1000 x (rank + 1)
# and 100_003 x restarts, copy i), must stay below 2^31, the largest seed ale-py's vector env takes
MOST_SEED = 2**30 - 1
LEARNING_RATE = between(0, 1, low_open=True)
CNN_TORSOS = ("nature_cnn", "impala_cnn", "elite_cnn")


# Which runs read a section: module-level functions, since settings travel to worker processes by pickle.
def is_atari(hp: HParams) -> bool:
    return hp.env_type == "atari"


def is_gym_vector(hp: HParams) -> bool:
    """gymnasium's vector engines (every family but Atari, whose ale-py vector env is its own)."""
    return hp.env_type != "atari"


def has_mlp(hp: HParams) -> bool:
    """The MLP torso and the continuous agents' critics read its widths; a convolutional torso does not."""
    return hp.torso not in CNN_TORSOS


def has_cnn(hp: HParams) -> bool:
    return hp.torso in CNN_TORSOS


def uses_fixup(hp: HParams) -> bool:
    """Fixup is impala_cnn's option, off unless asked for."""
    return hp.fixup_init


def has_replay(hp: HParams) -> bool:
    """A replay memory, which a checkpoint may hold (an on-policy rollout is always kept: it is small)."""
    return hp.memory not in ("rollout",)


def has_workers(hp: HParams) -> bool:
    return hp.num_workers > 0 or hp.num_grad_workers > 1


def has_collection_workers(hp: HParams) -> bool:
    return hp.num_workers > 0


def has_gradient_workers(hp: HParams) -> bool:
    return hp.num_grad_workers > 1


def on_ray(hp: HParams) -> bool:
    return bool(hp.ray_address) and has_workers(hp)


def base() -> HParams:
    """Not registered: it names no agent settings of its own, so every runnable set derives from a family set."""
    hp = HParams()
    d = hp.section("parts")  # what to assemble, by registry key
    d("agent", "dqn", "agents registry key: the algorithm")
    d("model", "q_network", "models registry key: the network builder")
    d("torso", "mlp", "models registry key: the feature extractor inside the network")
    d("memory", "replay", "memory registry key: where experience is stored and sampled from")
    d("act_select", "epsilon_greedy", "act_select registry key: how actions are chosen while training")
    d("grad_comp", "td", "grad_comp registry key: the loss function")
    d = hp.section("env")
    d("env", "CartPole-v1", "gymnasium env id (--env overrides)")
    d("env_type", "gym", "envs registry key: the env family and its wrappers (gym, atari, bullet ...)")
    d("num_envs", 1, "environments stepped together in one vector env", bound=at_least(1))
    d("max_episode_steps", 0, "time limit of an episode in env steps, truncating it (0: the env id's own limit)",
      bound=at_least(0))
    d = hp.section("gym vector env", when=is_gym_vector)
    d("time_feature", False, "gym envs: append the time left, 1 - t / time limit, to the observation (sb3-contrib's "
      "TimeFeatureWrapper, used by rl-baselines3-zoo on PyBullet)")
    d("vector_mode", "sync", "vector engine: sync, async, native (the env's own vectorised code) or auto "
      "(native where it resets in the same step, e.g. CartPole; sync otherwise)",
      bound=one_of("sync", "async", "native", "auto"))
    # ale-py's AtariVectorEnv, whose C++ threads do the DeepMind preprocessing
    d = hp.section("atari", when=is_atari)
    d("frame_skip", 4, "atari: emulator frames per agent step (the last two max-pooled)", bound=at_least(1))
    d("frame_stack", 4, "atari: 84x84 grayscale frames stacked into one observation", bound=at_least(1))
    d("noop_max", 30, "atari: up to this many no-op actions at the start of a game", bound=at_least(0))
    d("sticky_actions", -1.0, "atari: probability of repeating the previous action (-1: the id's own: 0.25 for "
      "ALE/*-v5, 0 for *NoFrameskip-v4)",
      bound=either(one_of(-1.0), PROBABILITY))
    d("full_action_space", False, "atari: all 18 actions instead of the game's minimal set")
    d("terminal_on_life_loss", False, "atari: a lost life ends the learning episode (the game goes on; scores "
      "still count whole games)")
    d("reward_clipping", True, "atari: the agent learns from rewards clipped to [-1, 1] (scores stay unclipped)")
    d("fire_reset", True, "atari: press FIRE at the start of games that need it")
    d("env_threads", 0, "atari: C++ threads stepping the envs (0: one per core, at most num_envs)", bound=at_least(0))
    d = hp.section("run")  # its length, evaluations, checkpoints and logs
    d("train_steps", 100_000, "environment steps to train for, summed over envs (--train_steps overrides)",
      bound=between(1, MOST_STEPS))
    d("seed", 0, "seed of envs, networks and samplers (--seed overrides; copy i uses seed + i)",
      bound=between(0, MOST_SEED))
    d("eval_interval", 10_000, "environment steps between periodic greedy evaluations (0: only at the end)",
      bound=between(0, MOST_INTERVAL))
    d("eval_episodes", 10, "episodes per periodic evaluation (--eval_episodes overrides)",
      bound=between(1, MOST_EPISODES))
    d("eval_deterministic", True, "evaluate with the greedy policy (False: the training policy, e.g. sampled "
      "actions or the final epsilon, as Atari evaluations usually do)")
    d("test_episodes", 100, "episodes in evaluation mode, --training False (--test_episodes overrides)",
      bound=between(1, MOST_EPISODES))
    d("checkpoint_interval", 10_000, "environment steps between checkpoints (0: by checkpoint_minutes and at the end)",
      bound=between(0, MOST_INTERVAL))
    d("checkpoint_minutes", 30.0, "also checkpoint once this many minutes of wall time have passed since the last "
      "checkpoint: the most a stop without warning (SIGKILL, the OOM killer, a lost node) can cost (0: steps alone)",
      bound=between(0, MOST_INTERVAL))
    d("keep_checkpoints", 3, "how many recent checkpoints to keep", bound=at_least(1))
    d = hp.section("replay checkpoints", when=has_replay)
    d("checkpoint_memory", True, "include the replay memory in checkpoints so a resumed run samples the same data")
    d = hp.section("run")
    d("log_interval", 1_000, "environment steps between log rows (TensorBoard, progress.csv, console)",
      bound=between(1, MOST_INTERVAL))
    d = hp.section("optimisation")
    d("lr", 3e-4, "learning rate", bound=LEARNING_RATE)
    d("adam_eps", 1e-8, "Adam's epsilon", bound=above(0))
    d("gamma", 0.99, "discount factor", bound=between(0, 1))
    d("max_grad_norm", 10.0, "gradient clipping by global norm (0: off)", bound=at_least(0))
    d = hp.section("mlp", when=has_mlp)
    d("hidden_sizes", [64, 64], "widths of the MLP torso's hidden layers", bound=each(at_least(1)))
    d("activation", "relu", "activation of the MLP torso: relu, tanh, elu, gelu, silu",
      bound=one_of("relu", "tanh", "elu", "gelu", "silu"))
    d = hp.section("fixup", when=uses_fixup)
    d("fixup_init", False, "impala_cnn: Fixup initialisation of the residual blocks (Zhang et al. 2019)")
    d = hp.section("cnn", when=has_cnn)
    d("channels_last", False, "convolutional torsos: channels-last memory format (faster on some CPUs and GPUs)")
    d = hp.section("system")
    d("device", "cpu", "torch device: cpu, cuda, cuda:1 ... (auto: cuda when available)",
      bound=where(is_device_name, DEVICE_NAMES))
    d("precision", "fp32", "fp32, or bf16: the DQN family, PQN, the on-policy agents and IMPALA run their torsos under "
      "bfloat16 autocast (heads, weights, gradients and losses stay fp32; CUDA or CPUs with AVX-512 BF16/AMX, fp32 "
      "elsewhere; DDPG, TD3, SAC and TQC have matmul_precision)",
      bound=one_of("fp32", "bf16"))
    d("torch_threads", 1, "threads for torch's intra-op pool, numpy's BLAS and OpenCV (small networks: 1 is fastest)",
      bound=at_least(1))
    # the Scheme (rl/parallel): collection workers and gradient workers, each group sync or async
    d = hp.section("replay buffers", when=uses_replay_parameters)
    d("replay_parameters", "", "the buffers of the mixed memory (transitions: queue, replay, prioritized, "
      "attentive) or of agent=impala (sequences, elite_buffer_vtrace's --replay_parameters: queue, standard, custom): "
      "a JSON list, each with type, capacity and sample_ratio (ratios summing to 1), parsed by "
      "rl/memory/replay_parameters.py ('': the reader's default: for transitions a queue of 1 and a replay of 1,000 "
      "at 0.5 each, for sequences elite_buffer_vtrace's 'no replay', a queue of 1 at 1)")
    d = hp.section("scheme", when=has_workers)
    d("num_workers", 0, "0: one process; N > 0: N collection worker processes feeding this learner "
      "(--num_workers overrides)", bound=at_least(0))
    d("num_grad_workers", 1, "gradient workers: M > 1 processes each collect and compute gradients on their share",
      bound=at_least(1))
    d("ray_address", "", "run the workers as Ray actors on this Ray cluster: auto, HOST:PORT or ray://HOST:PORT "
      "('': shared-memory processes on this machine; --ray_address or RAY_ADDRESS set it)")
    d = hp.section("collection workers", when=has_collection_workers)
    d("col_communication", "async", "collection workers: async (they keep acting with the weights they have: "
      "IMPALA, APPO, Ape-X) or sync (the learner waits for all, learns, then every worker gets the new weights)",
      bound=one_of("async", "sync"))
    d("max_policy_lag", 0, "drop worker data whose policy is more than this many learner versions old (0: keep all)",
      bound=at_least(0))
    d("worker_timeout", 60.0, "seconds a worker may go without a step before it is declared hung and restarted",
      bound=above(0))
    d("worker_envs", 0, "envs per collection worker (0: num_envs)", bound=at_least(0))
    d = hp.section("gradient workers", when=has_gradient_workers)
    d("grad_communication", "sync", "gradient workers: sync (gradients averaged by a torch.distributed "
      "all-reduce every step: DPPO) or async (the learner applies each worker's gradient as it arrives: A3C)",
      bound=one_of("sync", "async"))
    d("group_timeout_s", 1800.0, "sync gradient workers: seconds a rank waits in a collective for the others before "
      "the group is lost (exit 129). Rank 0's evaluations must fit in it: the other ranks wait in the next all-reduce",
      bound=above(0))
    d = hp.section("ray", when=on_ray)
    d("ray_worker_cpus", 1.0, "Ray: CPUs each worker actor declares", bound=at_least(0))
    d("ray_worker_gpus", 0.0, "Ray: GPUs each worker actor declares", bound=at_least(0))
    d("ray_worker_resources", "", "Ray: custom resources each worker actor declares, NAME:AMOUNT[;NAME:AMOUNT] "
      "(e.g. cpu_node:1 keeps workers on nodes started with --resources '{\"cpu_node\": 8}')")
    d("ray_rank_cpus", 1.0, "Ray: CPUs each synchronous gradient rank actor (DPPO's ranks > 0) declares",
      bound=at_least(0))
    d("ray_rank_gpus", 0.0, "Ray: GPUs each gradient rank actor declares (1 with device=cuda: a GPU a rank)",
      bound=at_least(0))
    d("ray_rank_resources", "", "Ray: custom resources each gradient rank actor declares, NAME:AMOUNT[;NAME:AMOUNT]")
    d("ray_learner_cpus", 0.0, "Ray: CPUs held for the learner (the driver) on its own node, so that no actor is "
      "placed on them (0: none held; a RayJob's entrypointNumCpus does it)", bound=at_least(0))
    d("ray_learner_gpus", 0.0, "Ray: GPUs held for the learner on its own node (0: none; a RayJob's "
      "entrypointNumGpus does it)", bound=at_least(0))
    return hp


def uses_priorities(hp: HParams) -> bool:
    return hp.memory in ("prioritized", "mixed")


def uses_attention(hp: HParams) -> bool:
    return hp.memory in ("attentive", "mixed")


def uses_replay_parameters(hp: HParams) -> bool:
    """The mixed memory's buffers (transitions), or the V-trace agent's sequence buffers."""
    return hp.memory == "mixed" or hp.agent == "impala"


def off_policy(hp: HParams) -> HParams:
    """Add the settings every off-policy agent (dqn, ddpg, td3, sac) shares: its memory and update schedule."""
    d = hp.section("replay")
    d("batch_size", 64, "minibatch size: transitions sampled from the memory for each gradient step",
      bound=at_least(1))
    d("buffer_size", 1_000_000, "replay memory capacity in transitions", bound=at_least(1))
    d("learning_starts", 50_000, "environment steps of pure collection before the first update", bound=at_least(0))
    d("train_freq", 4, "environment steps between training phases", bound=at_least(1))
    d("gradient_steps", 1, "gradient steps per training phase", bound=at_least(1))
    d("target_update_interval", 1, "environment steps between target network updates", bound=at_least(1))
    d("tau", 1.0, "target update rate: 1.0 copies (hard update), < 1 is Polyak averaging",
      bound=between(0, 1, low_open=True))
    # the replay family (rl/memory: prioritized, attentive, queue, mixed; n-step returns for all of them)
    d = hp.section("collection workers", when=has_collection_workers)
    d("worker_steps", 32, "with workers: vector steps a worker collects before it ships them to the learner",
      bound=at_least(1))
    d = hp.section("atari", when=is_atari)
    d("replay_frames", True, "store each frame of stacked-frame observations (atari) once and rebuild the stacks "
      "when sampling, instead of 2 x frame_stack copies per transition")
    d = hp.section("replay")
    d("n_step", 1, "n-step returns: transitions carry up to n discounted rewards and bootstrap with gamma^k",
      bound=at_least(1))
    d = hp.section("prioritized replay", when=uses_priorities)
    d("per_alpha", 0.6, "prioritized memory: priority exponent, p = (|td error| + per_eps)^per_alpha",
      bound=at_least(0))
    d("per_beta", 0.4, "prioritized memory: initial importance-weight exponent, annealed linearly to 1 over the run",
      bound=PROBABILITY)
    d("per_eps", 1e-6, "prioritized memory: added to |td error| so no item's priority is zero", bound=at_least(0))
    d = hp.section("attentive replay", when=uses_attention)
    d("attentive_lambda", 4.0, "attentive memory: candidates drawn per kept item (>= 1) at the start",
      bound=at_least(1))
    d("attentive_anneal_fraction", 1.0, "attentive memory: fraction of the run over which lambda falls to 1",
      bound=between(0, 1, low_open=True))
    d("attentive_features", "obs", "attentive memory: similarity on raw observations (obs) or the agent's features "
      "(model)", bound=one_of("obs", "model"))
    return hp

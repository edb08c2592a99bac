"""`base()`: every setting that all agents share, with one line of help each. Families extend it."""

from rl.hparams import HParams


def base() -> HParams:
    """Not registered: it names no agent settings of its own, so every runnable set derives from a family set."""
    hp = HParams()
    d = hp.define
    # what to assemble
    d("agent", "dqn", "agents registry key: the algorithm")
    d("model", "q_network", "models registry key: the network builder")
    d("torso", "mlp", "models registry key: the feature extractor inside the network")
    d("memory", "replay", "memory registry key: where experience is stored and sampled from")
    d("act_select", "epsilon_greedy", "act_select registry key: how actions are chosen while training")
    d("grad_comp", "td", "grad_comp registry key: the loss function")
    # environment
    d("env", "CartPole-v1", "gymnasium env id (--env overrides)")
    d("env_type", "gym", "envs registry key: the env family and its wrappers (gym, atari, bullet ...)")
    d("num_envs", 1, "environments stepped together in one vector env")
    d("max_episode_steps", 0, "time limit of an episode in env steps, truncating it (0: the env id's own limit)")
    d("vector_mode", "sync", "vector engine: sync, async, native (the env's own vectorised code) or auto "
      "(native where it resets in the same step, e.g. CartPole; sync otherwise)")
    # Atari (env_type=atari: ale-py's AtariVectorEnv, whose C++ threads do the DeepMind preprocessing)
    d("frame_skip", 4, "atari: emulator frames per agent step (the last two max-pooled)")
    d("frame_stack", 4, "atari: 84x84 grayscale frames stacked into one observation")
    d("noop_max", 30, "atari: up to this many no-op actions at the start of a game")
    d("sticky_actions", -1.0, "atari: probability of repeating the previous action (-1: the id's own: 0.25 for "
      "ALE/*-v5, 0 for *NoFrameskip-v4)")
    d("full_action_space", False, "atari: all 18 actions instead of the game's minimal set")
    d("terminal_on_life_loss", False, "atari: a lost life ends the learning episode (the game goes on; scores "
      "still count whole games)")
    d("reward_clipping", True, "atari: the agent learns from rewards clipped to [-1, 1] (scores stay unclipped)")
    d("fire_reset", True, "atari: press FIRE at the start of games that need it")
    d("env_threads", 0, "atari: C++ threads stepping the envs (0: one per core, at most num_envs)")
    # run length, evaluation, checkpoints
    d("train_steps", 100_000, "environment steps to train for, summed over envs (--train_steps overrides)")
    d("seed", 0, "seed of envs, networks and samplers (--seed overrides; copy i uses seed + i)")
    d("eval_interval", 10_000, "environment steps between periodic greedy evaluations (0: only at the end)")
    d("eval_episodes", 10, "episodes per periodic evaluation (--eval_episodes overrides)")
    d("eval_deterministic", True, "evaluate with the greedy policy (False: the training policy, e.g. sampled "
      "actions or the final epsilon, as Atari evaluations usually do)")
    d("test_episodes", 100, "episodes in evaluation mode, --training False (--test_episodes overrides)")
    d("checkpoint_interval", 10_000, "environment steps between checkpoints")
    d("keep_checkpoints", 3, "how many recent checkpoints to keep")
    d("checkpoint_memory", True, "include the replay memory in checkpoints so a resumed run samples the same data")
    d("log_interval", 1_000, "environment steps between log rows (TensorBoard, progress.csv, console)")
    # optimisation
    d("lr", 3e-4, "learning rate")
    d("adam_eps", 1e-8, "Adam's epsilon")
    d("gamma", 0.99, "discount factor")
    d("batch_size", 64, "minibatch size")
    d("max_grad_norm", 10.0, "gradient clipping by global norm (0: off)")
    d("hidden_sizes", [64, 64], "widths of the MLP torso's hidden layers")
    d("activation", "relu", "activation of the MLP torso: relu, tanh, elu, gelu, silu")
    d("fixup_init", False, "impala_cnn: Fixup initialisation of the residual blocks (Zhang et al. 2019)")
    d("channels_last", False, "convolutional torsos: channels-last memory format (faster on some CPUs and GPUs)")
    # system
    d("device", "cpu", "torch device: cpu, cuda, cuda:1 ... (auto: cuda when available)")
    d("precision", "fp32", "fp32, or bf16: on-policy agents run forward passes under bfloat16 autocast (weights, "
      "gradients and losses stay fp32; CUDA or CPUs with AVX-512 BF16/AMX, fp32 elsewhere)")
    d("torch_threads", 1, "threads for torch's intra-op pool, numpy's BLAS and OpenCV (small networks: 1 is fastest)")
    # the Scheme (rl/parallel): collection workers and gradient workers, each group sync or async
    d("num_workers", 0, "0: one process; N > 0: N collection worker processes feeding this learner "
      "(--num_workers overrides)")
    d("col_communication", "async", "collection workers: async (they keep acting with the weights they have: "
      "IMPALA, APPO, Ape-X) or sync (the learner waits for all, learns, then every worker gets the new weights)")
    d("max_policy_lag", 0, "drop worker data whose policy is more than this many learner versions old (0: keep all)")
    d("worker_timeout", 60.0, "seconds a worker may go without a step before it is declared hung and restarted")
    d("worker_envs", 0, "envs per collection worker (0: num_envs)")
    d("num_grad_workers", 1, "gradient workers: M > 1 processes each collect and compute gradients on their share")
    d("grad_communication", "sync", "gradient workers: sync (gradients averaged by a torch.distributed "
      "all-reduce every step: DPPO) or async (the learner applies each worker's gradient as it arrives: A3C)")
    d("group_timeout_s", 1800.0, "sync gradient workers: seconds a rank waits in a collective for the others before "
      "the group is lost (exit 129). Rank 0's evaluations must fit in it: the other ranks wait in the next all-reduce")
    d("ray_address", "", "run the workers as Ray actors on this Ray cluster: auto, HOST:PORT or ray://HOST:PORT "
      "('': shared-memory processes on this machine; --ray_address or RAY_ADDRESS set it)")
    d("ray_worker_cpus", 1.0, "Ray: CPUs each worker actor declares")
    d("ray_worker_gpus", 0.0, "Ray: GPUs each worker actor declares")
    d("ray_worker_resources", "", "Ray: custom resources each worker actor declares, NAME:AMOUNT[;NAME:AMOUNT] "
      "(e.g. cpu_node:1 keeps workers on nodes started with --resources '{\"cpu_node\": 8}')")
    return hp


def off_policy(hp: HParams) -> HParams:
    """Add the settings every off-policy agent (dqn, ddpg, td3, sac) shares: its memory and update schedule."""
    d = hp.define
    d("buffer_size", 1_000_000, "replay memory capacity in transitions")
    d("learning_starts", 50_000, "environment steps of pure collection before the first update")
    d("train_freq", 4, "environment steps between training phases")
    d("gradient_steps", 1, "gradient steps per training phase")
    d("target_update_interval", 1, "environment steps between target network updates")
    d("tau", 1.0, "target update rate: 1.0 copies (hard update), < 1 is Polyak averaging")
    # the replay family (rl/memory: prioritized, attentive, queue, mixed; n-step returns for all of them)
    d("worker_steps", 32, "with workers: vector steps a worker collects before it ships them to the learner")
    d("replay_frames", True, "store each frame of stacked-frame observations (atari) once and rebuild the stacks "
      "when sampling, instead of 2 x frame_stack copies per transition")
    d("n_step", 1, "n-step returns: transitions carry up to n discounted rewards and bootstrap with gamma^k")
    d("per_alpha", 0.6, "prioritized memory: priority exponent, p = (|td error| + per_eps)^per_alpha")
    d("per_beta", 0.4, "prioritized memory: initial importance-weight exponent, annealed linearly to 1 over the run")
    d("per_eps", 1e-6, "prioritized memory: added to |td error| so no item's priority is zero")
    d("attentive_lambda", 4.0, "attentive memory: candidates drawn per kept item (>= 1) at the start")
    d("attentive_anneal_fraction", 1.0, "attentive memory: fraction of the run over which lambda falls to 1")
    d("attentive_features", "obs", "attentive memory: similarity on raw observations (obs) or the agent's features "
      "(model)")
    d("replay_parameters", '[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, '
      '{"type": "replay", "capacity": 1000, "sample_ratio": 0.5}]',
      "mixed memory (transitions) and agent=impala (sequences: seed B's queue, standard, custom): JSON list of "
      "buffers, each with type, capacity and sample_ratio (ratios summing to 1)")
    return hp

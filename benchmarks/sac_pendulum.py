"""SAC: our `sac_pendulum` against Stable-Baselines3's SAC with the same rl-baselines3-zoo settings and seeds, one
after the other in one run, each as a whole process; or, with `--env HalfCheetahBulletEnv-v0`, the same comparison
with `sac_halfcheetah_bullet`'s settings, for steps/s on a PyBullet robot.

    .venv/bin/pip install stable-baselines3 sb3-contrib     # the peer, for benchmarks only
    .venv/bin/python benchmarks/sac_pendulum.py --seeds 0 1 2
    .venv/bin/python benchmarks/sac_pendulum.py --env HalfCheetahBulletEnv-v0 --steps 20000 --seeds 0
    .venv/bin/python benchmarks/sac_pendulum.py --env HalfCheetahBulletEnv-v0 --steps 300000 --seeds 0 1 \
        --episodes 10     # the learning comparison at an equal budget (hours: run it in the background)

On HalfCheetahBulletEnv-v0 both sides run the zoo's settings: gSDE and sb3-contrib's TimeFeatureWrapper included.

Prints whole-process wall time, steps/s, peak memory and the final deterministic evaluation for both, and the speed
ratio SB3 time / our time. SB3 runs with torch's default thread count; ours with the set's `torch_threads` unless
`--threads` says otherwise.
"""

from __future__ import annotations

import json

from common import benchmark_parser, compare_with_sb3

# our set -> the same settings in SB3's terms (rl-baselines3-zoo hyperparams/sac.yml)
SETTINGS = {
    "Pendulum-v1": ("sac_pendulum", 20_000, 10,
                    dict(learning_rate=1e-3, buffer_size=1_000_000, learning_starts=100, batch_size=256, tau=0.005,
                         gamma=0.99, train_freq=1, gradient_steps=1, policy_kwargs=dict(net_arch=[256, 256]))),
    "HalfCheetahBulletEnv-v0": ("sac_halfcheetah_bullet", 20_000, 2,
                                dict(learning_rate=7.3e-4, buffer_size=300_000, learning_starts=10_000,
                                     batch_size=256, tau=0.02, gamma=0.98, train_freq=8, gradient_steps=8,
                                     use_sde=True, policy_kwargs=dict(log_std_init=-3, net_arch=[400, 300]),
                                     time_feature=True)),
}

SB3_SCRIPT = """
import json, sys, time
import gymnasium as gym, numpy as np, torch
import pybullet_envs_gymnasium  # noqa: F401  (registers the PyBullet ids)
from sb3_contrib.common.wrappers import TimeFeatureWrapper
from stable_baselines3 import SAC
from stable_baselines3.common.evaluation import evaluate_policy
env_id, seed, steps, episodes, kwargs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), \
    json.loads(sys.argv[5])
wrap = TimeFeatureWrapper if kwargs.pop("time_feature", False) else (lambda env: env)
start = time.perf_counter()
model = SAC("MlpPolicy", wrap(gym.make(env_id)), seed=seed, device="cpu", verbose=0, **kwargs)
model.learn(steps)
train_s = time.perf_counter() - start
last10 = [ep["r"] for ep in list(model.ep_info_buffer)[-10:]]
mean, std = evaluate_policy(model, wrap(gym.make(env_id)), n_eval_episodes=episodes, deterministic=True)
print(json.dumps({"mean_return": float(mean), "std_return": float(std), "train_s": train_s,
                  "last10": float(np.mean(last10)) if last10 else None}))
"""


def main() -> None:
    p = benchmark_parser(__doc__, steps=None, episodes=None)  # None: the env's (20000; 10 episodes, 2 on PyBullet)
    p.add_argument("--env", default="Pendulum-v1", choices=list(SETTINGS))
    p.add_argument("--threads", type=int, default=None, help="torch threads for ours (default: the set's)")
    p.add_argument("--override", default="", help="extra --hparam_override for ours, e.g. matmul_precision=highest")
    args = p.parse_args()
    set_name, default_steps, default_episodes, sb3_kwargs = SETTINGS[args.env]
    steps, episodes = args.steps or default_steps, args.episodes or default_episodes
    threads = f"torch_threads={args.threads}" if args.threads else ""
    override = ",".join(x for x in ["eval_interval=0", args.override, threads] if x)
    compare_with_sb3(set_name, SB3_SCRIPT, f"SAC {args.env} ({set_name})", args.seeds, steps, episodes,
                     args.skip_peer, ours_args=("--hparam_override", override),
                     peer_prefix=(args.env,), peer_suffix=(json.dumps(sb3_kwargs),))


if __name__ == "__main__":
    main()

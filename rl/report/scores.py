"""Published scores a run is measured against: Atari's random and human scores, and reference results by algorithm
and env.

Random and human scores per game (the Atari-57 table of Mnih et al. 2015 and Badia et al. 2020, as DeepMind's DQN
Zoo ships it: `google-deepmind/dqn_zoo`, `dqn_zoo/atari_data.py`; the same numbers as rliable's Atari data). Human-
normalised score = (score - random) / (human - random): 0 plays like a random agent, 1 like a professional tester.

Reference results (each row keeps the file and line of the source it was read from):
- zoo: rl-baselines3-zoo `benchmark.md`, one run each, deterministic evaluation (the sets here port its settings);
- sb3: Stable-Baselines3's documentation, PyBullet tables over 6 (PPO, A2C) or 3 (SAC, TD3) seeds, Gaussian policies;
- cleanrl: CleanRL's `docs/benchmark` tables, mean over 3 seeds.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

ATARI_RANDOM_HUMAN = {  # game (ALE ROM id): (random, human)
    "alien": (227.8, 7127.7), "amidar": (5.8, 1719.5), "assault": (222.4, 742.0), "asterix": (210.0, 8503.3),
    "asteroids": (719.1, 47388.7), "atlantis": (12850.0, 29028.1), "bank_heist": (14.2, 753.1),
    "battle_zone": (2360.0, 37187.5), "beam_rider": (363.9, 16926.5), "berzerk": (123.7, 2630.4),
    "bowling": (23.1, 160.7), "boxing": (0.1, 12.1), "breakout": (1.7, 30.5), "centipede": (2090.9, 12017.0),
    "chopper_command": (811.0, 7387.8), "crazy_climber": (10780.5, 35829.4), "defender": (2874.5, 18688.9),
    "demon_attack": (152.1, 1971.0), "double_dunk": (-18.6, -16.4), "enduro": (0.0, 860.5),
    "fishing_derby": (-91.7, -38.7), "freeway": (0.0, 29.6), "frostbite": (65.2, 4334.7), "gopher": (257.6, 2412.5),
    "gravitar": (173.0, 3351.4), "hero": (1027.0, 30826.4), "ice_hockey": (-11.2, 0.9), "jamesbond": (29.0, 302.8),
    "kangaroo": (52.0, 3035.0), "krull": (1598.0, 2665.5), "kung_fu_master": (258.5, 22736.3),
    "montezuma_revenge": (0.0, 4753.3), "ms_pacman": (307.3, 6951.6), "name_this_game": (2292.3, 8049.0),
    "phoenix": (761.4, 7242.6), "pitfall": (-229.4, 6463.7), "pong": (-20.7, 14.6), "private_eye": (24.9, 69571.3),
    "qbert": (163.9, 13455.0), "riverraid": (1338.5, 17118.0), "road_runner": (11.5, 7845.0),
    "robotank": (2.2, 11.9), "seaquest": (68.4, 42054.7), "skiing": (-17098.1, -4336.9),
    "solaris": (1236.3, 12326.7), "space_invaders": (148.0, 1668.7), "star_gunner": (664.0, 10250.0),
    "surround": (-10.0, 6.5), "tennis": (-23.8, -8.3), "time_pilot": (3568.0, 5229.2), "tutankham": (11.4, 167.6),
    "up_n_down": (533.4, 11693.2), "venture": (0.0, 1187.5), "video_pinball": (16256.9, 17667.9),
    "wizard_of_wor": (563.5, 4756.5), "yars_revenge": (3092.9, 54576.9), "zaxxon": (32.5, 9173.3),
}


def atari_game(env_id: str) -> str | None:
    """The ALE ROM id of a gymnasium Atari id (`PongNoFrameskip-v4`, `ALE/Pong-v5` -> `pong`; `MsPacman...` ->
    `ms_pacman`), None for other envs."""
    from rl.envs.atari import parse_atari_id

    parsed = parse_atari_id(env_id)
    return parsed[0] if parsed else None


def human_normalized(env_id: str, score: float) -> float | None:
    """(score - random) / (human - random) for an Atari-57 game, None for anything else."""
    game = atari_game(env_id)
    if game not in ATARI_RANDOM_HUMAN:
        return None
    random, human = ATARI_RANDOM_HUMAN[game]
    return (score - random) / (human - random)


SOURCES = {
    "zoo": "rl-baselines3-zoo benchmark.md (1 run, deterministic evaluation)",
    "sb3": "SB3 docs PyBullet tables (6 seeds PPO/A2C, 3 seeds SAC/TD3)",
    "cleanrl": "CleanRL docs/benchmark (3 seeds)",
    "sb3_contrib": "sb3-contrib docs (3 seeds)",
}


@dataclass(frozen=True)
class Reference:
    source: str  # a key of SOURCES
    algo: str
    env: str
    mean: float
    std: float
    steps: int  # the reference's training budget, in environment steps
    where: str  # its file and line

    def as_dict(self) -> dict:
        return {**asdict(self), "source_name": SOURCES[self.source]}


def _rows(source: str, where: str, text: str) -> list[Reference]:
    """`algo env mean std steps line` per line."""
    rows = []
    for line in text.strip().splitlines():
        algo, env, mean, std, steps, at = line.split()
        rows.append(Reference(source, algo, env, float(mean), float(std), int(float(steps)), f"{where} {at}"))
    return rows


REFERENCES = _rows("zoo", "benchmark.md", """
    ppo CartPole-v1 500.0 0.0 1e5 L96
    dqn CartPole-v1 500.0 0.0 5e4 L77
    a2c CartPole-v1 500.0 0.0 5e5 L31
    ppo_lstm CartPoleNoVel-v1 500.0 0.0 1e5 L129
    sac Pendulum-v1 -156.995 88.714 2e4 L157
    td3 Pendulum-v1 -151.855 90.227 2e4 L173
    ppo Pendulum-v1 -172.225 104.159 1e5 L118
    a2c Pendulum-v1 -162.965 103.210 1e6 L43
    ppo HalfCheetahBulletEnv-v0 2924.721 64.465 2e6 L99
    sac HalfCheetahBulletEnv-v0 2792.170 12.088 1e6 L151
    td3 HalfCheetahBulletEnv-v0 2821.641 19.722 1e6 L167
    a2c HalfCheetahBulletEnv-v0 2107.384 36.008 2e6 L34
    ppo AntBulletEnv-v0 2865.922 56.468 2e6 L89
    sac AntBulletEnv-v0 3073.114 175.148 1e6 L147
    td3 AntBulletEnv-v0 3300.026 54.640 1e6 L163
    a2c AntBulletEnv-v0 2497.147 37.359 2e6 L25
    ppo HopperBulletEnv-v0 2575.054 223.301 2e6 L101
    sac HopperBulletEnv-v0 2603.494 164.322 1e6 L153
    ppo Walker2DBulletEnv-v0 2109.992 13.899 2e6 L126
    sac Walker2DBulletEnv-v0 2292.266 13.970 1e6 L160
    ppo PongNoFrameskip-v4 20.989 0.105 1e7 L119
    dqn PongNoFrameskip-v4 20.602 0.613 1e7 L82
    a2c PongNoFrameskip-v4 17.292 3.214 1e7 L44
    ppo BreakoutNoFrameskip-v4 398.033 33.328 1e7 L94
    dqn BreakoutNoFrameskip-v4 358.327 61.981 1e7 L76
    qrdqn BreakoutNoFrameskip-v4 393.600 79.828 1e7 L135
    qrdqn PongNoFrameskip-v4 20.49 0 1e7 (Pong)
    qrdqn CartPole-v1 500.0 0.0 5e4 (CartPole)
    tqc HalfCheetahBulletEnv-v0 3675 0 1e6 (HalfCheetahBullet)
    tqc AntBulletEnv-v0 3457 0 1e6 (AntBullet)
    tqc HopperBulletEnv-v0 2662 0 1e6 (HopperBullet)
    tqc Walker2DBulletEnv-v0 2509 0 1e6 (Walker2DBullet)
    ppo LunarLander-v2 242.119 31.823 1e6 L102
    dqn LunarLander-v2 154.382 79.241 1e5 L79
    sac HalfCheetah-v3 9535.5 0 1e6 L150
    td3 HalfCheetah-v3 9655.7 0 1e6 L166
""") + _rows("sb3", "docs/modules", """
    a2c HalfCheetahBulletEnv-v0 2003 54 2e6 ppo.md:L114-L131
    ppo HalfCheetahBulletEnv-v0 1976 479 2e6 ppo.md:L114-L131
    a2c AntBulletEnv-v0 2286 72 2e6 ppo.md:L114-L131
    ppo AntBulletEnv-v0 2364 120 2e6 ppo.md:L114-L131
    a2c HopperBulletEnv-v0 1627 158 2e6 ppo.md:L114-L131
    ppo HopperBulletEnv-v0 1567 339 2e6 ppo.md:L114-L131
    a2c Walker2DBulletEnv-v0 577 65 2e6 ppo.md:L114-L131
    ppo Walker2DBulletEnv-v0 1230 147 2e6 ppo.md:L114-L131
    sac HalfCheetahBulletEnv-v0 2757 53 1e6 sac.md:L105-L122
    td3 HalfCheetahBulletEnv-v0 2774 35 1e6 sac.md:L105-L122
    sac AntBulletEnv-v0 3146 35 1e6 sac.md:L105-L122
    td3 AntBulletEnv-v0 3305 43 1e6 sac.md:L105-L122
    sac HopperBulletEnv-v0 2422 168 1e6 sac.md:L105-L122
    td3 HopperBulletEnv-v0 2429 126 1e6 sac.md:L105-L122
    sac Walker2DBulletEnv-v0 2184 54 1e6 sac.md:L105-L122
    td3 Walker2DBulletEnv-v0 2063 185 1e6 sac.md:L105-L122
""") + _rows("sb3_contrib", "docs/modules", """
    tqc HalfCheetahBulletEnv-v0 3041 157 1e6 tqc.rst
    tqc AntBulletEnv-v0 3700 37 1e6 tqc.rst
    tqc HopperBulletEnv-v0 2401 62 1e6 tqc.rst
    tqc Walker2DBulletEnv-v0 2535 94 1e6 tqc.rst
    qrdqn PongNoFrameskip-v4 20 0 1e7 qrdqn.rst
    qrdqn BreakoutNoFrameskip-v4 413 21 1e7 qrdqn.rst
""") + _rows("cleanrl", "docs", """
    pqn CartPole-v1 495.13 6.89 5e5 rl-algorithms/pqn.md
    pqn PongNoFrameskip-v4 20.49 0.11 1e7 rl-algorithms/pqn.md(pqn_atari_envpool)
    pqn BreakoutNoFrameskip-v4 384.9 12.4 1e7 rl-algorithms/pqn.md(pqn_atari_envpool)
    ppo CartPole-v1 490.04 6.12 5e5 benchmark/ppo.md
    ppo Acrobot-v1 -86.36 1.32 5e5 benchmark/ppo.md
    dqn CartPole-v1 488.69 16.11 5e5 rl-algorithms/dqn.md:L212
    ppo PongNoFrameskip-v4 20.36 0.20 1e7 benchmark/ppo_atari.md
    ppo BreakoutNoFrameskip-v4 414.66 28.09 1e7 benchmark/ppo_atari.md
    ppo BeamRiderNoFrameskip-v4 1915.93 484.58 1e7 benchmark/ppo_atari.md
    ppo_lstm PongNoFrameskip-v4 19.78 1.58 1e7 rl-algorithms/ppo.md:L468
    ppo_lstm BreakoutNoFrameskip-v4 128.92 31.10 1e7 rl-algorithms/ppo.md:L469
    dqn PongNoFrameskip-v4 20.25 0.41 1e7 rl-algorithms/dqn.md:L115
    dqn BreakoutNoFrameskip-v4 366.93 39.89 1e7 rl-algorithms/dqn.md:L116
    dqn BeamRiderNoFrameskip-v4 6673.24 1434.37 1e7 rl-algorithms/dqn.md:L117
    sac HalfCheetah-v4 9634.89 1423.73 1e6 benchmark/sac.md
    sac Hopper-v4 2310.46 342.82 1e6 benchmark/sac.md
    sac Walker2d-v4 3591.45 911.33 1e6 benchmark/sac.md
    td3 HalfCheetah-v4 9583.22 126.09 1e6 benchmark/td3.md
    td3 Hopper-v4 3134.61 360.18 1e6 benchmark/td3.md
    td3 Walker2d-v4 4057.59 658.78 1e6 benchmark/td3.md
    ppo HalfCheetah-v4 1442.64 46.03 1e6 benchmark/ppo_continuous_action.md
    ppo Hopper-v4 2382.86 271.74 1e6 benchmark/ppo_continuous_action.md
    ppo Walker2d-v4 2287.95 571.78 1e6 benchmark/ppo_continuous_action.md
""")

# The first word of a set's name, as the algorithm the references know it by. Variants without their own rows are
# compared with their family's (a Rainbow set with DQN's), and the page says "nearest".
ALGO_OF_PREFIX = {"ppo": "ppo", "appo": "ppo", "dppo": "ppo", "a2c": "a2c", "a3c": "a2c", "dqn": "dqn", "ddqn": "dqn",
                  "dueling": "dqn", "noisy": "dqn", "rainbow": "dqn", "apex": "dqn", "qrdqn": "qrdqn", "sac": "sac",
                  "td3": "td3", "tqc": "tqc", "pqn": "pqn"}


def reference_algo(hparams_set: str, hparams: dict) -> tuple[str | None, bool]:
    """(the references' algorithm name for a run, whether that is the set's own algorithm rather than the nearest
    one). A recurrent PPO is `ppo_lstm`; otherwise the set's first word, else its agent."""
    prefix = hparams_set.split("_")[0]
    algo = ALGO_OF_PREFIX.get(prefix) or ALGO_OF_PREFIX.get(str(hparams.get("agent")))
    if algo == "ppo" and hparams.get("recurrent"):
        algo = "ppo_lstm"
    return algo, algo == prefix or (algo == "ppo_lstm" and prefix == "ppo")


def task_key(env_id: str) -> str:
    """An env without its version and id style: the same task under another id finds its reference, said so."""
    game = atari_game(env_id)
    if game:
        return f"atari:{game}"
    return re.sub(r"-v\d+$", "", env_id.split("/")[-1]).lower()


def references_for(hparams_set: str, hparams: dict) -> list[dict]:
    """The published rows for a run's algorithm and env: the same env id first, then the same task under another id
    (or version); within each, in the order zoo, SB3 docs, CleanRL. Each row says how it matched."""
    algo, own = reference_algo(hparams_set, hparams)
    env = str(hparams.get("env", ""))
    if algo is None or not env:
        return []
    exact = [r for r in REFERENCES if r.algo == algo and r.env == env]
    task = [r for r in REFERENCES if r.algo == algo and r.env != env and task_key(r.env) == task_key(env)]
    rows = []
    for ref in exact + task:
        match = ("same algorithm" if own else f"nearest algorithm: {algo}") + (
            "" if ref.env == env else f"; env {ref.env} (this run: {env})")
        rows.append({**ref.as_dict(), "match": match})
    return rows


def reached(score: float | None, ref: dict) -> bool | None:
    """Within the reference's own spread: score >= reference mean - reference std (a single-run 500 ± 0 on CartPole
    needs 500)."""
    return None if score is None else bool(score >= ref["mean"] - ref["std"])

"""Model registry: torsos (feature extractors) and heads, assembled into networks by builders.

`models` knows nothing of algorithms: a builder takes the hparams and the env's spaces and returns an nn.Module.
"""

from rl.models import mlp, q_network  # noqa: F401  (registers members)
from rl.models import continuous  # noqa: F401
from rl.models import actor_critic  # noqa: F401
from rl.models import distributional, noisy  # noqa: F401  (replay family, issue 5)

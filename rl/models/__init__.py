"""Model registry: torsos (feature extractors) and heads, assembled into networks by builders.

`models` knows nothing of algorithms: a builder takes the hparams and the env's spaces and returns an nn.Module.
"""

from rl.models import (  # noqa: F401  (imported to register their members)
    actor_critic,  # noqa: F401
    cnn,
    continuous,  # noqa: F401
    distributional,
    layer_norm,
    mlp,
    multi_input,
    noisy,
    q_network,
    quantile,
)

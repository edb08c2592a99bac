"""Named hyperparameter sets, one file per algorithm family. Importing this package registers them all."""

from hparams import (  # noqa: F401
    atari,  # noqa: F401
    base,
    continuous,  # noqa: F401
    dqn,
    masked,  # noqa: F401
    on_policy,  # noqa: F401
    pqn,  # noqa: F401
    quantile,  # noqa: F401
    scheme,  # noqa: F401
)

"""Named hyperparameter sets, one file per algorithm family. Importing this package registers them all."""

from hparams import base, dqn  # noqa: F401
from hparams import continuous  # noqa: F401
from hparams import on_policy  # noqa: F401

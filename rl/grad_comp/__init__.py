"""grad_comp registry: losses as plain functions of a batch and networks, returning (loss, diagnostics), each
registered with its kind, the call its agents make (contracts.py)."""

from rl.grad_comp import (
    actor_critic_losses,  # noqa: F401
    c51,  # noqa: F401  (registers members)
    policy_gradient,  # noqa: F401
    pqn,  # noqa: F401
    quantile,  # noqa: F401
    td,  # noqa: F401  (registers members)
    tqc,  # noqa: F401
    vtrace,  # noqa: F401
)

"""The one-step Bellman target every bootstrapping loss builds: DQN's (td.py), DDPG's, TD3's and SAC's
(actor_critic_losses.py), and C51's shifted support (c51.py).

Kept in one place so that the losses agree on what bootstraps: truncated transitions do, terminated ones do not, and
`discounts` (the batch's gamma^n for n-step returns, gamma already in it) is the bootstrap's only factor.
"""

from __future__ import annotations

import torch


def td_target(rewards: torch.Tensor, discounts: torch.Tensor, terminated: torch.Tensor,
              next_values: torch.Tensor) -> torch.Tensor:
    """rewards + discounts * (1 - terminated) * next_values, broadcast (C51 passes [B, 1] rows and a [1, atoms]
    support). Rounded as each loss rounded it before it was shared: `terminated` is 0 or 1, so the products are exact
    in any grouping, but a fused multiply-add (torch.addcmul), float64 or an expanded form rounds differently and
    changes every seeded run's numbers."""
    return rewards + discounts * (1.0 - terminated) * next_values

"""The MLP's numpy forward pass (the on-policy analytic path) against its torch forward pass."""

import warnings

import numpy as np
import pytest
import torch

from rl.agents.flat_adam import FlatAdam
from rl.models.mlp import MLP


@pytest.mark.parametrize("act", ["tanh", "relu"])
@pytest.mark.parametrize("rows", [8, 256])  # an acting batch (np.tanh) and a training batch (tanh through exp)
def test_numpy_forward_equals_torch_forward_even_where_exp_would_overflow(act, rows):
    torch.manual_seed(0)
    mlp = MLP(4, [64, 64], act)
    FlatAdam(mlp, 1e-3)  # gives the parameters their .grad views, as in an agent
    obs = np.random.default_rng(0).standard_normal((rows, 4)).astype(np.float32) * 100.0  # saturating inputs
    obs[0] = [1e4, -1e4, 1e4, -1e4]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning from exp
        out, xs = mlp.forward_numpy(mlp.numpy_layers(), obs)
    with torch.no_grad():
        expected = mlp(torch.from_numpy(obs)).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6 if act == "tanh" else 1e-4)  # relu: values ~100
    assert len(xs) == 3 and xs[1].shape == (rows, 64)

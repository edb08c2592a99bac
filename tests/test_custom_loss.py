"""The contract of docs/extending.md's "A new algorithm": a loss is a plain torch function returning (loss,
diagnostics), and what it returns is what trains the agent. A 15-line loss registered from outside rl/ trains
through train.py; a loss multiplied by zero leaves the weights where they were; editing a loss's formula changes the
trained weights."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from rl.collector import Collector
from rl.envs import make_env
from rl.registry import grad_comp
from rl.registry import hparams as sets
from rl.resolve import read_record
from rl.trainer import build_agent, seed_everything

ROOT = Path(__file__).resolve().parents[1]

MY_LOSS = '''
@grad_comp.register("my_pg", kind="policy_gradient")
def my_pg(log_probs, entropy, values, batch, *, vf_coef=0.5, diagnostics=True, **_):
    """REINFORCE with a baseline, written the CleanRL way."""
    adv = (batch.advantages - batch.advantages.mean()) / (batch.advantages.std() + 1e-8)
    policy_loss = -(log_probs * adv).mean()
    value_loss = (values - batch.returns).square().mean()
    loss = policy_loss + vf_coef * value_loss
    info = {"losses/my_policy_loss": policy_loss.detach()} if diagnostics else {}
    return loss, info
'''


def test_a_plain_loss_registered_from_outside_trains_through_train_py(tmp_path):
    script = tmp_path / "my_train.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from rl.registry import grad_comp
        {textwrap.indent(MY_LOSS, '        ').strip()}
        import train
        sys.exit(train.main(sys.argv[1:]))
    """))
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, str(script), "--hparams", "vpg_cartpole", "--output_dir", str(out),
                          "--train_steps", "40000", "--hparam_override", "grad_comp=my_pg,eval_interval=0",
                          "--eval_episodes", "10"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert read_record(out / "hparams.json")["hparams"]["grad_comp"] == "my_pg"
    rows = list(csv.DictReader(open(out / "progress.csv")))
    assert any(r.get("losses_my_policy_loss") for r in rows)  # its diagnostics reach the logs
    # a random CartPole policy scores about 20; seeds 0-5 of this loss reached 261-500 at 40k steps
    assert json.loads((out / "eval.json").read_text())["mean_return"] >= 150


def one_update(grad_comp_name: str):
    hp = sets["ppo_cartpole"]()
    hp.parse(f"grad_comp={grad_comp_name},num_envs=2,num_steps=16,batch_size=16,epochs=2")
    seed_everything(0)
    env = make_env(hp)
    agent = build_agent(hp, env, 0)
    before = torch.cat([p.detach().flatten().clone() for p in agent.model.parameters()])
    collector = Collector(env, agent, seed=0)
    while agent.updates == 0:
        collector.step()
        agent.update()
    return before, torch.cat([p.detach().flatten() for p in agent.model.parameters()])


@pytest.fixture
def variants():
    """Three registered variants of ppo_clip: times zero, unchanged, and with an extra term on the policy loss."""
    ppo = grad_comp["ppo_clip"]

    def zero(*args, **kwargs):
        loss, info = ppo(*args, **kwargs)
        return 0.0 * loss, info

    def extra_term(log_probs, entropy, values, batch, **kwargs):
        loss, info = ppo(log_probs, entropy, values, batch, **kwargs)
        return loss + 0.1 * log_probs.square().mean(), info

    names = {"zero_ppo": zero, "extra_ppo": extra_term}
    for name, fn in names.items():
        grad_comp.register(name, kind="policy_gradient")(fn)
    yield
    for name in names:
        grad_comp.unregister(name)


def test_the_loss_returned_is_the_gradient_trained(variants):
    before, plain = one_update("ppo_clip")
    _, zero = one_update("zero_ppo")
    _, extra = one_update("extra_ppo")
    assert not torch.equal(before, plain)  # the plain loss moves the weights
    assert torch.equal(before, zero)  # zero times the loss: zero gradient, and Adam leaves the weights alone
    assert not torch.allclose(plain, extra)  # one added term changes what is trained
    assert np.isfinite(extra.numpy()).all()

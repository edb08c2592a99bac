"""FlatAdam is torch.optim.Adam's arithmetic over one flat buffer, and stays correct under the patterns researchers
use on a model: model.zero_grad() (gradients set to None), gradients assigned by hand, parameters re-bound."""

import pytest
import torch

from rl.agents.flat_adam import FlatAdam


def nets():
    torch.manual_seed(0)
    a = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    b = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    b.load_state_dict(a.state_dict())
    return a, b


def reference_step(net, opt, x, clip=None):
    opt.zero_grad()
    (net(x) ** 2).sum().backward()
    if clip:
        torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
    opt.step()


def assert_same(net_a, net_b, step):
    for p, q in zip(net_a.parameters(), net_b.parameters()):
        assert torch.allclose(p, q, atol=1e-6), step


def test_matches_torch_adam_with_clipping():
    net_a, net_b = nets()
    flat = FlatAdam(net_a, lr=1e-2, eps=1e-5)
    ref = torch.optim.Adam(net_b.parameters(), lr=1e-2, eps=1e-5)
    for step in range(6):
        x = torch.randn(16, 3)
        flat.zero_grad()
        (net_a(x) ** 2).sum().backward()
        assert flat.grad.norm() > 0.5  # the clip acts
        flat.clip_grad_norm(0.5)
        flat.step()
        reference_step(net_b, ref, x, clip=0.5)
        assert_same(net_a, net_b, step)
    assert len(flat.param) == sum(p.numel() for p in net_a.parameters())


@pytest.mark.parametrize("pattern", ["model.zero_grad", "grad_by_hand", "rebind_data"])
def test_safe_under_the_usual_patterns(pattern):
    """Each pattern breaks the flat buffers' views; the optimizer must notice and still train as torch's Adam."""
    net_a, net_b = nets()
    flat = FlatAdam(net_a, lr=1e-2)
    ref = torch.optim.Adam(net_b.parameters(), lr=1e-2)
    for step in range(5):
        x = torch.randn(16, 3)
        if pattern == "model.zero_grad":  # sets every .grad to None; backward then allocates fresh tensors
            net_a.zero_grad()
            (net_a(x) ** 2).sum().backward()
        elif pattern == "grad_by_hand":
            flat.zero_grad()
            loss = (net_a(x) ** 2).sum()
            grads = torch.autograd.grad(loss, list(net_a.parameters()))
            for p, g in zip(net_a.parameters(), grads):
                p.grad = g.clone()
        else:  # a parameter re-bound to a new tensor, e.g. by hand-made initialisation
            flat.zero_grad()
            if step == 2:
                net_a[0].weight.data = net_a[0].weight.detach().clone()
                net_b[0].weight.data = net_b[0].weight.detach().clone()
            (net_a(x) ** 2).sum().backward()
        flat.step()
        reference_step(net_b, ref, x)
        assert_same(net_a, net_b, step)
    # and the network still lives in the flat buffer, so a Polyak update or clipping on it sees every weight
    assert all(p.grad.data_ptr() >= flat.grad.data_ptr() for p in net_a.parameters())
    assert torch.equal(flat.param, torch.cat([p.detach().flatten() for p in net_a.parameters()]))


def test_a_learned_model_moves_after_model_zero_grad():
    """The trap this guards against: gradients set to None used to leave the flat gradient at zero, so training
    silently did nothing."""
    net, _ = nets()
    flat = FlatAdam(net, lr=1e-2)
    before = flat.param.clone()
    net.zero_grad()
    (net(torch.randn(8, 3)) ** 2).sum().backward()
    flat.step()
    assert not torch.equal(before, flat.param)


def test_capturable_reads_its_rate_and_count_on_the_device_and_steps_as_the_default():
    """The mode a CUDA graph records (rl/agents/cuda_graph.py): the learning rate and the step count are tensors
    the recorded kernel reads, so a rate set later and the count of replayed steps reach it. Bugs caught: a rate
    change that misses the device copy, a count refilled from Python (a replay would reuse the recorded count)."""
    net_a, net_b = nets()
    plain, capturable = FlatAdam(net_a, lr=1e-2), FlatAdam(net_b, lr=1e-2, capturable=True)
    for step in range(6):
        if step == 3:
            plain.lr = capturable.lr = 3e-3
        x = torch.randn(16, 3)
        for net, opt in ((net_a, plain), (net_b, capturable)):
            opt.zero_grad()
            (net(x) ** 2).sum().backward()
            opt.step()
        assert_same(net_a, net_b, step)
    assert plain.steps == capturable.steps == 6
    _, net_c = nets()
    resumed = FlatAdam(net_c, lr=1.0, capturable=True)
    net_c.load_state_dict(net_b.state_dict())
    resumed.load_state_dict(capturable.state_dict())
    assert resumed.steps == 6 and resumed.lr == 3e-3
    x = torch.randn(16, 3)
    for net, opt in ((net_b, capturable), (net_c, resumed)):
        opt.zero_grad()
        (net(x) ** 2).sum().backward()
        opt.step()
    assert_same(net_b, net_c, "resumed")


def test_rmsprop_matches_torch_rmsprop_and_resumes_from_its_state():
    """kind="rmsprop" is torch.optim.RMSprop's arithmetic (IMPALA's optimizer), and a checkpoint written when the
    flat buffer was stepped by torch.optim.RMSprop itself (its state_dict under "rmsprop") resumes with its averages."""
    net_a, net_b = nets()
    flat = FlatAdam(net_a, lr=1e-2, eps=1e-3, kind="rmsprop", rmsprop_alpha=0.9)
    ref = torch.optim.RMSprop(net_b.parameters(), lr=1e-2, alpha=0.9, eps=1e-3)
    for step in range(6):
        x = torch.randn(16, 3)
        flat.zero_grad()
        (net_a(x) ** 2).sum().backward()
        flat.clip_grad_norm(0.5)
        flat.step()
        reference_step(net_b, ref, x, clip=0.5)
        assert_same(net_a, net_b, step)
    assert flat.steps == 6

    net_c, _ = nets()
    net_c.load_state_dict(net_b.state_dict())
    old = FlatAdam(net_c, lr=1e-2, eps=1e-3, kind="rmsprop", rmsprop_alpha=0.9)
    flat_ref = torch.optim.RMSprop([old.param], lr=1e-2, alpha=0.9, eps=1e-3)  # how the old checkpoints were made
    flat_ref.state[old.param]["square_avg"] = torch.cat([ref.state[p]["square_avg"].flatten()
                                                        for p in net_b.parameters()])
    flat_ref.state[old.param]["step"] = torch.tensor(6.0)
    old.load_state_dict({"exp_avg": torch.zeros_like(old.param), "exp_avg_sq": torch.zeros_like(old.param),
                         "steps": 6, "lr": 1e-2, "rmsprop": flat_ref.state_dict()})
    x = torch.randn(16, 3)
    old.zero_grad()
    (net_c(x) ** 2).sum().backward()
    old.step()
    reference_step(net_b, ref, x)
    assert_same(net_c, net_b, "resumed")

import warnings

import pytest

from rl.errors import ConfigError
from rl.registry import ALL, Registry, RegistryError, snake_case


def test_register_default_and_explicit_names():
    reg = Registry("things")

    @reg.register
    class DoubleTD:
        pass

    @reg.register("custom")
    def fn():
        return 1

    assert reg["double_td"] is DoubleTD
    assert reg["custom"] is fn
    assert reg.names() == ["custom", "double_td"]
    assert "custom" in reg and "nope" not in reg


def test_duplicate_is_an_error():
    reg = Registry("things")
    reg.register("a")(lambda: 1)
    with pytest.raises(RegistryError, match="already registered"):
        reg.register("a")(lambda: 2)


def define_twice(source: str, name: str) -> tuple:
    """Two distinct objects from running `source` twice as module `notebook` (a notebook cell run again)."""
    made = []
    for _ in range(2):
        namespace = {"__name__": "notebook"}
        exec(source, namespace)
        made.append(namespace[name])
    return tuple(made)


def test_the_same_definition_registered_again_replaces_it_with_a_warning():
    """A notebook cell or importlib.reload runs a registered definition again: the same module and qualified name,
    a new object. It replaces the old one, with a warning. Bug caught: every duplicate an error (the cell cannot be
    run twice), or the old object kept."""
    reg = Registry("grad_comp")
    first, second = define_twice("def my_loss():\n    return 1\n", "my_loss")
    assert first is not second and (first.__module__, first.__qualname__) == (second.__module__, second.__qualname__)
    reg.register(first)
    with pytest.warns(UserWarning, match="grad_comp 'my_loss' registered again by notebook.my_loss: the new definition "
                                         "replaces the old one"):
        reg.register(second)
    assert reg["my_loss"] is second and len(reg) == 1
    old_cls, new_cls = define_twice("class MyMemory:\n    pass\n", "MyMemory")
    reg.register("mem")(old_cls)
    with pytest.warns(UserWarning, match="registered again"):
        reg.register("mem")(new_cls)
    assert reg["mem"] is new_cls


def test_another_definition_under_a_taken_key_stays_an_error():
    """Only the same definition replaces: another function (another name or module) under a key already taken is
    still a RegistryError, and the first stays. Bug caught: a replace rule that looks at the key alone."""
    reg = Registry("grad_comp")
    first, _ = define_twice("def my_loss():\n    return 1\n", "my_loss")
    reg.register("loss")(first)
    other = define_twice("def other_loss():\n    return 2\n", "other_loss")[0]
    elsewhere = define_twice("def my_loss():\n    return 3\n", "my_loss")[0]
    elsewhere.__module__ = "another_notebook"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no replacement either
        for candidate in (other, elsewhere):
            with pytest.raises(RegistryError, match="already registered \\(by notebook.my_loss; this one: "):
                reg.register("loss")(candidate)
    assert reg["loss"] is first


def test_miss_names_closest_and_valid():
    reg = Registry("agents")
    for name in ("dqn", "ppo", "sac"):
        reg.register(name)(lambda: None)
    with pytest.raises(ConfigError) as info:
        reg["dqm"]
    message = str(info.value)
    assert "unknown agents 'dqm'" in message and "'dqn'" in message and "ppo" in message
    assert isinstance(info.value, KeyError)  # still a KeyError for callers that expect one


def test_snake_case():
    assert snake_case("ReplayMemory") == "replay_memory"
    assert snake_case("DQN") == "dqn"
    assert snake_case("MLP") == "mlp"


def test_seven_registries_are_filled():
    assert set(ALL) == {"memory", "hparams", "envs", "models", "agents", "act_select", "grad_comp"}
    for kind, registry in ALL.items():
        assert len(registry) > 0, kind
    assert "dqn_cartpole" in ALL["hparams"]
    assert {"td", "double_td"} <= set(ALL["grad_comp"])
    assert {"epsilon_greedy", "greedy"} <= set(ALL["act_select"])


def test_a_registry_with_member_kinds_keeps_each_members_kind_and_declarations():
    """grad_comp's losses are told apart by what their registration declared, kept by the registry: never by
    attributes set on the function. Bug caught: declarations lost, shared between members, writable from outside,
    or not replaced with the definition a notebook cell registers again."""
    reg = Registry("losses", member_kinds=("td", "policy_gradient"), declarations=("targets", "per_sample_error"))

    def hook():
        return 0

    first, second = define_twice("def my_td():\n    return 1\n", "my_td")
    reg.register("my_td", kind="td", targets=hook, per_sample_error=True)(first)
    reg.register("my_pg", kind="policy_gradient")(lambda: 2)
    assert reg.kind_of("my_td") == "td" and reg.kind_of("my_pg") == "policy_gradient"
    assert dict(reg.declared("my_td")) == {"kind": "td", "targets": hook, "per_sample_error": True}
    assert dict(reg.declared("my_pg")) == {"kind": "policy_gradient"}
    assert not hasattr(first, "targets")  # nothing set on the function
    with pytest.raises(TypeError):
        reg.declared("my_td")["targets"] = None  # read-only
    assert reg.names_of_kind("td") == ["my_td"] and reg.names_of_kind("td", "policy_gradient") == ["my_pg", "my_td"]
    with pytest.warns(UserWarning, match="registered again"):
        reg.register("my_td", kind="td")(second)
    assert dict(reg.declared("my_td")) == {"kind": "td"}
    reg.unregister("my_td")
    with pytest.raises(RegistryError, match="unknown losses 'my_td'"):
        reg.kind_of("my_td")
    assert reg.names_of_kind("td") == []


@pytest.mark.parametrize("register, message", [
    (lambda reg: reg.register("x"), "losses 'x' is registered with no kind: declare one, register\\('x', kind=...\\), "
                                    "of td, policy_gradient"),
    (lambda reg: reg.register, "losses 'x' is registered with no kind"),
    (lambda reg: reg.register("x", kind="TD"), "losses 'x' is registered with kind 'TD': declare one"),
    (lambda reg: reg.register("x", kind="td", per_sample_eror=False), "losses 'x': unknown declaration "
                                                                     "per_sample_eror: valid: per_sample_error"),
    (lambda reg: Registry("memory").register("x", kind="td"), "memory 'x': a memory registration takes no kind"),
])
def test_a_registration_without_a_kind_it_may_have_is_refused(register, message):
    """A loss registered with no kind (or a misspelt one, or an unknown declaration) is refused at registration, in
    one line naming the valid ones; a registry without member kinds takes none. Bug caught: a loss whose call nobody
    can check reaching an agent, or a misspelt declaration silently ignored."""
    reg = Registry("losses", member_kinds=("td", "policy_gradient"), declarations=("per_sample_error",))

    def x():
        return 1

    with pytest.raises(RegistryError, match=message):
        register(reg)(x)
    assert "x" not in reg

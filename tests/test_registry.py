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

import json

import pytest

from rl.errors import ConfigError
from rl.hparams import HParams, split_top_level
from rl.registry import hparams as sets


def make() -> HParams:
    hp = HParams()
    hp.define("lr", 3e-4, "learning rate")
    hp.define("batch_size", 64, "batch")
    hp.define("hidden_sizes", [64, 64], "widths")
    hp.define("double_q", False, "double")
    hp.define("env", "CartPole-v1", "env id")
    hp.define("replay_parameters", "", "json text")
    return hp


def test_override_is_typed_by_the_default():
    hp = make().parse("lr=1e-3,hidden_sizes=[32, 16, 8],double_q=true,batch_size=128,env=Pendulum-v1")
    assert hp.lr == 1e-3 and isinstance(hp.lr, float)
    assert hp.hidden_sizes == [32, 16, 8]
    assert hp.double_q is True
    assert hp.batch_size == 128 and isinstance(hp.batch_size, int)
    assert hp.env == "Pendulum-v1"


def test_int_setting_accepts_scientific_integers_and_float_accepts_ints():
    hp = make().parse("batch_size=1e3,lr=1")
    assert hp.batch_size == 1000 and hp.lr == 1.0


def test_quoted_values_keep_commas():
    hp = make().parse('replay_parameters=\'[{"type": "queue", "capacity": 1}]\',lr=0.1')
    assert json.loads(hp.replay_parameters) == [{"type": "queue", "capacity": 1}]
    assert hp.lr == 0.1


@pytest.mark.parametrize("text, match", [
    ("lrr=1", "unknown setting 'lrr'.*'lr'"),
    ("batch_size=abc", "batch_size.*int"),
    ("batch_size=1.5", "batch_size.*int"),
    ("double_q=maybe", "double_q.*bool"),
    ("hidden_sizes=64", "hidden_sizes.*list"),
    ("hidden_sizes=[64,x]", "hidden_sizes.*list of int"),
    ("lr", "malformed override"),
    ("hidden_sizes=[64,64", "malformed override"),
])
def test_bad_overrides_name_the_problem(text, match):
    with pytest.raises(ConfigError, match=match):
        make().parse(text)


def test_closed_reads_and_writes():
    hp = make()
    with pytest.raises(ConfigError, match="unknown setting 'batchsize'.*batch_size"):
        _ = hp.batchsize
    with pytest.raises(ConfigError, match="unknown setting"):
        hp.new_thing = 1
    with pytest.raises(ConfigError, match="must be a int"):
        hp.batch_size = "big"
    with pytest.raises(ConfigError, match="must be a int"):
        hp.batch_size = True


def test_json_round_trip():
    hp = make().parse("lr=0.5,hidden_sizes=[1,2]")
    again = make().update(json.loads(hp.to_json()))
    assert again == hp and again.to_dict() == hp.to_dict()


def test_split_top_level():
    assert split_top_level("a=[1,2],b={x,y},c='p,q'") == ["a=[1,2]", "b={x,y}", "c='p,q'"]


def test_sets_build_fresh_objects_and_derive():
    a, b = sets["dqn_cartpole"](), sets["dqn_cartpole"]()
    a.lr = 1.0
    assert b.lr == 2.3e-3  # a fresh object per lookup
    assert sets["ddqn_cartpole"]().grad_comp == "double_td"
    assert sets["dueling_dqn_cartpole"]().dueling is True
    zoo = sets["dqn_cartpole"]()
    assert (zoo.lr, zoo.batch_size, zoo.buffer_size) == (2.3e-3, 64, 100_000)
    assert (zoo.learning_starts, zoo.gamma) == (1000, 0.99)
    assert (zoo.target_update_interval, zoo.train_freq, zoo.gradient_steps) == (10, 256, 128)
    assert (zoo.exploration_fraction, zoo.exploration_final_eps, zoo.hidden_sizes) == (0.16, 0.04, [256, 256])
    assert zoo.train_steps == 50_000


def test_every_setting_has_help():
    for name in sets:
        hp = sets[name]()
        for key in hp.to_dict():
            assert hp.doc(key).strip(), (name, key)


def test_precedence_set_then_saved_then_override_then_flags(tmp_path):
    import train
    from rl.hparams import resolve_hparams

    saved = sets["dqn_cartpole"]()
    saved.lr, saved.batch_size, saved.train_steps, saved.gamma = 0.5, 7, 1234, 0.9
    (tmp_path / "hparams.json").write_text(json.dumps({"hparams_set": "dqn_cartpole", "hparams": saved.to_dict()}))
    args = train.parser().parse_args(["--hparams", "dqn_cartpole", "--output_dir", str(tmp_path),
                                      "--hparam_override", "batch_size=9,train_steps=99", "--train_steps", "555"])
    hp = resolve_hparams(args, tmp_path)
    assert hp.gamma == 0.9  # saved beats the set
    assert hp.lr == 0.5  # saved, not overridden
    assert hp.batch_size == 9  # override beats saved
    assert hp.train_steps == 555  # flag beats override

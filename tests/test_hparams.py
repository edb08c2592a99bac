import json

import pytest

from rl.errors import ConfigError
from rl.hparams import HParams
from rl.overrides import split_top_level
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


def test_int_setting_takes_whole_number_text_only_and_float_accepts_ints():
    """Float text is refused by an int setting, naming the whole number to write: `eval_episodes=1e30` became an
    evaluation of 10^30 episodes that never ended. Bug caught: an int parser that reads float text (int(float(raw)))."""
    hp = make().parse("batch_size=1_000,lr=1")
    assert hp.batch_size == 1000 and isinstance(hp.batch_size, int) and hp.lr == 1.0
    for text, hint in [("1e3", "1000"), ("2.0", "2"), ("1E+2", "100")]:
        with pytest.raises(ConfigError) as err:
            make().parse(f"batch_size={text}")
        assert str(err.value) == (f"setting 'batch_size' expects an int, could not parse {text!r} (write it as a whole "
                                  f"number: {hint})")
    with pytest.raises(ConfigError) as err:  # no whole number to name
        make().parse("batch_size=1.5")
    assert str(err.value) == "setting 'batch_size' expects an int, could not parse '1.5'"


def test_int_settings_fit_in_64_bits():
    """numpy and torch take ints as 64-bit: a larger one is refused where it is assigned, not in a traceback from
    numpy. Bug caught: the 64-bit check left out (or left out for a list's items)."""
    hp = make()
    hp.batch_size = 2**63 - 1
    hp.batch_size = -(2**63)
    for value in (2**63, -(2**63) - 1):
        with pytest.raises(ConfigError, match="'batch_size' must fit in 64 bits"):
            hp.batch_size = value
    with pytest.raises(ConfigError, match="'hidden_sizes' holds 64-bit int items"):
        hp.parse(f"hidden_sizes=[64,{2**64}]")


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
    with pytest.raises(ConfigError, match="must be an int"):
        hp.batch_size = "big"
    with pytest.raises(ConfigError, match="must be an int"):
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
    from rl.resolve import resolve_hparams

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


def _args(**flags):
    import train

    argv = ["--hparams", "dqn_cartpole", "--output_dir", "unused"]
    for flag, value in flags.items():
        argv += [f"--{flag}", str(value)]
    return train.parser().parse_args(argv)


GOOD_VALUES = {"agent": "dqn", "lr": 0.5}
WRONG_RECORDS = [
    ([1, 2], "an object with hparams_set, hparams and flags, found a list"),
    ({"hparams": GOOD_VALUES}, '"hparams_set": the name of an hparams set, found none'),
    ({"hparams_set": 3, "hparams": GOOD_VALUES}, '"hparams_set": the name of an hparams set, found a number'),
    ({"hparams_set": "dqn_cartpole", "hparams": [1, 2]}, '"hparams": an object of settings, found a list'),
    ({"hparams_set": "dqn_cartpole"}, '"hparams": an object of settings, found none'),
    ({"hparams_set": "dqn_cartpole", "hparams": GOOD_VALUES, "flags": []},
     '"flags": an object of train.py\'s flags, found a list'),
    ({"hparams_set": "dqn_cartpole", "hparams": GOOD_VALUES, "flags": {"hparam_override": ["lr=1"]}},
     "flags' \"hparam_override\": a string, found a list"),
    ({"hparams_set": "dqn_cartpole", "hparams": GOOD_VALUES, "control": "oops"},
     '"control": a list of --control changes, found a string'),
    ({"hparams_set": "dqn_cartpole", "hparams": GOOD_VALUES, "control": [{"settings": {"lr": 0.1}}, 7]},
     '"control"[1]: an object with step and settings, found a number'),
    ({"hparams_set": "dqn_cartpole", "hparams": GOOD_VALUES, "control": [{"settings": [["lr", 0.1]]}]},
     '"control"[0].settings: an object of settings, found a list'),
    ({"hparams_set": "dqn_cartpole", "hparams": GOOD_VALUES, "control": [{"settings": {}, "overridden": "lr"}]},
     '"control"[0].overridden: a list of setting names, found a string'),
]


@pytest.mark.parametrize("record, expected", WRONG_RECORDS)
def test_a_record_of_the_wrong_structure_is_one_config_error_naming_the_file(tmp_path, record, expected):
    """A hand-edited hparams.json of another shape: one ConfigError naming the file and what it expected. Bug
    caught: any part read without its structure checked first (an AttributeError or TypeError traceback)."""
    from rl.resolve import read_record, resolve_hparams

    path = tmp_path / "hparams.json"
    path.write_text(json.dumps(record))
    with pytest.raises(ConfigError) as err:
        resolve_hparams(_args(), tmp_path)
    assert str(err.value) == f"{path} is corrupt: expected {expected}; fix or delete it, or use another --output_dir"
    with pytest.raises(ConfigError, match="is corrupt: expected"):
        read_record(path)


def test_a_record_of_the_right_structure_resumes_with_its_control_changes(tmp_path):
    """The structure check lets through what train.py writes: flags, --control changes and an `overridden` list.
    Bug caught: a check that refuses a well-formed record, or a `flags` without hparam_override."""
    from rl.resolve import read_record, resolve_hparams

    record = {"hparams_set": "dqn_cartpole", "hparams": sets["dqn_cartpole"]().to_dict(), "flags": {"seed": None},
              "control": [{"step": 10, "settings": {"lr": 0.25, "gamma": 0.5}, "overridden": ["gamma"]}]}
    (tmp_path / "hparams.json").write_text(json.dumps(record))
    assert read_record(tmp_path / "hparams.json") == record
    hp = resolve_hparams(_args(), tmp_path)
    assert hp.lr == 0.25 and hp.gamma == 0.99  # the change kept, the overridden one not


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe{}", b""])
def test_a_record_that_is_not_json_text_is_one_config_error(tmp_path, content):
    """Bug caught: a record that is not UTF-8 (UnicodeDecodeError from reading it) or not JSON escaping as a
    traceback."""
    from rl.resolve import read_record

    path = tmp_path / "hparams.json"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=f"{path} is corrupt \\(.*\\); fix or delete it"):
        read_record(path)

"""Settings by section: a run's hparams.json and its printed settings hold only the sections the run reads (its env
family's, its agent family's, the Scheme's when it has workers), grouped; an older flat record still resumes."""

import json

import pytest

import hparams  # noqa: F401  (registers the sets)
from rl.hparams import flat
from rl.registry import hparams as sets
from rl.resolve import read_record


def recorded(name: str, **settings) -> dict[str, dict]:
    hp = sets[name]()
    hp.update(settings)
    return hp.record()


def test_a_ppo_run_on_one_process_records_at_most_50_settings_and_no_other_familys():
    record = recorded("ppo_cartpole")
    assert sum(map(len, record.values())) <= 50
    for absent in ("atari", "scheme", "collection workers", "gradient workers", "ray", "replay", "prioritized replay",
                   "replay buffers", "impala", "v-trace", "recurrent", "observation normalisation", "gaussian policy",
                   "cnn", "kl stop", "value clip"):
        assert absent not in record, absent
    assert record["optimisation"]["lr"] == 1e-3 and record["ppo"]["clip_decay"] is True


def test_every_ppo_set_on_one_process_records_at_most_50_settings():
    counts = {name: sum(map(len, sets[name]().record().values())) for name in sets
              if sets[name]().agent == "ppo" and sets[name]().num_workers == 0}
    assert len(counts) >= 8 and max(counts.values()) <= 50, counts


def test_a_vpg_set_records_no_clip_and_a_dqn_set_no_policy_settings():
    assert "ppo" not in recorded("vpg_cartpole")
    dqn = recorded("dqn_cartpole")
    assert "replay" in dqn and "on-policy" not in dqn and "policy network" not in dqn and "c51" not in dqn


def test_the_run_mode_adds_the_sections_it_reads():
    workers = recorded("ppo_cartpole", num_workers=2)
    assert workers["scheme"]["num_workers"] == 2 and "worker_timeout" in workers["collection workers"]
    assert "ray" not in workers and "gradient workers" not in workers
    ray = recorded("ppo_cartpole", num_workers=2, ray_address="auto")
    assert ray["ray"]["ray_worker_cpus"] == 1.0
    atari = recorded("ppo_atari")
    assert atari["atari"]["frame_stack"] == 4 and "gym vector env" not in atari and "mlp" not in atari


def test_a_value_off_its_default_keeps_its_section_even_where_no_condition_asks_for_it():
    assert "optimizer" not in recorded("ppo_cartpole")
    assert recorded("ppo_cartpole", rmsprop_alpha=0.9)["optimizer"]["rmsprop_alpha"] == 0.9


def test_a_left_out_setting_still_reads_as_its_default():
    hp = sets["ppo_cartpole"]()
    assert "observation normalisation" not in hp.record() and hp.normalize_obs is False and hp.clip_obs == 10.0


def test_describe_prints_the_recorded_sections_in_order():
    text = sets["ppo_cartpole"]().describe()
    headers = [line for line in text.splitlines() if line.startswith("[")]
    assert headers[:3] == ["[parts]", "[env]", "[gym vector env]"] and "[atari]" not in headers
    assert "  clip_range" in text and "ray_worker_cpus" not in text


def test_flat_reads_a_grouped_record_and_an_older_flat_one_alike():
    hp = sets["ppo_cartpole"]()
    assert flat(hp.record()) == {k: v for k, v in hp.to_dict().items() if k in flat(hp.record())}
    assert flat(hp.to_dict()) == hp.to_dict()


@pytest.mark.parametrize("layout", ["grouped", "flat"])
def test_a_run_resumes_from_its_record_grouped_or_in_the_older_flat_layout(tmp_path, capsys, layout):
    import train

    out = tmp_path / "run"
    argv = ["--hparams", "ppo_cartpole", "--output_dir", str(out), "--eval_episodes", "1",
            "--hparam_override", "num_steps=16,lr=5e-4"]
    assert train.main([*argv, "--train_steps", "256"]) == 0
    path = out / "hparams.json"
    record = json.loads(path.read_text())
    assert record["hparams"]["on-policy"]["num_steps"] == 16  # grouped as written
    if layout == "flat":  # as runs before sections wrote it: every setting, one object
        hp = sets["ppo_cartpole"]().update(record["hparams"])
        path.write_text(json.dumps({**record, "hparams": hp.to_dict()}, indent=2))
    assert train.main(["--hparams", "ppo_cartpole", "--output_dir", str(out), "--train_steps", "512"]) == 0
    capsys.readouterr()
    resumed = read_record(path)["hparams"]
    assert resumed["num_steps"] == 16 and resumed["lr"] == 5e-4 and resumed["train_steps"] == 512
    assert "optimisation" in json.loads(path.read_text())["hparams"]  # written back grouped

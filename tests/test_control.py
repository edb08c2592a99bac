"""`train.py --control`: a running job (one process, and the Scheme's learner with 2 workers) changes its learning
rate at the next update, checkpoints and evaluates on request, keeps the change after resume; what cannot change,
a bad value and a job that is not running each give one line."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from rl.checkpoint import write_json
from rl.control import carry_changes, changeable, parse_request
from rl.errors import ConfigError
from rl.job import running_job
from rl.registry import hparams as sets
from rl.resolve import resolve_hparams

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def start_job(out, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, str(ROOT / "train.py"), "--hparams", "ppo_cartpole", "--output_dir", str(out),
           "--train_steps", "1000000", *extra]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while running_job(out) is None or not (out / "progress.csv").exists():  # up and logging
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(0.2)
    return proc


def control(out, text: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "train.py"), "--output_dir", str(out), "--control", text],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, output
    return output


def logged_rates(out) -> list[tuple[int, float]]:
    with open(out / "progress.csv", newline="") as f:
        return [(int(r["env_steps"]), float(r["learning_rate"])) for r in csv.DictReader(f) if r.get("learning_rate")]


def check_new_rate(out, step: int, lr: float, train_steps: int = 1_000_000) -> None:
    """Every update after `step` ran at the new rate (with the set's linear decay): the logged rates say so."""
    after = [(s, rate) for s, rate in logged_rates(out) if s > step + 2048]  # past the next update and its log
    assert after, "no update logged after the change"
    for s, rate in after:
        assert rate == pytest.approx(lr * (1 - s / train_steps), rel=0.02), (s, rate)


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_a_running_job_changes_its_learning_rate_checkpoints_and_keeps_it_after_resume(tmp_path, workers):
    out = tmp_path / "run"
    proc = start_job(out, "--num_workers", str(workers))
    try:
        done = control(out, "lr=2e-4")
        assert done.returncode == 0, done.stderr
        assert "lr 0.001 -> 0.0002" in done.stdout
        step = int(done.stdout.split("at step ")[1].split(":")[0])
        saved = control(out, "checkpoint")
        assert saved.returncode == 0, saved.stderr
        saved_at = int(saved.stdout.split("at step ")[1])
        assert (out / "checkpoints" / f"ckpt_{saved_at:012d}.pt").exists()
        while not any(s > step + 4096 for s, _ in logged_rates(out)):
            assert proc.poll() is None
            time.sleep(0.5)
    finally:
        stop(proc)
    check_new_rate(out, step, 2e-4)
    record = json.loads((out / "hparams.json").read_text())
    assert record["hparams"]["optimisation"]["lr"] == 2e-4 and record["control"][0]["settings"] == {"lr": 2e-4}
    assert "lr 0.001 -> 0.0002" in (out / "control" / "control.log").read_text()
    assert not (out / "control" / "job.json").exists()  # gone with the job: --control now says it is not running
    refused = control(out, "lr=1e-4")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "no job is running" in refused.stderr

    resumed = start_job(out, "--num_workers", str(workers))  # the same command: the change stays
    try:
        last = max(s for s, _ in logged_rates(out))
        while max(s for s, _ in logged_rates(out)) < last + 4096:
            assert resumed.poll() is None
            time.sleep(0.5)
    finally:
        stop(resumed)
    check_new_rate(out, step, 2e-4)


@pytest.mark.slow
def test_evaluate_on_request_and_what_cannot_change_and_a_stop_during_an_evaluation(tmp_path, capsys):
    """Evaluate on request, one line for what cannot change; then SIGTERM while the job plays an evaluation someone
    asked for (10,000 games, the most eval_episodes allows): the job gives it up, checkpoints and exits 143, and the
    one who asked is told the evaluation was stopped, not left waiting. The refused requests go through train.main in
    this process (what a `train.py --control` process runs, less 2 s of start-up each)."""
    import train

    out = tmp_path / "run"
    proc = start_job(out, "--hparam_override", "log_interval=256")  # a row every update
    try:
        evaluated = control(out, "evaluate")
        assert evaluated.returncode == 0 and "control: evaluation at step" in evaluated.stdout, evaluated.stderr
        for text, message in [("gamma=0.5", "gamma cannot change while this run goes on"),
                              ("no_such=1", "unknown setting 'no_such'"),
                              ("lr=abc", "expects a float"),
                              ("flush", "expected checkpoint, evaluate or settings")]:
            code = train.main(["--output_dir", str(out), "--control", text])
            err = capsys.readouterr().err
            assert code == 2 and message in err and err.startswith("error: ") and err.count("\n") == 1, (text, err)
        assert train.main(["--output_dir", str(out), "--control", "eval_episodes=10000"]) == 0
        asked = subprocess.Popen([sys.executable, str(ROOT / "train.py"), "--output_dir", str(out), "--control",
                                  "evaluate"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        progress, deadline = out / "progress.csv", time.monotonic() + 120
        while time.time() - progress.stat().st_mtime < 3:  # no row while it evaluates
            assert time.monotonic() < deadline and asked.poll() is None, "the job never began the evaluation"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
        answer, error = asked.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM and "SIGTERM: saved a checkpoint" in output, output[-3000:]
    assert asked.returncode == 0 and "was stopped by a stop signal" in answer, (answer, error)
    with open(out / "progress.csv", newline="") as f:
        assert any(r["eval_return_mean"] for r in csv.DictReader(f))


def hp_of(name: str, overrides: str = ""):
    hp = sets[name]()
    if overrides:
        hp.parse(overrides)
    return hp


def test_what_can_change_depends_on_where_it_is_computed():
    alone = changeable(hp_of("dqn_cartpole"))
    assert {"lr", "exploration_final_eps", "eval_interval"} <= set(alone)
    assert "exploration_final_eps" not in changeable(hp_of("apex_dqn_cartpole"))  # workers act with their own
    a3c = changeable(hp_of("a3c_cartpole"))  # the gradient workers compute the loss, the learner steps
    assert "lr" in a3c and "ent_coef" not in a3c
    dppo = changeable(hp_of("ppo_cartpole", "num_grad_workers=2,grad_communication=sync"))
    assert "lr" not in dppo and "eval_interval" in dppo  # the ranks would step with different rates
    assert parse_request(hp_of("ppo_cartpole"), "lr=1e-4, ent_coef=0.01") == {
        "command": "set", "settings": {"lr": 1e-4, "ent_coef": 0.01}}
    with pytest.raises(ConfigError, match="'eval_episodes' must be .*, got 0"):
        parse_request(hp_of("ppo_cartpole"), "eval_episodes=0")
    # elite_buffer_vtrace's clip is summed_clip / (T x batch) there, so max_grad_norm would change nothing: refused
    assert "max_grad_norm" in changeable(hp_of("impala_cartpole"))
    assert "max_grad_norm" not in changeable(hp_of("elite_impala_seaquest")) and "lr" in changeable(
        hp_of("elite_impala_seaquest"))


def write_record(args, out):
    """What a start or resume writes as hparams.json (rl/run.py): the settings in effect, every --control change
    kept, those a new --hparam_override replaced marked `overridden`."""
    hp = resolve_hparams(args, out)
    record = {"hparams_set": args.hparams, "hparams": hp.record(), "flags": dict(vars(args))}
    if (out / "hparams.json").exists():
        changes = carry_changes(out, json.loads((out / "hparams.json").read_text()), hp.to_dict())
        if changes:
            record["control"] = changes
    write_json(out / "hparams.json", record, indent=2, sort_keys=True)
    return hp


def test_resume_keeps_control_changes_over_the_original_override_but_not_over_a_new_one(tmp_path):
    args = SimpleNamespace(hparams="ppo_cartpole", hparam_override="lr=5e-4,ent_coef=0.01", env=None, seed=None,
                           train_steps=None, eval_episodes=None, test_episodes=None, num_workers=None,
                           ray_address=None)
    write_record(args, tmp_path)
    record = json.loads((tmp_path / "hparams.json").read_text())
    record["control"] = [{"step": 100, "settings": {"lr": 2e-4, "ent_coef": 0.0}}]  # as rl/control.py writes it
    (tmp_path / "hparams.json").write_text(json.dumps(record))

    same = write_record(args, tmp_path)  # resumed with the command it was started with
    assert (same.lr, same.ent_coef) == (2e-4, 0.0)
    assert json.loads((tmp_path / "hparams.json").read_text())["control"][0]["settings"] == {
        "lr": 2e-4, "ent_coef": 0.0}

    args.hparam_override = "lr=1e-3,ent_coef=0.01"  # lr typed anew: it wins; the record keeps the change, overridden
    new = write_record(args, tmp_path)
    assert (new.lr, new.ent_coef) == (1e-3, 0.0)
    record = json.loads((tmp_path / "hparams.json").read_text())
    assert record["control"] == [{"step": 100, "settings": {"lr": 2e-4, "ent_coef": 0.0}, "overridden": ["lr"]}]
    assert "resumed with lr 0.001: it replaces the change to 0.0002 made at step 100" in (
        tmp_path / "control" / "control.log").read_text()
    again = write_record(args, tmp_path)
    assert (again.lr, again.ent_coef) == (1e-3, 0.0)  # and stays the user's choice on the next resume
    assert json.loads((tmp_path / "hparams.json").read_text())["control"] == record["control"]  # marked once


def build(name: str, overrides: str = ""):
    from rl.envs import make_env
    from rl.trainer import build_agent

    hp = hp_of(name, overrides)
    env = make_env(hp)
    agent = build_agent(hp, env, 0)
    env.close()
    return agent


def test_change_settings_reaches_the_optimizers_and_refuses_the_rest():
    dqn = build("dqn_cartpole")
    dqn.change_settings({"lr": 1e-5, "exploration_final_eps": 0.2})
    assert dqn.optimizer.lr == 1e-5 and dqn.explore.epsilon(10**9) == pytest.approx(0.2)
    sac = build("sac_pendulum", "lr_actor=0.0")
    sac.change_settings({"lr": 2e-5})
    assert {name: opt.lr for name, opt in sac.optimizers().items()} == {name: 2e-5 for name in sac.optimizers()}
    with pytest.raises(ConfigError, match="gamma cannot change"):
        build("ppo_cartpole").change_settings({"gamma": 0.5})


def test_a_control_message_gives_the_rates_in_effect_before_and_after_under_decay(tmp_path):
    """ppo_cartpole decays lr and clip_range linearly to 0: the message's values in effect are the optimizer's rate
    and the loss's clip at the step of the change, under the old base and the new one, and the next update steps on
    from the new base."""
    import re

    from rl.control import Controller
    from rl.trainer import make_trainer, prepare

    hp = hp_of("ppo_cartpole", "train_steps=4096")
    env, agent, stats = prepare(hp, tmp_path)
    trainer = make_trainer(hp, env, agent, stats, seed=0)
    try:
        while agent.updates < 4:
            trainer.step()
        step, rate, clip = agent.env_steps, agent.optimizer.lr, agent.in_effect(["clip_range"])["clip_range"]
        assert rate == pytest.approx(1e-3 * (1 - step / 4096), rel=1e-6) and rate < 0.9e-3  # decayed by this step
        controller = Controller(tmp_path, hp, agent, log=lambda *a: None, evaluate=None, checkpoint=None)
        (tmp_path / "control" / "1-1.request.json").write_text(json.dumps(
            {"command": "set", "settings": {"lr": 1e-4, "clip_range": 0.1}}))
        controller.poll()
        controller.close()
        message = json.loads((tmp_path / "control" / "1-1.answer.json").read_text())["message"]
        found = re.search(r"lr 0.001 -> 0.0001 \(in effect (\S+) -> (\S+)\), clip_range 0.2 -> 0.1 "
                          r"\(in effect (\S+) -> (\S+)\)", message)
        assert found, message
        was, now, clip_was, clip_now = (float(x) for x in found.groups())
        assert was == pytest.approx(rate, rel=1e-5) and clip_was == pytest.approx(clip, rel=1e-5)
        assert now == pytest.approx(agent.optimizer.lr, rel=1e-5) == pytest.approx(1e-4 * (1 - step / 4096))
        assert clip_now == pytest.approx(0.1 * (1 - step / 4096), rel=1e-5)
        while agent.updates < 5:
            trainer.step()
        assert agent.optimizer.lr == pytest.approx(1e-4 * (1 - agent.env_steps / 4096), rel=1e-6)
    finally:
        trainer.close()
        env.close()


# ------------------------------------------------------------------------------ who runs, and what the folder holds
def run_folder(out, **job):
    """A run folder of ppo_cartpole as train.py writes it; with `job`, a control/job.json holding it."""
    out.mkdir(parents=True, exist_ok=True)
    record = {"hparams_set": "ppo_cartpole", "hparams": sets["ppo_cartpole"]().to_dict(), "flags": {}}
    (out / "hparams.json").write_text(json.dumps(record))
    if job:
        (out / "control").mkdir(exist_ok=True)
        (out / "control" / "job.json").write_text(json.dumps({"heartbeat": time.time(), **job}))
    return out


def control_in_process(out, text: str, capsys) -> tuple[int, str, str, float]:
    """train.py --control in this process: its exit status, stdout, stderr and how long it took."""
    import train

    started = time.monotonic()
    code = train.main(["--output_dir", str(out), "--control", text])
    printed = capsys.readouterr()
    return code, printed.out, printed.err, time.monotonic() - started


def one_line(err: str) -> bool:
    return err.startswith("error: ") and err.count("\n") == 1


def reused_pid() -> dict:
    """job.json of a job whose pid is now another process: this test's pid, with another start time."""
    from rl.folder import identity

    me = identity()
    return {**me, "start_ticks": (me["start_ticks"] or 0) + 12345}


@pytest.mark.parametrize("job", [reused_pid(), {"host": __import__("socket").gethostname(), "started": 1.0}],
                         ids=["pid-reused-by-another-process", "no-pid"])
def test_a_job_json_left_by_a_killed_job_is_removed_and_nothing_is_queued(tmp_path, capsys, job):
    """A kill leaves job.json behind; its pid may now be another process (the same pid, another start time), or a
    hand-made one names no pid (os.kill(-1, 0) succeeds). --control says at once, in one line, that no job runs,
    removes the stale job.json and writes no request that a resume would apply days later."""
    out = run_folder(tmp_path / "run", **job)
    code, _, err, took = control_in_process(out, "lr=1e-4", capsys)
    assert code == 2 and one_line(err) and "no job is running" in err, err
    assert "removed a stale control/job.json" in err and took < 10, (err, took)
    assert "resume it with train.py --hparams ppo_cartpole" in err
    assert not (out / "control" / "job.json").exists()
    assert not list((out / "control").glob("*.request.json"))


def test_the_folder_lock_is_the_strongest_evidence_of_a_running_job(tmp_path, capsys):
    """job.json naming this live process: with the folder's lock left free (a killed owner leaves the file) no job
    runs; with the lock held by that process, it runs; with the lock held by a process job.json does not name (a
    job that has not opened its channel yet), nothing is removed and --control says who holds the folder."""
    from rl.folder import LOCK, FolderLock, identity

    out = run_folder(tmp_path / "run", **identity())
    assert running_job(out) is not None  # no lock file: the process is judged by its pid and start time
    (out / LOCK).write_text(json.dumps(identity()))  # left free
    assert running_job(out) is None
    with FolderLock(out):
        assert running_job(out)["pid"] == identity()["pid"]
        (out / "control" / "job.json").write_text(json.dumps({**reused_pid(), "heartbeat": time.time()}))
        assert running_job(out) is None
        code, _, err, _ = control_in_process(out, "lr=1e-4", capsys)
        assert code == 2 and one_line(err) and "is in use by pid" in err and "takes no requests" in err, err
        assert (out / "control" / "job.json").exists() and not list((out / "control").glob("*.request.json"))


@pytest.mark.parametrize("name, text, message", [
    ("hparams.json", "{not json", "hparams.json is not valid JSON"),
    ("hparams.json", "[1, 2]", "hparams.json holds a list"),
    ("hparams.json", '{"hparams_set": "ppo_cartpole", "hparams": {}, "control": "oops"}', "'control' must be a list"),
    ("control/job.json", "{not json", "job.json is not valid JSON"),
    ("control/job.json", "[1, 2]", "job.json holds a list"),
])
def test_a_damaged_record_is_one_line_naming_the_file(tmp_path, capsys, name, text, message):
    out = run_folder(tmp_path / "run")
    (out / "control").mkdir()
    (out / name).write_text(text)
    code, _, err, _ = control_in_process(out, "lr=1e-4", capsys)
    assert code == 2 and one_line(err) and message in err, err


@pytest.mark.parametrize("control", ["oops", [1, 2], [{"step": 1, "settings": [1]}]])
def test_a_control_list_of_another_shape_is_one_error_naming_hparams_json(tmp_path, control):
    """The job's side (Controller) and a resume (carry_changes) read the same list: a hand-edited one of another
    shape stops them with one line naming the file, not an AttributeError further on."""
    from rl.control import Controller

    out = run_folder(tmp_path / "run")
    record = json.loads((out / "hparams.json").read_text())
    (out / "hparams.json").write_text(json.dumps({**record, "control": control}))
    with pytest.raises(ConfigError, match=r"hparams.json: 'control' must be a list"):
        Controller(out, hp_of("ppo_cartpole"), agent=None, log=None, evaluate=None, checkpoint=None)
    with pytest.raises(ConfigError, match=r"hparams.json: 'control' must be a list"):
        carry_changes(out, {**record, "control": control}, record["hparams"])


def test_an_int_setting_refuses_float_text(tmp_path, capsys):
    """eval_episodes=1e30 is not an episode count (rl/hparams.py parse_value): refused in one line, with the job
    (a channel open in this process) left as it was."""
    from rl.job import Channel

    out = run_folder(tmp_path / "run")
    channel = Channel(out)
    try:
        code, _, err, _ = control_in_process(out, "eval_episodes=1e30", capsys)
    finally:
        channel.close()
    assert code == 2 and one_line(err) and "eval_episodes" in err, err
    assert not list((out / "control").glob("*.request.json"))


def test_a_starting_job_discards_requests_left_for_a_job_that_ended(tmp_path):
    """A request queued for a job that was then killed is not applied by a resume days later: the new job's channel
    answers it with a refusal (for a sender still waiting), notes it in control.log and does not find it at its
    first poll."""
    from rl.job import Channel

    out = run_folder(tmp_path / "run")
    (out / "control").mkdir()
    (out / "control" / "1-1.request.json").write_text(json.dumps({"command": "set", "settings": {"lr": 1e-4}}))
    channel = Channel(out)
    try:
        assert channel.poll(every_s=0) == []
        assert not (out / "control" / "1-1.request.json").exists()
        assert "ended before taking it" in json.loads((out / "control" / "1-1.answer.json").read_text())["error"]
        assert "discarded a request left for a job that ended" in (out / "control" / "control.log").read_text()
    finally:
        channel.close()


def test_a_job_answers_and_leaves_no_answer_nobody_collects(tmp_path, capsys):
    """A job (a channel answering from a thread) answers --control, whose answer file then goes; an answer nobody
    collected (its sender timed out long ago) is removed when the job closes, a recent one is left for its sender;
    and job.json goes with the job."""
    import os
    import threading

    from rl.job import Channel

    out = run_folder(tmp_path / "run")
    channel, done = Channel(out), threading.Event()

    def job():
        while not done.is_set():
            for path, request in channel.poll(every_s=0.05):
                channel.answer(path, {"message": f"control: took {request['command']}"})
            time.sleep(0.05)

    thread = threading.Thread(target=job)
    thread.start()
    try:
        code, printed, err, _ = control_in_process(out, "checkpoint", capsys)
        assert code == 0 and "control: took checkpoint" in printed, err
        assert not list((out / "control").glob("*.answer.json"))
    finally:
        done.set()
        thread.join()
    old, recent = out / "control" / "1-1.answer.json", out / "control" / "2-2.answer.json"
    old.write_text('{"message": "x"}')
    recent.write_text('{"message": "y"}')
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    channel.close()
    assert not old.exists() and recent.exists() and not (out / "control" / "job.json").exists()


def test_a_job_that_ends_without_answering_withdraws_the_request(tmp_path, capsys):
    """The job ends (its channel closes) while --control waits: one line, and the request is gone (a resume would
    otherwise find it)."""
    import threading

    from rl.job import Channel

    out = run_folder(tmp_path / "run")
    channel = Channel(out)
    closer = threading.Timer(1.0, channel.close)
    closer.start()
    try:
        code, _, err, took = control_in_process(out, "lr=1e-4", capsys)
    finally:
        closer.join()
    assert code == 2 and one_line(err) and "ended before it took the request" in err and took < 10, err
    assert not list((out / "control").glob("*.request.json"))


def test_a_second_job_does_not_take_the_channel_of_a_live_one(tmp_path):
    """job.json naming another live process of this host (a job whose folder lock did not keep this one out): a new
    channel refuses in one line rather than overwrite it; once that process has ended, it takes over."""
    from rl.folder import identity
    from rl.job import Channel

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        out = run_folder(tmp_path / "run", **identity(other.pid))
        with pytest.raises(ConfigError, match=rf"has a job running already \(pid {other.pid} on"):
            Channel(out)
    finally:
        other.kill()
        other.wait()
    channel = Channel(out)
    assert json.loads((out / "control" / "job.json").read_text())["pid"] == channel.job["pid"]
    channel.close()
    assert "took over from pid" in (out / "control" / "control.log").read_text()

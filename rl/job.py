"""Who runs in a run folder, and the channel `--control` talks to it through: `control/job.json` (who the job is,
`rl.folder.identity`, and a heartbeat), the request files `send` drops beside it and the answers the job leaves.

Whether a job runs is judged by the strongest evidence at hand: the folder's lock (rl/folder.py) held by the process
job.json names; on this host, that process alive (its pid and its start time: a pid reused by another process does
not count), and a free lock left behind means the job that wrote job.json is gone; on another host, a fresh heartbeat.
A job discards on start the requests it finds (they were meant for a job that is gone), so a request never waits in a
folder for a resume days later.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from rl.checkpoint import write_json
from rl.errors import ConfigError, first_line
from rl.folder import LOCK, holder, identity, is_alive

CONTROL_DIR = "control"
JOB_FILE = "job.json"
HEARTBEAT_S = 10.0  # the job refreshes job.json this often (between updates; not during an evaluation)
STALE_S = 600.0  # a job on another host is trusted to run while its heartbeat is younger than this
LIVE_S = 3 * HEARTBEAT_S  # a heartbeat this fresh from another host: a starting job does not take that job's place
ANSWER_KEEP_S = 120.0  # twice --control's wait for an answer: older, nobody waits for it, and the job removes it


def pid_alive(pid: int) -> bool:
    """Whether process `pid` of this host exists (one we may not signal exists too). Only a positive pid names one
    process (0 and negatives name groups, which `os.kill` accepts)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_object(path: Path, fix: str) -> dict | None:
    """The JSON object in `path`, None where there is no file; anything else (not JSON, not an object) is one
    ConfigError line naming the file and saying how to `fix` it."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or first_line(exc)}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON ({first_line(exc)}): {fix}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} holds a {type(data).__name__}, not the object train.py writes: {fix}")
    return data


def read_job(output_dir: Path) -> dict | None:
    """control/job.json, None where there is none (no job has its channel open)."""
    return read_object(Path(output_dir) / CONTROL_DIR / JOB_FILE,
                       "a job rewrites it while it runs; where none runs, delete it")


def describe_job(job: dict) -> str:
    started = job.get("started")
    since = time.strftime(" since %Y-%m-%d %H:%M:%S", time.localtime(started)) \
        if isinstance(started, (int, float)) and not isinstance(started, bool) else ""
    return f"pid {job.get('pid', '?')} on {job.get('host', '?')}{since}"


def _same_process(a: dict, b: dict) -> bool:
    """Whether two identities (rl.folder.identity) name one process: pid and host, and start time where both
    recorded it."""
    if a.get("pid") is None or a.get("pid") != b.get("pid") or a.get("host") != b.get("host"):
        return False
    ticks = a.get("start_ticks"), b.get("start_ticks")
    return None in ticks or ticks[0] == ticks[1]


def _heartbeat_age(job: dict) -> float | None:
    beat = job.get("heartbeat")
    if not isinstance(beat, (int, float)) or isinstance(beat, bool):
        return None
    return time.time() - beat


def judged_here(job: dict) -> bool:
    """A record of this host, or one without a pid or host (no job writes such a one: this host judges it)."""
    return job.get("host") == socket.gethostname() or "pid" not in job or "host" not in job


def job_state(output_dir: Path) -> tuple[dict | None, bool, str | None]:
    """(control/job.json or None, whether the job it names runs, and if not which job it names and why it is gone).
    A ConfigError when job.json is damaged."""
    output_dir = Path(output_dir)
    job = read_job(output_dir)
    if job is None:
        return None, False, None
    owner = holder(output_dir)
    if owner and _same_process(owner, job):  # the folder's owner is the process job.json names
        return job, True, None
    if judged_here(job):
        if owner is None and (output_dir / LOCK).exists():  # a lock left free: its owner ended (a kill leaves it)
            return job, False, f"{describe_job(job)} (no longer running: the run folder's lock is free)"
        if is_alive(job):
            return job, True, None
        if not isinstance(job.get("pid"), int):
            return job, False, "no process (it names no pid)"
        if pid_alive(job["pid"]):
            return job, False, f"pid {job['pid']} (now another process)"
        return job, False, f"pid {job['pid']} (no longer running)"
    age = _heartbeat_age(job)
    if age is not None and age < STALE_S:
        return job, True, None
    return job, False, f"{describe_job(job)} (last heartbeat {'never' if age is None else f'{age / 60:.0f} min ago'})"


def running_job(output_dir: Path) -> dict | None:
    """The job.json of the job running in `output_dir`, or None (see `job_state`)."""
    job, running, _ = job_state(output_dir)
    return job if running else None


class Channel:
    """The job's side: job.json while it runs, the requests it finds in control/, the answers it leaves (removed
    once nobody can be waiting for them)."""

    def __init__(self, output_dir: Path):
        self.output_dir = Path(output_dir)
        self.dir = self.output_dir / CONTROL_DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        self.job = identity()
        self._take_over()
        self._discard_earlier_requests()
        self._remove_old_answers()
        self._beat = 0.0
        self._polled = 0.0
        self.heartbeat()

    def _take_over(self) -> None:
        """Refuse to open a second channel beside a job that runs (its requests would go to either); a job.json of
        a job that is gone is replaced, with a note."""
        try:
            job = read_job(self.output_dir)
        except ConfigError as exc:
            self.note(f"replaced a damaged {JOB_FILE}: {exc}")
            return
        if job is None or _same_process(job, self.job):
            return
        age = _heartbeat_age(job)
        live = is_alive(job) if judged_here(job) else age is not None and age < LIVE_S
        if live:
            raise ConfigError(f"{self.output_dir} has a job running already ({describe_job(job)}, its "
                              f"{CONTROL_DIR}/{JOB_FILE} refreshed {age or 0:.0f} s ago): one job trains in a run "
                              f"folder at a time; wait for it to end (or stop it), or use another --output_dir")
        self.note(f"took over from {describe_job(job)}, which no longer runs")

    def _discard_earlier_requests(self) -> None:
        """Requests already here were sent to a job that has ended (this one has not published job.json yet):
        applying them now, perhaps days later, would surprise. Each is answered with a refusal, for a sender still
        waiting."""
        for path in sorted(self.dir.glob("*.request.json")):
            try:
                request = json.loads(path.read_text())
            except (OSError, ValueError):
                request = "(unreadable)"
            self.note(f"discarded a request left for a job that ended before taking it: {request}")
            self.answer(path, {"error": f"the job it was sent to ended before taking it; the job now running "
                                        f"({describe_job(self.job)}) discarded it: send it again"})

    def _remove_old_answers(self, older_than_s: float = ANSWER_KEEP_S) -> None:
        """Answers nobody collected (the sender timed out, or ended): older than `older_than_s`, nobody waits."""
        now = time.time()
        for path in self.dir.glob("*.answer.json"):
            try:
                if now - path.stat().st_mtime > older_than_s:
                    path.unlink(missing_ok=True)
            except OSError:
                pass

    def heartbeat(self) -> None:
        self._beat = time.monotonic()
        write_json(self.dir / JOB_FILE, {**self.job, "heartbeat": time.time()}, indent=2)

    def poll(self, every_s: float = 0.5) -> list[tuple[Path, dict]]:
        """Requests waiting, oldest first (at most one look every `every_s` seconds: the loop calls this each
        step)."""
        now = time.monotonic()
        if now - self._polled < every_s:
            return []
        self._polled = now
        if now - self._beat > HEARTBEAT_S:
            self.heartbeat()
            self._remove_old_answers()
        found = []
        for path in sorted(self.dir.glob("*.request.json")):
            try:
                request = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                request = {"command": "invalid", "error": f"unreadable request ({first_line(exc)})"}
            if not isinstance(request, dict):
                request = {"command": "invalid", "error": f"a request is an object, not a {type(request).__name__}"}
            found.append((path, request))
        return found

    def answer(self, request_path: Path, answer: dict) -> None:
        name = request_path.name.removesuffix(".request.json")
        write_json(self.dir / f"{name}.answer.json", answer, indent=2)
        request_path.unlink(missing_ok=True)

    def note(self, line: str) -> None:
        with open(self.dir / "control.log", "a") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")

    def close(self) -> None:
        """job.json goes (where it is still this job's), and the answers nobody can be waiting for."""
        try:
            job = read_job(self.output_dir)
        except ConfigError:
            job = None
        if job is not None and _same_process(job, self.job):
            (self.dir / JOB_FILE).unlink(missing_ok=True)
        self._remove_old_answers()

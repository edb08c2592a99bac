"""A run folder's owner: one process at a time trains or evaluates in it.

The owner holds an exclusive `fcntl.flock` on `run.lock` in the folder for as long as it trains or evaluates. The
kernel drops the lock when the process ends, however it ends (SIGKILL included), so a lock is never stale: a second
process that finds it held is refused in one line naming the holder (its pid, host and start time, which the holder
writes into the file), and one that finds it free owns the folder. The lock file is removed by its owner on release
(after checking, on taking it, that the file it locked is still the one at the path), so a finished or refused run
leaves nothing behind.

`flock` works between processes of one host, and on a volume that several hosts mount when its filesystem supports it
(NFSv4, most CSI drivers); `holder` reads the file's contents either way.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from pathlib import Path

from rl.errors import ConfigError, FolderBusy

LOCK = "run.lock"


def process_start(pid: int) -> int | None:
    """The start time of process `pid` in clock ticks since boot (/proc/PID/stat's 22nd field), or None where it
    cannot be read: with the pid, it names one process even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def identity(pid: int | None = None) -> dict:
    """What names a process: pid, host, and its start (ticks since boot, and wall-clock seconds)."""
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "host": socket.gethostname(), "start_ticks": process_start(pid), "started": time.time()}


def is_alive(job: dict) -> bool:
    """Whether the process a record names (`identity`) still runs on this host: its pid exists and started at the
    recorded time (a pid reused by another process does not count). False for a record without a pid."""
    pid = job.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or job.get("host") != socket.gethostname():
        return False
    start = process_start(pid)
    if start is None:
        return False
    recorded = job.get("start_ticks")
    return recorded is None or start == recorded


def _describe(holder: dict | None) -> str:
    if not holder:
        return "another process"
    started = holder.get("started")
    when = time.strftime(" since %Y-%m-%d %H:%M:%S", time.localtime(started)) if isinstance(started, (int, float)) \
        else ""
    return f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}{when}"


def read_holder(path: Path) -> dict | None:
    try:
        holder = json.loads((path / LOCK).read_text())
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


def holder(path: Path) -> dict | None:
    """The identity of the process that owns run folder `path` now, or None when nobody does (probed with a
    non-blocking flock, which is released at once)."""
    lock = Path(path) / LOCK
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return read_holder(Path(path)) or {}
    except OSError:
        return None
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def check_writable_folder(path: Path, what: str) -> None:
    """A ConfigError when `path` cannot be a run folder: a file, or a folder (or its nearest existing parent) this
    process cannot write. Checked before anything is written."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--output_dir {path} is a file, not a folder: give a folder for {what}")
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"{probe} is not writable by this process ({what} writes its records there): make it "
                          f"writable, or copy the run folder elsewhere")


def _flock_briefly(fd: int, tries: int = 5, pause_s: float = 0.01) -> None:
    """An exclusive non-blocking flock, tried a few times over ~50 ms: `holder` (--control, rl.report) takes the
    lock for an instant to probe it, which must not refuse a run starting at that moment."""
    for attempt in range(tries):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if attempt == tries - 1:
                raise
            time.sleep(pause_s)


class FolderLock:
    """The exclusive lock on a run folder; `acquire` raises FolderBusy when another process holds it."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.fd: int | None = None
        self.created_folder = False

    def acquire(self) -> FolderLock:
        if not self.path.exists():
            try:
                self.path.mkdir(parents=True)
            except FileExistsError:
                pass
            except OSError as exc:
                raise ConfigError(f"cannot create the run folder {self.path}: {exc.strerror}") from None
            else:
                self.created_folder = True
        lock = self.path / LOCK
        while True:
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                self._undo_folder()
                raise ConfigError(f"cannot take the run folder {self.path}: {exc.strerror or exc} (it must be a "
                                  f"writable folder)") from None
            try:
                _flock_briefly(fd)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise ConfigError(f"cannot lock the run folder {self.path}: {exc.strerror}") from None
                raise FolderBusy(f"{self.path} is in use by {_describe(read_holder(self.path))}: one process trains "
                                 f"or evaluates in a run folder at a time; wait for it to end (or stop it), or use "
                                 f"another --output_dir") from None
            try:  # the file locked must still be the one at the path (its last owner may have removed it just now)
                same = os.fstat(fd).st_ino == os.stat(lock).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self.fd = fd
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(identity()).encode())
        return self

    def _undo_folder(self) -> None:
        if self.created_folder:
            try:
                self.path.rmdir()
            except OSError:
                pass

    def release(self, remove_new_folder: bool = False) -> None:
        """Give the folder up; `remove_new_folder`: a refused start leaves no folder it created."""
        if self.fd is None:
            return
        try:
            (self.path / LOCK).unlink(missing_ok=True)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None
        if remove_new_folder:
            self._undo_folder()

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


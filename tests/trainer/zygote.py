"""A trainer launcher for the tests: one process does the trainer's heavy imports (torch,
transformers, peft: about four seconds of CPU, nearly all of a short run's) once, then forks
a trainer per request. Each child is `python -m trainer` in all that a test can see: its own
pid, argv, environment, working directory, stdout and stderr (the test's pipes, passed over a
Unix socket), signals and exit status; only the imports were done before it was forked.

Serve: `python -m tests.trainer.zygote SOCKET`, with the environment the trainer's imports
read (HF_HUB_OFFLINE and the like; the same for every run). Ask: `Zygote(SOCKET).spawn(...)`,
which answers a `ForkedTrainer`, used as a `subprocess.Popen`.

The zygote stays single-threaded (a fork copies only the calling thread) and runs no tensor
operation, so no thread pool exists to be copied half-made.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import traceback
from pathlib import Path

REQUEST_MAX_BYTES = 1 << 20


def _preload() -> None:
    import peft  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401
    from transformers import (  # noqa: F401
        AutoModelForCausalLM,
        AutoTokenizer,
        PrinterCallback,
        Trainer,
        TrainingArguments,
    )

    import trainer.batching
    import trainer.callbacks
    import trainer.cli
    import trainer.train  # noqa: F401


def _run_trainer(request: dict, fds: list[int]) -> int:
    """In the child: become `python -m trainer` with the request's argv, env and cwd."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["-m", *request["args"]]
    try:
        runpy.run_module("trainer", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, int | None):
            print(stop.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader gone: nothing left to tell
            stream.flush()
    return code


def _exit_status(status: int) -> int:
    """As subprocess reports it: the exit code, or minus the signal that ended it."""
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def serve(path: str) -> None:
    _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(f"{path}.{os.getpid()}")
    listener.listen(64)
    os.replace(f"{path}.{os.getpid()}", path)  # the path appears once it accepts
    waiting: dict[int, tuple[int, socket.socket]] = {}  # pidfd: (pid, its asker)
    while True:
        ready, _, _ = select.select([listener, *waiting], [], [])
        for item in ready:
            if item is listener:
                conn, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(conn, REQUEST_MAX_BYTES, 3)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    conn.close()
                    for _, asker in waiting.values():
                        asker.close()
                    os._exit(_run_trainer(json.loads(message), fds))
                for fd in fds:
                    os.close(fd)
                conn.sendall(f"{pid}\n".encode())
                waiting[os.pidfd_open(pid)] = (pid, conn)
            else:
                pid, asker = waiting.pop(item)
                os.close(item)
                _, status = os.waitpid(pid, 0)
                with contextlib.suppress(OSError):  # the test stopped listening
                    asker.sendall(f"{_exit_status(status)}\n".encode())
                asker.close()


class ForkedTrainer:
    """A forked trainer, used as `subprocess.Popen` is (text mode, stdout and stderr piped)."""

    def __init__(self, conn: socket.socket, stdout_fd: int, stderr_fd: int) -> None:
        self._conn = conn
        self._reply = conn.makefile("r")
        self.pid = int(self._reply.readline())
        self.stdout = os.fdopen(stdout_fd, "r")
        self.stderr = os.fdopen(stderr_fd, "r")
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._conn.settimeout(timeout)
            try:
                line = self._reply.readline()
            except TimeoutError:
                raise subprocess.TimeoutExpired(f"trainer {self.pid}", timeout) from None
            self.returncode = int(line)
            self._conn.close()
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The serving process and how to ask it for a trainer."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.path = str(workdir / "zygote.sock")
        self.log = workdir / "zygote.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.trainer.zygote", self.path],
                cwd=Path(__file__).resolve().parents[2],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def spawn(self, args: list[str], env: dict[str, str], cwd: Path) -> ForkedTrainer:
        """`python -m trainer` with `args` (after `-m`), `env` and `cwd`."""
        from tests.live import wait_until

        wait_until(
            lambda: os.path.exists(self.path) or self.process.poll() is not None,
            timeout=120,
            what="the trainer zygote",
        )
        if self.process.poll() is not None:
            raise RuntimeError(f"the trainer zygote exited:\n{self.log.read_text()}")
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self.path)
        request = {"args": args, "env": env, "cwd": str(cwd)}
        with open(os.devnull, "rb") as stdin:
            socket.send_fds(conn, [json.dumps(request).encode()], [stdin.fileno(), out_w, err_w])
        os.close(out_w)
        os.close(err_w)
        return ForkedTrainer(conn, out_r, err_r)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


if __name__ == "__main__":
    serve(sys.argv[1])

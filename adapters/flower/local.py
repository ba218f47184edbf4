"""A real Flower deployment on this machine: one SuperLink and n SuperNodes over loopback.

:class:`LocalDeployment` starts ``flower-superlink`` and ``flower-supernode`` as separate
processes (``--insecure`` on 127.0.0.1, free ports), submits a run with ``flwr run`` (the app
directory written by :func:`~riemfl.adapters.flower.deploy.write_app_project`), waits for the
ServerApp's result file, and always stops every process it started (its own process groups),
also when something fails. It is what the integration test and ``examples/flower_kpca.py``
use; on real machines, run the same three commands by hand (``docs/flower.md``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...errors import ParameterError
from ._flwr import INSTALL_HINT
from .errors import FlowerAdapterError, FlowerNotInstalledError

__all__ = ["LocalDeployment", "free_port"]

CONNECTION = "riemfl-local"


def free_port() -> int:
    """A TCP port of 127.0.0.1 that is free now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _executable(name: str) -> str:
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if found is None:
        raise FlowerNotInstalledError(f"{name} (from Flower) is not on PATH; {INSTALL_HINT}")
    return found


def _tail(path: Path, lines: int = 15) -> str:
    if not path.exists():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


class LocalDeployment:
    """SuperLink + ``supernodes`` SuperNodes as processes on 127.0.0.1; a context manager.

    Parameters
    ----------
    supernodes : int
        SuperNode p gets ``--node-config "partition-id=p num-partitions=<supernodes>"``.
    workdir : path
        Logs (``superlink.log``, ``supernode-<p>.log``), ``FLWR_HOME`` and the app directory.
    startup_timeout : float
        Seconds to wait for the SuperLink to accept connections.

    Examples
    --------
    >>> with LocalDeployment(2, tmp) as deployment:  # doctest: +SKIP
    ...     result = deployment.run({"algorithm": "rfedproj", "rounds": 3})
    """

    def __init__(
        self, supernodes: int, workdir: str | os.PathLike, startup_timeout: float = 60.0
    ) -> None:
        if isinstance(supernodes, bool) or int(supernodes) != supernodes or supernodes < 1:
            raise ParameterError(f"supernodes must be an integer >= 1, got {supernodes!r}")
        self.supernodes = int(supernodes)
        self.workdir = Path(workdir)
        self.startup_timeout = float(startup_timeout)
        self.port = 0
        self._procs: list[tuple[str, subprocess.Popen, Path]] = []
        self.env = {
            **os.environ,
            "FLWR_HOME": str(self.workdir / "flwr-home"),
            "PYTHONUNBUFFERED": "1",
        }

    # ------------------------------------------------------------------ processes
    def _start(self, name: str, argv: list[str]) -> None:
        log = self.workdir / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.workdir,
                start_new_session=True,
            )
        self._procs.append((name, proc, log))

    def _wait_for_port(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            self._check_alive()
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.2)
        raise FlowerAdapterError(
            f"the SuperLink did not accept connections on 127.0.0.1:{self.port} within "
            f"{self.startup_timeout:g} s:\n{self.logs()}"
        )

    def _check_alive(self) -> None:
        dead = [(n, p.returncode) for n, p, _ in self._procs if p.poll() is not None]
        if dead:
            raise FlowerAdapterError(f"processes exited early {dead}:\n{self.logs()}")

    @property
    def processes(self) -> list[tuple[str, subprocess.Popen]]:
        """``(name, process)`` of every process started, in start order."""
        return [(name, proc) for name, proc, _ in self._procs]

    def logs(self) -> str:
        """The last lines of every process's log."""
        return "\n".join(f"--- {name} ---\n{_tail(log)}" for name, _, log in self._procs)

    def start(self) -> LocalDeployment:
        """Start the SuperLink, wait for it, start the SuperNodes, write the CLI connection."""
        (self.workdir / "flwr-home").mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self._start(
            "superlink",
            [
                _executable("flower-superlink"),
                "--insecure",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--disable-runtime-dependency-installation",
            ],
        )
        self._wait_for_port()
        for p in range(self.supernodes):
            self._start(
                f"supernode-{p}",
                [
                    _executable("flower-supernode"),
                    "--insecure",
                    "--superlink",
                    f"127.0.0.1:{self.port}",
                    "--port",
                    str(free_port()),
                    "--node-config",
                    f"partition-id={p} num-partitions={self.supernodes}",
                ],
            )
        (self.workdir / "flwr-home" / "config.toml").write_text(
            f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
            f'address = "127.0.0.1:{self.port}"\ninsecure = true\n'
        )
        return self

    def stop(self) -> None:
        """Stop every process started (SIGTERM to its process group, SIGKILL after 10 s)."""
        for _, proc, _ in reversed(self._procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for _, proc, _ in reversed(self._procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)

    def __enter__(self) -> LocalDeployment:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------ runs
    def _flwr(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [_executable("flwr"), *args],
            env=self.env,
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def _status(self, run_id: str) -> str:
        out = self._flwr("ls", CONNECTION, "--format", "json")
        try:
            runs = json.loads(out.stdout)["runs"]
        except (ValueError, KeyError):
            return ""
        return next((r["status"] for r in runs if str(r["run-id"]) == run_id), "")

    def run(self, run_config: Mapping[str, Any], timeout: float = 600.0) -> dict[str, Any]:
        """Submit one run (keys of :data:`~riemfl.adapters.flower.deploy.DEFAULTS`); wait for
        and return its result (:func:`~riemfl.adapters.flower.deploy.load_result`)."""
        from .deploy import load_result, write_app_project

        self._check_alive()
        n_runs = len(list(self.workdir.glob("run-*")))
        app = self.workdir / f"run-{n_runs}"
        output = app / "result.json"
        write_app_project(app, {"min-nodes": self.supernodes, **run_config, "output": str(output)})
        started = self._flwr("run", str(app), CONNECTION, "--format", "json")
        try:
            run_id = str(json.loads(started.stdout)["run-id"])
        except (ValueError, KeyError, TypeError) as exc:
            raise FlowerAdapterError(
                f"flwr run failed ({started.returncode}): {started.stdout}\n{started.stderr}"
            ) from exc
        deadline = time.monotonic() + timeout
        next_status = time.monotonic() + 5.0
        while not output.exists():
            self._check_alive()
            if time.monotonic() > deadline:
                raise FlowerAdapterError(
                    f"run {run_id} wrote no result within {timeout:g} s "
                    f"(status {self._status(run_id)!r}):\n{self.logs()}"
                )
            if time.monotonic() > next_status:  # a failed run writes nothing: stop early
                status = self._status(run_id)
                if status.startswith("finished") and not output.exists():
                    raise FlowerAdapterError(f"run {run_id} ended with {status!r}:\n{self.logs()}")
                next_status = time.monotonic() + 5.0
            time.sleep(0.2)
        return load_result(output)

"""A real Flower deployment on this machine: one SuperLink and n SuperNodes over loopback.

:class:`LocalDeployment` starts ``flower-superlink`` and ``flower-supernode`` as separate
processes (127.0.0.1, free ports), submits a run with ``flwr run`` (the app directory written
by :func:`~riemfl.adapters.flower.deploy.write_app_project`), waits for the ServerApp's result
file, and always stops every process it started (its own process groups), also when something
fails. By default the SuperLink serves TLS with a throwaway CA and server certificate
(:mod:`~riemfl.adapters.flower.certificates`) and accepts only the SuperNodes whose public keys
were registered with it (``--enable-supernode-auth``, one P-384 key per node); ``tls=False``
runs everything ``--insecure``. It is what the integration test and ``examples/flower_kpca.py``
use; on real machines, run the same commands by hand (``docs/flower.md``, "Security").
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
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from riemfl.adapters.flower._flwr import INSTALL_HINT
from riemfl.adapters.flower.certificates import (
    TlsFiles,
    check_tls_files,
    write_node_keys,
    write_tls_files,
)
from riemfl.adapters.flower.errors import (
    ConnectionRefusedByPeerError,
    FlowerAdapterError,
    FlowerNotInstalledError,
    NodeAuthenticationError,
    NodeRegistrationError,
)

from riemfl._validation import integer
from riemfl.errors import ParameterError

__all__ = ["LocalDeployment", "free_port"]

CONNECTION = "riemfl-local"
#: what Flower 1.41's SuperNode logs once the SuperLink accepted it (after activation)
REGISTERED = "SuperNode ID:"
#: log lines of a SuperNode the SuperLink refused: its key is not registered (Flower API error
#: 2004, "Failed to activate SuperNode"), or it could not verify the server's certificate
AUTH_REFUSED = ("Failed to activate SuperNode", "[code: 2004]")
TLS_REFUSED = ("SSL/TLS handshake error", "CERTIFICATE_VERIFY_FAILED", "SSL:")


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
        Logs (``superlink.log``, ``supernode-<p>.log``), ``FLWR_HOME``, the app directory, and
        with TLS the certificates (``tls/``) and the SuperNodes' keys (``keys/``).
    startup_timeout : float
        Seconds to wait for the SuperLink to accept connections, and then for the SuperNodes
        to register.
    tls : bool or TlsFiles
        True (default): write a throwaway CA and a server certificate for 127.0.0.1 into
        ``workdir/tls`` (:func:`~riemfl.adapters.flower.certificates.write_tls_files`); a
        :class:`~riemfl.adapters.flower.certificates.TlsFiles`: use these files; False: no
        TLS (``--insecure`` everywhere; the benchmark's baseline). The files are checked before
        any process starts (:func:`~riemfl.adapters.flower.certificates.check_tls_files`).
    authenticate : bool, optional
        SuperNode authentication: the SuperLink runs with ``--enable-supernode-auth``, every
        SuperNode gets a fresh P-384 key pair whose public key is registered with
        ``flwr supernode register`` before the node starts. Default: on with TLS (Flower
        refuses node authentication without TLS, so ``tls=False, authenticate=True`` is a
        :class:`~riemfl.errors.ParameterError`).
    wait : bool
        Whether :meth:`start` waits until every SuperNode registered (default); a refused node
        then raises at start (:meth:`add_supernode`).

    Raises
    ------
    CertificateError
        At start: a TLS file is missing, expired or does not fit the others.
    NodeAuthenticationError, ConnectionRefusedByPeerError, NodeRegistrationError
        At start: a SuperNode was refused or did not register (see :meth:`add_supernode`).

    Examples
    --------
    >>> with LocalDeployment(2, tmp) as deployment:  # doctest: +SKIP
    ...     result = deployment.run({"algorithm": "rfedproj", "steps": 3})
    """

    def __init__(
        self,
        supernodes: int,
        workdir: str | os.PathLike,
        startup_timeout: float = 120.0,
        *,
        tls: bool | TlsFiles = True,
        authenticate: bool | None = None,
        wait: bool = True,
    ) -> None:
        integer(supernodes, "LocalDeployment: supernodes", minimum=1)
        if not isinstance(tls, (bool, TlsFiles)):
            raise ParameterError(f"tls must be True, False or a TlsFiles, got {tls!r}")
        authenticate = tls is not False if authenticate is None else bool(authenticate)
        if authenticate and tls is False:
            raise ParameterError(
                "authenticate=True needs TLS: Flower refuses SuperNode authentication over an "
                "insecure connection; pass tls=True (or TlsFiles) or authenticate=False"
            )
        self.supernodes = int(supernodes)
        self.workdir = Path(workdir)
        self.startup_timeout = float(startup_timeout)
        self.tls = tls
        self.authenticate = authenticate
        self.wait = bool(wait)
        self.tls_files: TlsFiles | None = tls if isinstance(tls, TlsFiles) else None
        self.port = 0
        self._procs: list[tuple[str, subprocess.Popen, Path]] = []
        #: SuperNodes the SuperLink refused (they exited at start; the deployment goes on)
        self.refused: list[str] = []
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

    def _check_alive(self, ignore: Collection[str] = ()) -> None:
        skip = {*ignore, *self.refused}
        dead = [
            (n, p.returncode) for n, p, _ in self._procs if n not in skip and p.poll() is not None
        ]
        if dead:
            raise FlowerAdapterError(f"processes exited early {dead}:\n{self.logs()}")

    @property
    def processes(self) -> list[tuple[str, subprocess.Popen]]:
        """``(name, process)`` of every process started, in start order."""
        return [(name, proc) for name, proc, _ in self._procs]

    def logs(self) -> str:
        """The last lines of every process's log."""
        return "\n".join(f"--- {name} ---\n{_tail(log)}" for name, _, log in self._procs)

    def _tls_args(self) -> list[str]:
        if self.tls_files is None:
            return ["--insecure"]
        f = self.tls_files
        return [
            "--ssl-ca-certfile",
            str(f.ca_cert),
            "--ssl-certfile",
            str(f.server_cert),
            "--ssl-keyfile",
            str(f.server_key),
        ]

    def start(self) -> LocalDeployment:
        """Write (or check) the TLS files, start the SuperLink, write the CLI connection, then
        start the SuperNodes (registering their keys first) and wait until they registered."""
        (self.workdir / "flwr-home").mkdir(parents=True, exist_ok=True)
        if self.tls is True and self.tls_files is None:
            self.tls_files = write_tls_files(self.workdir / "tls")
        if self.tls_files is not None:
            check_tls_files(self.tls_files)
        self.port = free_port()
        self._start(
            "superlink",
            [
                _executable("flower-superlink"),
                *self._tls_args(),
                *(["--enable-supernode-auth"] if self.authenticate else []),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--disable-runtime-dependency-installation",
            ],
        )
        self._wait_for_port()
        security = (
            f'root-certificates = "{self.tls_files.ca_cert.resolve()}"'
            if self.tls_files is not None
            else "insecure = true"
        )
        (self.workdir / "flwr-home" / "config.toml").write_text(
            f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
            f'address = "127.0.0.1:{self.port}"\n{security}\n'
        )
        names = [self._launch_supernode(p) for p in range(self.supernodes)]
        if self.wait:
            self._wait_registered(names)
        return self

    def _register(self, public_key: Path) -> str:
        out = self._flwr("supernode", "register", str(public_key), CONNECTION, "--format", "json")
        try:
            node_id = str(json.loads(out.stdout)["node-id"])
        except (ValueError, KeyError, TypeError) as exc:
            raise self._cli_error(f"registering the key {str(public_key)!r}", out) from exc
        return node_id

    def _launch_supernode(
        self, partition: int, *, register: bool = True, trust_ca: bool = True
    ) -> str:
        name = f"supernode-{len([n for n, _ in self.processes if n.startswith('supernode')])}"
        security: list[str] = ["--insecure"] if self.tls_files is None else []
        if self.tls_files is not None and trust_ca:
            security = ["--root-certificates", str(self.tls_files.ca_cert)]
        if self.authenticate:
            keys = write_node_keys(self.workdir / "keys", name)
            if register:
                self._register(keys.public_key)
            security += ["--auth-supernode-private-key", str(keys.private_key)]
        self._start(
            name,
            [
                _executable("flower-supernode"),
                *security,
                "--superlink",
                f"127.0.0.1:{self.port}",
                "--port",
                str(free_port()),
                "--node-config",
                f"partition-id={partition} num-partitions={self.supernodes}",
            ],
        )
        return name

    def _wait_registered(self, names: list[str]) -> None:
        procs = {name: (proc, log) for name, proc, log in self._procs if name in names}
        waiting = set(names)
        deadline = time.monotonic() + self.startup_timeout
        while waiting:
            for name in sorted(waiting):
                proc, log = procs[name]
                text = log.read_text(errors="replace") if log.exists() else ""
                if REGISTERED in text:
                    waiting.discard(name)
                elif proc.poll() is not None:
                    self.refused.append(name)
                    raise self._refusal(name, proc.returncode, text)
            self._check_alive(names)
            if waiting and time.monotonic() > deadline:
                raise NodeRegistrationError(
                    f"{sorted(waiting)} did not register with the SuperLink on "
                    f"127.0.0.1:{self.port} within {self.startup_timeout:g} s:\n{self.logs()}"
                )
            time.sleep(0.2)

    def _refusal(self, name: str, code: int, text: str) -> FlowerAdapterError:
        tail = "\n".join(text.splitlines()[-15:])
        if any(line in text for line in AUTH_REFUSED):
            return NodeAuthenticationError(
                f"the SuperLink refused {name}: its public key is not registered (SuperNode "
                f"authentication is on); the node exited with {code}:\n{tail}"
            )
        if any(line in text for line in TLS_REFUSED):
            return ConnectionRefusedByPeerError(
                f"{name} could not connect to the SuperLink over TLS (it does not trust the "
                f"server's certificate: wrong or missing CA, expired certificate or another "
                f"host name); the node exited with {code}:\n{tail}"
            )
        return NodeRegistrationError(f"{name} exited with {code} before registering:\n{tail}")

    def add_supernode(
        self, partition: int = 0, *, register: bool = True, trust_ca: bool = True
    ) -> str:
        """Start one more SuperNode and wait until the SuperLink accepted it; return its name.

        ``register=False`` starts it with a fresh key that is not registered with the
        SuperLink, ``trust_ca=False`` without the CA (it then verifies the server against the
        system's certificates): both are refused, which is how the tests check that the
        SuperLink accepts only listed, TLS-verified nodes.

        Raises
        ------
        NodeAuthenticationError
            The SuperLink refused the node's key (the node exits; Flower API error 2004).
        ConnectionRefusedByPeerError
            The node could not verify the SuperLink's certificate (the node exits).
        NodeRegistrationError
            The node exited otherwise, or did not register within ``startup_timeout``.
        """
        self._check_alive()
        name = self._launch_supernode(partition, register=register, trust_ca=trust_ca)
        self._wait_registered([name])
        return name

    def online_nodes(self) -> list[str]:
        """The node IDs the SuperLink lists as online (``flwr supernode ls``)."""
        out = self._flwr("supernode", "ls", CONNECTION, "--format", "json")
        try:
            nodes = json.loads(out.stdout)["nodes"]
        except (ValueError, KeyError, TypeError) as exc:
            raise self._cli_error("listing the SuperNodes", out) from exc
        return [str(n["node-id"]) for n in nodes if n.get("status") == "online"]

    def _cli_error(self, what: str, out: subprocess.CompletedProcess) -> FlowerAdapterError:
        text = f"{out.stdout}\n{out.stderr}"
        try:
            message = str(json.loads(out.stdout).get("error-message", text))
        except (ValueError, AttributeError):
            message = text
        if "unavailable" in message.lower() or any(line in text for line in TLS_REFUSED):
            return ConnectionRefusedByPeerError(
                f"flwr could not reach the SuperLink on 127.0.0.1:{self.port} while {what} "
                f"(with TLS: the CLI does not trust the server's certificate): {message.strip()}"
            )
        return FlowerAdapterError(f"flwr failed ({out.returncode}) while {what}: {text}")

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
        try:
            return subprocess.run(
                [_executable("flwr"), *args],
                env=self.env,
                cwd=self.workdir,
                capture_output=True,
                text=True,
                timeout=120,
            )
        except subprocess.TimeoutExpired as exc:
            raise FlowerAdapterError(
                f"flwr {' '.join(args)} did not return within 120 s:\n{self.logs()}"
            ) from exc

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
        return self.result(*self.submit(run_config), timeout=timeout)

    def submit(self, run_config: Mapping[str, Any]) -> tuple[str, Path]:
        """Submit one run without waiting for it: its run id and the file its result will be
        written to (for :meth:`result`)."""
        from riemfl.adapters.flower.deploy import write_app_project

        self._check_alive()
        n_runs = len(list(self.workdir.glob("run-*")))
        app = self.workdir / f"run-{n_runs}"
        output = app / "result.json"
        write_app_project(app, {"min-nodes": self.supernodes, **run_config, "output": str(output)})
        started = self._flwr("run", str(app), CONNECTION, "--format", "json")
        try:
            return str(json.loads(started.stdout)["run-id"]), output
        except (ValueError, KeyError, TypeError) as exc:
            raise self._cli_error("submitting the run (flwr run)", started) from exc

    def result(self, run_id: str, output: Path, timeout: float = 600.0) -> dict[str, Any]:
        """The result of a submitted run, once it has written it (:meth:`submit`)."""
        from riemfl.adapters.flower.deploy import load_result

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

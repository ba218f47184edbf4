"""Missing optional dependencies: every command that needs an extra says which, in one line.

Each test runs the commands in a fresh interpreter in which the modules of some extras cannot be
imported (a meta-path finder refuses them, as on a machine where they were never installed).
The commands come from the tables (``PAPERS``, ``PROBLEMS``, ``ALGORITHMS``, ``ASYNC_RULES``
and the run-wide extras of ``riemfl.cli.run``), so a new entry is checked with the extras it
declares; and every ``riemfl run`` problem and method runs with the modules of every extra it
does not declare refused, so an entry that forgets an extra fails.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import numpy as np
import pytest

from riemfl.cli.reproduce import PAPERS
from riemfl.cli.run import DP_EXTRAS, RUN_EXTRAS
from riemfl.experiments.registry import (
    ALGORITHMS,
    ASYNC_RULES,
    CURVE_RULE_NAMES,
    PROBLEMS,
)
from riemfl.extras import EXTRAS

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]

#: runs ``riemfl ARGV`` for each ARGV of argv[2] (JSON) with the modules of argv[1] refused;
#: prints [exit status, stderr] per command as JSON
_WITHOUT = """
import contextlib, importlib.abc, io, json, sys

REFUSED = set(json.loads(sys.argv[1]))

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in REFUSED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
from riemfl.cli import main

results = []
for argv in json.loads(sys.argv[2]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
        except BaseException as exc:  # a traceback the command should not have shown
            code, _ = -1, err.write(f"{type(exc).__name__}: {exc}")
    results.append([code, err.getvalue()])
print(json.dumps(results))
"""


def _run_without(modules, commands):
    """[exit status, stderr] of each command, run with ``modules`` unimportable."""
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT, json.dumps(sorted(modules)), json.dumps(commands)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    """An MNIST-like npz file (random 8 x 8 images, 10 labels) for the problems that read one."""
    path = tmp_path_factory.mktemp("data") / "images.npz"
    rng = np.random.default_rng(0)
    np.savez(path, x=rng.integers(0, 256, (120, 8, 8), dtype=np.uint8), y=np.arange(120) % 10)
    return path


def _run_argv(problem, method, out, data_file, *more):
    """A one-round ``riemfl run`` of ``method`` (an algorithm, or an asynchronous rule)."""
    argv = ["run", problem, "--algorithm", method, "--local-steps", "1"]
    if method in ASYNC_RULES:
        argv += ["--engine", "async", "--workers", "2", "--steps", "2", "--buffer-size", "2"]
    else:
        argv += ["--steps", "1"]
    if PROBLEMS[problem].needs_data:
        argv += ["--data", str(data_file)]
    return [*argv, *more, "--out", str(out), "--overwrite", "--no-progress"]


def _commands(tmp_path, data_file):
    """Every command of the tables, with the extras it declares: (argv, extras)."""
    out = tmp_path / "out"
    commands = []
    for paper, entry in PAPERS.items():
        argv = ["reproduce", paper, "--quick", "--out", str(out), "--no-progress"]
        commands.append((argv, entry.extras))
    for name, entry in PROBLEMS.items():
        argv = _run_argv(name, "rfedavg", out, data_file)
        commands.append((argv, (*RUN_EXTRAS, *entry.extras)))
    for name, entry in {**ALGORITHMS, **ASYNC_RULES}.items():
        problem = "logreg-digits" if name in CURVE_RULE_NAMES else "kpca-synthetic"
        argv = _run_argv(problem, name, out, data_file)
        commands.append((argv, (*RUN_EXTRAS, *PROBLEMS[problem].extras, *entry.extras)))
    dp = ("--dp-clip", "1", "--dp-noise", "1")
    commands.append((_run_argv("kpca-synthetic", "rfedproj", out, data_file, *dp), DP_EXTRAS))
    return commands


def test_every_extra_of_the_tables_is_an_extra_of_pyproject_that_installs_its_packages():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = config["project"]["optional-dependencies"]
    declared = {e for p in PAPERS.values() for e in p.extras}
    for entry in (*PROBLEMS.values(), *ALGORITHMS.values(), *ASYNC_RULES.values()):
        declared.update(entry.extras)
    assert declared | set(RUN_EXTRAS) | set(DP_EXTRAS) <= set(EXTRAS)
    for extra, packages in EXTRAS.items():
        assert extra in extras, extra
        listed = {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower() for r in extras[extra]}
        assert set(packages.values()) <= listed, (extra, packages, listed)
    installed = packages_distributions()  # and each module is the one its package installs
    for module, package in ((m, p) for ps in EXTRAS.values() for m, p in ps.items()):
        if module in installed:
            assert package in {d.lower() for d in installed[module]}, (module, package)


@pytest.mark.slow
@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_each_command_that_needs_a_missing_extra_names_it_in_one_line(tmp_path, data_file, extra):
    """All the commands that declare ``extra``, run with its modules missing: exit status 2
    and one stderr line with its ``pip install`` command, nothing written."""
    needing = [argv for argv, extras in _commands(tmp_path, data_file) if extra in extras]
    if not needing:
        pytest.skip(f"no command of the tables needs the {extra!r} extra")
    for argv, (code, err) in zip(needing, _run_without(EXTRAS[extra], needing), strict=True):
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1, (argv, code, err)
        assert lines[0].startswith("riemfl: error: riemfl ") and "Traceback" not in err, err
        assert f'pip install "riemfl[{extra}]"' in lines[0], (argv, lines[0])
        assert any(p in lines[0] for p in EXTRAS[extra].values()), lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_every_run_declares_the_extras_it_needs(tmp_path, data_file):
    """Every problem and every method runs with the modules of the extras it does not declare
    refused (so a new entry that needs, e.g., torch and does not say so fails here)."""
    commands = [
        (argv, extras)
        for argv, extras in _commands(tmp_path, data_file)
        if argv[0] == "run" and "--dp-clip" not in argv
    ]
    by_refused: dict[tuple[str, ...], list[list[str]]] = {}
    for argv, extras in commands:
        refused = tuple(sorted(m for e in EXTRAS if e not in extras for m in EXTRAS[e]))
        by_refused.setdefault(refused, []).append(argv)
    for refused, group in by_refused.items():
        for argv, (code, err) in zip(group, _run_without(refused, group), strict=True):
            assert code == 0, (argv, refused, err[-2000:])


def test_the_torch_reproductions_name_the_torch_extra_from_the_library_too(monkeypatch):
    """``floral.reproduce`` and ``licudi2025.reproduce`` called without the command line: their
    torch thread settings name the extra rather than fail in an import."""
    import importlib.util

    from riemfl.errors import MissingDependencyError
    from riemfl.experiments._threads import single_torch_thread

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    with pytest.raises(MissingDependencyError, match=r'pip install "riemfl\[torch\]"'):
        with single_torch_thread():
            pass

"""Federated kPCA on the Stiefel manifold: from riemfl's in-process engine to Flower.

Three steps, each printed:

1. RFedProj in-process (:func:`riemfl.federated.run_sync`);
2. the same job through Flower's simulation engine (one virtual SuperNode per two clients):
   the same iterates, and the per-round wall time of each path;
3. FedAsync through Flower's asynchronous loop: the optimality gap and the staleness of the
   updates.

With ``--deploy``, step 2 is also run on a real deployment over loopback: a SuperLink and two
SuperNodes as separate processes (``flower-superlink`` / ``flower-supernode``, with TLS and
SuperNode authentication, certificates and keys made at start), the job submitted with ``flwr
run`` (see ``docs/flower.md``, "Security").

Usage::

    python examples/flower_kpca.py [--quick] [--deploy]

Needs Flower: ``pip install "riemfl[flower]"``.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np
from riemfl.adapters.flower import AsyncJob, ProblemSpec, SyncJob, simulate

from riemfl.federated import FedAsync, RFedProj, RunOptions, run_sync


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--quick", action="store_true", help="few rounds (seconds, plus Ray's start)")
    cli.add_argument("--deploy", action="store_true", help="also run on a local deployment")
    opts = cli.parse_args(argv)
    rounds, steps = (5, 40) if opts.quick else (40, 300)

    # the problem by name (a ProblemSpec travels cheaply and is built once per process)
    spec = ProblemSpec("kpca-synthetic", clients=6, k=2, seed=1)
    problem = spec.build()
    algorithm = RFedProj(step_size=4e-3, local_steps=5)

    n = problem.n_clients
    print(f"1. in-process: RFedProj on {problem.name}, {n} clients, {rounds} rounds")
    local = run_sync(problem, algorithm, rounds, options=RunOptions(seed=0))
    print(f"   optimality gap {local.optimality_gap[0]:.3g} -> {local.optimality_gap[-1]:.3g}")

    print("2. Flower simulation (3 SuperNodes) of the same job, and 3. FedAsync on Flower")
    sync_job = SyncJob(spec, algorithm, rounds, name="rfedproj", options=RunOptions(seed=0))
    async_job = AsyncJob(spec, FedAsync(), steps, 1 / problem.smoothness, 5, name="fedasync")
    t0 = time.perf_counter()
    results = simulate([sync_job, async_job], num_supernodes=3)
    print(f"   simulation took {time.perf_counter() - t0:.1f} s (Ray's start included)")
    flower = results["rfedproj"]
    diff = np.max(np.abs(flower.final_point - local.final_point))
    print(f"   same iterates as in-process: max |difference| {diff:.1e}")
    flower_ms = 1e3 * np.median(np.diff(flower.wall_time))
    local_ms = 1e3 * np.median(np.diff(local.wall_time))
    print(f"   per round: Flower {flower_ms:.1f} ms, in-process {local_ms:.2f} ms")
    fedasync = results["fedasync"]
    gap = fedasync.metrics["optimality_gap"]
    stale = fedasync.staleness_stats()
    print(f"3. FedAsync: {len(fedasync.log['client'])} updates, gap {gap[0]:.3g} -> {gap[-1]:.3g}, "
          f"staleness mean {stale['mean']:.2f}, max {stale['max']:.0f}")  # fmt: skip

    if opts.deploy:
        from riemfl.adapters.flower.local import LocalDeployment

        config = {"problem": "kpca-synthetic", "problem-clients": 6, "problem-k": 2,
                  "problem-seed": 1, "algorithm": "rfedproj", "step-size": 4e-3,
                  "local-steps": 5, "steps": min(rounds, 3), "seed": 0}  # fmt: skip
        print("4. a real deployment: SuperLink + 2 SuperNodes on 127.0.0.1, flwr run")
        with tempfile.TemporaryDirectory() as workdir, LocalDeployment(2, workdir) as deployment:
            result = deployment.run(config)
        short = run_sync(problem, algorithm, config["steps"], options=RunOptions(seed=0))
        diff = np.max(np.abs(result["final_point"] - short.final_point))
        print(f"   {config['steps']} rounds; same iterates as in-process: max |difference| "
              f"{diff:.1e}")  # fmt: skip


if __name__ == "__main__":
    main()

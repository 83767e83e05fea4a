"""benchmarks/open_swarm.py --ray (benchmarks/open_swarm_ray.py): the open swarm's nodes in Ray
actors, packed as many to an actor as asked and churning inside their actors, play the
one-process run exactly (the same rewards, and the same nodes offline, leaving and joining);
its report carries the actors' memory, in its own subsection of the section."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sapo_env.churn import absence

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
CHURN = dict(offline=0.2, leave=0.2, join=0.2)  # enough churn that 32 nodes see all three kinds


@pytest.fixture
def benchmarks_path(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the scripts import each other by file name


def recorder(rounds: list):
    """An ``on_round`` that keeps each round's rewards and each node's absence (None: played)."""
    return lambda record: rounds.append((record.round, record.rewards, {
        a: absence(a, action) for a, action in record.actions.items()}))


@pytest.mark.slow  # Ray: a local cluster and its actors
def test_the_ray_form_packs_the_nodes_as_asked_and_plays_the_one_process_run(
        local_ray, benchmarks_path):
    pytest.importorskip("ray")
    import open_swarm
    import open_swarm_ray

    here, there = [], []
    open_swarm.measure(32, 4, **CHURN, every=100, on_round=recorder(here))
    result = open_swarm_ray.measure_ray(32, 4, **CHURN, every=2, nodes_per_actor=16,
                                        on_round=recorder(there))
    assert result["actors"] == 2 and result["nodes_per_actor"] == 16
    assert len(set(result["pids"])) == 2 and os.getpid() not in result["pids"]
    assert there == here  # rewards to the bit, and who sat out, left and played when
    statuses = [status for *_, absent in here for status in absent.values()]
    assert "offline" in statuses and "left" in statuses and None in statuses
    first, last = set(here[0][2]), set(here[-1][2])
    assert last - first  # late joiners acted, through their actors
    assert [m[0] for m in result["memory"]] == [0, 2, 4]
    assert all(driver > 0 and rss > 0 and pss > 0 for _, driver, rss, pss in result["memory"])
    report = open_swarm_ray.report_ray(result, "python benchmarks/open_swarm.py --ray")
    assert report.startswith(open_swarm_ray.SUBSECTION + "\n")
    assert "| nodes / actors x nodes per actor / Ray CPUs | 32 / 2 x 16 / 2 |" in report
    assert "| actors' PSS (MB) |" in report and "of which the env's step" in report


def test_ray_results_are_written_to_their_own_subsection(benchmarks_path, monkeypatch):
    import open_swarm
    import open_swarm_ray

    asked, published = [], []
    fake = {"n": 8, "rounds": 1, "offline": 0.0, "leaves": 0, "joins": 0, "startup": 1.0,
            "actors": 2, "nodes_per_actor": 4, "cpus": 2, "pids": [1, 2], "load": (1.0, 1.0),
            "rows": [(0.2, 0.5, 0.1, 0.3, 8, 8)],
            "memory": [(0, 100.0, 300.0, 200.0), (1, 101.0, 301.0, 201.0)]}
    monkeypatch.setattr(open_swarm_ray, "measure_ray", lambda *args: asked.append(args) or fake)
    monkeypatch.setattr(open_swarm, "publish",
                        lambda *args, **kwargs: published.append((args, kwargs)))
    open_swarm.main(["--ray", "--nodes", "8", "--rounds", "1", "--nodes-per-actor", "4",
                     "--write"])
    assert asked == [(8, 1, 0.05, 0.1, 0.1, 50, 4, None)]
    [((section, write), kwargs)] = published
    assert write and kwargs == {"within": open_swarm.SECTION}
    assert section.startswith(open_swarm_ray.SUBSECTION + "\n\n`python benchmarks/open_swarm.py "
                              "--ray --nodes 8")
    assert "| memory at the end: driver RSS / actors' RSS / actors' PSS | 101 / 301 / 201 MB |" \
        in section

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

import sapo_env

# Small swarms keep the suite fast; every mechanism is the same as at the paper's size.
SMALL = dict(n=3, completions_per_question=3, train_budget=3, num_external=1,
             max_rounds=20)
ARITHMETIC = [("basic_arithmetic", 1.0, {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                         "max_digits": 1})]


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models run many times faster on one thread when the cores are shared with other
    work (OpenMP threads spin waiting for each other; docs/testing.md, "Measured here");
    restored afterwards for the rest of the session."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def local_ray():
    """A 2-CPU local Ray for one module (tests/ and the repository importable in its workers),
    shut down and its temp folder removed after. A Ray already initialised is used as it is
    and left to whoever started it."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        yield
        return
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths are limited
    here = Path(__file__).resolve().parent
    path = os.pathsep.join([str(here), str(here.parent), os.environ.get("PYTHONPATH", "")])
    # "local": a Ray of its own, never one left running on this machine
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             _temp_dir=temp, runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)
    assert not os.path.exists(temp)
    deadline = time.monotonic() + 20  # Ray's processes name its temp folder in their arguments
    while (left := _processes_naming(temp)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"Ray processes still running after shutdown: {left}"


def _processes_naming(text: str) -> list[int]:
    """The pids of the processes whose command line contains ``text`` (Linux's /proc)."""
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if text.encode() in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours to read
            pass
    return pids


@pytest.fixture(scope="module")
def tok():
    """The tiny models' character-level tokenizer (tests/tiny_lm.py)."""
    from tiny_lm import char_tokenizer

    return char_tokenizer()


@pytest.fixture
def small_env():
    return sapo_env.parallel_env(**SMALL)


def fixed_actions(observations, text="<answer>1</answer>", num_external=1):
    """The same completion everywhere: every group has zero advantage."""
    return {
        a: {"completions": tuple((text,) * o["completions_per_question"]
                                 for _ in o["questions"]),
            "num_external": num_external}
        for a, o in observations.items()
    }


def mixed_actions(observations, num_external=1):
    """Right answer in the first completion of every question, wrong in the others: every
    group has a non-zero advantage."""
    from sapo_env.tasks import reference_answer, resolve

    actions = {}
    for a, o in observations.items():
        completions = []
        for q in o["questions"]:
            right = f"<answer>{reference_answer(resolve(q['ref']))}</answer>"
            completions.append((right,) + ("<answer>wrong</answer>",)
                               * (o["completions_per_question"] - 1))
        actions[a] = {"completions": tuple(completions), "num_external": num_external}
    return actions

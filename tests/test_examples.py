"""The examples, the CLI and the docstring examples run."""

import doctest
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_script():
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py"),
                          "--rounds", "2"], capture_output=True, text=True, check=True).stdout
    assert "node_3" in out and "cumulative reward" in out


def test_cli_demo_and_help():
    from sapo_experiments.cli import build_parser

    assert "demo" in build_parser().format_help()
    out = subprocess.run([sys.executable, "-m", "sapo_experiments.cli", "demo", "--rounds", "1",
                          "--render"], capture_output=True, text=True, check=True).stdout
    assert "round 0: pool" in out and "swarm" in out


def test_cli_bad_input_is_one_line_and_verbose_shows_the_traceback():
    from sapo_experiments import cli

    done = subprocess.run([sys.executable, "-m", "sapo_experiments.cli", "demo", "--rounds", "0"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == "sapo-env demo: error: max_rounds must be an int >= 1, got 0"
    with pytest.raises(ValueError, match="max_rounds"):
        cli.main(["-v", "demo", "--rounds", "0"])


def test_cli_info_explains_both_protocols():
    out = subprocess.run([sys.executable, "-m", "sapo_experiments.cli", "info"],
                         capture_output=True, text=True, check=True).stdout
    assert "questions_per_round        None" in out and "I = train_budget - J" in out
    assert "an int B (fixed)" in out and "train_budget // 2 = 4" in out


@pytest.mark.parametrize("module", ["sapo_env.swarm", "sapo_env.runtime.runner",
                                    "sapo_env.scoring.answers", "sapo_env.rollouts",
                                    "sapo_env.runtime.metrics", "sapo_env", "sapo_env.runtime",
                                    "sapo_env.extras", "agents.lm.loss"])
def test_docstring_examples(module):
    if module.startswith("agents.lm.loss"):
        pytest.importorskip("torch")
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0


def test_readme_usage_block_runs():
    text = (ROOT / "README.md").read_text()
    block = text.split("## Usage", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    assert namespace["history"].rounds == 20
    assert 0.3 < namespace["history"].swarm_mean.mean() < 0.7  # demonstrators at accuracy 0.5


REAL_ENTRY = """
import argparse, dataclasses, sys
from sapo_experiments.bench_ratio import bench, cli
config = cli.config_from_args(cli.add_arguments(argparse.ArgumentParser()).parse_args())
config = dataclasses.replace(config, held_out_questions=4, learner=dataclasses.replace(
    config.learner, warm_start_steps=2, target_accuracy=0.99))
print(bench(config).table_markdown)
"""
"""``sapo-env bench-ratio`` on its arguments, each base trained 2 steps."""


@pytest.mark.slow
def test_readme_policy_example_is_tested_and_benchmarked_from_its_own_folder(tmp_path):
    """The README's "Benchmark your own I:J policy": its policy, its test (run with pytest)
    and its two commands, run as a user would, from the folder holding the files: the real
    track's (1 seed x 3 rounds of 2 nodes, 2-step bases) and the simulated track's (1 seed x
    12 rounds, one scenario)."""
    text = (ROOT / "README.md").read_text().split("### Benchmark your own I:J policy", 1)[1]
    text = text.split("\n## ", 1)[0]
    policy, test = [block.split("```", 1)[0] for block in text.split("```python")[1:3]]
    real, sim = [block.split("```", 1)[0].split() for block in text.split("```bash")[1:3]]
    (tmp_path / "my_policy.py").write_text(policy)
    (tmp_path / "test_my_policy.py").write_text(test)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SAPO_ENV_CACHE": str(tmp_path / "cache")}
    tested = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "test_my_policy.py"], cwd=tmp_path, capture_output=True,
                            text=True, env=env)
    assert tested.returncode == 0 and "1 passed" in tested.stdout, tested.stdout
    assert real[:2] == sim[:2] == [".venv/bin/sapo-env", "bench-ratio"]  # the clone's folder
    assert real[real.index("--track") + 1] == "real" and "--track" not in sim
    done = subprocess.run([sys.executable, "-c", REAL_ENTRY, *real[2:], "--seeds", "1",
                           "--rounds", "3", "--nodes", "2", "--jobs", "1", "--no-plots",
                           "--no-progress", "--out", str(tmp_path / "real")],
                          cwd=tmp_path, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "real track's quick run" in done.stdout and "my_policy:BackOff" in done.stdout
    done = subprocess.run([sys.executable, "-m", "sapo_experiments.cli", *sim[1:], "--seeds",
                           "1", "--rounds", "12", "--scenarios", "adversarial", "--jobs", "1",
                           "--no-plots", "--no-progress", "--out", str(tmp_path / "sim")],
                          cwd=tmp_path, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "my_policy:BackOff" in (tmp_path / "sim" / "results.md").read_text()


@pytest.mark.parametrize("script, blocked, argv, expected", [
    ("train_meta_agent.py", "supersuit", ["--help"],
     "train_meta_agent.py needs supersuit: pip install 'sapo-env[meta]'"),
    ("served_swarm.py", "httpx2", ["--rounds", "1"],
     "served_swarm.py: agents.serving.served needs 'httpx2', which is not installed: "
     "pip install 'sapo-env[served]'"),
])
def test_an_example_without_its_extra_says_what_to_install(script, blocked, argv, expected):
    """The package made unimportable, the example answers in one line naming the extra."""
    path = ROOT / "examples" / script
    code = (f"import runpy, sys; sys.modules[{blocked!r}] = None; sys.argv = ['x', *{argv!r}]; "
            f"runpy.run_path({str(path)!r}, run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.strip() == expected


@pytest.mark.slow
def test_served_swarm_example_runs():
    """7 tiny learners and a served SmolLM2 on llama.cpp's server, 2 rounds of short answers
    (skipped without the server: make .venv/.served)."""
    from agents.serving.llama_server import missing

    if missing():
        pytest.skip(f"no local llama.cpp server: {missing()}")
    pytest.importorskip("torch")
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "served_swarm.py"),
                          "--rounds", "2", "--max-tokens", "8"], capture_output=True,
                         text=True, check=True).stdout
    assert "round   1  tiny nodes" in out and "malformed 0" in out
    assert "the tiny nodes trained on" in out

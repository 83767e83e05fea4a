"""``sapo-env reproduce``: every file written, same seed same table, resume, processes."""

from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pytest
from timings import TIMING_ARRAYS, without_timings_csv, without_timings_md

import sapo_experiments.reproduce as rp
from sapo_experiments.reproduce import cli as rp_cli
from sapo_experiments.reproduce import sweep

pytestmark = pytest.mark.slow  # whole sweeps, tiny learners trained
ARITHMETIC = ["basic_arithmetic", 1.0, {"min_terms": 2, "max_terms": 2, "max_digits": 1}]
TINY = ["--quick", "--rounds", "8", "--nodes", "3", "--seeds", "2", "--held-out-every", "4",
        "--held-out-questions", "3", "--no-progress"]


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="learner"):
        rp.ReproduceConfig(learner="lm")
    with pytest.raises(ValueError, match="model"):
        rp.ReproduceConfig(learner="grpo")
    with pytest.raises(ValueError, match="experiments"):
        rp.ReproduceConfig(experiments=("9/9",))
    with pytest.raises(ValueError, match="seeds"):
        rp.ReproduceConfig(seeds=0)
    with pytest.raises(ValueError, match="n_agents"):
        rp.ReproduceConfig(n_agents=1)
    with pytest.raises(ValueError, match="swarm"):
        rp.ReproduceConfig(swarm={"filter_local": True})
    with pytest.raises(ValueError, match="swarm"):
        rp.ReproduceConfig(swarm={"colour": "blue"})
    with pytest.raises(ValueError, match="swarm"):  # the sweep sets J and the protocol
        rp.ReproduceConfig(swarm={"questions_per_round": 8})
    with pytest.raises(ValueError, match="protocol"):
        rp.ReproduceConfig(protocol="b8")
    # a bad value is caught when the sweep is configured, not in a worker minutes later
    with pytest.raises(ValueError, match="swarm: pool_window must be an int >= 1, got 0"):
        rp.ReproduceConfig(swarm={"pool_window": 0})


def test_cli_errors_are_one_line(capsys):
    args = rp_cli.build_parser().parse_args(["--swarm", "pool_window=0"])
    with pytest.raises(SystemExit, match="sapo-env reproduce: swarm: pool_window"):
        rp_cli.run_from_args(args)


def test_each_configuration_follows_its_protocol():
    paper = rp.ReproduceConfig()
    by_label = {e.label: paper.swarm_config(e) for e in rp.CONDITIONS}
    assert {label: (c.questions_for(c.initial_num_external("node_0")),
                    c.initial_num_external("node_0")) for label, c in by_label.items()} == {
        "8/0": (8, 0), "6/2": (6, 2), "4/4": (4, 4), "2/6": (2, 6),
        "8/0 oversampled + filtered": (16, 0), "4/4 self-replay": (4, 4),
        "8/0 filtered": (8, 0), "4/4 answering 8": (8, 4), "4/0": (4, 0),
        "8/0 16 completions": (8, 0), "8/0 rescue": (8, 0)}
    assert by_label["4/0"].train_budget == 4 and by_label["8/0"].train_budget == 8
    assert by_label["8/0 rescue"].rescue and by_label["8/0 rescue"].shared_questions
    assert by_label["8/0 oversampled + filtered"].filter_local
    assert by_label["8/0 filtered"].filter_local and not by_label["8/0"].filter_local
    fixed = rp.ReproduceConfig(protocol="fixed")
    assert {e.label: fixed.swarm_config(e).questions_per_round for e in rp.CONDITIONS} == {
        "8/0": 8, "6/2": 8, "4/4": 8, "2/6": 8, "8/0 oversampled + filtered": 16,
        "4/4 self-replay": 8, "8/0 filtered": 8, "4/4 answering 8": 8, "4/0": 8,
        "8/0 16 completions": 8, "8/0 rescue": 8}
    assert paper.experiments == rp.config.PAPER_AND_TWO_CONTROLS  # the default sweep: six

def test_cli_swarm_overrides():
    args = rp_cli.build_parser().parse_args(["--swarm", 'answer_format="lenient"', "--swarm",
                                         "pool_window=3", "--swarm", "answer_format=tag"])
    assert rp_cli.config_from_args(args).swarm == {"answer_format": "tag", "pool_window": 3}


def test_quick_changes_only_the_defaults():
    quick = rp.ReproduceConfig(quick=True)
    assert (quick.rounds, quick.seeds, str(quick.out)) == (
        rp.QUICK["rounds"], rp.QUICK["seeds"], "out/reproduce-quick")
    assert rp.ReproduceConfig(quick=True, rounds=50).rounds == 50
    # a value given explicitly is kept, even when it equals the full sweep's
    assert rp.ReproduceConfig(quick=True, rounds=2000, seeds=3).rounds == 2000
    assert rp.ReproduceConfig(quick=True, rounds=2000, seeds=3).seeds == 3
    assert rp.ReproduceConfig().rounds == 2000 and str(rp.ReproduceConfig().out) == "out/reproduce"
    slugs = rp.ReproduceConfig(experiments=("4-4", "8/0", "4/4")).experiments
    assert slugs == ("4/4", "8/0")


def test_the_tiny_learner_has_its_own_full_and_quick_sweeps():
    """The tiny sweep's defaults are those of the run in records/tiny-reproduce/, and its quick
    run (make demo) is 8/0, 4/0 and 4/4; a value given explicitly is kept."""
    tiny = rp.ReproduceConfig(learner="tiny")
    assert (tiny.rounds, tiny.seeds, tiny.held_out_every, tiny.held_out_questions) == (
        200, 3, 50, 32)
    assert tiny.experiments == rp.config.PAPER_AND_TWO_CONTROLS
    quick = rp.ReproduceConfig(learner="tiny", quick=True)
    assert (quick.experiments, quick.rounds, quick.seeds, str(quick.out)) == (
        ("8/0", "4/0", "4/4"), 40, 4, "out/reproduce-tiny-quick")
    assert rp.ReproduceConfig(learner="tiny", quick=True, experiments=("2/6",),
                              seeds=5).experiments == ("2/6",)
    assert rp.ReproduceConfig(quick=True).experiments == rp.ReproduceConfig().experiments


def test_tiny_dtype_reaches_the_agents_and_fast_is_resolved_per_machine(monkeypatch):
    """--tiny-dtype goes to every node's GRPOConfig; "fast" is bfloat16 exactly where oneDNN
    says the CPU multiplies bfloat16 natively, float32 elsewhere; the others pass through."""
    torch = pytest.importorskip("torch")
    from sapo_experiments.learners import TinyLearners
    from sapo_experiments.tiny_learners import SlowDtypeWarning

    args = rp_cli.build_parser().parse_args(["--learner", "tiny", "--tiny-dtype", "bfloat16"])
    assert rp_cli.config_from_args(args).tiny.dtype == "bfloat16"
    assert rp_cli.config_from_args(rp_cli.build_parser().parse_args([])).tiny.dtype == "auto"
    for dtype in ("auto", "float32", "bfloat16"):
        assert TinyLearners(dtype=dtype).compute_dtype() == dtype
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for native, expected in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda n=native: n)
        assert TinyLearners(dtype="fast").compute_dtype() == expected
    # bfloat16 asked for where it is emulated says so, and runs in it all the same
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert TinyLearners(dtype="bfloat16").compute_dtype() == "bfloat16"
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    with pytest.warns(SlowDtypeWarning, match="10x slower"):
        assert TinyLearners(dtype="bfloat16").compute_dtype() == "bfloat16"
    # what the nodes are built with (warm starts and models left out: only the config matters)
    import agents.tiny.warm_start as warm_start

    built = []
    monkeypatch.setattr(TinyLearners, "warm_starts", lambda self, jobs=1, seeds=(): [])
    monkeypatch.setattr(warm_start, "tiny_nodes", lambda paths, config, *a: built.append(config)
                        or [])
    TinyLearners(dtype="fast", batched=False)(["node_0"], 4, np.random.SeedSequence(0))
    assert built[0].dtype == "float32"  # native is False since the last monkeypatch


def test_mean_ci():
    mean, ci = rp.mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0 and ci == pytest.approx(4.303 * 1.0 / np.sqrt(3))
    assert np.isnan(rp.mean_ci([1.0])[1])


def test_quick_writes_every_file_and_same_seed_same_table(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    pytest.importorskip("tensorboard")
    first, second = tmp_path / "a", tmp_path / "b"
    rp_cli.main([*TINY, "--jobs", "1", "--out", str(first)])
    assert "| 4/4 self-replay |" in capsys.readouterr().out
    for name in ("results.md", "results.csv", "figure1_trajectories.png",
                 "figure2_moving_average.png", "held_out.png", "summary.json"):
        assert (first / name).stat().st_size > 0, name
    runs = sorted(p.name for p in (first / "runs").glob("*.npz"))
    assert len(runs) == 12 and "4-4-self-replay_seed1.npz" in runs
    boards = [p for p in (first / "tensorboard").iterdir() if p.is_dir()]
    assert len(boards) == 12 and all(any(b.glob("events.out.tfevents.*")) for b in boards)
    summary = json.loads((first / "summary.json").read_text())
    assert {"date", "machine", "wall_seconds", "settings", "rows"} <= set(summary)
    # the generation cost: L=8 completions per question answered, 8 - J questions a round
    generated = {r["experiment"]: r["generated"] for r in summary["rows"]}
    assert generated == {"8/0": 64, "6/2": 48, "4/4": 32, "2/6": 16,
                         "8/0 oversampled + filtered": 128, "4/4 self-replay": 32}
    assert "quick run" in (first / "results.md").read_text()
    # what a node-round cost: the simulated learner reports no tokens or steps, the runner
    # times every node's act and learn
    with np.load(first / "runs" / "4-4_seed0.npz") as run:
        assert np.isnan(run["generated_tokens"]).all() and np.isnan(run["optimizer_steps"]).all()
        assert run["act_cpu_seconds"].shape == run["learn_cpu_seconds"].shape == (8, 3)
        assert (run["act_cpu_seconds"] >= 0).all() and (run["learn_cpu_seconds"] >= 0).all()
    assert "| 4/4 | 32.0 | – | – | – | " in (first / "results.md").read_text()
    # runs done again replace their TensorBoard events instead of adding a second file
    rp_cli.main([*TINY, "--jobs", "1", "--no-resume", "--no-plots", "--out", str(first)])
    assert all(len(list(b.glob("events.out.tfevents.*"))) == 1 for b in boards)

    # the same sweep in two worker processes: the same table, byte for byte
    rp_cli.main([*TINY, "--jobs", "2", "--no-tensorboard", "--no-plots", "--out", str(second)])
    assert without_timings_csv((first / "results.csv").read_text()) == without_timings_csv(
        (second / "results.csv").read_text())  # the CPU seconds are timings
    assert without_timings_md((first / "results.md").read_text()) == without_timings_md(
        (second / "results.md").read_text())


def _row(label, ratio, ci):
    return rp.Row(experiment=label, local=4, external=4, seeds=3, cumulative=1.0,
                  cumulative_ci=0.1, ratio=ratio, ratio_ci=ci, batch_ratio=None,
                  batch_ratio_ci=None, paper=None, paper_ratio=None,
                  generated=32.0, reward_per_1k=1.0, final_reward=0.5, held_out=None, note="")


def test_verdict_says_what_the_table_cannot_tell():
    rows = [_row("8/0", 1.0, 0.0), _row("4/4", 1.4, 0.2), _row("2/6", 1.1, 0.3)]
    text = rp.verdict(rows, rp.ReproduceConfig(seeds=3))
    assert "4/4 (1.40)" in text.split("**")[0] and "Not distinguishable" in text
    assert "2/6" in text.split("Not distinguishable")[1] and "quick" not in text
    quick = rp.verdict(rows, rp.ReproduceConfig(quick=True))
    assert "too short to conclude anything" in quick and "Distinguishable" not in quick
    assert "One seed" in rp.verdict(rows, rp.ReproduceConfig(seeds=1))
    # the tiny learner's quick run is long enough to decide: it says which ratios it does
    tiny = rp.verdict(rows, rp.ReproduceConfig(learner="tiny", quick=True))
    assert tiny.startswith("This is the quick run (40 rounds x 4 seeds)")
    assert "4/4 (1.40)" in tiny and "Not distinguishable" in tiny


def test_resume_reuses_finished_runs_and_reruns_changed_ones(tmp_path, monkeypatch):
    config = rp.ReproduceConfig(out=tmp_path, experiments=("8/0", "4/4"), rounds=5, n_agents=2,
                                seeds=1, held_out_every=5, held_out_questions=2, jobs=1,
                                tensorboard=False, plots=False, progress=False)
    rp.reproduce(config)
    ran = []
    original = sweep.compute
    monkeypatch.setattr(sweep, "compute", lambda spec: ran.append(spec.name) or original(spec))
    rp.reproduce(config)
    assert ran == []
    longer = rp.ReproduceConfig(**{**config.__dict__, "rounds": 6})
    result = rp.reproduce(longer)
    assert sorted(ran) == ["4-4_seed0", "8-0_seed0"]
    assert result.runs["4/4"][0]["rewards"].shape == (6, 2)
    assert [r.experiment for r in result.rows] == ["8/0", "4/4"]
    assert result.rows[0].ratio == pytest.approx(1.0)


def test_the_sweep_saves_each_run_as_computed_alone_under_its_old_key(tmp_path):
    """``reproduce`` on the shared skeleton: every configuration under every seed as
    ``compute`` makes it alone, under its old key (tests/sweep_outputs.py), and summary.json
    holding the rows of those runs with the settings it always had."""
    from sweep_outputs import check_runs, check_summary

    from sapo_env import __version__
    from sapo_experiments.learners import describe
    from sapo_experiments.reproduce.report import summarise

    config = rp.ReproduceConfig(out=tmp_path, experiments=("8/0", "4/4"), rounds=5, n_agents=2,
                                seeds=2, held_out_every=5, held_out_questions=2, jobs=1,
                                checkpoint_every=0, tensorboard=False, plots=False,
                                progress=False)
    rp.reproduce(config)
    specs = [rp.RunSpec(e, k, config) for e in ("8/0", "4/4") for k in range(2)]
    saved = check_runs(tmp_path, specs, sweep.compute, lambda spec: {
        "version": __version__, "seed": spec.seed_index, "protocol": "paper",
        "experiment": dataclasses.asdict(rp.BY_LABEL[spec.experiment]), "base_seed": 0,
        "rounds": 5, "n_agents": 2, "swarm": {}, "held_out": [5, 2],
        "learner": describe(rp.simulated_learners)})
    assert set(TIMING_ARRAYS) <= set(saved[0])  # the CPU seconds, checked by shape alone
    runs: dict[str, list] = {}
    for spec, run in zip(specs, saved):
        runs.setdefault(spec.experiment, []).append(run)
    summary = check_summary(
        tmp_path, ["date", "machine", "wall_seconds", "jobs", "settings", "run_seconds", "rows"],
        {"out", "learner", "tiny", "model", "experiments", "protocol", "seeds", "base_seed",
         "rounds", "n_agents", "held_out_every", "held_out_questions", "jobs", "ray",
         "tensorboard", "wandb", "plots", "resume", "checkpoint_every", "progress", "quick",
         "grpo_max_new_tokens", "swarm"})
    assert list(summary["run_seconds"]) == [s.name for s in specs]
    expected = [dataclasses.asdict(r) for r in summarise(config, runs)]
    assert json.dumps(summary["rows"]) == json.dumps(expected)
    assert summary["rows"][0]["cumulative"] > 0  # not vacuous: the nodes earned something


def scripted_nodes(names, num_external, seed):
    """A user's own agent factory: demonstrators that are right half the time."""
    from agents import DemonstratorAgent

    return [DemonstratorAgent(0.5, num_external=num_external, seed=int(s.generate_state(1)[0]))
            for s in seed.spawn(len(names))]


def test_tiny_hidden_sizes_reach_the_learners_and_mixed_widths_need_a_common_base():
    parse = rp_cli.build_parser().parse_args
    assert rp_cli.config_from_args(parse([])).tiny.hidden_sizes == (128,)
    mixed = parse(["--learner", "tiny", "--tiny-common-base", "--tiny-hidden-sizes", "64", "256"])
    tiny = rp_cli.config_from_args(mixed).tiny
    assert tiny.hidden_sizes == (64, 256)
    assert tiny.node_kinds(4) == ["width 64", "width 256", "width 64", "width 256"]
    with pytest.raises(ValueError, match="needs common_base"):
        rp_cli.config_from_args(parse(["--tiny-hidden-sizes", "64", "256"]))


def test_a_users_own_agents_run_through_the_sweep(tmp_path):
    args = rp_cli.build_parser().parse_args(
        ["--learner", "test_reproduce:scripted_nodes", "--experiments", "8/0", "2/6",
         "--rounds", "3", "--nodes", "3", "--seeds", "1", "--held-out-every", "3",
         "--held-out-questions", "2", "--jobs", "1", "--no-tensorboard", "--no-plots",
         "--no-progress", "--out", str(tmp_path)])
    config = rp_cli.config_from_args(args)
    assert config.learner is scripted_nodes
    result = rp.reproduce(config)
    assert 0.3 < result.rows[0].cumulative / 3 < 0.7  # demonstrators right half the time
    assert result.runs["2/6"][0]["generated"].tolist() == [[16, 16, 16]] * 3
    assert "test_reproduce:scripted_nodes" in result.table_markdown
    with pytest.raises(ValueError, match="learner: cannot import"):
        rp_cli.config_from_args(rp_cli.build_parser().parse_args(["--learner", "nope:nothing"]))


def test_grpo_learner_runs_with_a_tiny_local_model(tmp_path, request):
    """The language-model path of the sweep, with a 2-layer model saved to disk (offline)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    request.getfixturevalue("one_torch_thread")  # see conftest.py
    from tiny_lm import char_tokenizer, tiny_llama  # tests/ is on sys.path (rootdir conftest)

    tokenizer = char_tokenizer()
    tiny_llama(tokenizer).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    config = rp.ReproduceConfig(out=tmp_path / "out", learner="grpo", model=str(tmp_path / "model"),
                                experiments=("8/0", "4/4"), rounds=2, n_agents=2, seeds=1,
                                held_out_every=2, held_out_questions=2, grpo_max_new_tokens=8,
                                tensorboard=False, plots=False, progress=False,
                                swarm={"tasks": [ARITHMETIC], "completions_per_question": 2})
    result = rp.reproduce(config)
    assert [r.experiment for r in result.rows] == ["8/0", "4/4"]
    assert result.runs["4/4"][0]["rewards"].shape == (2, 2)
    assert "GRPO" in result.table_markdown


def test_tiny_learner_runs_specialists_and_reports_what_they_knew(tmp_path, request,
                                                                   monkeypatch):
    """--learner tiny: warm-started specialists (a few steps here), batched, with the
    per-seed and per-specialist tables."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    request.getfixturevalue("one_torch_thread")
    monkeypatch.setenv("SAPO_ENV_CACHE", str(tmp_path / "cache"))
    args = rp_cli.build_parser().parse_args(
        ["--learner", "tiny", "--tiny-lr", "1e-3", "--experiments", "8/0", "4/4",
         "--rounds", "2", "--nodes", "2", "--seeds", "2", "--held-out-every", "1",
         "--held-out-questions", "4", "--jobs", "1", "--no-tensorboard", "--no-plots",
         "--no-progress", "--out", str(tmp_path / "out"), "--swarm", "completions_per_question=2"])
    config = rp_cli.config_from_args(args)
    config = dataclasses.replace(config, tiny=dataclasses.replace(
        config.tiny, warm_start_steps=2, target_accuracy=0.99))
    assert config.tiny.learning_rate == 1e-3
    swarm = config.swarm_config(rp.CONDITIONS[2])
    assert swarm.system_prompt == "" and [t.name for t in swarm.tasks] == list(
        config.tiny.specialties)
    result = rp.reproduce(config)
    run = result.runs["4/4"][0]
    assert run["held_out_rounds"].tolist() == [-1, 0, 1]  # before training, then every round
    assert run["held_out_task_scores"].shape == (3, 2, 2)
    assert run["held_out_tasks"].tolist() == list(config.tiny.specialties)
    assert run["learn_grad_norm"].shape == run["learn_groups"].shape == (2, 2)
    # what each node-round cost: at least one token (an EOS) and at most max_new_tokens per
    # completion generated, a step where the node had something to train on
    tokens, completions = run["generated_tokens"], run["generated"]
    assert (completions > 0).all()
    assert ((tokens >= completions) & (tokens <= completions * config.tiny.max_new_tokens)).all()
    assert run["optimizer_steps"].tolist() == (run["learn_groups"] > 0).astype(float).tolist()
    assert (run["act_cpu_seconds"] > 0).all() and (run["learn_cpu_seconds"] > 0).all()
    text = (tmp_path / "out" / "results.md").read_text()
    assert "tiny transformer specialists" in text
    assert "## Per seed" in text and "## What each kind of node knew" in text
    assert "basic_arithmetic nodes on spell_backward" in text
    assert "## The GRPO steps" in text and "| 4/4 | " in text.split("## The GRPO steps")[1]


def test_tiny_common_base_gives_every_node_of_a_seed_one_base_and_each_seed_its_own(
        tmp_path, request, monkeypatch):
    """--tiny-common-base: one warm start per seed (the same in every configuration), every
    node of a run starts from it; the report pairs against 8/0 filtered and gives the batch
    reward beside the own-completion reward."""
    torch = pytest.importorskip("torch")
    from agents.tiny.config import SPECIALIST_TASKS

    request.getfixturevalue("one_torch_thread")
    monkeypatch.setenv("SAPO_ENV_CACHE", str(tmp_path / "cache"))
    args = rp_cli.build_parser().parse_args(
        ["--learner", "tiny", "--tiny-common-base", "--tiny-specialties", "basic_arithmetic",
         "--tiny-target-accuracy", "0.99", "--tiny-off-policy", "ftis",
         "--experiments", "8/0", "4/4", "8/0 filtered",
         "--rounds", "2", "--nodes", "2", "--seeds", "2", "--held-out-every", "2",
         "--held-out-questions", "4", "--jobs", "1", "--no-tensorboard", "--no-plots",
         "--no-progress", "--out", str(tmp_path / "out"), "--swarm", "completions_per_question=2"])
    config = rp_cli.config_from_args(args)
    config = dataclasses.replace(config, tiny=dataclasses.replace(config.tiny,
                                                                  warm_start_steps=2))
    assert config.tiny.common_base and config.tiny.target_accuracy == 0.99
    seeds = [rp.seeds_of(config.base_seed, k)[1] for k in range(2)]
    bases = config.tiny.warm_start_configs(seeds)
    assert [b.tasks for b in bases] == [(SPECIALIST_TASKS["basic_arithmetic"],)] * 2
    assert bases[0].seed != bases[1].seed  # independently trained bases
    first, second = (config.tiny(["a", "b"], 0, s) for s in seeds)
    again = config.tiny(["a", "b"], 4, rp.seeds_of(config.base_seed, 0)[1])

    def weights(agent):
        return torch.cat([p.detach().flatten() for p in agent.model.parameters()])

    assert first[0].config.off_policy_correction == "ftis" and first[0].config.share_logprobs
    assert first[0].joint_actor.share_prompts  # the default; --tiny-copied-prompts: False
    copied = rp_cli.config_from_args(rp_cli.build_parser().parse_args(
        ["--learner", "tiny", "--tiny-copied-prompts"]))
    assert not copied.tiny.share_prompts
    assert torch.equal(weights(first[0]), weights(first[1]))  # one base for a run's nodes
    assert torch.equal(weights(first[0]), weights(again[0]))  # and for seed 0 everywhere
    assert not torch.equal(weights(first[0]), weights(second[0]))
    result = rp.reproduce(config)
    run = result.runs["4/4"][0]
    assert run["batch_rewards"].shape == run["rewards"].shape == (2, 2)
    assert run["learn_off_policy_weight_mean"].shape == (2, 2)  # saved: a correction is on
    batch = rp.report.cumulative_rewards(result.runs, "batch_rewards")
    assert batch["4/4"][0] == pytest.approx(np.nanmean(run["batch_rewards"], axis=1).sum())
    text = (tmp_path / "out" / "results.md").read_text()
    assert "| batch ratio |" in text and "all nodes on basic_arithmetic" in text
    assert "nodes from a common base per seed (warm-start target 0.99, off-policy " \
        "correction ftis)" in text
    assert "minus 8/0 filtered, per seed" in text
    assert "## Per seed, reward of the trained batch" in text


def test_tiny_swarm_of_mixed_widths_batches_each_width_and_reports_each_kind(
        tmp_path, request, monkeypatch):
    """hidden_sizes: node i has width hidden_sizes[i % k], each width warm-started from the
    seed's base seed, one batched swarm per width; results.md has a row per kind."""
    torch = pytest.importorskip("torch")
    from sapo_experiments.learners import TinyLearners

    request.getfixturevalue("one_torch_thread")
    monkeypatch.setenv("SAPO_ENV_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ValueError, match="needs common_base=True"):
        TinyLearners(hidden_sizes=(32, 64))
    with pytest.raises(ValueError, match="distinct multiples of 32"):
        TinyLearners(hidden_sizes=(48,), common_base=True)
    from agents.lm.off_policy import CORRECTIONS
    from sapo_experiments import learners

    assert learners.CORRECTIONS == CORRECTIONS
    with pytest.raises(ValueError, match="off_policy_correction must be one of"):
        TinyLearners(off_policy_correction="is")
    tiny = TinyLearners(specialties=("basic_arithmetic",), common_base=True,
                        hidden_sizes=(32, 64), warm_start_steps=2, target_accuracy=0.99)
    assert tiny.node_kinds(4) == ["width 32", "width 64"] * 2
    agents = tiny(["a", "b", "c", "d"], 4, rp.seeds_of(0, 0)[1])
    widths = [a.model.config.hidden_size for a in agents]
    assert widths == [32, 64, 32, 64]
    assert agents[0].joint_actor is agents[2].joint_actor is not agents[1].joint_actor
    assert torch.equal(agents[0].model.lm_head.weight, agents[2].model.lm_head.weight)
    config = rp.ReproduceConfig(
        learner="tiny", tiny=tiny, experiments=("8/0", "4/4"), rounds=2, n_agents=4, seeds=1,
        held_out_every=2, held_out_questions=2, jobs=1, tensorboard=False, plots=False,
        progress=False, out=tmp_path / "out", swarm={"completions_per_question": 2})
    rp.reproduce(config)
    text = (tmp_path / "out" / "results.md").read_text()
    assert "| configuration | width 32 nodes | minus 8/0 | width 64 nodes | minus 8/0 |" in text
    assert "width 64 nodes on basic_arithmetic" in text


def test_a_run_file_made_by_other_code_is_not_reused(tmp_path, monkeypatch, caplog):
    from sapo_experiments import run_files

    path = run_files.save_run(tmp_path / "run.npz", {"key": "k"}, rewards=np.zeros(3))
    assert run_files.is_finished(path, "k") and not run_files.is_finished(path, "other")
    monkeypatch.setattr(run_files, "code_digest", lambda: "edited")
    assert not run_files.is_finished(path, "k")
    older = tmp_path / "older.npz"  # written before run files recorded their code
    np.savez_compressed(older, meta=np.asarray(json.dumps({"key": "k"})))
    assert run_files.is_finished(older, "k")  # reused on its key alone
    run_files.run_all(lambda spec: None, [], done=2, jobs=1, progress=False)
    assert "reusing 2 finished run(s) of 2" in caplog.text
    assert run_files.made_by_other_code(path, "k") and not run_files.made_by_other_code(
        path, "other") and not run_files.made_by_other_code(older, "k")


def test_a_resumed_sweep_says_which_runs_other_code_made(tmp_path, monkeypatch, caplog):
    """Runs made by other code are made again, and the plan and the log say so (a long sweep
    belongs in a worktree of its own)."""
    from sapo_experiments import run_files
    from sapo_experiments.reproduce import plan

    config = rp.ReproduceConfig(quick=True, experiments=("8/0",), seeds=1, rounds=2, jobs=1,
                                held_out_every=1, held_out_questions=2, tensorboard=False,
                                plots=False, progress=False, out=tmp_path / "out")
    rp.reproduce(config)
    assert "made again" not in plan.plan_text(config)
    monkeypatch.setattr(run_files, "code_digest", lambda: "edited")
    assert "1 made again: their files in" in " ".join(plan.plan_text(config).split())
    rp.reproduce(config)
    assert "making again 1 run(s) whose files hold these settings but were made by other " \
        "code" in caplog.text


def test_tiny_rescue_and_the_compute_controls_run_through_the_sweep(
        tmp_path, request, monkeypatch):
    """--tiny-rescue-gate and --tiny-ftis-statistic reach every node's GRPOConfig (the gate
    makes the nodes send log-probs); '8/0 rescue' runs on shared questions and saves each
    node-round's all-fail groups, complementarity and rescued groups; '4/0' answers 4
    questions; '8/0 16 completions' generates twice 8/0's completions."""
    pytest.importorskip("torch")
    from agents.lm.off_policy import FTIS_STATISTICS, GATES
    from sapo_experiments import learners

    assert (learners.GATES, learners.FTIS_STATISTICS) == (GATES, FTIS_STATISTICS)
    with pytest.raises(ValueError, match="rescue_gate must be one of"):
        learners.TinyLearners(rescue_gate="gate")
    with pytest.raises(ValueError, match="ftis_statistic must be one of"):
        learners.TinyLearners(ftis_statistic="max")
    request.getfixturevalue("one_torch_thread")
    monkeypatch.setenv("SAPO_ENV_CACHE", str(tmp_path / "cache"))
    args = rp_cli.build_parser().parse_args(
        ["--learner", "tiny", "--tiny-common-base", "--tiny-specialties", "basic_arithmetic",
         "--tiny-target-accuracy", "0.99", "--tiny-rescue-gate", "graft",
         "--tiny-off-policy", "ftis", "--tiny-ftis-statistic", "mean",
         "--experiments", "8/0", "4/0", "8/0 16 completions", "8/0 rescue",
         "--rounds", "2", "--nodes", "3", "--seeds", "1", "--held-out-every", "2",
         "--held-out-questions", "4", "--jobs", "1", "--no-tensorboard", "--no-plots",
         "--no-progress", "--out", str(tmp_path / "out"), "--swarm", "completions_per_question=2"])
    config = rp_cli.config_from_args(args)
    config = dataclasses.replace(config, tiny=dataclasses.replace(config.tiny,
                                                                  warm_start_steps=2))
    node = config.tiny(["a", "b"], 0, rp.seeds_of(config.base_seed, 0)[1])[0]
    assert (node.config.rescue_gate, node.config.ftis_statistic) == ("graft", "mean")
    assert node.config.share_logprobs
    assert not dataclasses.replace(config.tiny, rescue_gate="none",
                                   off_policy_correction="none").shares_logprobs
    rescue = config.swarm_config(rp.BY_LABEL["8/0 rescue"])
    assert rescue.rescue and rescue.shared_questions and rescue.completions_per_question == 2
    assert config.swarm_config(rp.BY_LABEL["8/0 16 completions"]).completions_per_question == 16
    result = rp.reproduce(config)
    assert {r.experiment: (r.local, r.external) for r in result.rows}["4/0"] == (4, 0)
    generated = {label: runs[0]["generated"].sum() for label, runs in result.runs.items()}
    assert generated["4/0"] * 2 == generated["8/0"]
    assert generated["8/0 16 completions"] == 8 * generated["8/0"]  # 16 against 2 completions
    run = result.runs["8/0 rescue"][0]
    for key in ("all_fail_groups", "complementarity", "rescued_groups"):
        assert run[key].shape == (2, 3)
    assert (run["rescued_groups"] <= run["all_fail_groups"]).all()
    assert np.isnan(run["complementarity"][run["all_fail_groups"] == 0]).all()

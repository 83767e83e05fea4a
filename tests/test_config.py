import pytest

from sapo_env import PAPER_TASKS, SwarmConfig, TaskSpec


def test_paper_defaults():
    c = SwarmConfig()
    assert (c.n_agents, c.questions_per_round, c.completions_per_question, c.train_budget,
            c.initial_num_external("node_0"), c.max_rounds) == (8, None, 8, 8, 4, 2000)
    assert c.paper_protocol and c.max_questions == 8
    assert c.filter == "zero_advantage" and not c.filter_local
    assert c.external_source == "swarm" and c.external_sampling == "uniform"
    assert c.pool_window == 1 and c.answer_format == "tag" and not c.shared_questions
    assert [t.name for t in c.tasks] == [
        "arc_1d", "basic_arithmetic", "base_conversion", "bf", "binary_matrix",
        "calendar_arithmetic", "decimal_arithmetic", "fraction_simplification",
        "propositional_logic"]
    assert all(t.weight == 1.0 for t in c.tasks)
    assert c.agent_names == tuple(f"node_{i}" for i in range(8))
    assert "<answer>" in c.system_prompt


@pytest.mark.parametrize("field,value", [
    ("n_agents", 0), ("n_agents", 2.5), ("n_agents", True), ("questions_per_round", 0),
    ("completions_per_question", -1), ("train_budget", -1), ("max_rounds", 0),
    ("pool_window", 0), ("pool_capacity", 0), ("max_completion_chars", 0),
    ("advantage_eps", 0.0), ("filter", "top_k"), ("external_sampling", "greedy"),
    ("answer_format", "xml"), ("external_source", "cloud"), ("filter_local", "yes"),
    ("shared_questions", 1), ("num_external", 9), ("num_external", -1), ("num_external", 2.0),
    ("num_external", True),
])
def test_bad_values_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        SwarmConfig(**{field: value})


def test_two_protocols_and_question_counts():
    paper = SwarmConfig()
    assert [paper.questions_for(j) for j in (0, 2, 4, 6, 8)] == [8, 6, 4, 2, 0]
    fixed = SwarmConfig(questions_per_round=16)
    assert not fixed.paper_protocol and fixed.max_questions == 16
    assert {fixed.questions_for(j) for j in range(9)} == {16}


def test_num_external_per_node():
    c = SwarmConfig(n_agents=3, num_external={"node_0": 0, "node_1": 8, "node_2": 4})
    assert [c.initial_num_external(a) for a in c.agent_names] == [0, 8, 4]
    assert SwarmConfig(n_agents=2, num_external=2).initial_num_external("node_1") == 2
    with pytest.raises(ValueError, match=r"num_external.*missing \['node_2'\]"):
        SwarmConfig(n_agents=3, num_external={"node_0": 0, "node_1": 8})
    with pytest.raises(ValueError, match=r"num_external\['node_1'\].*\[0, 8\]"):
        SwarmConfig(n_agents=2, num_external={"node_0": 0, "node_1": 9})
    with pytest.raises(ValueError, match=r"num_external.*\[0, 3\].*got 4"):
        SwarmConfig(train_budget=3, num_external=4)
    # the default: half the budget, the paper's 4/4 at its budget of 8
    assert SwarmConfig(train_budget=5).initial_num_external("node_0") == 2


def test_task_specs_in_every_form():
    c = SwarmConfig(tasks=["basic_arithmetic", ("bf", 2.0), ("arc_1d", 1, {"min_size": 9}),
                           {"name": "leg_counting", "weight": 0.5},
                           TaskSpec("chain_sum")])
    assert [t.name for t in c.tasks] == ["basic_arithmetic", "bf", "arc_1d", "leg_counting",
                                         "chain_sum"]
    assert c.tasks[1].weight == 2.0 and c.tasks[2].config == {"min_size": 9}


def test_whole_number_task_weights_work():
    import sapo_env

    env = sapo_env.parallel_env(n=2, tasks=[("bf", 2), ("arc_1d", 1)])
    assert [t.weight for t in env.config.tasks] == [2.0, 1.0]
    observations, _ = env.reset(seed=0)  # drawing tasks by weight needs float weights
    assert len(observations) == 2


@pytest.mark.parametrize("tasks,match", [
    (["no_such_task"], "unknown reasoning-gym task"),
    ([("bf", 0.0)], "weight"),
    ([("bf", True)], "weight"),
    ([("bf", float("inf"))], "weight"),
    ([("bf", "1")], "weight"),
    ([("bf", 1.0, {"seed": 3})], "seed"),
    ([("basic_arithmetic", 1.0, {"min_terms": 5, "max_terms": 2})], "invalid config"),
    ([("basic_arithmetic", 1.0, {"bogus": 1})], "invalid config"),
    ([], "at least one task"),
    ("bf", "sequence of task specs"),
])
def test_bad_tasks(tasks, match):
    with pytest.raises(ValueError, match=match):
        SwarmConfig(tasks=tasks)


def test_node_tasks():
    c = SwarmConfig(n_agents=2, node_tasks={"node_1": ["bf"]})
    assert c.tasks_of("node_0") == PAPER_TASKS
    assert [t.name for t in c.tasks_of("node_1")] == ["bf"]
    with pytest.raises(ValueError, match="node_tasks"):
        SwarmConfig(n_agents=2, node_tasks={"node_7": ["bf"]})
    with pytest.raises(ValueError, match="node_tasks"):
        SwarmConfig(n_agents=2, node_tasks={"node_1": ["bf"]}, shared_questions=True)


def test_self_replay_needs_a_window():
    with pytest.raises(ValueError, match="pool_window"):
        SwarmConfig(external_source="self_replay")
    assert SwarmConfig(external_source="self_replay", pool_window=2).pool_window == 2


def test_replace_validates_again():
    c = SwarmConfig()
    assert c.replace(train_budget=4).train_budget == 4
    with pytest.raises(ValueError, match="train_budget"):
        c.replace(train_budget=-3)


def test_callables_accepted():
    c = SwarmConfig(filter=lambda g: True, answer_format=lambda s: s,
                    external_sampling=lambda cands, k, rng: list(cands)[:k])
    assert callable(c.filter)


def test_the_default_system_prompt_is_reasoning_gyms():
    from reasoning_gym.utils import SYSTEM_PROMPTS

    assert SwarmConfig().system_prompt == SYSTEM_PROMPTS["default"]


def test_a_task_spec_is_checked_with_reasoning_gym_when_a_config_takes_it():
    spec = TaskSpec("no_such_task")  # reasoning-gym is not consulted yet
    with pytest.raises(ValueError, match="unknown reasoning-gym task 'no_such_task'"):
        SwarmConfig(tasks=[spec])
    with pytest.raises(ValueError, match="invalid config for 'bf'"):
        SwarmConfig(node_tasks={"node_1": [("bf", 1.0, {"difficulty": "x"})]})


def test_importing_sapo_env_loads_no_heavy_library():
    """``import sapo_env`` stays fast: reasoning-gym (about 3 s), sympy, matplotlib and torch
    load when first needed (BENCHMARKS.md, "Import time")."""
    import subprocess
    import sys

    heavy = ["reasoning_gym", "sympy", "matplotlib", "torch", "transformers", "ray"]
    code = ("import sys, sapo_env; print(' '.join(m for m in " + repr(heavy)
            + " if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.split()
    assert loaded == []

"""The attack and ratio-policy registries: an attack or a policy is one module that registers
itself, and the CLI, the harnesses and the docs tables read the registries."""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import sapo_env
from agents.hostile.adversarial import AGENT_ATTACKS
from agents.ratio import registry as ratio_registry
from sapo_env import attacks as attack_registry
from sapo_env.defenses import transport_attacks
from sapo_env.defenses.attack_names import TRANSPORT_ATTACK_NAMES
from sapo_experiments import docs_tables
from sapo_experiments.attack import cli as attack_cli
from sapo_experiments.attack.config import ALL_ATTACKS, ATTACKS, AttackConfig, RunSpec
from sapo_experiments.bench_ratio import cli as bench_cli
from sapo_experiments.bench_ratio.config import BenchConfig
from sapo_experiments.bench_ratio.policies import ADAPTIVE, POLICIES, spec_of
from sapo_experiments.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]

THROWAWAY_ATTACK = '''
from sapo_env.defenses.transport_attacks import transport_attack

@transport_attack("throwaway_attack", per="node", does="sends its groups twice",
                  models="a stutter")
def throwaway_attack(own, received, extract, eps):
    return [*own, *own]
'''
THROWAWAY_POLICY = '''
from agents.ratio.registry import ratio_policy

@ratio_policy("throwaway-policy", kind="rule", rule="always 3")
class Throwaway:
    def choose(self, observation):
        return 3

    def update(self, reward, info):
        pass
'''


@pytest.fixture
def load(tmp_path, monkeypatch):
    """``load(name, source)``: the module ``name`` written into ``tmp_path`` and imported; what
    it registered is forgotten after the test."""
    monkeypatch.syspath_prepend(str(tmp_path))
    registries = (attack_registry.REGISTRY, ratio_registry.REGISTRY)
    before = [set(r) for r in registries]
    loaded = []

    def load(name: str, source: str):
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        loaded.append(name)
        return importlib.import_module(name)

    tables = (transport_attacks.TRANSPORT_ATTACKS, transport_attacks.NODE_ATTACKS)
    kept = [set(t) for t in tables]
    yield load
    for registry, names in zip(registries, before):
        for name in set(registry) - names:
            registry.remove(name)
    for table, names in zip(tables, kept):
        for name in set(table) - names:
            del table[name]
    for name in loaded:
        sys.modules.pop(name, None)


@pytest.fixture
def docs(tmp_path):
    """A copy of the docs pages that hold the tables."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for table in docs_tables.TABLES:
        shutil.copy(docs_tables.DOCS / table.page, folder / table.page)
    return folder


def test_the_config_checks_attack_names_without_importing_the_defenses():
    """``sapo_env.config`` imports no module of ``sapo_env.defenses`` (which builds on the
    config); the registry it reads imports nothing of the env but the registry helper and the
    validation functions."""
    def ours(path: Path) -> set[str]:
        tree = ast.parse((ROOT / path).read_text())
        return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                and n.module and n.module.split(".")[0] in ("sapo_env", "agents")}

    assert not [m for m in ours(Path("sapo_env/config.py")) if m.startswith("sapo_env.defenses")]
    assert ours(Path("sapo_env/attacks.py")) == {"sapo_env.registry"}
    assert ours(Path("sapo_env/registry.py")) == {"sapo_env.validation"}


def test_the_registries_keep_the_lists_they_replace_in_order():
    """The harnesses' lists, read from the registries, are the hand-kept lists they replace:
    their order feeds the runs' order, the reports and the tuning."""
    assert tuple(TRANSPORT_ATTACK_NAMES) == (
        "forge_rewards", "forge_metadata", "duplicate_spam", "slow_packets", "replay", "flood",
        "sybil", "held_out", "future_round", "malformed", "impersonation", "framing")
    assert ATTACKS == (*TRANSPORT_ATTACK_NAMES, "garbage", "wrong_answers", "free_rider",
                       "poison", "scoring_dos", "remote_junk")
    assert [a for a in ALL_ATTACKS if a not in ATTACKS] == ["misleading"]
    assert [a.name for a in attack_registry.attacks("text")] == list(AGENT_ATTACKS)
    assert list(POLICIES) == ["fixed-0", "fixed-2", "fixed-4", "fixed-6", "fixed-7",
                              "pool-quality", "learning-progress", "discounted-ucb", "exp3",
                              "thompson", "linucb", "ppo"]
    assert ADAPTIVE == ("pool-quality", "learning-progress", "discounted-ucb", "exp3",
                        "thompson", "linucb")


def test_the_docs_tables_match_the_registries():
    assert docs_tables.check() == []


def test_the_docs_check_reports_a_missing_an_unregistered_and_a_changed_row(docs):
    page = docs / "hostile-nodes.md"
    lines = page.read_text().splitlines()
    lines = [line for line in lines if not line.startswith("| `misleading` |")]
    at = next(k for k, line in enumerate(lines) if line.startswith("| `garbage` |"))
    lines.insert(at, "| `phantom` | packet | nothing | nobody |")
    page.write_text("\n".join(lines))
    policies = docs / "ratio-policies.md"
    policies.write_text(policies.read_text().replace("| bandit | EXP3 as", "| bandit | EXP-3 as"))
    assert docs_tables.check(docs) == [
        "hostile-nodes.md: the attacks table lacks registered 'misleading'",
        "hostile-nodes.md: the attacks table lists 'phantom', which is not registered",
        "ratio-policies.md: the ratio policies table differs from the registry (its rows or "
        "their order)"]
    assert docs_tables.write(docs) == [page, policies] and docs_tables.check(docs) == []


def test_a_throwaway_attack_in_one_file_reaches_the_cli_the_harness_the_env_and_the_docs(
        load, docs):
    assert "throwaway_attack" not in ALL_ATTACKS
    load("throwaway_attack", THROWAWAY_ATTACK)
    # the CLI's choices (sapo-env attack --attacks) and the harness's config
    args = build_parser().parse_args(["attack", "--attacks", "throwaway_attack", "--quick"])
    config = attack_cli.config_from_args(args)
    assert config.attacks == ("throwaway_attack",) and "throwaway_attack" in ATTACKS
    assert RunSpec("throwaway_attack", 0.3, "none", 0, config).transport
    # the env: the config accepts it and the hook sends what it returns, as its sender
    assert "throwaway_attack" in TRANSPORT_ATTACK_NAMES  # imported before it was registered
    env_config = sapo_env.SwarmConfig(n_agents=2, adversaries={"node_1": "throwaway_attack"})
    groups = [{"source": "node_0", "id": "a"}, {"source": "node_1", "id": "b"}]
    sent = transport_attacks.tamper(groups, env_config.adversaries, None, 0.0)
    assert sent == [("node_0", groups[0]), ("node_1", groups[1]), ("node_1", groups[1])]
    # the docs: the check sees it until the table is written again
    assert docs_tables.check(docs) == [
        "hostile-nodes.md: the attacks table lacks registered 'throwaway_attack'"]
    docs_tables.write(docs)
    assert docs_tables.check(docs) == []
    assert "| `throwaway_attack` | packet | sends its groups twice | a stutter |" in (
        docs / "hostile-nodes.md").read_text().splitlines()


def test_a_throwaway_ratio_policy_in_one_file_reaches_the_cli_the_benchmark_and_the_docs(
        load, docs):
    assert "throwaway-policy" not in POLICIES
    module = load("throwaway_policy", THROWAWAY_POLICY)
    # the CLI: bench-ratio's help lists it among the built-in policies, --policies takes it
    parser = bench_cli.COMMAND.build_parser()
    assert "throwaway-policy" in parser.format_help().split("built in:")[1]
    config = bench_cli.config_from_args(parser.parse_args(["--policies", "throwaway-policy",
                                                           "--quick"]))
    assert config.policies == ("throwaway-policy",)
    # the benchmark: a built-in policy (in 'all'), built for a node from its label
    assert "throwaway-policy" in POLICIES
    assert "throwaway-policy" in BenchConfig(quick=True, policies=("all",)).policies
    spec = spec_of("throwaway-policy")
    assert spec.adaptive and isinstance(spec.build(np.random.SeedSequence(0), "node_0", config,
                                                   {}), module.Throwaway)
    assert "throwaway-policy" not in ADAPTIVE  # no tuning: not benchmarked by default
    # the docs
    assert docs_tables.check(docs) == [
        "ratio-policies.md: the ratio policies table lacks registered 'throwaway-policy'"]
    docs_tables.write(docs)
    assert docs_tables.check(docs) == []


def test_the_attack_harness_builds_an_agents_attack_from_its_entry(load, monkeypatch):
    """A text attack's entry gives the harness its swarm builder, the J its nodes start with
    and the env settings its runs add."""
    from sapo_experiments.attack import sweep

    load("throwaway_text", '''
        from sapo_env.attacks import Attack, register_attack

        CALLS = []

        def swarm(agents, attack, nodes, seed):
            CALLS.append((attack, list(nodes)))
            return dict(agents)

        register_attack(Attack("throwaway_text", "text", "nothing", "nobody", swarm=swarm,
                               experiment_env={"round_score_budget": 5.0}, experiment_j=2))
        ''')
    made = []
    real = sapo_env.parallel_env
    monkeypatch.setattr(sapo_env, "parallel_env", lambda **kw: made.append(kw) or real(**kw))
    config = AttackConfig(attacks=("throwaway_text",), rounds=1, seeds=1, n_agents=2,
                          fractions=(0.5,), ablation=False, progress=False, plots=False)
    sweep.compute(RunSpec("throwaway_text", 0.5, "none", 0, config))
    assert sys.modules["throwaway_text"].CALLS == [("throwaway_text", ["node_1"])]
    assert made[0]["num_external"] == {"node_0": 4, "node_1": 2}
    assert made[0]["round_score_budget"] == 5.0 and made[0]["adversaries"] is None


@pytest.mark.parametrize("name, source, label", [
    ("dup_attack", '''
        from sapo_env.defenses.transport_attacks import transport_attack

        @transport_attack("forge_rewards", per="group", does="x", models="y")
        def forge(group, extract, eps):
            return []
        ''', "forge_rewards"),
    ("dup_text", '''
        from sapo_env.attacks import Attack, register_attack

        register_attack(Attack("poison", "text", "x", "y", swarm=dict))
        ''', "poison"),
    ("dup_policy", '''
        from agents.ratio.registry import ratio_policy

        @ratio_policy("exp3", kind="bandit", rule="x")
        class Again:
            pass
        ''', "exp3"),
])
def test_a_name_registered_twice_is_refused_naming_both_places(load, name, source, label):
    registry = ratio_registry.REGISTRY if name == "dup_policy" else attack_registry.REGISTRY
    kept, first = registry.get(label), registry.place(label)
    assert re.fullmatch(r"(sapo_env|agents)\.[\w.]+:\d+", first)  # the defining module
    with pytest.raises(ValueError, match=rf"{registry.what} '{label}' is registered twice: at "
                                         rf"{re.escape(first)} and at {name}:\d+; rename one "
                                         "of them"):
        load(name, source)
    assert registry.get(label) is kept
    assert transport_attacks.TRANSPORT_ATTACKS["forge_rewards"] is transport_attacks.forge_rewards


def test_the_registry_docstring_example_runs():
    import doctest

    import sapo_env.registry

    result = doctest.testmod(sapo_env.registry)
    assert result.attempted > 0 and result.failed == 0


def test_a_run_of_an_attack_its_process_has_not_registered_fails_instead_of_running_clean(
        load):
    """A worker process that did not import the module registering an attack refuses its run,
    rather than playing a swarm without adversaries under the attack's name."""
    from sapo_experiments.attack import sweep

    load("throwaway_attack", THROWAWAY_ATTACK)
    config = AttackConfig(attacks=("throwaway_attack",), rounds=1, seeds=1, n_agents=2,
                          fractions=(0.5,), ablation=False, progress=False, plots=False)
    spec = RunSpec("throwaway_attack", 0.5, "none", 0, config)
    attack_registry.REGISTRY.remove("throwaway_attack")  # as in a process that never loaded it
    with pytest.raises(ValueError, match="unknown attack 'throwaway_attack'"):
        sweep.compute(spec)

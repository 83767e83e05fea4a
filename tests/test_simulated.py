"""The simulated learner: real text scored by the real verifier, learning by re-encoding."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from agents.sim.simulated import (
    FORMATS,
    STRATEGIES,
    SimulatedLearner,
    SimulatedLearnerConfig,
    parse_completion,
    question_difficulty,
    simulated_swarm,
    wrong_answer,
)
from sapo_env import make_observation
from sapo_env.rollouts import group_advantages, make_group
from sapo_env.scoring.answers import extract_tag
from sapo_env.tasks import DrawnQuestion, dataset_for, resolve, score_completions

TASKS = ("basic_arithmetic", "base_conversion", "calendar_arithmetic", "propositional_logic",
         "fraction_simplification", "binary_matrix")


def make_questions(n: int = 6, start: int = 0, seed: int = 7_000_000) -> tuple[dict, ...]:
    """Hand-made questions across tasks, each with a ref reasoning-gym can re-derive."""
    questions = []
    for k in range(n):
        ref = {"task": TASKS[k % len(TASKS)], "config": {}, "seed": seed, "index": start + k}
        entry = resolve(ref)
        questions.append({"id": f"{ref['task']}/{seed}/{start + k}", "task": ref["task"],
                          "prompt": entry["question"], "ref": ref})
    return tuple(questions)


def observation(questions, round_=0, L=8, budget=8, batch=()) -> dict:
    return make_observation(round=round_, system_prompt="", completions_per_question=L,
                            train_budget=budget, num_external=0, questions=questions,
                            batch=batch)


def score(question: dict, completions) -> np.ndarray:
    """The env's scoring of these completions (tag extraction, reasoning-gym's verifier)."""
    drawn = DrawnQuestion(question, resolve(question["ref"]), dataset_for(question["ref"]))
    return score_completions(drawn, completions, extract_tag)


def groups_of(questions, action, source="node_x", round_=0) -> list[dict]:
    """The groups the env would build from ``action``, as a batch holds them."""
    groups = []
    for k, (q, completions) in enumerate(zip(questions, action["completions"])):
        rewards = score(q, completions)
        group = make_group(source, round_, k, q, "", completions, rewards,
                           group_advantages(rewards))
        groups.append({**group, "local": source == "self"})
    return groups


# --- configuration ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "field, value",
    [("start_tag_prob", 0.0), ("known_strategies", ("telepathy",)), ("known_strategies", ()),
     ("strategy_quality", (0.5,)), ("explore", 1.5), ("lr", 0.0), ("lr_jitter", -1.0),
     ("logit_clip", 0.0), ("num_external", -1), ("num_external", 2.0), ("forget_rate", 1.5),
     ("off_policy_power", -1.0), ("difficulty_spread", -0.5)],
)
def test_config_rejects_bad_values_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        SimulatedLearnerConfig(**{field: value})


# --- acting ----------------------------------------------------------------------------------
def test_act_shape_and_num_external_clipped_to_budget():
    questions = make_questions(4)
    learner = SimulatedLearner(SimulatedLearnerConfig(num_external=6), seed=0)
    action = learner.act(observation(questions, L=5, budget=4))
    assert len(action["completions"]) == 4
    assert all(len(c) == 5 and all(isinstance(t, str) for t in c) for c in action["completions"])
    assert action["num_external"] == 4


def test_perfect_learner_scores_one_and_hopeless_one_scores_below():
    questions = make_questions(6)
    perfect = SimulatedLearnerConfig(start_tag_prob=0.999, start_jitter=0.0, logit_clip=20.0,
                                     strategy_quality=(1.0, 1.0, 1.0, 1.0))
    learner = SimulatedLearner(perfect, seed=1)
    learner.format_logits[:] = [20.0, -20.0, -20.0]
    action = learner.act(observation(questions))
    for q, completions in zip(questions, action["completions"]):
        assert score(q, completions).min() == 1.0, (q["task"], completions)
    hopeless = SimulatedLearner(dataclasses.replace(perfect, strategy_quality=(0.0,) * 4), seed=1)
    hopeless.format_logits[:] = [20.0, -20.0, -20.0]
    action = hopeless.act(observation(questions))
    for q, completions in zip(questions, action["completions"]):
        # wrong answers may earn partial credit (propositional_logic), never full marks
        assert score(q, completions).max() < 1.0, (q["task"], completions)


@pytest.mark.parametrize("answer", ["9707", "3 3 2\n2 2 1", "Sunday", "(Q ∧ P)", "aba", "",
                                    "$\\frac{197}{487}$"])
@pytest.mark.parametrize("u", [0.0, 0.37, 0.999])
def test_wrong_answer_differs(answer, u):
    assert wrong_answer(answer, u) != answer


def test_same_seed_same_completions_and_eval_calls_do_not_shift_training():
    questions, later = make_questions(4), make_questions(4, start=10)
    a, b = SimulatedLearner(seed=3), SimulatedLearner(seed=3)
    assert a.act(observation(questions)) == b.act(observation(questions))
    b.act(observation(make_questions(4, start=20)))  # an extra (held-out) call in round 0
    assert a.act(observation(later, round_=1)) == b.act(observation(later, round_=1))
    # another seed, same questions, same round: other completions
    assert SimulatedLearner(seed=4).act(observation(questions)) != SimulatedLearner(
        seed=3).act(observation(questions))


def test_slot_aligned_draws_make_a_slot_s_completions_independent_of_J():
    """With slot_aligned_draws, question slot k gets the same random numbers whether the node
    was dealt 2, 4 or 8 questions; without, only the full budget draws as before."""
    questions = make_questions(8)
    aligned = SimulatedLearnerConfig(slot_aligned_draws=True)
    full = SimulatedLearner(aligned, seed=3).act(observation(questions))["completions"]
    for dealt in (2, 4, 6):
        part = SimulatedLearner(aligned, seed=3).act(observation(questions[:dealt]))
        assert part["completions"] == full[:dealt]
        plain = SimulatedLearner(seed=3).act(observation(questions[:dealt]))
        assert plain["completions"] != full[:dealt]  # the old draws: slot k moves with I
    assert SimulatedLearner(seed=3).act(observation(questions))["completions"] == full
    with pytest.raises(ValueError, match="slot_aligned_draws must be a bool"):
        SimulatedLearnerConfig(slot_aligned_draws=1)


def test_simulated_learners_factory_applies_its_overrides_and_names_them():
    from sapo_experiments import learners

    factory = learners.SimulatedLearners({"start_tag_prob": 0.3, "slot_aligned_draws": True})
    nodes = factory(["node_0", "node_1"], 2, np.random.SeedSequence(0))
    assert [n.config.start_tag_prob for n in nodes] == [0.3, 0.3]
    assert [n.config.num_external for n in nodes] == [2, 2]
    reference = simulated_swarm(["node_0", "node_1"], seed=np.random.SeedSequence(0),
                                num_external=2, start_tag_prob=0.3, slot_aligned_draws=True)
    obs = observation(make_questions(4))
    assert [n.act(obs) for n in nodes] == [n.act(obs) for n in reference.values()]
    assert "start_tag_prob=0.3" in learners.describe(factory)
    assert learners.describe(factory) != learners.describe(learners.SimulatedLearners())
    with pytest.raises(ValueError, match="SimulatedLearners overrides: .*'nope'"):
        learners.SimulatedLearners({"nope": 1})
    with pytest.raises(ValueError, match="start_tag_prob must be in"):
        learners.SimulatedLearners({"start_tag_prob": 2.0})


def test_swarm_nodes_start_different_and_overrides_apply():
    swarm = simulated_swarm(3, seed=0, num_external=2, lr_jitter=0.5)
    assert list(swarm) == ["node_0", "node_1", "node_2"]
    assert all(s.config.num_external == 2 for s in swarm.values())
    assert len({round(s.lr, 9) for s in swarm.values()}) == 3
    assert len({tuple(s.format_logits.round(9)) for s in swarm.values()}) == 3


# --- re-encoding -----------------------------------------------------------------------------
def test_parse_recovers_every_format_and_strategy():
    learner = SimulatedLearner(SimulatedLearnerConfig(known_strategies=STRATEGIES,
                                                      explore=0.0), seed=0)
    questions = make_questions(6)
    seen = set()
    for round_ in range(30):
        action = learner.act(observation(questions, round_=round_))
        for completions in action["completions"]:
            for text in completions:
                fmt, strategy = parse_completion(text)
                assert fmt is not None and strategy is not None, text
                assert text.startswith(f"Approach: {STRATEGIES[strategy]}.")
                seen.add((fmt, strategy))
    assert {f for f, _ in seen} == set(range(len(FORMATS)))
    assert {s for _, s in seen} == set(range(len(STRATEGIES)))


def test_parse_reads_the_format_of_text_no_sim_learner_wrote():
    assert parse_completion("Let me think. 2+2=4 <answer>4</answer>") == (0, None)
    assert parse_completion("Adding them up, the answer is 4.") == (1, None)
    assert parse_completion("zzz qqq") == (None, None)
    assert parse_completion("Approach: telepathy. Hmm\n<answer>4</answer>") == (0, None)


# --- learning --------------------------------------------------------------------------------
def test_learn_moves_towards_positive_advantage_and_empty_batch_is_none():
    learner = SimulatedLearner(SimulatedLearnerConfig(lr=2.0), seed=0)
    assert learner.learn(()) is None
    tagged = "Approach: recall. I remember.\n<answer>4</answer>"
    hedged = "Approach: guess. I go with my first impression.\nI think it is 5, but I am not sure."
    group = {"task": "basic_arithmetic", "completions": (tagged, hedged) * 4,
             "rewards": np.array([1, 0] * 4, np.float32),
             "advantages": group_advantages(np.array([1, 0] * 4, np.float32))}
    before_tag = learner.format_probs()[0]
    before = learner.skill("basic_arithmetic").probs()
    metrics = learner.learn([group])
    after = learner.skill("basic_arithmetic").probs()
    assert metrics["tag_prob"] > before_tag
    assert after[STRATEGIES.index("recall")] > before[STRATEGIES.index("recall")]
    assert after[STRATEGIES.index("guess")] < before[STRATEGIES.index("guess")]
    assert metrics["readable_fraction"] == 1.0
    assert set(metrics) >= {"loss", "tag_prob", "expected_quality", "known_strategies"}


def test_zero_advantage_groups_count_in_the_step_normaliser():
    """As GRPO's token-level loss (and the GRPO agent) does: a zero-advantage group adds no
    gradient but dilutes the step, here to exactly half (both groups have 8 completions)."""
    tagged = "Approach: recall. I remember.\n<answer>4</answer>"
    hedged = "Approach: guess. I go with my first impression.\nI think it is 5, but I am not sure."
    rewards = np.array([1, 0] * 4, np.float32)
    informative = {"task": "basic_arithmetic", "completions": (tagged, hedged) * 4,
                   "rewards": rewards, "advantages": group_advantages(rewards)}
    flat = {"task": "basic_arithmetic", "completions": (tagged,) * 8,
            "rewards": np.ones(8, np.float32), "advantages": np.zeros(8, np.float32)}
    steps = []
    for batch in ([informative], [informative, flat]):
        learner = SimulatedLearner(SimulatedLearnerConfig(lr=0.01, logit_clip=50.0), seed=0)
        before = learner.format_logits.copy()
        learner.learn(batch)
        steps.append(learner.format_logits - before)
    np.testing.assert_allclose(steps[1], steps[0] / 2, rtol=1e-9)


def test_reading_an_unknown_strategy_makes_it_known_and_learnable():
    learner = SimulatedLearner(SimulatedLearnerConfig(explore=0.0), seed=0)
    verify = STRATEGIES.index("verify")
    assert not learner.skill("basic_arithmetic").known[verify]
    text = "Approach: verify. I check.\n<answer>4</answer>"
    wrong = "Approach: guess. Hmm.\n<answer>5</answer>"
    rewards = np.array([1, 0] * 4, np.float32)
    group = {"task": "basic_arithmetic", "completions": (text, wrong) * 4, "rewards": rewards,
             "advantages": group_advantages(rewards), "local": False}
    learner.learn([group])
    skill = learner.skill("basic_arithmetic")
    assert skill.known[verify] and skill.probs()[verify] > 0
    # once known, the learner can produce it
    questions = make_questions(1)
    texts = [t for r in range(50) for t in learner.act(observation(questions, round_=r))[
        "completions"][0]]
    assert any(t.startswith("Approach: verify.") for t in texts)


def recall_beats_guess(task="basic_arithmetic", local=True) -> dict:
    """A group in which "recall" answered right and "guess" wrong, half and half."""
    right = "Approach: recall. This looks like one I have seen before.\n<answer>4</answer>"
    wrong = "Approach: guess. I go with my first impression.\n<answer>5</answer>"
    rewards = np.array([1, 0] * 4, np.float32)
    return {"task": task, "completions": (right, wrong) * 4, "rewards": rewards,
            "advantages": group_advantages(rewards), "local": local}


def test_unpractised_skills_drift_back_to_their_start_and_practised_ones_do_not():
    learner = SimulatedLearner(SimulatedLearnerConfig(forget_rate=0.25), seed=0)
    idle, practised = learner.skill("basic_arithmetic"), learner.skill("base_conversion")
    idle_start, practised_start = idle.logits.copy(), practised.logits.copy()
    format_start = learner.format_logits.copy()
    idle.logits += 2.0
    practised.logits += 2.0
    learner.format_logits += 1.0
    # one own group on base_conversion that carries no gradient: only forgetting moves logits
    silent = {"task": "base_conversion", "completions": ("zzz",) * 8,
              "rewards": np.zeros(8, np.float32), "advantages": np.zeros(8, np.float32),
              "local": True}
    learner.learn([silent])
    np.testing.assert_allclose(idle.logits, idle_start + 0.75 * 2.0)
    np.testing.assert_allclose(practised.logits, practised_start + 2.0)
    np.testing.assert_allclose(learner.format_logits, format_start + 1.0)  # it answered
    # a round of external groups only: nothing was practised, the format fades too
    learner.learn([{**silent, "local": False}])
    np.testing.assert_allclose(practised.logits, practised_start + 0.75 * 2.0)
    np.testing.assert_allclose(learner.format_logits, format_start + 0.75)


def test_a_forgotten_discovery_returns_to_its_seed_and_stays_known():
    learner = SimulatedLearner(SimulatedLearnerConfig(forget_rate=1.0, explore=0.0), seed=0)
    verify = STRATEGIES.index("verify")
    text = "Approach: verify. I check.\n<answer>4</answer>"
    rewards = np.array([1, 0] * 4, np.float32)
    group = {"task": "basic_arithmetic", "completions": (text, "zzz") * 4, "rewards": rewards,
             "advantages": group_advantages(rewards), "local": False}
    learner.learn([group])
    skill = learner.skill("basic_arithmetic")
    seed_logit = skill.start[verify]
    assert skill.logits[verify] > seed_logit  # reinforced after it was read
    learner.learn([{**group, "task": "base_conversion"}])  # basic_arithmetic not practised
    assert skill.known[verify] and skill.logits[verify] == seed_logit


@pytest.mark.parametrize("local", [False, True])
def test_external_text_the_node_would_rarely_write_teaches_less(local):
    recall = STRATEGIES.index("recall")

    def recall_step(power):
        learner = SimulatedLearner(SimulatedLearnerConfig(off_policy_power=power), seed=0)
        skill = learner.skill("basic_arithmetic")
        skill.logits[:] = [3.0, -3.0, 0.0, 0.0]  # this node seldom recalls
        learner.learn([recall_beats_guess(local=local)])
        return skill.logits[recall] + 3.0

    assert recall_step(0.0) > 0
    if local:  # its own text is on-policy: the weight does not apply
        assert recall_step(1.0) == recall_step(0.0)
    else:
        assert 0 < recall_step(1.0) < 0.1 * recall_step(0.0)


def test_question_difficulty_is_a_logistic_property_of_the_question():
    ref = {"task": "basic_arithmetic", "config": {"min_terms": 2}, "seed": 123, "index": 4}
    assert question_difficulty(ref) == question_difficulty({**ref, "config": {}})
    d = np.array([question_difficulty({**ref, "index": i}) for i in range(4000)])
    assert abs(d.mean()) < 0.1 and abs(d.std() - np.pi / np.sqrt(3)) < 0.1


def test_difficulty_spread_makes_groups_all_right_or_all_wrong():
    """With every strategy right half the time, a group of 8 is all right or all wrong with
    probability 2/256 on equally hard questions; spread difficulty makes that common."""
    questions = make_questions(48)

    def uniform_groups(spread):
        config = SimulatedLearnerConfig(strategy_quality=(0.5,) * 4, difficulty_spread=spread)
        learner = SimulatedLearner(config, seed=2)
        learner.format_logits[:] = [20.0, -20.0, -20.0]  # always tagged: the verifier reads all
        action = learner.act(observation(questions))
        uniform = sum(len(set(score(q, completions) == 1.0)) == 1
                      for q, completions in zip(questions, action["completions"]))
        return uniform / len(questions)

    assert uniform_groups(0.0) < 0.1
    assert uniform_groups(3.0) > 0.4


def test_reward_rises_in_isolation():
    """Training only on its own groups (8/0), a learner's verifier score goes up."""
    learner = SimulatedLearner(SimulatedLearnerConfig(lr=2.0, start_tag_prob=0.2), seed=5)
    rewards = []
    for round_ in range(60):
        questions = make_questions(6, start=6 * round_)
        action = learner.act(observation(questions, round_=round_))
        groups = groups_of(questions, action, source="self", round_=round_)
        rewards.append(float(np.mean([g["rewards"].mean() for g in groups])))
        learner.learn(groups)
    assert np.mean(rewards[-15:]) > np.mean(rewards[:15]) + 0.1


# --- in the real env -------------------------------------------------------------------------
def run_swarm(n, rounds, seed=0, config=None, **overrides):
    import sapo_env.runtime

    # the env's J of round 0 is the learners' J (a learner's action sets it from round 1 on)
    env = sapo_env.parallel_env(n=n, max_rounds=rounds,
                                num_external=overrides.get("num_external", 0))
    nodes = simulated_swarm(env.possible_agents, seed=seed, config=config, **overrides)
    return sapo_env.runtime.run(env, nodes, seed=seed, progress=False), nodes


def test_reward_rises_in_isolation_in_the_env():
    history, _ = run_swarm(2, 60, num_external=0, lr=3.0)
    curve = history.swarm_mean
    assert curve[-15:].mean() > curve[:15].mean() + 0.1


def test_skill_of_one_node_spreads_with_sharing_only():
    """Only node_0 knows "verify" and nobody can invent it: the others learn it only by reading
    node_0's shared text, so with J=0 they never use it."""
    verify = STRATEGIES.index("verify")

    def others_verify(num_external):
        base = SimulatedLearnerConfig(explore=0.0, lr=3.0, start_tag_prob=0.5,
                                      num_external=num_external)
        pioneer = dataclasses.replace(base, known_strategies=STRATEGIES)
        config = {"node_0": pioneer, "node_1": base, "node_2": base, "node_3": base}
        history, nodes = run_swarm(4, 40, config=config)
        known = [np.mean([s.known[verify] for s in nodes[a].skills.values()])
                 for a in ("node_1", "node_2", "node_3")]
        used = [np.mean([s.probs()[verify] for s in nodes[a].skills.values()])
                for a in ("node_1", "node_2", "node_3")]
        return np.array(known), np.array(used)

    known, used = others_verify(0)
    assert known.max() == 0.0 and used.max() == 0.0
    known, used = others_verify(4)
    assert known.min() > 0.5 and used.min() > 0.0


def test_same_seed_same_history():
    a, _ = run_swarm(3, 15, seed=11, num_external=2)
    b, _ = run_swarm(3, 15, seed=11, num_external=2)
    np.testing.assert_array_equal(a.rewards, b.rewards)
    assert a.learn_metrics == b.learn_metrics


def test_swarm_config_mapping_must_name_swarm_nodes():
    with pytest.raises(ValueError, match="node_O"):
        simulated_swarm(2, config={"node_O": SimulatedLearnerConfig()})

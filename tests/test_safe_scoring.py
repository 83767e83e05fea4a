"""Scorers never execute answer text, honest answers score as before, and the scoring guard turns
every failure of a scorer into a counted 0 (sapo_env.scoring: safe_parsing,
safe_scorers, guard)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time

import numpy as np
import pytest
import reasoning_gym
import sympy
from conftest import ARITHMETIC, SMALL, mixed_actions
from reasoning_gym.logic import propositional_logic
from sympy.parsing.sympy_parser import parse_expr

import sapo_env
from sapo_env.config import PAPER_TASKS
from sapo_env.scoring import guard as scoring_guard
from sapo_env.scoring import safe_scorers
from sapo_env.scoring.answers import extract_tag
from sapo_env.scoring.guard import FAILURE_REASONS, ScoringLimits, guarded_scores, no_failures
from sapo_env.scoring.safe_parsing import (
    MAX_BITS,
    integer_arithmetic,
    literal,
    propositional_expression,
    sympy_expression,
)
from sapo_env.tasks import reference_answer

SENTINEL = "SAPO_ENV_PWNED"


def code_answers() -> list[str]:
    """Answers that would leave SENTINEL in the environment if anything executed them."""
    payload = f"__import__('os').environ.__setitem__('{SENTINEL}', '1')"
    return [payload, f"[{payload}]", f"[[{payload}]]", f"x + {payload}", f"({payload}, 1)",
            f"(lambda: {payload})()", f"[x for x in [{payload}]]", f"Symbol('x') * {payload}",
            "().__class__.__base__.__subclasses__()", "9**9**9**9", "(2*x)**10**10",
            "1e999999999", "Float('1e999999999')", "Rational('1e999999999')",
            "factorial(99999999)", "2<<10**10", "open('/etc/passwd').read()"]


# --- reasoning-gym's own functions, for comparison on honest text -----------------------------


@contextlib.contextmanager
def reasoning_gym_alone():
    """reasoning-gym's own eval/parse_expr/score_answer, for the block's duration (honest
    text only)."""
    safe_scorers.restore()
    try:
        yield
    finally:
        safe_scorers.apply()


def original_propositional_parser():
    with reasoning_gym_alone():
        return propositional_logic.parse_expr


def honest_answers(task: str, entry: dict) -> list[str]:
    """The reference answer, the partial-credit forms the eval-based scorers read, and typical
    wrong answers."""
    ref = reference_answer(entry)
    meta = entry["metadata"]
    answers = [ref, "", "no idea", "0", ref[:-1], ref + " 1", ref.replace("1", "2", 1),
               f"The answer is {ref}"]
    extra = {  # built only for its own task: the metadata differ
        "binary_matrix": lambda: [str(meta["solution"]), str(meta["matrix"])],
        "spiral_matrix": lambda: [str(meta["solution"]), str(meta["matrix"])],
        "n_queens": lambda: [str(s) for s in meta["solutions"][:2]] + [str(meta["puzzle"])],
        "string_insertion": lambda: [str(list(ref)), str(list(ref[::-1]))],
        "number_sorting": lambda: [ref.replace("'", ""), str(sorted(eval(ref)))],
        "bitwise_arithmetic": lambda: [str(int(ref, 16)), hex(int(ref, 16) + 1), ref.upper()],
        "countdown": lambda: [str(meta["target"]), " + ".join(map(str, meta["numbers"]))],
        "puzzle24": lambda: ["24", " * ".join(map(str, meta["numbers"]))],
        "propositional_logic": lambda: ["P", "¬P", "(P ∨ ¬P)", "P ∧ Q", "(P → Q)", "P and Q",
                                        "p ∧ q", "((P ∧ Q) ∨ R) ↔ ¬S"],
        "simple_integration": lambda: ["x**2 + C", ref.replace(" + C", "")],
        "intermediate_integration": lambda: ["x**2 + C", ref.replace(" + C", "")],
        "polynomial_multiplication": lambda: ["x**2 + 1", ref.replace("+", "-", 1)],
    }.get(task, list)()
    return answers + extra


PATCHED = {"binary_matrix": 30, "n_queens": 30, "spiral_matrix": 30, "string_insertion": 30,
           "number_sorting": 30, "bitwise_arithmetic": 30, "countdown": 15, "puzzle24": 15,
           "propositional_logic": 30, "simple_integration": 3, "intermediate_integration": 2,
           "polynomial_multiplication": 5}  # task -> entries (sympy's simplify is slow)


@pytest.mark.parametrize("task", PATCHED)
def test_honest_answers_score_as_with_reasoning_gym_alone(task):
    dataset = reasoning_gym.create_dataset(task, seed=7, size=PATCHED[task])
    entries = [dataset[i] for i in range(PATCHED[task])]
    cases = [(entry, answer) for entry in entries for answer in honest_answers(task, entry)]
    safe = [dataset.score_answer(answer, entry) for entry, answer in cases]
    with reasoning_gym_alone():
        original = [dataset.score_answer(answer, entry) for entry, answer in cases]
    assert safe == original
    assert max(safe) == 1.0  # the reference answers were scored as right


@pytest.mark.parametrize("task", PATCHED)
def test_code_in_an_answer_is_never_executed(task):
    dataset = reasoning_gym.create_dataset(task, seed=3, size=1)
    entry = dataset[0]
    garbage = dataset.score_answer("garbage", entry)
    for answer in code_answers():
        start = time.process_time()
        try:
            score = dataset.score_answer(answer, entry)
        except (ValueError, RecursionError):
            score = 0.0  # raising is fine: the guard scores it 0 (prime_factorization does)
        assert SENTINEL not in os.environ, answer
        assert score <= max(garbage, 0.0), (answer, score)  # countdown's floor is 0.01
        assert time.process_time() - start < 1.0, answer  # refused before computing


@pytest.mark.parametrize("task", ["binary_matrix", "countdown", "simple_integration"])
def test_the_same_answers_do_run_code_in_reasoning_gym_alone(task):
    """The attack the tests above defend against is real (and harmless here)."""
    dataset = reasoning_gym.create_dataset(task, seed=3, size=1)
    try:
        with reasoning_gym_alone():
            assert propositional_logic.parse_expr is not safe_scorers.parse_proposition
            dataset.score_answer(code_answers()[0], dataset[0])
        assert os.environ.pop(SENTINEL) == "1"
    finally:
        os.environ.pop(SENTINEL, None)
    assert propositional_logic.parse_expr is safe_scorers.parse_proposition  # apply()ed again


def test_no_scorer_of_any_task_compiles_or_runs_answer_text():
    """An audit hook sees every eval/exec of text; none may happen while scoring, on any task
    reasoning-gym registers (composite needs sub-datasets, and wraps these scorers)."""
    from reasoning_gym.factory import DATASETS

    seen: list[str] = []
    state = {"on": False}

    def hook(event, args):
        if state["on"] and event == "compile" and args[1] != "<unknown>":  # ast.parse is fine
            seen.append(f"compile {args[1]}")
        if state["on"] and event == "exec" and args[0].co_filename.startswith("<"):
            seen.append(f"exec {args[0].co_filename}")

    sys.addaudithook(hook)  # stays for the session, but records only while state["on"]
    for task in sorted(set(DATASETS) - {"composite"}):
        try:
            dataset = reasoning_gym.create_dataset(task, seed=1, size=1)
            entry = dataset[0]
        except Exception:  # noqa: BLE001 (a few tasks need data or config; nothing to score)
            continue
        for answer in [reference_answer(entry), *code_answers()[:8]]:
            for hooked in (False, True):  # the first call pays for lazy imports
                state["on"] = hooked
                try:
                    dataset.score_answer(answer, entry)
                except Exception:  # noqa: BLE001 (some scorers raise: the guard's job)
                    pass
                finally:
                    state["on"] = False
            assert seen == [], (task, answer, seen)


# --- the parsers ----------------------------------------------------------------------------


def test_literal_reads_literals_only():
    assert literal(" [[0, 1], (2, 'a')]") == [[0, 1], (2, "a")]
    for text in ["[[0]*3]", "x", "__import__('os')", "[" * 300 + "]" * 300, "9" * 5000,
                 "x" * 70000]:
        with pytest.raises((ValueError, SyntaxError)):
            literal(text)


def test_integer_arithmetic_agrees_with_python_on_bitwise_problems():
    dataset = reasoning_gym.create_dataset("bitwise_arithmetic", seed=0, size=300, difficulty=4)
    for i in range(300):
        problem = dataset[i]["metadata"]["problem"]
        assert integer_arithmetic(problem) == eval(problem), problem  # trusted generated text
    for text in ["1 << 10**10", "2**3", "abs(1)", "(1).real"]:
        with pytest.raises(ValueError):
            integer_arithmetic(text)


@pytest.mark.parametrize("text", [
    "x**2 + C", "-4*(-2*x - 8)**(3/2)/3 + C", "3*x*exp(2*x) - sin(x)/2 + log(x)", "1.5*x - .25",
    "2*sqrt(x) + atan(x) + pi", "3*Integral(x**3*cos(3*x), x) + C", "0.[3]", "7//2 + 7 % 3",
    "x**-1", "2**10", "(1 + I)**2", "y*z**3 - 120384*z**6", "94*4 - 61 - 6", "1e10 + 1E-5",
    # the forms reasoning-gym reads that the safe parser once refused
    "759*pow(x, 5) + 3*x", "Pow(x, 2)", "cbrt(x)", "root(x, 3)", "root(x, 3, 1)", "abs(x - 1)",
    "Abs(x)", "Max(x, 2) + Min(x, 1)", "max(x, 1) - min(2, 3)", "sign(x)", "floor(x/2)",
    "ceiling(7/2)", "factorial(5)", "5!", "x!", "binomial(x, 3) + binomial(1584, 1)",
    "gamma(7/2)", "S(2)/3", "Add(x, 1, 2)", "Mul(2, x + 1, C)", "Integer(3)*Float('1.5')",
    "pow(E, x) + exp(2*x)", "real_root(-8, 3)", "log(8, 2) + ln(x)", "pow(x, 2, 3)", "Max()",
    "atan2(x, 1) + erf(x) + sech(x) + asinh(x)", "oo + zoo + nan", "Rational(3, 9)",
])
def test_sympy_expression_equals_parse_expr_on_honest_text(text):
    local = {"x": sympy.Symbol("x"), "C": sympy.Symbol("C")}
    expected = parse_expr(text, local_dict=dict(local))
    assert sympy.srepr(sympy_expression(text, local)) == sympy.srepr(expected)


# A refusal costs milliseconds; what these texts would compute if read costs minutes to hours
# (factorial(10**7), 9**9**9**9). The bound is this process's CPU time, 10-100x what a refusal
# takes, so a loaded machine does not fail it and an evaluated text still does.
REFUSAL_CPU_SECONDS = 1.0


@pytest.mark.parametrize("text", [
    "x.func", "x[0]", "lambda y: y", "x if x else 1", "f(x)", "Function('f')(x)", "x == 1",
    "Symbol('x', real=True)", "Float('1.5', 10**9)", "(1, 2)", "eval('1')", "Q.zero",
    "9**9**9**9", "2**(x*0 + 10**6)", "(2*x)**100000", "((x + 1)**999)**999", "10**10000",
    "Rational('1/3')", "1e999999999", "2" + "*x" * 300, "(" * 250 + "x" + ")" * 250,
])
def test_sympy_expression_refuses_what_no_answer_needs(text):
    start = time.process_time()
    with pytest.raises((ValueError, SyntaxError, TypeError)):
        sympy_expression(text, {"x": sympy.Symbol("x")})
    assert time.process_time() - start < REFUSAL_CPU_SECONDS


@pytest.mark.parametrize("text", [
    "__import__('os')", "__import__('os').system('true')", "x.__class__", "x.func", "S.Half",
    "pow(9, 9**9)", "pow(9, pow(9, 9))", "Pow(10, 10**6)", "pow(2, 10**6, 7)",
    "factorial(10**7)", "factorial(10**6)", "factorial(1000)", "(10**7)!", "gamma(10**6)",
    "binomial(10**6, 5*10**5)", "binomial(2**100, 100)", "root(2, 10**9)",
    "real_root(2, 10**9)", "x**(1/1001)", "exp(10**9*log(2))", "exp(1000)**1000",
    "exp(1000)*exp(1000)", "(x + 2**900)**10", "Mul(" + ", ".join(["2**1000"] * 9) + ")",
    "Max(" + ", ".join(f"x**{i}" for i in range(9)) + ")", "lambda: 1", "(lambda y: y)(x)",
    "x[0]", "[x][0]", "S('x')", "sympify('1')", "sqrt(x, False)", "Pow(2, 10, False)",
    "Max(x, 1, evaluate=False)", "N(pi, 10**9)", "Function('f')(x)", "f(x)", "x(2)",
    "1.5" + "0" * 60000, "9" * 4000, "1" * 5000, "x" * 70000, "-" * 20000 + "x",
    "x" + "**x" * 3000, "(" * 5000 + "x" + ")" * 5000, "'" + "a" * 60000 + "'",
])
def test_hostile_sympy_text_is_refused_before_it_computes(text):
    start = time.process_time()
    with pytest.raises((ValueError, SyntaxError, TypeError)):
        sympy_expression(text, {"x": sympy.Symbol("x"), "C": sympy.Symbol("C")})
    # sympy's tokenizer is linear in the text; what it refuses would compute for minutes
    assert time.process_time() - start < REFUSAL_CPU_SECONDS + 1e-4 * len(text)


def test_sympy_numbers_stay_small():
    assert MAX_BITS == 8192  # the expressions below are built for it
    assert sympy_expression("(2**1000)**8 * 2**191 + 1").p.bit_length() == MAX_BITS
    with pytest.raises(ValueError):
        sympy_expression("(2**1000)**8 * 2**191 * 4")


def test_propositional_parser_gives_reasoning_gym_trees():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    original = original_propositional_parser()

    def tree(text, parse):
        try:
            e = parse(text)
        except ValueError as error:
            return ("ValueError", str(error))
        stack, out = [e], []
        while stack:
            node = stack.pop()
            if isinstance(node, propositional_logic.Expression):
                out.append(node.operator)
                stack += [node.left, node.right]
            else:
                out.append(node)
        return out

    @settings(max_examples=600, deadline=None, derandomize=True, database=None)
    @given(st.text(alphabet="PQ()∧∨→↔¬ \tx", max_size=30))
    def check(text):
        assert tree(text, propositional_expression) == tree(text, original)

    check()


def test_propositional_logic_is_linear_and_bounds_its_truth_table():
    dataset = reasoning_gym.create_dataset("propositional_logic", seed=0, size=1)
    entry = dataset[0]
    v = entry["metadata"]["variables"][0]
    start = time.process_time()
    for answer in ["¬" * 2047 + v, f"{v}∧" * 1023 + v, f"({v}↔{v})→" * 290 + v,
                   " ∧ ".join(f"p{i}" for i in range(300)), "(" * 900 + v + ")" * 900]:
        try:
            assert 0.0 <= dataset.score_answer(answer, entry) <= 1.0
        except RecursionError:
            pass  # deeper than Python evaluates: the guard scores it 0
    assert time.process_time() - start < 2.0  # reasoning-gym alone: seconds each, gigabytes
    assert dataset.score_answer(" ∧ ".join(f"p{i}" for i in range(300)), entry) == 0.0
    five_extra = " ∧ ".join([v, "a", "b", "c", "d", "e"])
    assert dataset.score_answer(five_extra.replace(" ∧ e", ""), entry) > 0  # 4: scored
    assert dataset.score_answer(five_extra, entry) == 0.0


# --- the guard --------------------------------------------------------------------------------


FAST = ScoringLimits(time_limit=0.05)


def guard(answers, score, limits=FAST):
    failures = no_failures()
    return guarded_scores(answers, lambda c: c, score, limits, failures).tolist(), failures


def test_failures_score_zero_and_are_counted_by_reason():
    def score(answer):
        if answer == "raise":
            raise KeyError("boom")
        if answer == "recurse":
            return score(answer)
        if answer == "slow":
            while True:
                pass
        return {"nan": float("nan"), "none": None, "inf": float("inf")}.get(answer, 0.5)

    answers = ["ok", "raise", "recurse", "slow", "nan", "none", "inf", "x" * 2049, "ok"]
    start = time.perf_counter()
    scores, failures = guard(answers, score)
    assert time.perf_counter() - start < 1.0
    assert scores == [0.5, 0, 0, 0, 0, 0, 0, 0, 0.5]
    assert failures == {"too_long": 1, "error": 4, "recursion": 1, "timeout": 1, "budget": 0}


def test_an_over_long_answer_is_never_parsed():
    calls = []
    scores, failures = guard(["x" * 11], calls.append, ScoringLimits(max_answer_chars=10))
    assert calls == [] and failures["too_long"] == 1
    # the boundary: an answer of exactly max_answer_chars is scored
    scores, failures = guard(["x" * 10], lambda a: calls.append(a) or 1.0,
                             ScoringLimits(max_answer_chars=10))
    assert calls == ["x" * 10] and scores == [1.0] and failures["too_long"] == 0


@pytest.mark.parametrize("text", ["1e-999999", "1e-5000", "-1e-999999", "1e999999"])
def test_decimals_beyond_the_bound_are_refused_both_ways(text):
    """Tiny exponents as well as huge ones: sympy would carry either as an exact exponent."""
    with pytest.raises(ValueError):
        sympy_expression(text)
    assert sympy_expression("1e-20") == sympy.Float("1e-20")


def test_a_scorer_that_swallows_the_timeout_still_stops():
    def stubborn(answer):
        for _ in range(3):  # catches the interruption twice, then gives up
            try:
                while True:
                    pass
            except BaseException:  # noqa: BLE001 (what a careless scorer does)
                pass
        return 1.0

    def catches_exception_in_a_loop(answer):
        while True:
            try:
                sum(range(1000))
            except Exception:  # noqa: BLE001 (ScoreTimeout is not an Exception)
                continue

    scores, failures = guard(["a", "b"], lambda a: stubborn(a) if a == "a"
                             else catches_exception_in_a_loop(a))
    assert scores == [0, 0] and failures["timeout"] == 2


def test_the_timer_is_left_as_it_was():
    def handler(signum, frame):
        pass

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        guard(["a"], lambda a: 1.0)
        assert signal.getsignal(signal.SIGALRM) is handler
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
        # someone else's alarm is running: no time limit, and their alarm is untouched
        signal.setitimer(signal.ITIMER_REAL, 30.0)
        scores, failures = guard(["a"], lambda a: time.sleep(0.1) or 1.0)
        assert scores == [1.0] and failures["timeout"] == 0
        assert 29.0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 30.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _count_timer_calls(monkeypatch):
    """Every ``signal.signal`` and ``signal.setitimer`` call from now on, in order."""
    calls = []
    real_signal, real_setitimer = signal.signal, signal.setitimer
    monkeypatch.setattr(signal, "signal",
                        lambda *args: calls.append("signal") or real_signal(*args))
    monkeypatch.setattr(signal, "setitimer",
                        lambda *args: calls.append(args[1:]) or real_setitimer(*args))
    return calls


def test_a_session_sets_the_timer_once_for_many_questions_and_keeps_the_limits(monkeypatch):
    def slow_on_b(answer):
        while answer == "b":
            pass
        return 1.0

    before = signal.getsignal(signal.SIGALRM)
    calls = _count_timer_calls(monkeypatch)
    with scoring_guard.timer_session(FAST):
        results = [guard(["a", "b", "a"], slow_on_b) for _ in range(5)]
        assert calls == ["signal", (FAST.time_limit * scoring_guard.TICK,) * 2]
        # a node with less budget left than the limit: a finer tick for its completions only
        failures = no_failures()
        budget = scoring_guard.ScoreBudget(0.01)
        scores = guarded_scores(["b", "a"], lambda c: c, slow_on_b, FAST, failures, budget)
        assert calls[2:] == [(0.0025, 0.0025), (FAST.time_limit * scoring_guard.TICK,) * 2]
    assert calls[4:] == [(0,), "signal"]  # disarmed, and the handler put back, once
    assert signal.getsignal(signal.SIGALRM) is before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert all(r == ([1.0, 0.0, 1.0], {**no_failures(), "timeout": 1}) for r in results)
    assert scores.tolist() == [0.0, 0.0] and (failures["timeout"], failures["budget"]) == (1, 1)


def test_a_round_is_scored_in_one_session(monkeypatch):
    from sapo_env.scoring.answers import get_extractor
    from sapo_env.scoring.jobs import score_all
    from sapo_env.tasks import DrawnQuestion

    calls = _count_timer_calls(monkeypatch)
    jobs = [(DrawnQuestion(question=None, entry={}, dataset=_FastDataset()),
             ["<answer>1</answer>"] * 4, k % 2) for k in range(6)]
    results = score_all(jobs, get_extractor("tag"), FAST, [10.0, 10.0])
    assert [r.scores.tolist() for r in results] == [[1.0] * 4] * 6
    assert calls.count("signal") == 2 and len(calls) == 4  # not four calls a question


def test_off_the_main_thread_scoring_still_catches_errors():
    out = {}

    def run():
        out["result"] = guard(["ok", "raise"], lambda a: 1.0 if a == "ok" else 1 / 0)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert out["result"] == ([1.0, 0.0], {"too_long": 0, "error": 1, "recursion": 0,
                                          "timeout": 0, "budget": 0})


def test_each_reason_is_logged_once(caplog):
    scoring_guard._warned.clear()
    with caplog.at_level(logging.WARNING, logger="sapo_env.scoring.guard"):
        guard(["raise", "raise", "x" * 3000], lambda a: 1 / 0)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert any("max_answer_chars=2048" in m for m in messages)


# --- in the env -------------------------------------------------------------------------------


def test_the_env_counts_failures_per_node_and_completes_the_round():
    def extract(completion):
        if completion == "raise":
            raise RuntimeError("a buggy extractor")
        if completion == "slow":
            time.sleep(5)
        return extract_tag(completion)

    env = sapo_env.parallel_env(**SMALL, tasks=ARITHMETIC, answer_format=extract,
                                score_time_limit=0.05)
    observations, _ = env.reset(seed=0)
    actions = mixed_actions(observations)
    actions["node_1"]["completions"] = (("raise", "slow", "<answer>" + "9" * 3000 + "</answer>"),
                                        actions["node_1"]["completions"][1])
    _, rewards, _, _, infos = env.step(actions)
    assert infos["node_1"]["scoring_failures"] == {"too_long": 1, "error": 1, "recursion": 0,
                                                   "timeout": 1, "budget": 0}
    assert infos["node_0"]["scoring_failures"] == no_failures()
    assert rewards["node_1"] == pytest.approx(np.mean([0, 0, 0, 1, 0, 0]))


def test_paper_tasks_score_code_and_huge_numbers_zero_in_the_env():
    env = sapo_env.parallel_env(n=1, completions_per_question=len(code_answers()), max_rounds=50,
                                tasks=PAPER_TASKS, num_external=0)
    observations, _ = env.reset(seed=1)
    texts = tuple(f"<answer>{a}</answer>" for a in code_answers())
    seen = set()
    for _ in range(3):
        questions = observations["node_0"]["questions"]
        seen |= {q["task"] for q in questions}
        action = {"completions": (texts,) * len(questions), "num_external": 0}
        observations, rewards, *_ = env.step({"node_0": action})
        assert 0.0 <= rewards["node_0"] <= 0.2  # garbage earns floors and substring credit
    assert SENTINEL not in os.environ and len(seen) >= 5


def test_config_validates_the_limits():
    assert sapo_env.SwarmConfig(score_time_limit=None).scoring_limits.time_limit is None
    for bad in ({"score_time_limit": 0}, {"score_time_limit": True},
                {"score_time_limit": float("nan")}, {"max_answer_chars": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            sapo_env.SwarmConfig(**bad)
    assert set(FAILURE_REASONS) == set(no_failures())


def test_the_tag_extractor_is_reasoning_gyms_in_linear_time():
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from reasoning_gym.utils import extract_answer as reasoning_gym_extract

    from sapo_env.scoring.answers import extract_answer

    pieces = st.sampled_from(["<answer>", "</answer>", "<answer", "answer>", " ", "\n", "\t",
                              "\u2003", "x", "42", "<", "/"])

    @settings(max_examples=500, deadline=None, derandomize=True, database=None)
    @given(st.lists(pieces, max_size=14).map("".join))
    def check(text):
        assert extract_answer(text) == reasoning_gym_extract(text)

    check()
    start = time.process_time()
    assert extract_answer("<answer>" * 2048) is None  # reasoning-gym's regex: ~0.5 s
    assert time.process_time() - start < 0.25


# --- the per-node scoring budget -------------------------------------------------------------

class _SlowDataset:
    """A scorer that never finishes on its own: only the time limit stops it."""

    def score_answer(self, answer, entry):
        import time

        while True:
            time.sleep(0.01)


class _FastDataset:
    def score_answer(self, answer, entry):
        return 1.0


def test_a_node_that_spends_its_budget_scores_zero_for_the_rest_and_others_are_scored():
    from sapo_env.scoring.answers import get_extractor
    from sapo_env.scoring.guard import ScoringLimits
    from sapo_env.scoring.round_scoring import LocalScoring, score_round
    from sapo_env.tasks import DrawnQuestion

    limit, budget = 0.05, 0.2
    slow = [DrawnQuestion(question=None, entry={}, dataset=_SlowDataset()) for _ in range(8)]
    fast = [DrawnQuestion(question=None, entry={}, dataset=_FastDataset()) for _ in range(8)]
    texts = [["<answer>1</answer>"] * 8] * 8
    scores, failures = score_round({"hostile": slow, "honest": fast},
                                   {"hostile": texts, "honest": texts},
                                   get_extractor("tag"), ScoringLimits(time_limit=limit), 8,
                                   LocalScoring(), node_budget=budget)
    # every scored completion ran into the time limit, each spending at least `limit` of the
    # budget, so at most budget / limit + 1 were scored; the other 59+ were never started
    assert failures["hostile"]["timeout"] <= budget / limit + 1
    assert failures["hostile"]["timeout"] + failures["hostile"]["budget"] == 64
    assert failures["hostile"]["budget"] >= 64 - budget / limit - 1
    assert (scores["hostile"] == 0).all()
    assert (scores["honest"] == 1).all() and failures["honest"]["budget"] == 0


def test_the_budget_is_a_setting_checked_like_the_time_limit():
    with pytest.raises(ValueError, match="node_score_budget must be None or a number"):
        sapo_env.SwarmConfig(node_score_budget=0)
    assert sapo_env.SwarmConfig(node_score_budget=None).node_score_budget is None


# reasoning-gym 0.1.25: sha256 (first 16 hex digits) of each score_answer that
# sapo_env.scoring.safe_scorers rewrites (the integration and polynomial tasks) or wraps
# (propositional_logic)
MIRRORED_SCORERS = {
    "PropositionalLogicDataset": "5cbc2250d7c9ec68",
    "SimpleIntegrationDataset": "25c67a197cbef4e2",
    "IntermediateIntegrationDataset": "8e765c309e3eb03c",
    "PolynomialMultiplicationDataset": "5d0893d7e0fabb2e",
}


def test_the_scorers_sapo_env_mirrors_are_the_ones_it_was_written_against():
    """When this fails, reasoning-gym changed a scorer that sapo_env.scoring.safe_scorers
    rewrites or wraps, and the copy would silently diverge: read the new scorer, update the
    copy, then these digests and the reasoning-gym pin in pyproject.toml."""
    import hashlib
    import inspect

    from sapo_env.scoring import safe_scorers

    digests = {cls.__name__: hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()[:16]
               for cls, fn in safe_scorers._ORIGINAL_SCORERS.items()}
    assert digests == MIRRORED_SCORERS

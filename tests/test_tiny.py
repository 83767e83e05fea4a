"""Tiny models (agents.tiny): tokenizer, model, warm start, cache, and a node in the env."""

from __future__ import annotations

import dataclasses
import doctest
import importlib
import io
import json
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from hypothesis import assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import sapo_env  # noqa: E402
from agents.lm.generation import chat_prompt_ids  # noqa: E402
from agents.tiny import questions  # noqa: E402
from agents.tiny.config import SPECIALIST_TASKS, TinyModelConfig, WarmStartConfig  # noqa: E402
from agents.tiny.model import parameter_count, tiny_model  # noqa: E402
from agents.tiny.tokenizer import ANSWER_TAGS, CHARSET, SPECIAL_TOKENS, tiny_tokenizer  # noqa: E402
from agents.tiny.warm_start import cache_key, load_tiny, read_report, train, warm_start  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ARITHMETIC, SPELL = SPECIALIST_TASKS["basic_arithmetic"], SPECIALIST_TASKS["spell_backward"]
# A warm start of half a second: a smaller model, a few steps, a few questions; it learns just
# enough of the answer format to earn partial credit on spell_backward now and then.
SHORT = WarmStartConfig(
    tasks=[SPELL, ARITHMETIC], target_accuracy=None, max_steps=20, batch_size=8, eval_every=10,
    eval_size=4, learning_rate=1e-2,
    model=TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                          intermediate_size=64),
)


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def short_run(tmp_path_factory, one_torch_thread):
    """The SHORT warm start saved in a cache folder of this module: (cache root, its path)."""
    root = tmp_path_factory.mktemp("tiny-cache")
    return root, warm_start(SHORT, root)


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("module", ["agents.tiny.tokenizer", "agents.tiny.model",
                                   "agents.tiny.config"])
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0


# ------------------------------------------------------------------ tokenizer


def test_vocabulary_is_fixed(tok):
    expected = list(SPECIAL_TOKENS) + list(ANSWER_TAGS) + list(CHARSET)
    assert [tok.convert_ids_to_tokens(i) for i in range(len(tok))] == expected
    assert len(tok) == 122 and tiny_tokenizer().get_vocab() == tok.get_vocab()
    assert (tok.pad_token_id, tok.unk_token_id, tok.eos_token_id) == (0, 1, 3)
    assert tok.convert_tokens_to_ids(["<|im_start|>", "<answer>", "</answer>", "a"]) == [2, 4, 5, 6]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.text(alphabet=CHARSET), st.sampled_from(ANSWER_TAGS))))
def test_decode_encode_round_trip(parts):
    tok = _TOKENIZER
    text = "".join(parts)
    # A special token's text ("<unk>", "<|im_end|>", ...) is read as that token, as by every
    # Hugging Face tokenizer (test_special_token_text_is_read_as_the_token).
    assume(not any(special in text for special in SPECIAL_TOKENS))
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.unk_token_id not in ids
    assert tok.decode(ids) == text
    assert tok.batch_decode([ids], skip_special_tokens=True) == [text]


_TOKENIZER = tiny_tokenizer()  # hypothesis does not mix with function-scoped fixtures


def test_special_token_text_is_read_as_the_token(tok):
    ids = tok("2<|im_end|>x<unk>", add_special_tokens=False)["input_ids"]
    assert tok.eos_token_id in ids and tok.unk_token_id in ids
    assert tok.decode(ids) == "2<|im_end|>x<unk>"


def test_every_token_decodes_to_text_that_re_encodes_to_it(tok):
    specials = set(tok.all_special_ids) | {tok.convert_tokens_to_ids("<|im_start|>")}
    for i in range(len(tok)):
        text = tok.decode([i])
        assert tok(text, add_special_tokens=False)["input_ids"] == [i], (i, text)
        # what GRPOAgent's decode keeps: specials vanish, everything else is kept
        assert tok.decode([i], skip_special_tokens=True) == ("" if i in specials else text)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(4, 121), max_size=40))
def test_sampled_ids_re_encode_to_the_same_text(ids):
    tok = _TOKENIZER
    text = tok.decode(ids, skip_special_tokens=True)
    again = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(again) == text
    assert len(again) <= len(ids)  # equal, unless the ids spelled out an answer tag


def test_unknown_characters_map_to_unk(tok):
    ids = tok("a数🙂\rb", add_special_tokens=False)["input_ids"]
    assert ids == [6, 1, 1, 1, 7]
    assert tok.decode(ids, skip_special_tokens=True) == "ab"


def test_answer_tags_survive_decoding_and_the_chat_prompt(tok):
    ids = tok("<answer>-56</answer>", add_special_tokens=False)["input_ids"]
    assert ids[0] == 4 and ids[-1] == 5 and len(ids) == 5
    assert tok.batch_decode([ids + [tok.eos_token_id]], skip_special_tokens=True) == [
        "<answer>-56</answer>"]
    prompt = chat_prompt_ids(tok, "", "Calculate 4 + -2.")
    assert tok.decode(prompt) == "<|im_start|>user\nCalculate 4 + -2.<|im_end|>\n" \
                                 "<|im_start|>assistant\n"


def test_saved_tokenizer_loads_identical(tok, tmp_path):
    from transformers import AutoTokenizer

    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = "Spell this word backward: sun <answer>nus</answer> ¬(P ∧ Q) 数"
    assert loaded(text)["input_ids"] == tok(text)["input_ids"]
    assert chat_prompt_ids(loaded, "", text) == chat_prompt_ids(tok, "", text)
    assert loaded.get_vocab() == tok.get_vocab() and loaded.eos_token_id == tok.eos_token_id


# ------------------------------------------------------------------ model


def test_model_weights_come_from_the_seed_alone(tok):
    state = torch.get_rng_state()
    first, again, other = (tiny_model(tok, SHORT.model, s) for s in (0, 0, 1))
    assert torch.equal(torch.get_rng_state(), state)
    assert same_weights(first, again) and not same_weights(first, other)


def test_default_model_is_a_plain_llama_of_under_a_million_parameters(tok):
    from agents.tiny.grouped_llama import check_supported

    model = tiny_model(tok, TinyModelConfig(), seed=0)
    config = model.config
    assert 0.8e6 < parameter_count(model) < 0.9e6
    assert (config.vocab_size, config.eos_token_id, config.pad_token_id) == (122, 3, 0)
    assert config.hidden_act == "silu" and not config.attention_bias and not config.mlp_bias
    check_supported(config)  # the batched forward reproduces this configuration


@pytest.mark.parametrize("bad, field", [
    (dict(num_heads=3), "num_heads"), (dict(num_kv_heads=3), "num_kv_heads"),
    (dict(hidden_size=0), "hidden_size"), (dict(rope_theta=-1.0), "rope_theta"),
])
def test_model_config_errors_name_the_field(bad, field):
    with pytest.raises(ValueError, match=field):
        TinyModelConfig(**bad)


# ------------------------------------------------------------------ warm start


@pytest.mark.parametrize("bad, field", [
    (dict(max_steps=0), "max_steps"), (dict(tasks=[ARITHMETIC, ARITHMETIC]), "tasks"),
    (dict(tasks="basic_arithmetic"), "tasks"), (dict(target_accuracy=1.5), "target_accuracy"),
    (dict(target_accuracy={"spell_backward": 0.5}), "target_accuracy"),
    (dict(learning_rate=0.0), "learning_rate"), (dict(max_steps=2**20, batch_size=32),
                                                 "max_steps"),
    (dict(tag_probability=1.5), "tag_probability"), (dict(tag_probability=0.0), "target_accuracy"),
])
def test_warm_start_config_errors_name_the_field(bad, field):
    with pytest.raises(ValueError, match=field):
        WarmStartConfig(**bad)


def test_targets_and_plain_data():
    config = WarmStartConfig(tasks=["spell_backward"], eval_tasks=[SPELL, ARITHMETIC],
                             target_accuracy={"basic_arithmetic": 0.1})
    assert config.targets() == {"basic_arithmetic": 0.1}
    assert WarmStartConfig(target_accuracy=0.2).targets() == {"basic_arithmetic": 0.2}
    json.dumps(config.to_dict())
    assert cache_key(config) != cache_key(WarmStartConfig(tasks=["spell_backward"]))


def test_warm_start_questions_use_seeds_no_swarm_reads():
    from sapo_env.runtime.metrics import held_out_questions

    env_seeds = [d.question["ref"]["seed"] + d.question["ref"]["index"]
                 for d in held_out_questions(sapo_env.SwarmConfig(), 64)]
    assert max(env_seeds) < 2**62 == questions.WARM_START_SEED
    rng = np.random.default_rng(0)
    streams = questions.training_streams([ARITHMETIC, SPELL], rng)
    assert all(2**62 + 2**24 <= s.seed < 2**63 - 2**24 for s in streams)
    held = questions.evaluation_questions(SPELL, 3)
    assert [d.question["ref"]["seed"] for d in held] == [2**62] * 3
    assert [d.question["ref"]["index"] for d in held] == [0, 1, 2]


def test_supervised_example_is_what_grpo_re_encodes(tok):
    from agents.lm.encoding import encode_group

    drawn = questions.evaluation_questions(ARITHMETIC, 1)[0]
    example = questions.supervised_example(tok, drawn)
    answer = drawn.entry["answer"]
    group = {"system_prompt": "", "question": drawn.question["prompt"],
             "completions": [f"<answer>{answer}</answer>"]}
    encoded = encode_group(tok, group, max_new_tokens=12, eos_id=tok.eos_token_id)
    assert example.prompt == encoded.prompt and [example.target] == encoded.completions
    ids, mask, labels = questions.collate([example], tok.pad_token_id)
    assert (labels >= 0).sum() == len(example.target) and mask.sum() == ids.shape[1]


def test_untagged_targets_and_which_warm_starts_draw_them(tok):
    """tag_probability: bare-answer targets; only a probability strictly inside (0, 1) draws
    from the data stream, so always-tagged warm starts keep their draws and weights."""
    from agents.tiny.warm_start import tag_draws

    drawn = questions.evaluation_questions(SPELL, 1)[0]
    bare = questions.supervised_example(tok, drawn, tagged=False)
    assert tok.decode(bare.target, skip_special_tokens=True) == drawn.entry["answer"]
    untouched, used = np.random.default_rng(0), np.random.default_rng(0)
    assert tag_draws(1.0, untouched, 3) == [True] * 3
    assert tag_draws(0.0, untouched, 2) == [False] * 2
    assert untouched.random() == np.random.default_rng(0).random()
    mixed = tag_draws(0.5, used, 1000)
    assert 400 < sum(mixed) < 600
    assert cache_key(WarmStartConfig(tag_probability=0.5)) != cache_key(WarmStartConfig())


def test_evaluation_scores_with_the_env_verifier(tok, monkeypatch):
    from agents.tiny import evaluation

    held = {"spell_backward": questions.evaluation_questions(SPELL, 4)}
    right = [d.entry["answer"] for d in held["spell_backward"]]
    # right answers for half the questions, a wrong one and a missing tag for the others
    texts = [f"<answer>{right[0]}</answer>", f"<answer>{right[1]}</answer>", "<answer></answer>",
             right[3]]
    fake = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    monkeypatch.setattr(evaluation, "generate_completion_ids", lambda *a, **k: fake)
    model = tiny_model(tok, SHORT.model, 0)
    assert evaluation.sampled_accuracy(model, tok, held, max_new_tokens=12, seed=0) == {
        "spell_backward": 0.5}


def test_short_warm_start_is_deterministic_and_its_loss_falls():
    first_model, _, first = train(SHORT)
    again_model, _, again = train(SHORT)
    assert same_weights(first_model, again_model)
    assert first["losses"] == again["losses"]
    assert [c["accuracy"] for c in first["curve"]] == [c["accuracy"] for c in again["curve"]]
    losses = first["losses"]
    assert first["steps"] == 20 and np.mean(losses[-3:]) < np.mean(losses[:3]) - 1.0
    assert [c["step"] for c in first["curve"]] == [10, 20]
    assert set(first["curve"][-1]["accuracy"]) == {"basic_arithmetic", "spell_backward"}


def test_warm_start_is_cached_and_loads(short_run, monkeypatch, tok):
    from agents.tiny import warm_start as module

    root, path = short_run
    report = read_report(path)
    assert report["steps"] == 20 and report["cache_key"] == path.name == cache_key(SHORT)
    assert report["config"] == json.loads(json.dumps(SHORT.to_dict()))
    assert report["seconds"] > 0 and report["cpu_seconds"] > 0

    def no_training(config, progress=None):
        raise AssertionError("the cached warm start was trained again")

    monkeypatch.setattr(module, "train", no_training)
    assert warm_start(SHORT, root) == path
    with pytest.raises(AssertionError, match="trained again"):
        warm_start(dataclasses.replace(SHORT, seed=1), root)

    model, loaded_tok = load_tiny(path)
    assert loaded_tok.get_vocab() == tok.get_vocab()
    trained, _, _ = train(SHORT)
    assert same_weights(model, trained)


def test_warm_start_shows_its_steps_and_writes_no_shard_bar(tmp_path, capfd, monkeypatch):
    """Where stderr is not a terminal (here: captured), a plain line at each evaluation, no
    carriage returns or escape codes (two processes' bars would interleave in a log file)."""
    warm_start(dataclasses.replace(SHORT, seed=2), tmp_path, progress=0)
    shown = capfd.readouterr().err
    name = "warm start spell_backward+basic_arithmetic"
    assert [line.split(", accuracy spell_backward")[0] for line in shown.splitlines()] == [
        f"{name}: step 10/20", f"{name}: step 20/20"]
    assert "\r" not in shown and "\x1b" not in shown and "Writing model shards" not in shown
    warm_start(dataclasses.replace(SHORT, seed=3), tmp_path)  # quiet by default
    assert "warm start" not in capfd.readouterr().err
    # a target reached at the first evaluation (step 10): the line says so, and it stops
    from agents.tiny import warm_start as module

    monkeypatch.setattr(module, "sampled_accuracy",
                        lambda model, tok, held_out, **kw: {name: 1.0 for name in held_out})
    warm_start(dataclasses.replace(SHORT, seed=4, target_accuracy=0.3), tmp_path, progress=0)
    shown = capfd.readouterr().err
    assert shown.splitlines() == [f"{name}: step 10/20, accuracy spell_backward 1.00, "
                                  "basic_arithmetic 1.00, target reached"]
    # on a terminal, the bar redrawn in place; done early, it ends full and says why
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    warm_start(dataclasses.replace(SHORT, seed=5, target_accuracy=0.3), tmp_path, progress=0)
    shown = terminal.getvalue()
    assert "\r" in shown and f"{name}:" in shown and "step 10/20" not in shown
    assert "10/10" in shown and "target reached" in shown


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_warm_started_node_plays_in_the_env(short_run):
    from agents import GRPOAgent, GRPOConfig

    _, path = short_run
    env = sapo_env.parallel_env(n=2, system_prompt="", tasks=[SPELL], max_rounds=2,
                                questions_per_round=2, completions_per_question=4,
                                train_budget=2, num_external=1)
    config = GRPOConfig(max_new_tokens=12, learning_rate=3e-4, device="cpu",
                        gradient_checkpointing=False)
    nodes = []
    for seed in range(2):
        model, tokenizer = load_tiny(path)
        nodes.append(GRPOAgent(model, tokenizer=tokenizer, config=config, num_external=1,
                               seed=seed))
    before = [{k: v.clone() for k, v in node.model.state_dict().items()} for node in nodes]
    history = sapo_env.runtime.run(env, nodes, seed=0, progress=False)
    assert history.rewards.shape == (2, 2) and history.rewards.max() > 0
    assert all(set(m) == {"node_0", "node_1"} for m in history.learn_metrics)
    for name, node, weights in zip(("node_0", "node_1"), nodes, before):
        changed = any(not torch.equal(weights[k], v) for k, v in node.model.state_dict().items())
        trained = any(m[name]["groups"] > 0 for m in history.learn_metrics)
        assert changed == trained
    assert any(m["node_0"]["groups"] > 0 for m in history.learn_metrics)


# ------------------------------------------------------------------ command line


def test_cli_help_and_task_specs(capsys):
    from sapo_experiments.cli import build_parser
    from sapo_experiments.warm_start_cli import task_spec

    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["warm-start", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "--tasks" in out and "--target" in out and "--max-steps" in out
    assert task_spec("spell_backward") == SPELL
    assert task_spec('basic_arithmetic={"max_terms": 3}').config == {"max_terms": 3}
    with pytest.raises(ValueError, match="JSON"):
        task_spec("basic_arithmetic={max_terms: 3}")


def test_cli_trains_prints_and_then_finds_the_cache(tmp_path, capsys):
    from sapo_experiments.cli import main

    argv = ["warm-start", "--tasks", "basic_arithmetic", "--eval-tasks", "basic_arithmetic",
            "spell_backward", "--max-steps", "2", "--batch-size", "2", "--eval-size", "2",
            "--target", "0", "--out", str(tmp_path)]
    main(argv)
    first = capsys.readouterr().out
    assert "spell_backward" in first and "2 steps" in first and str(tmp_path) in first
    assert "found in the cache" not in first
    main(argv)
    again = capsys.readouterr().out
    assert again.replace(" (found in the cache)", "") == first and again != first

"""Prompt-prefix sharing in the batched tiny swarm: the completions of one prompt read its keys
and values once (agents.tiny.grouped_llama.grouped_prefix_forward) and get the logits, the
log-probs, the gradients and the samples of each row's own copy of them (the old path) to float
rounding."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from test_batched_swarm import CONFIG, env_of, nodes  # noqa: E402
from tiny_lm import tiny_llama  # noqa: E402

from agents.lm.encoding import Row  # noqa: E402
from agents.lm.loss import token_logprobs  # noqa: E402
from agents.tiny import TinyModelConfig, tiny_model, tiny_tokenizer  # noqa: E402
from agents.tiny.batched import batched_swarm  # noqa: E402
from agents.tiny.fast_kernels import fast_weights  # noqa: E402
from agents.tiny.grouped_llama import (  # noqa: E402
    RowCache,
    grouped_forward,
    grouped_prefix_forward,
    stack_weights,
)
from agents.tiny.learn_batches import CopiedPromptBatch, SharedPromptBatch  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def prompts_and_rows(tok):
    """Two nodes' training rows: prompts of different lengths, a different number of rows per
    prompt and of prompts per node, completions of 1 to 6 tokens (so rows and slots pad)."""
    def ids(text):
        return tok(text, add_special_tokens=False)["input_ids"]

    node_0 = [Row(ids("What is 3 + 4?"), ids("7<|im_end|>"), 1.0),
              Row(ids("What is 3 + 4?"), ids("12"), -1.0),
              Row(ids("What is 3 + 4?"), ids("x"), 1.0),
              Row(ids("Spell abc backward"), ids("cba<|im_end|>"), -1.0),
              Row(ids("Spell abc backward"), ids("abc12"), 1.0)]
    node_1 = [Row(ids("1 + 1 ="), ids("2"), 1.0),
              Row(ids("1 + 1 ="), ids("<answer>"), -1.0)]
    return [node_0, node_1]


def batches_of(rows_per_node, pad_id):
    """The training batch of these rows in the old layout (each row its own copy of its
    prompt's keys) and the shared one."""
    updates = [SimpleNamespace(data=SimpleNamespace(rows=rows)) for rows in rows_per_node]
    cpu = torch.device("cpu")
    return CopiedPromptBatch.of(updates, pad_id, cpu), SharedPromptBatch.of(updates, pad_id, cpu)


def logprobs_and_gradients(models, batch, targets, mask):
    """Each row's completion log-probs (zero past its end) and the gradient of their sum
    weighted by a fixed pattern, for every parameter of every model."""
    for model in models:
        model.zero_grad(set_to_none=True)
    logits = batch.completion_logits(stack_weights(models), models[0].config)
    logp = token_logprobs(logits.flatten(0, 1), targets.flatten(0, 1))
    logp = logp.reshape(targets.shape) * mask
    weight = torch.linspace(-1.0, 2.0, logp.numel()).reshape(logp.shape)
    (logp * weight).sum().backward()
    grads = [[p.grad.clone() for p in model.parameters()] for model in models]
    return logp.detach(), grads


@pytest.mark.parametrize("make_models", ["gqa", "tiny_default"])
def test_learning_logprobs_and_gradients_equal_the_copied_prompt_path(tok, make_models):
    if make_models == "gqa":  # 4 query heads on 2 key heads, untied head
        tokenizer = tok
        models = [tiny_llama(tok, seed=s) for s in range(2)]
    else:  # the tiny learner's own shape (agents.tiny), tied embeddings
        tokenizer = tiny_tokenizer()
        models = [tiny_model(tokenizer, TinyModelConfig(), seed=s) for s in range(2)]
    copied, shared = batches_of(prompts_and_rows(tokenizer), tokenizer.pad_token_id)
    targets, mask = copied.completion_ids, copied.completion_mask
    old_logp, old_grads = logprobs_and_gradients(models, copied, targets, mask)
    new_logp, new_grads = logprobs_and_gradients(models, shared, targets, mask)
    assert old_logp.abs().sum() > 0
    torch.testing.assert_close(new_logp, old_logp, rtol=1e-5, atol=1e-5)
    for old, new in zip(old_grads, new_grads):
        for g_old, g_new in zip(old, new):
            scale = g_old.abs().max().item()
            torch.testing.assert_close(g_new, g_old, rtol=1e-5, atol=1e-5 * scale)


def test_a_prompt_with_more_rows_than_the_others_takes_several_places(tok):
    """The same question in two groups gives one prompt twice the rows of the others: it is
    forwarded twice rather than every prompt's slots made twice as wide."""
    def ids(text):
        return tok(text, add_special_tokens=False)["input_ids"]

    def group(question, count):
        return [Row(ids(question), ids(f"{k}ab{k}"), 1.0) for k in range(count)]

    node_0 = (group("What is 13 + 4?", 6) + group("What is 2 + 24?", 3)
              + group("What is 9 - 16?", 3) + group("What is 71 * 3?", 3))
    node_1 = group("Spell abc backward", 3)
    copied, shared = batches_of([node_0, node_1], tok.pad_token_id)
    assert copied.prompt_ids.shape[1] == 4  # distinct prompts, forwarded once each
    assert shared.prompt_ids.shape[1] == 5 and shared.slot_ids.shape[2] == 3
    models = [tiny_llama(tok, seed=s) for s in range(2)]
    targets, mask = copied.completion_ids, copied.completion_mask
    old_logp, old_grads = logprobs_and_gradients(models, copied, targets, mask)
    new_logp, new_grads = logprobs_and_gradients(models, shared, targets, mask)
    torch.testing.assert_close(new_logp, old_logp, rtol=1e-5, atol=1e-5)
    for old, new in zip(old_grads, new_grads):
        for g_old, g_new in zip(old, new):
            torch.testing.assert_close(g_new, g_old, rtol=1e-5,
                                       atol=1e-5 * g_old.abs().max().item())


def test_one_token_completions_need_no_second_pass(tok):
    rows = [[Row([5, 6, 7], [9], 1.0), Row([5, 6, 7], [10], -1.0)]]
    copied, shared = batches_of(rows, tok.pad_token_id)
    models = [tiny_llama(tok)]
    with torch.no_grad():
        old = copied.completion_logits(stack_weights(models), models[0].config)
        new = shared.completion_logits(stack_weights(models), models[0].config)
    assert new.shape == (1, 2, 1, len(tok))
    torch.testing.assert_close(new, old)


def test_decoding_from_a_row_cache_equals_the_copied_prompt_cache(tok):
    """Generation's steps: one token per row at a time, the rows of a prompt reading its
    keys once, against grouped_forward on a cache copied to every row."""
    models = [tiny_llama(tok, seed=s) for s in range(2)]
    weights, config = stack_weights(models), models[0].config
    prompts = torch.tensor([[[0, 0, 20, 21, 22], [30, 31, 32, 33, 34]],
                            [[0, 0, 0, 40, 41], [0, 50, 51, 52, 53]]])
    mask = (prompts != 0).long()
    positions = (mask.cumsum(dim=2) - 1).clamp(min=0)
    copies, steps = 3, 4
    drawn = torch.randint(3, len(tok), (2, 2 * copies, steps),
                          generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        _, prompt_cache = grouped_forward(weights, config, prompts, mask, positions)
        copy_of = torch.arange(2).repeat_interleave(copies).expand(2, -1)
        copied = prompt_cache.select_rows(copy_of).with_room(steps)
        fast = fast_weights(weights, config)
        _, prompt_cache = grouped_forward(fast, config, prompts, mask, positions,
                                          arithmetic="fast")
        shared = RowCache.empty(config, 2, 2, copies, steps, torch.float32, torch.device("cpu"))
        position = positions[:, :, -1:].repeat_interleave(copies, dim=1)
        for step in range(steps):
            position = position + 1
            token = drawn[:, :, step : step + 1]
            old, copied = grouped_forward(weights, config, token, torch.ones_like(token),
                                          position, cache=copied)
            new, shared = grouped_prefix_forward(
                fast, config, prompt_cache, token.reshape(2, 2, copies, 1),
                torch.ones_like(token).reshape(2, 2, copies, 1),
                position.reshape(2, 2, copies, 1), cache=shared)
            torch.testing.assert_close(new.reshape(old.shape), old, rtol=1e-5, atol=1e-5)


def test_a_row_cache_is_filled_without_gradients_and_within_its_room(tok):
    models = [tiny_llama(tok)]
    config = models[0].config
    ids = torch.tensor([[[20, 21, 22]]])
    row = torch.tensor([[[[30]]]])
    with pytest.raises(ValueError, match="fast_weights"):  # not the layout it reads
        grouped_prefix_forward(stack_weights(models), config, None, row, torch.ones_like(row),
                               row * 0 + 3)
    weights = fast_weights(stack_weights(models), config)
    _, prefix = grouped_forward(weights, config, ids, torch.ones_like(ids),
                                torch.arange(3)[None, None], arithmetic="fast")
    cache = RowCache.empty(config, 1, 1, 1, 1, torch.float32, torch.device("cpu"))
    with pytest.raises(ValueError, match="no_grad"):
        grouped_prefix_forward(weights, config, prefix, row, torch.ones_like(row), row * 0 + 3,
                               cache=cache)
    with torch.no_grad():
        _, cache = grouped_prefix_forward(weights, config, prefix, row, torch.ones_like(row),
                                          row * 0 + 3, cache=cache)
        with pytest.raises(ValueError, match="no room"):
            grouped_prefix_forward(weights, config, prefix, row, torch.ones_like(row),
                                   row * 0 + 4, cache=cache)


def test_a_round_with_shared_prompts_equals_the_old_path(tok):
    """Acting and learning with share_prompts on and off: the same completions and the same
    update to float rounding (the test of test_batched_swarm.py against node by node runs
    with the default, sharing)."""
    env = env_of()
    observations, _ = env.reset(seed=2)
    old, new = batched_swarm(nodes(tok), share_prompts=False), batched_swarm(nodes(tok))
    assert not old[0].joint_actor.share_prompts and new[0].joint_actor.share_prompts
    actions = new[0].joint_actor.act_jointly(observations)
    assert old[0].joint_actor.act_jointly(observations) == actions
    observations, *_ = env.step(actions)
    batches = {a: observations[a]["batch"] for a in env.agents}
    assert any(any(g["advantages"]) for b in batches.values() for g in b)
    expected = old[0].joint_actor.learn_jointly(batches)
    learned = new[0].joint_actor.learn_jointly(batches)
    for a, one, other in zip(env.agents, old, new):
        for key in ("loss", "grad_norm", "clip_fraction", "tokens"):
            assert learned[a][key] == pytest.approx(expected[a][key], rel=1e-5, abs=1e-7), key
        for p, q in zip(one.model.parameters(), other.model.parameters()):
            moment = one.optimizer.state[p]["exp_avg"], other.optimizer.state[q]["exp_avg"]
            assert torch.allclose(*moment, rtol=1e-4, atol=1e-8)
            assert torch.allclose(p, q, atol=CONFIG.learning_rate * 1e-2)

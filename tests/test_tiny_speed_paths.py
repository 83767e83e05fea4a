"""The tiny swarm's copied-prompt path (``batched_swarm(share_prompts=False)``) computes bit for
bit what it computed when committed runs were made, whatever is done to the shared path's speed.

``--tiny-copied-prompts`` repeats runs made before prompt sharing existed, so every bit of its
arithmetic is pinned here: SHA-256 fingerprints of its logits, log-probs and gradients on a fixed
batch, and of a whole swarm round (completions, update statistics, weights and Adam moments
after it), in float32 and under bfloat16 autocast, recorded at commit 405d3fc (before the speed
work of issue 33 part 4) on one torch thread. Bit equality holds only on the same kernels: a
fingerprint of plain matrix products and softmaxes, recorded with them, tells whether this
machine rounds as that one did, and the tests skip where it does not.

Regenerate (only from a commit whose copied path is the reference):
``python tests/test_tiny_speed_paths.py``, then paste the printed dictionary.
"""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tiny_lm import char_tokenizer, tiny_llama  # noqa: E402

from agents.encoding import Row  # noqa: E402
from agents.grpo import GRPOAgent, GRPOConfig  # noqa: E402
from agents.loss import token_logprobs  # noqa: E402
from agents.models import autocast  # noqa: E402
from agents.tiny import TinyModelConfig, tiny_model, tiny_tokenizer  # noqa: E402
from agents.tiny.batched import batched_swarm  # noqa: E402
from agents.tiny.grouped_llama import stack_weights  # noqa: E402
from agents.tiny.learn_batches import CopiedPromptBatch  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SHAPES = ("tiny", "gqa")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}

# Recorded at 405d3fc (AMD EPYC, torch 2.13.0+cpu, one thread).
REFERENCE = {
    "kernels/float32": "67edd4dd48323bf5179b4b21",
    "learn_step/tiny/float32": "097a2a4cb8b151eea6f382e3",
    "learn_step/gqa/float32": "0ba261c9d6aa7400b75ae041",
    "swarm_rounds/float32": "ec28c17337f260a2c10948e5",
    "kernels/bfloat16": "b081290602e9ce0ea3cd9ffd",
    "learn_step/tiny/bfloat16": "e196279a634e64b8044017c9",
    "learn_step/gqa/bfloat16": "bb41b9420281d7d59e138f28",
    "swarm_rounds/bfloat16": "021629687cec7d35576d190e",
}


def fingerprint(*values) -> str:
    """SHA-256 of tensors' bytes (and of anything else's repr), in order."""
    digest = hashlib.sha256()
    for value in values:
        if isinstance(value, torch.Tensor):
            value = value.detach().contiguous()
            if value.dtype == torch.bfloat16:
                value = value.view(torch.int16)
            digest.update(str((value.dtype, tuple(value.shape))).encode())
            digest.update(value.numpy().tobytes())
        else:
            digest.update(repr(value).encode())
    return digest.hexdigest()[:24]


def kernels(dtype: torch.dtype) -> str:
    """Matrix products and a softmax of the learn step's shapes, to tell whether this machine's
    kernels round as the reference machine's did."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(8, 96, 128, generator=g), torch.randn(8, 128, 384, generator=g)
    with autocast(torch.device("cpu"), dtype):
        product = torch.bmm(a, b)
        scores = torch.matmul(a, a.transpose(1, 2))
    return fingerprint(product, torch.softmax(scores.float(), dim=-1))


def training_rows(tok) -> list[list[Row]]:
    """Two nodes' rows: prompts of different lengths, 1 to 3 rows a prompt, completions of 1
    to 6 tokens, so that prompts, rows and completions all pad."""
    def ids(text):
        return tok(text, add_special_tokens=False)["input_ids"]

    return [[Row(ids("What is 3 + 4?"), ids("7<|im_end|>"), 1.0),
             Row(ids("What is 3 + 4?"), ids("12"), -1.0),
             Row(ids("What is 3 + 4?"), ids("x"), 1.0),
             Row(ids("Spell abc backward"), ids("cba<|im_end|>"), -1.0),
             Row(ids("Spell abc backward"), ids("abc12"), 1.0)],
            [Row(ids("1 + 1 ="), ids("2"), 1.0),
             Row(ids("1 + 1 ="), ids("<answer>"), -1.0)]]


def learn_step(dtype: torch.dtype, shape: str) -> str:
    """The copied layout's logits, log-probs and every parameter's gradient on a fixed batch,
    for two models of the tiny learner's shape or of a grouped-query one (4 query heads on 2
    key heads, untied head)."""
    if shape == "tiny":
        tok = tiny_tokenizer()
        models = [tiny_model(tok, TinyModelConfig(), seed=s) for s in range(2)]
    else:
        tok = char_tokenizer()
        models = [tiny_llama(tok, seed=s) for s in range(2)]
    updates = [SimpleNamespace(data=SimpleNamespace(rows=rows)) for rows in training_rows(tok)]
    batch = CopiedPromptBatch.of(updates, tok.pad_token_id, torch.device("cpu"))
    with autocast(torch.device("cpu"), dtype):
        logits = batch.completion_logits(stack_weights(models), models[0].config)
    targets = batch.completion_ids
    logp = token_logprobs(logits.flatten(0, 1).float(), targets.flatten(0, 1))
    logp = logp.reshape(targets.shape) * batch.completion_mask
    (logp * torch.linspace(-1.0, 2.0, logp.numel()).reshape(logp.shape)).sum().backward()
    grads = [p.grad for model in models for p in model.parameters()]
    return fingerprint(logits, logp, *grads)


QUESTIONS = ("What is 3 + 4?", "Spell cat backward", "What is 9 - 2?", "Spell dog backward",
             "What is 5 * 6?", "What is 1 + 8?")


def swarm_rounds(dtype: str, rounds: int = 2) -> str:
    """Two rounds of three tiny nodes, each answering 4 questions with 8 completions of up to
    12 tokens and training on its own 4 groups and 4 of the next node's (advantages +1 / -1
    alternately): every completion, every update's statistics, and the weights and Adam moments
    after. No env: what is pinned is the swarm's arithmetic alone."""
    tok = tiny_tokenizer()
    config = GRPOConfig(max_new_tokens=12, learning_rate=3e-3, device="cpu", dtype=dtype)
    agents = batched_swarm([GRPOAgent(tiny_model(tok, TinyModelConfig(), seed=i), tok, config,
                                      seed=i, num_external=4) for i in range(3)],
                           share_prompts=False)
    joint = agents[0].joint_actor
    record = []
    for r in range(rounds):
        questions = [[QUESTIONS[(r + i + q) % len(QUESTIONS)] for q in range(4)]
                     for i in range(3)]
        prompts = [[agent.prompt_ids(q, "") for q in asked]
                   for agent, asked in zip(agents, questions)]
        ids = joint.generate(agents, prompts, 8)
        groups = [[{"question": q, "system_prompt": "",
                    "completions": tok.batch_decode(ids[i][8 * k : 8 * k + 8],
                                                    skip_special_tokens=True),
                    "advantages": np.resize(np.array([1.0, -1.0], np.float32), 8)}
                   for k, q in enumerate(asked)] for i, asked in enumerate(questions)]
        batches = {f"node_{i}": groups[i] + groups[(i + 1) % 3] for i in range(3)}
        stats = joint.learn_jointly(batches)
        record += [ids, {a: {k: v for k, v in s.items() if k != "seconds"}  # wall time
                         for a, s in stats.items()}]
    weights = [p for agent in agents for p in agent.model.parameters()]
    moments = [agent.optimizer.state[p][k] for agent in agents for p in agent.model.parameters()
               for k in ("exp_avg", "exp_avg_sq")]
    return fingerprint(repr(record), *weights, *moments)


def measured() -> dict[str, str]:
    found = {}
    for name, dtype in DTYPES.items():
        found[f"kernels/{name}"] = kernels(dtype)
        for shape in SHAPES:
            found[f"learn_step/{shape}/{name}"] = learn_step(dtype, shape)
        found[f"swarm_rounds/{name}"] = swarm_rounds(name)
    return found


def same_kernels_or_skip(name: str) -> None:
    if not REFERENCE:
        pytest.skip("no reference fingerprints recorded")
    if kernels(DTYPES[name]) != REFERENCE[f"kernels/{name}"]:
        pytest.skip(f"this machine's {name} kernels round otherwise than the reference's: "
                    "bit equality cannot be checked here")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", list(DTYPES))
def test_the_copied_learn_step_is_bit_for_bit_the_reference(name, shape):
    same_kernels_or_skip(name)
    assert learn_step(DTYPES[name], shape) == REFERENCE[f"learn_step/{shape}/{name}"]


@pytest.mark.parametrize("name", list(DTYPES))
def test_copied_swarm_rounds_are_bit_for_bit_the_reference(name):
    same_kernels_or_skip(name)
    assert swarm_rounds(name) == REFERENCE[f"swarm_rounds/{name}"]


if __name__ == "__main__":
    torch.set_num_threads(1)
    print(measured())

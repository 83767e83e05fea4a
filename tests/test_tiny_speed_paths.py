"""The tiny swarm's copied-prompt path (``batched_swarm(share_prompts=False)``) computes bit for
bit what it computed when committed runs were made, whatever is done to the shared path's speed;
the shared path (the default) keeps its own results through speed work that must not change
them (``SHARED_REFERENCE``).

``--tiny-copied-prompts`` repeats runs made before prompt sharing existed, so every bit of its
arithmetic is pinned here: SHA-256 fingerprints of its logits, log-probs and gradients on a fixed
batch, and of a whole swarm round (completions, update statistics, weights and Adam moments
after it), in float32 and under bfloat16 autocast, recorded at commit 405d3fc (before the speed
work on the batched swarm) on one torch thread. Bit equality holds only on the same kernels: a
fingerprint of plain matrix products and softmaxes, recorded with them, tells whether this
machine rounds as that one did, and the tests skip where it does not, or where the CPU's vendor
is not the reference's (MKL and oneDNN choose other kernels on other vendors' CPUs, where the
probe can match while a learn step differs: docs/testing.md, "Measured here").

Regenerate (only from a commit whose copied path is the reference):
``python tests/test_tiny_speed_paths.py``, then paste the printed dictionaries (the second is
``SHARED_REFERENCE``, regenerated only with a versioned change of the shared path's results).
"""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from test_batched_swarm import padded  # noqa: E402
from tiny_lm import char_tokenizer, tiny_llama  # noqa: E402

from agents.lm.encoding import Row  # noqa: E402
from agents.lm.grpo import GRPOAgent, GRPOConfig  # noqa: E402
from agents.lm.loss import token_logprobs  # noqa: E402
from agents.lm.models import autocast  # noqa: E402
from agents.tiny import TinyModelConfig, tiny_model, tiny_tokenizer  # noqa: E402
from agents.tiny.batched import batched_swarm  # noqa: E402
from agents.tiny.decoder_layers import (  # noqa: E402
    PromptPacking,
    reference_rotate,
    reference_swiglu,
    rms_norm,
    rotary,
)
from agents.tiny.fast_kernels import (  # noqa: E402
    fast_weights,
    rms_normalize,
    rotary_pairs,
    rotate,
    rotation,
    swiglu,
)
from agents.tiny.grouped_llama import grouped_forward, stack_weights  # noqa: E402
from agents.tiny.learn_batches import CopiedPromptBatch, SharedPromptBatch  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SHAPES = ("tiny", "gqa")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}

# Recorded at 405d3fc on one torch thread (the machine: docs/testing.md, "Measured here").
REFERENCE_CPU_VENDOR = "AuthenticAMD"
REFERENCE_CPU_CAPABILITY = "AVX512"  # torch.backends.cpu.get_cpu_capability() there
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
# The shared-prompt path (the default), recorded at 1641110 before the speed work on generation
# that keeps its results (weight preparation, sampling), on the same machine.
SHARED_REFERENCE = {
    "float32": "c386b3679589114df2b81201",
    "bfloat16": "903462fd5daa7eb24a02f730",
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


UNPINNED = ("seconds", "generated_tokens", "optimizer_steps")


def swarm_rounds(dtype: str, rounds: int = 2, share_prompts: bool = False) -> str:
    """Two rounds of three tiny nodes (``share_prompts`` as ``batched_swarm``'s), each
    answering 4 questions with 8 completions of up to 12 tokens and training on its own 4
    groups and 4 of the next node's (advantages +1 / -1 alternately): every completion, every
    update's statistics, and the weights and Adam moments after. No env: what is pinned is the
    swarm's arithmetic alone."""
    tok = tiny_tokenizer()
    config = GRPOConfig(max_new_tokens=12, learning_rate=3e-3, device="cpu", dtype=dtype)
    agents = batched_swarm([GRPOAgent(tiny_model(tok, TinyModelConfig(), seed=i), tok, config,
                                      seed=i, num_external=4) for i in range(3)],
                           share_prompts=share_prompts)
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
        # not the wall time, nor the cost counts learn added after the fingerprints were
        # pinned (tests/test_compute_records.py checks those)
        record += [ids, {a: {k: v for k, v in s.items() if k not in UNPINNED}
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


def cpu_vendor() -> str:
    """``vendor_id`` of /proc/cpuinfo ("AuthenticAMD", "GenuineIntel"), or "" where unknown."""
    try:
        with open("/proc/cpuinfo") as info:
            return next((line.split(":", 1)[1].strip() for line in info
                         if line.startswith("vendor_id")), "")
    except OSError:
        return ""


def same_kernels_or_skip(name: str) -> None:
    if not REFERENCE:
        pytest.skip("no reference fingerprints recorded")
    if cpu_vendor() != REFERENCE_CPU_VENDOR:
        pytest.skip(f"the reference was recorded on a CPU of {REFERENCE_CPU_VENDOR}; this one is "
                    f"{cpu_vendor() or 'unknown'}'s: its kernels round otherwise, so bit equality "
                    "cannot be checked here")
    capability = torch.backends.cpu.get_cpu_capability()
    if capability != REFERENCE_CPU_CAPABILITY:
        pytest.skip(f"the reference was recorded with torch's {REFERENCE_CPU_CAPABILITY} "
                    f"kernels; this CPU runs its {capability} ones, which round otherwise")
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


@pytest.mark.parametrize("name", list(DTYPES))
def test_shared_swarm_rounds_are_bit_for_bit_the_reference(name):
    """The default path's results did not move with the speed work done after it was pinned."""
    same_kernels_or_skip(name)
    assert swarm_rounds(name, share_prompts=True) == SHARED_REFERENCE[name]


# ---------------------------------------------------------------- the fast arithmetic


def models_of(shape: str, count: int = 2):
    """Models of the tiny learner's shape or a grouped-query one, their norm weights moved off
    1 (a fresh model's are all 1, which would make folding them trivially exact)."""
    if shape == "tiny":
        tok = tiny_tokenizer()
        models = [tiny_model(tok, TinyModelConfig(), seed=s) for s in range(count)]
    else:
        tok = char_tokenizer()
        models = [tiny_llama(tok, seed=s) for s in range(count)]
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for model in models:
            for name, p in model.named_parameters():
                if name.endswith("norm.weight"):
                    p.mul_(1 + 0.3 * torch.randn(p.shape, generator=g))
    return tok, models


def test_rms_normalize_and_swiglu_equal_the_reference_with_their_gradients():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 16, generator=g, requires_grad=True)
    w = (1 + 0.3 * torch.randn(2, 16, generator=g)).requires_grad_()
    out = torch.randn(2, 3, 5, 16, generator=g)
    results = []
    for norm in (rms_norm, rms_normalize):
        x.grad = w.grad = None
        y = norm(x, w, 1e-5)
        (y * out).sum().backward()
        results.append((y.detach(), x.grad.clone(), w.grad.clone()))
    for ref, fast in zip(*results):
        torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-6)
    with torch.no_grad():  # the no-grad path, weightless as after fast_weights
        torch.testing.assert_close(rms_normalize(x, None, 1e-5),
                                   rms_norm(x, torch.ones(2, 16), 1e-5), rtol=1e-5, atol=1e-6)
    gate_up = torch.randn(2, 3, 5, 32, generator=g, requires_grad=True)
    grad = torch.randn(2, 3, 5, 16, generator=g)
    results = []
    for function in (reference_swiglu, swiglu):
        gate_up.grad = None
        y = function(gate_up)
        y.backward(grad)
        results.append((y.detach(), gate_up.grad.clone()))
    for ref, fast in zip(*results):  # the same kernels: the same bits
        assert torch.equal(fast, ref)


@pytest.mark.parametrize("dtype", DTYPES.values())
def test_rotate_equals_the_reference_rotary_embedding_with_its_gradient(dtype):
    """The complex product on heads in rotary pairs, put back in the reference's order, is
    the reference's ``x * cos + rotate_half(x) * sin`` (a float32 result from either input
    dtype), and its gradient the reference's in float32, rounded once to x's dtype (the
    reference's own bfloat16 gradient adds two rounded halves); positions far apart, so that
    the angles are large."""
    g = torch.Generator().manual_seed(0)
    positions = torch.tensor([[[0, 1, 7, 500, 2047]]])
    exact = torch.randn(1, 1, 5, 3, 16, generator=g).to(dtype).float().requires_grad_()
    x = exact.detach().to(dtype).requires_grad_()
    grad = torch.randn(1, 1, 5, 3, 16, generator=g)
    pairs = rotary_pairs(16)
    ref = reference_rotate(exact, rotary(positions, 16, 10000.0, torch.float32))
    ref.backward(grad)
    fast = rotate(x[..., pairs], rotation(positions, 16, 10000.0)).index_select(-1, pairs.argsort())
    fast.backward(grad)
    assert fast.dtype == torch.float32
    torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad, exact.grad.to(dtype))


@pytest.mark.parametrize("keep", [1, 2])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_fast_packed_prompt_pass_equals_the_reference(shape, keep):
    """The shared path's prompt pass (folded norms, packed prompts, a lean last layer) gives
    the reference's kept logits, keys, values and gradients to float rounding; one node has
    fewer prompts than the other (a place of padding only)."""
    tok, models = models_of(shape)
    ids, mask, positions = padded(
        tok, [["What is 3 + 4?", "Spell abc backward", "1 + 1 ="],
              ["What is 71 * 3? Answer with a number", "", "Hi"]])
    results = []
    for arithmetic in ("reference", "fast"):
        for model in models:
            model.zero_grad(set_to_none=True)
        weights = stack_weights(models)
        if arithmetic == "fast":
            weights = fast_weights(weights, models[0].config)
        logits, cache = grouped_forward(weights, models[0].config, ids, mask, positions,
                                        logits_to_keep=keep, arithmetic=arithmetic)
        real = mask.bool()[:, :, -keep:, None].expand(logits.shape)
        key_mask = mask.bool().reshape(-1, 1, mask.shape[2], 1)
        kv = [(z * key_mask).sum() for z in cache.keys + cache.values]
        weight = torch.linspace(-1, 1, logits.numel()).reshape(logits.shape)
        ((logits * weight)[real].sum() + 0.1 * sum(kv)).backward()
        keys = [(z * key_mask).detach() for z in cache.keys + cache.values]
        grads = [p.grad.clone() for model in models for p in model.parameters()]
        results.append((logits.detach()[real], keys, grads))
    (logits, keys, grads), (fast_logits, fast_keys, fast_grads) = results
    # the fast cache holds each key head's dimensions in rotary pairs (values as they are)
    pairs = rotary_pairs(keys[0].shape[-1])
    layers = len(keys) // 2
    fast_keys = [z if i >= layers else z.index_select(-1, pairs.argsort())
                 for i, z in enumerate(fast_keys)]
    assert logits.abs().sum() > 0
    torch.testing.assert_close(fast_logits, logits, rtol=1e-5, atol=1e-5)
    for ref, fast in zip(keys, fast_keys):
        torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-5)
    for ref, fast in zip(grads, fast_grads):
        torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-5 * ref.abs().max().item())


def test_prompt_packing_puts_every_real_token_back_where_it_was():
    mask = torch.tensor([[[0, 0, 1, 1], [1, 1, 1, 1]], [[0, 0, 0, 0], [0, 1, 1, 1]]])
    packing = PromptPacking(mask)
    assert packing.size == 6
    values = torch.arange(16.0).reshape(2, 2, 4)
    packed = packing.pack(values[..., None, None])  # (N, 1, S, heads 1, d 1)
    assert packed.flatten().tolist()[:6] == [2, 3, 4, 5, 6, 7]
    assert packed.flatten().tolist()[6:9] == [13, 14, 15]
    back = packing.unpack(packed).reshape(2, 2, 4)
    assert torch.equal(back[mask.bool()], values[mask.bool()])
    assert torch.equal(packing.pack_heads(back.reshape(4, 1, 4, 1)), packed.reshape(2, 1, 6, 1))
    last = packing.last(packed, 1).reshape(2, 2)  # each row's last position
    assert last[0].tolist() == [3, 7] and last[1, 1] == 15


@pytest.mark.parametrize("shape", SHAPES)
def test_the_shared_learn_step_in_bfloat16_matches_the_copied_one(shape):
    """Under bfloat16 autocast the two layouts agree to bfloat16 rounding."""
    tok, models = models_of(shape)
    updates = [SimpleNamespace(data=SimpleNamespace(rows=rows)) for rows in training_rows(tok)]
    results = []
    for layout in (CopiedPromptBatch, SharedPromptBatch):
        for model in models:
            model.zero_grad(set_to_none=True)
        batch = layout.of(updates, tok.pad_token_id, torch.device("cpu"))
        with autocast(torch.device("cpu"), torch.bfloat16):
            logits = batch.completion_logits(stack_weights(models), models[0].config).float()
        copied = layout is CopiedPromptBatch
        if copied:
            targets, mask = batch.completion_ids, batch.completion_mask
        logp = token_logprobs(logits[:, :, : targets.shape[2]].flatten(0, 1),
                              targets.flatten(0, 1)).reshape(targets.shape) * mask
        logp.sum().backward()
        results.append((logp.detach(), [p.grad.clone() for m in models for p in m.parameters()]))
    (logp, grads), (shared_logp, shared_grads) = results
    torch.testing.assert_close(shared_logp, logp, rtol=0, atol=0.05)
    for ref, fast in zip(grads, shared_grads):
        torch.testing.assert_close(fast, ref, rtol=0, atol=0.05 * ref.abs().max().item())


if __name__ == "__main__":
    torch.set_num_threads(1)
    print(measured())
    print({name: swarm_rounds(name, share_prompts=True) for name in DTYPES})

"""Batched sampling: prompts shared across rows, and rows with their own LoRA adapters."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model
from tiny_lm import tiny_llama

from agents.lm.generation import generate_completion_ids, left_padded, sampling_config
from agents.lm.grpo_config import GRPOConfig
from agents.lm.mixed_adapters import adapter_runs, per_row_adapters
from agents.lm.torch_rng import TorchRNG

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CPU = torch.device("cpu")


def peft_with_adapters(tok, names=("n0", "n1", "n2"), dora=False):
    """A tiny Llama with several LoRA adapters whose B matrices are not zero (so they matter)."""
    config = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", use_dora=dora)
    model = get_peft_model(tiny_llama(tok), config, adapter_name=names[0])
    for name in names[1:]:
        model.add_adapter(name, config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter_name, parameter in model.named_parameters():
            if "lora_B" in parameter_name:
                parameter.normal_(0, 0.5, generator=generator)
    return model.eval()


def batch(tok, rows):
    prompts = [tok(f"question {i % 3} " + "x" * i)["input_ids"] for i in range(rows)]
    return left_padded(prompts, tok.pad_token_id)


def test_adapter_runs():
    assert adapter_runs(["a", "a", "b", "a"]) == [("a", 0, 2), ("b", 2, 3), ("a", 3, 4)]
    assert adapter_runs([]) == []


@pytest.mark.parametrize("names", [
    ["n0", "n0", "n1", "n1", "n2", "n2"],  # nodes of equal size, as lora_swarm produces
    ["n0", "n1", "n0", "n2", "n2", "n0"],  # interleaved
    ["n1", "n1", "n1", "n1", "n1", "n0"],  # unequal runs
    ["n2"] * 6,  # a single adapter
])
def test_per_row_adapters_match_peft_routing(tok, names):
    model = peft_with_adapters(tok)
    ids, mask = batch(tok, len(names))
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask, adapter_names=names).logits
        with per_row_adapters(model, names) as routing:
            assert routing == {}  # the fast path, not peft's
            got = model(input_ids=ids, attention_mask=mask, **routing).logits
        base = model(input_ids=ids, attention_mask=mask, adapter_names=["__base__"] * 6).logits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(expected, base, atol=1e-3)  # the adapters do change the output
    # the hooks are gone afterwards: the active adapter alone again
    model.set_adapter("n0")
    with torch.no_grad():
        after = model(input_ids=ids, attention_mask=mask).logits
        only_a = model(input_ids=ids, attention_mask=mask, adapter_names=["n0"] * 6).logits
    torch.testing.assert_close(after, only_a)


def test_per_row_adapters_fall_back_to_peft_where_the_fast_path_does_not_apply(tok):
    names = ["n0", "n1"]
    model = peft_with_adapters(tok)
    with per_row_adapters(model, names) as routing:  # gradients on: not for training
        assert routing == {"adapter_names": names}
    dora = peft_with_adapters(tok, dora=True)  # DoRA changes the update itself
    with torch.no_grad(), per_row_adapters(dora, names) as routing:
        assert routing == {"adapter_names": names}  # peft routes (and refuses DoRA, clearly)


def test_per_row_adapters_reject_a_batch_of_another_size(tok):
    model = peft_with_adapters(tok)
    ids, mask = batch(tok, 3)
    with torch.no_grad(), per_row_adapters(model, ["n0", "n1"]):
        with pytest.raises(RuntimeError, match="2 rows but the batch has 3"):
            model(input_ids=ids, attention_mask=mask)


def counting_prompt_passes(model):
    """Records the batch size of every forward pass over more than one token (prompt passes)."""
    sizes = []

    def hook(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None and ids.shape[1] > 1:
            sizes.append(ids.shape[0])

    model.register_forward_pre_hook(hook, with_kwargs=True)
    return sizes


@pytest.mark.parametrize("copies", [1, 4])
def test_repeated_prompts_are_encoded_once_and_sample_the_same_tokens(tok, copies):
    model = tiny_llama(tok)
    prompt_passes = counting_prompt_passes(model)
    questions = [tok(q)["input_ids"] for q in ("What is 1 + 2?", "Sum 3 and 40 please.", "7*8")]
    prompts = [p for p in questions for _ in range(copies)]
    config = GRPOConfig(max_new_tokens=16, device="cpu")
    eos = [tok.eos_token_id]
    got = generate_completion_ids(model, prompts, config=config, pad_id=tok.pad_token_id,
                                  eos_ids=eos, device=CPU, dtype=torch.float32,
                                  rng=TorchRNG(5, CPU))
    assert prompt_passes == [3]  # one prompt pass, over the 3 distinct prompts (not 3 x copies)
    # A bare generate on the whole padded batch, from the same random state.
    ids, mask = left_padded(prompts, tok.pad_token_id)
    with TorchRNG(5, CPU).scope(), torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask,
                             generation_config=sampling_config(config, tok.pad_token_id, eos))
    bare = [row[: row.index(eos[0])] if eos[0] in row else row
            for row in out[:, ids.shape[1]:].tolist()]
    assert got == bare
    if copies > 1:
        assert len(set(map(tuple, got))) > len(questions)  # copies sampled differently


def test_generation_with_adapters_per_row_matches_one_adapter_at_a_time(tok):
    model = peft_with_adapters(tok, names=("n0", "n1"))
    prompts = [tok("What is 1 + 2?")["input_ids"]] * 2 + [tok("Sum 3 and 4.")["input_ids"]] * 2
    config = GRPOConfig(max_new_tokens=12, top_k=1, device="cpu")  # greedy: comparable
    common = dict(config=config, pad_id=tok.pad_token_id, eos_ids=[tok.eos_token_id],
                  device=CPU, dtype=torch.float32)
    joint = generate_completion_ids(model, prompts * 2, adapter_names=["n0"] * 4 + ["n1"] * 4,
                                    rng=TorchRNG(0, CPU), **common)
    alone = []
    for name in ("n0", "n1"):
        model.set_adapter(name)
        alone += generate_completion_ids(model, prompts, rng=TorchRNG(0, CPU), **common)
    assert joint == alone
    assert joint[:4] != joint[4:]


def test_sampling_config_sets_every_knob():
    config = sampling_config(GRPOConfig(temperature=0.7, top_p=0.9, top_k=5), 0, [1, 2])
    assert (config.temperature, config.top_p, config.top_k) == (0.7, 0.9, 5)
    assert config.repetition_penalty == 1.0 and config.do_sample
    assert config.eos_token_id == [1, 2]

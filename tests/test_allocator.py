"""The tiny swarm's processes keep freed memory (``sapo_experiments.allocator``): glibc's
thresholds set through ``mallopt`` where the swarm is built and where warm starts train, and
a swarm's rounds the same bits with them as without."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from sapo_experiments import allocator, tiny_learners
from sapo_experiments.allocator import SETTINGS, keep_freed_memory

ROOT = Path(__file__).resolve().parents[1]


class FakeLibc:
    def __init__(self, answer=1):
        self.calls, self.answer = [], answer

    def mallopt(self, parameter, value):
        self.calls.append((parameter, value))
        return self.answer


def test_keep_freed_memory_sets_glibcs_thresholds():
    libc = FakeLibc()
    assert keep_freed_memory(libc) is True
    assert libc.calls == [(-3, 32 * 2**20), (-1, 2**31 - 1), (-2, 256 * 2**20)] == list(SETTINGS)
    refusing = FakeLibc(answer=0)
    assert keep_freed_memory(refusing) is False and len(refusing.calls) == 3
    assert keep_freed_memory(object()) is False  # no mallopt (not glibc): nothing done


class Built(Exception):
    pass


def test_the_tiny_factory_and_warm_starts_set_it_in_their_process(monkeypatch):
    calls = []

    def record():
        calls.append(True)
        raise Built  # stop before any model is built or trained

    monkeypatch.setattr(tiny_learners, "keep_freed_memory", record)
    with pytest.raises(Built):
        tiny_learners.TinyLearners()(["node_0", "node_1"], 4, np.random.SeedSequence(0))
    with pytest.raises(Built):
        tiny_learners._train_warm_start(None, 1, None)
    assert calls == [True, True]


ROUNDS = textwrap.dedent("""
    import hashlib, sys
    import numpy as np, torch
    from agents.lm.grpo import GRPOAgent, GRPOConfig
    from agents.tiny import TinyModelConfig, tiny_model, tiny_tokenizer
    from agents.tiny.batched import batched_swarm
    from sapo_experiments.allocator import keep_freed_memory

    torch.set_num_threads(1)

    def rounds():
        tok = tiny_tokenizer()
        config = GRPOConfig(max_new_tokens=8, learning_rate=3e-3, device="cpu")
        agents = batched_swarm([GRPOAgent(tiny_model(tok, TinyModelConfig(), seed=i), tok,
                                          config, seed=i, num_external=2) for i in range(2)])
        digest = hashlib.sha256()
        for r in range(2):
            asked = [[f"What is {r + i} + {q}?" for q in range(2)] for i in range(2)]
            prompts = [[a.prompt_ids(q, "") for q in qs] for a, qs in zip(agents, asked)]
            ids = agents[0].joint_actor.generate(agents, prompts, 4)
            digest.update(repr(ids).encode())
            groups = [[{"question": q, "system_prompt": "", "completions":
                        tok.batch_decode(ids[i][4 * k: 4 * k + 4], skip_special_tokens=True),
                        "advantages": np.array([1, -1, 1, -1], np.float32)}
                       for k, q in enumerate(qs)] for i, qs in enumerate(asked)]
            agents[0].joint_actor.learn_jointly({f"node_{i}": groups[i] for i in range(2)})
        for a in agents:
            for p in a.model.parameters():
                digest.update(p.detach().numpy().tobytes())
        return digest.hexdigest()

    default = rounds()
    assert keep_freed_memory()
    print(default, rounds())
""")


@pytest.mark.slow  # a process of its own (the allocator's settings are the process's)
def test_a_tiny_swarms_rounds_are_the_same_bits_with_freed_memory_kept():
    pytest.importorskip("torch")
    if allocator._glibc() is None:
        pytest.skip("no glibc here")
    out = subprocess.run([sys.executable, "-c", ROUNDS], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    default, kept = out.stdout.split()
    assert default == kept

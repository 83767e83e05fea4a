"""A tiny run does not depend on what ran before it in the same process: the same run gives the
same per-round rewards and the same trained weights, bit for bit, in a fresh interpreter and
after a different run (another seed, sharing, bfloat16, copied prompts) in this one.

What a run could leave behind for the next: torch's global random state, default dtype, thread
count or autocast; a cached warm-start model or tokenizer trained in place; module caches
(reasoning-gym datasets and entries, folded weights, prompt packing); the scoring child
process. The reference run is made in a subprocess, so that it sees none of them.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import sapo_env  # noqa: E402
import sapo_env.runtime  # noqa: E402
from agents.tiny.config import SPECIALIST_TASKS, TinyModelConfig, WarmStartConfig  # noqa: E402
from agents.tiny.warm_start import warm_start  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TASKS = [SPECIALIST_TASKS["spell_backward"], SPECIALIST_TASKS["basic_arithmetic"]]
# A warm start of a second: enough of the answer format to earn partial credit now and then,
# so that rewards vary and the GRPO steps move the weights.
SHORT = WarmStartConfig(
    tasks=TASKS, target_accuracy=None, max_steps=40, batch_size=8, eval_every=20, eval_size=4,
    learning_rate=1e-2,
    model=TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                          intermediate_size=64),
)
RUN = {"seed": 0, "num_external": 1, "dtype": "float32", "share_prompts": True}
"""The run checked; OTHER differs from it in everything a setting can change."""
OTHER = {"seed": 1, "num_external": 2, "dtype": "bfloat16", "share_prompts": False}


def tiny_run(folder: str, seed: int, num_external: int, dtype: str, share_prompts: bool,
             rounds: int = 4) -> dict:
    """Four nodes of the warm start in ``folder``, batched as ``TinyLearners`` batches them,
    ``rounds`` rounds: each round's rewards (hex floats) and each node's weights' digest."""
    from agents import GRPOConfig
    from agents.tiny.batched import batched_swarm
    from agents.tiny.warm_start import tiny_nodes

    env = sapo_env.parallel_env(n=4, system_prompt="", tasks=TASKS, max_rounds=rounds,
                                questions_per_round=4, completions_per_question=4,
                                train_budget=4, num_external=num_external)
    config = GRPOConfig(max_new_tokens=12, learning_rate=1e-3, max_grad_norm=1.0,
                        gradient_checkpointing=False, torch_threads=1, dtype=dtype)
    nodes = tiny_nodes([folder], config, num_external,
                       np.random.SeedSequence(seed).spawn(len(env.possible_agents)))
    batched_swarm(nodes, env.possible_agents, share_prompts=share_prompts)
    history = sapo_env.runtime.run(env, nodes, seed=seed, progress=False)
    digests = []
    for node in nodes:
        digest = hashlib.sha256()
        for name, tensor in sorted(node.model.state_dict().items()):
            digest.update(name.encode() + tensor.detach().cpu().numpy().tobytes())
        digests.append(digest.hexdigest())
    return {"rewards": [[float(r).hex() for r in row] for row in history.rewards],
            "weights": digests}


@pytest.fixture(scope="module")
def folder(tmp_path_factory, one_torch_thread) -> str:
    return str(warm_start(SHORT, tmp_path_factory.mktemp("tiny-cache")))


def test_a_run_after_another_run_is_the_run_in_a_fresh_process(folder):
    tests = Path(__file__).resolve().parent
    script = (f"import json, sys; sys.path[:0] = {[str(tests.parent), str(tests)]!r}; "
              f"from test_run_independence import tiny_run; "
              f"print(json.dumps(tiny_run({folder!r}, **{RUN!r})))")
    fresh = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           check=True, timeout=600)
    alone = json.loads(fresh.stdout.strip().splitlines()[-1])
    # the check can fail: the run earns rewards that vary and its steps move the weights
    rewards = np.array([[float.fromhex(r) for r in row] for row in alone["rewards"]])
    assert rewards.max() > 0 and len(np.unique(rewards)) > 2
    tiny_run(folder, **OTHER)
    after = tiny_run(folder, **RUN)
    assert after["rewards"] == alone["rewards"]
    assert after["weights"] == alone["weights"]
    assert after == tiny_run(folder, **RUN)  # and after itself

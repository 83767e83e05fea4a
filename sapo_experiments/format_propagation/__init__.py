"""Format propagation: does a swarm of small language models learn the ``<answer>`` format from
each other's text? (The paper's Section 4.)

The paper added a formatting reward early on and removed it: "experience sharing in SAPO made
it unnecessary because knowledge about the correct formatting (expected by ReasoningGYM's
verifiers) spread throughout the swarm almost immediately". SmolLM2-135M-Instruct never writes
``<answer>`` tags on its own, so under the strict verifier all its completions score 0, its
groups have zero advantage and carry no gradient: it can only learn the format from someone
else's rollouts. This experiment measures that, on a CPU.

Conditions (``CONDITIONS``), each with ``lm_nodes`` SmolLM2 LoRA nodes on one shared base
(``agents.lora_swarm``), GRPO as the paper ran it (clip 0.2 / 0.28, no KL) and a LoRA learning
rate of 3e-4 (``FormatConfig.learning_rate`` says why):

- ``isolated``: J = 0, each node trains on its own 4 groups only;
- ``sharing``: J = 4, the LM nodes also train on up to 4 informative groups of the others;
- ``demonstrator``: the same plus one scripted ``DemonstratorAgent`` node that answers right
  (``demo_accuracy``) and writes the tag with probability ``demo_tag_probability`` = 0.5,
  otherwise "The answer is X.". Why not always tagged: advantages are relative within a group,
  so a group whose completions all carry the tag teaches right against wrong answers, not the
  format, and a group whose completions all score the same is filtered out of the pool before
  any node samples it. A group of 4 with p = 0.5 mixes tagged and untagged answers 7 times in
  8, and then the tag is all that separates reward 1 from reward 0;
- ``demonstrator-leaves``: the demonstrator stops publishing (its action's ``share`` flags all
  0) from round ``rounds // 2`` on, so only LM text is left in the pool. The env has no churn;
  this keeps everything else (questions, J, the swarm's size) unchanged.

Every node answers B = 4 questions with L = 4 completions of at most 48 tokens under a short
system prompt that asks for the tag, on basic_arithmetic with two one-digit terms and + or -;
the strict ``<answer>`` verifier is the reward. Per round and node (``metrics``): strict
reward, tag use and lenient accuracy (format against arithmetic), the informative groups of
the training set and the GRPO step's metrics.

Outputs in ``out`` (default ``out/format-propagation``):
    ``results.md``                  the table (LM nodes, mean ± 95% CI over seeds) and
                                    whether tag use settled above 80%
    ``format_propagation.png``      tag use, strict reward and lenient accuracy over rounds
    ``runs/<condition>_seed<k>.npz``  one run's per-round, per-node arrays (reused on resume)
                                    and ``samples``: each node's first completion of a round
    ``tensorboard/<condition>_seed<k>/``  the env's scalars plus ``format/*``
    ``summary.json``                settings, date, machine, seconds

Command line: ``sapo-env format-propagation [--quick] [--seeds 2] [--rounds 36]
[--conditions demonstrator ...] [--out DIR]``. A readable single run:
``examples/format_propagation.py``.

Example::

    from sapo_experiments.format_propagation import FormatConfig, format_propagation
    result = format_propagation(FormatConfig(quick=True, conditions=("demonstrator",)))
    print(result.table_markdown)

Modules: ``config`` (conditions and settings), ``metrics`` (pure per-round measures), ``run``
(one run), ``sweep`` (all runs, resume), ``report`` (table and figure), ``cli``.
"""

from sapo_experiments.format_propagation.config import (
    BY_NAME,
    CONDITIONS,
    EASY_ARITHMETIC,
    QUICK,
    SHORT_SYSTEM_PROMPT,
    Condition,
    FormatConfig,
    RunSpec,
    TinyNodes,
)
from sapo_experiments.format_propagation.metrics import (
    has_tag,
    informative_groups,
    lenient_accuracy,
    round_metrics,
    tag_use,
)
from sapo_experiments.format_propagation.run import StopsPublishing, build_agents, run_one
from sapo_experiments.format_propagation.sweep import FormatResult, format_propagation
from sapo_experiments.run_files import load_run

__all__ = [
    "BY_NAME",
    "CONDITIONS",
    "EASY_ARITHMETIC",
    "QUICK",
    "SHORT_SYSTEM_PROMPT",
    "Condition",
    "FormatConfig",
    "FormatResult",
    "RunSpec",
    "TinyNodes",
    "StopsPublishing",
    "build_agents",
    "format_propagation",
    "has_tag",
    "informative_groups",
    "lenient_accuracy",
    "load_run",
    "round_metrics",
    "run_one",
    "tag_use",
]

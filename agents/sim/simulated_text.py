"""The simulated learner's text: how it writes a completion and how it reads one back.

A completion names its approach (a strategy of ``STRATEGIES``), gives one sentence of
"reasoning", then the answer in one of ``FORMATS``. ``parse_completion`` re-encodes any text,
a simulated learner's or not, into the (format, strategy) choices that would have produced it.
"""

from __future__ import annotations

import re

FORMATS: tuple[str, ...] = ("tag", "answer_is", "hedge")
"""Answer formats, in logit order. Only ``"tag"`` scores under the env's default extractor."""

STRATEGIES: tuple[str, ...] = ("guess", "recall", "step-by-step", "verify")
"""Solution strategies, in logit order (and, with the default qualities, worst to best)."""

# One sentence of "reasoning" per strategy, so that completions read like reasoning traces.
_REASONING = {
    "guess": "I go with my first impression.",
    "recall": "This looks like one I have seen before, so I recall how it went.",
    "step-by-step": "I work through it one step at a time.",
    "verify": "I work through it step by step, then check the result against the question.",
}
_ANSWER_LINE = {
    "tag": "<answer>{}</answer>",
    "answer_is": "So the answer is {}.",
    "hedge": "I think it is {}, but I am not sure.",
}
_MARKER = "Approach: "
# TEMPLATES[format][strategy]: a whole completion with "{}" where the answer goes
TEMPLATES = [
    [
        f"{_MARKER}{name}. {_REASONING[name]}\n" + _ANSWER_LINE[fmt].replace("{}", "{0}")
        for name in STRATEGIES
    ]
    for fmt in FORMATS
]
_MARKER_LEN = len(_MARKER)
STRATEGY_INDEX = {name: i for i, name in enumerate(STRATEGIES)}
_NUMBER = re.compile(r"\d+")
_ANSWER_IS = re.compile(r"answer\s+is\b", re.IGNORECASE)


def parse_completion(text: str) -> tuple[int | None, int | None]:
    """Re-encode a completion: ``(format index, strategy index)``, None where unreadable.

    The format is read from any text (a tag, an "answer is" phrase); the strategy and the hedge
    only from text that names its approach the way simulated learners write it.
    """
    strategy = None
    from_sim = text.startswith(_MARKER)
    if from_sim:
        end = text.find(".", _MARKER_LEN)
        if end > 0:
            strategy = STRATEGY_INDEX.get(text[_MARKER_LEN:end])
        # a sim learner's answer is its last line; look there first (the common, fast case)
        last = text[text.rfind("\n") + 1:]
        if last.startswith("<answer>") and last.endswith("</answer>"):
            return 0, strategy
        if last.startswith("I think it is"):
            return 2, strategy
    if "<answer>" in text and "</answer>" in text:
        return 0, strategy
    if _ANSWER_IS.search(text):
        return 1, strategy
    if from_sim and "I think it is" in text:  # a hedge around a multi-line answer
        return 2, strategy
    return None, strategy


def wrong_answer(answer: str, u: float) -> str:
    """A plausible wrong answer derived from the right one; ``u`` in [0, 1) picks the change.

    A number in the answer is shifted by 1-9; an answer without digits is reversed (or
    extended when it reads the same backwards). The verifier decides what it is worth: some
    reasoning-gym scorers give partial credit.
    """
    numbers = list(_NUMBER.finditer(answer))
    if numbers:
        position = u * len(numbers)
        m = numbers[int(position)]
        shift = 1 + int((position - int(position)) * 9)  # the fraction left picks the shift
        return f"{answer[:m.start()]}{int(m.group()) + shift}{answer[m.end():]}"
    flipped = answer[::-1]
    return flipped if flipped != answer else answer + (answer[-1:] or "?")

"""The learn step's padded batch of a batched tiny swarm, in two layouts (``share_prompts``).

Both hold the training rows of N nodes, padded across nodes, and give each row's logits at
its completion positions from the nodes' stacked weights (:mod:`agents.tiny.grouped_llama`):

- :class:`CopiedPromptBatch` forwards each distinct prompt once, then copies its keys and
  values to each of its rows (how the swarm computed before prompt sharing; kept bit for bit
  for the runs made then);
- :class:`SharedPromptBatch` lets all the rows of a prompt read its keys and values once
  (:func:`agents.tiny.grouped_llama.grouped_prefix_forward`), computing with the fast arithmetic
  (:mod:`agents.tiny.fast_kernels`): the same logits to float rounding, in a faster learn step
  (BENCHMARKS.md, "Prompt-prefix sharing").

:class:`agents.tiny.batched.BatchedSwarm` builds one of them per learn step.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agents.lm.encoding import by_length
from agents.lm.grpo_update import GRPOUpdate
from agents.tiny.fast_kernels import fast_weights
from agents.tiny.grouped_llama import grouped_forward, grouped_prefix_forward


@dataclass
class CopiedPromptBatch:
    """The training rows of N nodes, each distinct prompt forwarded once, then copied to each
    of its rows (``share_prompts=False``: how the swarm computed before the option, kept bit
    for bit).

    A group's L completions share one prompt, which is most of each sequence (a question of
    tens of tokens against a dozen completion tokens), so each node's distinct prompts are
    forwarded once (``(N, G, P)``, left-padded) and every completion row continues from its
    prompt's cached keys and values (``(N, R, C)``, right-padded). Rows are in the order of
    the node's micro-batch (:func:`agents.lm.encoding.by_length`), so node ``i``'s logits for its
    completion tokens are ``completion_logits(...)[i, :S_i, :C_i]``. The same arithmetic as
    forwarding every row whole; the gradient of a shared prompt gathers from all its rows."""

    prompt_ids: torch.Tensor  # (N, G, P)
    prompt_mask: torch.Tensor  # (N, G, P)
    row_prompt: torch.Tensor  # (N, R): each row's prompt
    completion_ids: torch.Tensor  # (N, R, C)
    completion_mask: torch.Tensor  # (N, R, C)
    completion_positions: torch.Tensor  # (N, R, C)

    @classmethod
    def of(cls, updates: Sequence[GRPOUpdate], pad_id: int, device: torch.device
           ) -> CopiedPromptBatch:
        nodes = [distinct_prompts(u) for u in updates]
        n = len(nodes)
        g = max(len(prompts) for prompts, _ in nodes)
        p = max(len(prompt) for prompts, _ in nodes for prompt in prompts)
        r = max(len(rows) for _, rows in nodes)
        c = max(len(completion) for _, rows in nodes for _, completion in rows)
        prompt_ids = torch.full((n, g, p), pad_id, dtype=torch.long)
        prompt_mask = torch.zeros((n, g, p), dtype=torch.long)
        row_prompt = torch.zeros((n, r), dtype=torch.long)
        completion_ids = torch.full((n, r, c), pad_id, dtype=torch.long)
        completion_mask = torch.zeros((n, r, c), dtype=torch.long)
        prompt_length = torch.zeros((n, g), dtype=torch.long)
        for i, (prompts, rows) in enumerate(nodes):
            for k, prompt in enumerate(prompts):
                prompt_ids[i, k, p - len(prompt) :] = torch.tensor(prompt)
                prompt_mask[i, k, p - len(prompt) :] = 1
                prompt_length[i, k] = len(prompt)
            for j, (k, completion) in enumerate(rows):
                row_prompt[i, j] = k
                completion_ids[i, j, : len(completion)] = torch.tensor(completion)
                completion_mask[i, j, : len(completion)] = 1
        # A row's positions continue its prompt's real tokens.
        start = prompt_length.gather(1, row_prompt)
        positions = start[:, :, None] + torch.arange(c)
        return cls(*(t.to(device) for t in (prompt_ids, prompt_mask, row_prompt, completion_ids,
                                             completion_mask, positions)))

    def completion_logits(self, weights: dict[str, torch.Tensor], config: Any) -> torch.Tensor:
        """``(N, R, C, V)``: at ``[i, j, t]`` the logits that predict completion token t."""
        positions = (self.prompt_mask.cumsum(dim=2) - 1).clamp(min=0)
        last, cache = grouped_forward(weights, config, self.prompt_ids, self.prompt_mask,
                                      positions, logits_to_keep=1)
        n = last.shape[0]
        first = last[torch.arange(n, device=last.device)[:, None], self.row_prompt]  # (N, R, 1, V)
        if self.completion_ids.shape[2] == 1:
            return first  # every completion is one token: the prompts predict them all
        rest, _ = grouped_forward(weights, config, self.completion_ids[:, :, :-1],
                                  self.completion_mask[:, :, :-1],
                                  self.completion_positions[:, :, :-1],
                                  cache=cache.select_rows(self.row_prompt))
        return torch.cat([first, rest], dim=2)



def distinct_prompts(update: GRPOUpdate) -> tuple[list[list[int]], list[tuple[int, list[int]]]]:
    """A node's distinct prompts, and its rows in micro-batch order
    (:func:`agents.lm.encoding.by_length`) as (index of the row's prompt, completion)."""
    prompts: dict[tuple[int, ...], int] = {}
    rows = [(prompts.setdefault(tuple(r.prompt), len(prompts)), r.completion)
            for r in by_length(update.data.rows)]
    return [list(p) for p in prompts], rows


@dataclass
class SharedPromptBatch:
    """The training rows of N nodes, each prompt's keys and values read once by all its rows
    (``share_prompts=True``; :func:`grouped_prefix_forward`).

    The completions are laid out ``(N, G, L, C)``: slot ``(i, g, l)`` is the l-th row of
    prompt g of node i. A prompt with more than L rows (the same question in two groups) takes
    several prompt places, each forwarded, so that one such prompt does not widen every
    prompt's slots; L is chosen to forward the fewest padded positions. Node ``i``'s logits for
    its completion tokens are ``completion_logits(...)[i, :S_i, :C_i]``, rows in micro-batch
    order, as :class:`CopiedPromptBatch`'s, to which they are equal to float rounding."""

    prompt_ids: torch.Tensor  # (N, G, P), left-padded
    prompt_mask: torch.Tensor  # (N, G, P)
    slot_ids: torch.Tensor  # (N, G, L, C), right-padded
    slot_mask: torch.Tensor  # (N, G, L, C)
    slot_positions: torch.Tensor  # (N, G, L, C)
    row_prompt: torch.Tensor  # (N, R): the prompt place of each row in micro-batch order
    row_slot: torch.Tensor  # (N, R): and its slot there

    @classmethod
    def of(cls, updates: Sequence[GRPOUpdate], pad_id: int, device: torch.device
           ) -> SharedPromptBatch:
        nodes = [distinct_prompts(u) for u in updates]
        counts = [list(Counter(k for k, _ in rows).values()) for _, rows in nodes]
        p = max(len(prompt) for prompts, _ in nodes for prompt in prompts)
        c = max(len(completion) for _, rows in nodes for _, completion in rows)

        def places(per_prompt: int) -> int:  # prompt places of the node that needs the most
            return max(sum(-(-count // per_prompt) for count in node) for node in counts)

        # Positions forwarded per node for L rows a prompt place: G (P + L (C - 1)).
        per_prompt = min(sorted({n for node in counts for n in node}),
                         key=lambda rows: places(rows) * (p + rows * (c - 1)))
        n, g = len(nodes), places(per_prompt)
        r = max(len(rows) for _, rows in nodes)
        prompt_ids = torch.full((n, g, p), pad_id, dtype=torch.long)
        prompt_mask = torch.zeros((n, g, p), dtype=torch.long)
        prompt_length = torch.zeros((n, g), dtype=torch.long)
        slot_ids = torch.full((n, g, per_prompt, c), pad_id, dtype=torch.long)
        slot_mask = torch.zeros((n, g, per_prompt, c), dtype=torch.long)
        row_prompt = torch.zeros((n, r), dtype=torch.long)
        row_slot = torch.zeros((n, r), dtype=torch.long)
        for i, (prompts, rows) in enumerate(nodes):
            used = 0  # prompt places taken
            place_of: dict[int, int] = {}  # where the next row of each prompt goes
            filled = [0] * g  # rows in each place
            for j, (k, completion) in enumerate(rows):
                if k not in place_of or filled[place_of[k]] == per_prompt:
                    place_of[k], used = used, used + 1
                    prompt = prompts[k]
                    prompt_ids[i, place_of[k], p - len(prompt) :] = torch.tensor(prompt)
                    prompt_mask[i, place_of[k], p - len(prompt) :] = 1
                    prompt_length[i, place_of[k]] = len(prompt)
                place = place_of[k]
                row_prompt[i, j], row_slot[i, j] = place, filled[place]
                slot_ids[i, place, filled[place], : len(completion)] = torch.tensor(completion)
                slot_mask[i, place, filled[place], : len(completion)] = 1
                filled[place] += 1
        # A row's positions continue its prompt's real tokens.
        slot_positions = (prompt_length[:, :, None, None] + torch.arange(c)).expand(
            n, g, per_prompt, c)
        return cls(*(t.to(device) for t in (prompt_ids, prompt_mask, slot_ids, slot_mask,
                                             slot_positions, row_prompt, row_slot)))

    def completion_logits(self, weights: dict[str, torch.Tensor], config: Any) -> torch.Tensor:
        """``(N, R, C, V)``: at ``[i, j, t]`` the logits that predict completion token t."""
        positions = (self.prompt_mask.cumsum(dim=2) - 1).clamp(min=0)
        weights = fast_weights(weights, config)
        last, cache = grouped_forward(weights, config, self.prompt_ids, self.prompt_mask,
                                      positions, logits_to_keep=1, arithmetic="fast")
        nodes = torch.arange(last.shape[0], device=last.device)[:, None]
        first = last[nodes, self.row_prompt]  # (N, R, 1, V)
        if self.slot_ids.shape[3] == 1:
            return first  # every completion is one token: the prompts predict them all
        rest, _ = grouped_prefix_forward(weights, config, cache, self.slot_ids[..., :-1],
                                         self.slot_mask[..., :-1], self.slot_positions[..., :-1])
        rest = rest[nodes, self.row_prompt, self.row_slot]  # (N, R, C - 1, V)
        return torch.cat([first, rest], dim=2)

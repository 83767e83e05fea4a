"""The language-model learner: ``GRPOAgent``, a model that acts by sampling and learns with GRPO.

- ``grpo``: :class:`GRPOAgent`, one node (also ``agents.GRPOAgent``).
- ``grpo_config``: :class:`GRPOConfig`, its hyperparameters (also ``agents.GRPOConfig``).
- ``grpo_update``: one GRPO update in the steps every caller takes (begin, loss, step, finish).
- ``loss``, ``off_policy``: the GRPO objective and the corrections for received completions,
  as pure tensor functions.
- ``encoding``: groups re-encoded as tokens and packed in micro-batches.
- ``generation``: chat prompts and batched sampling.
- ``received_logprob``: the receiver's check of external completions against its own model.
- ``lora``, ``mixed_adapters``: :func:`lora_swarm`, many nodes on one frozen base with one LoRA
  adapter each, and the batches whose rows each go through their own adapter.
- ``models``: loading models and tokenizers, offline first.
- ``torch_rng``: :class:`TorchRNG`, a private torch random stream for one node.
- ``weights``: the weight files of a ``GRPOAgent`` checkpoint (the whole model or an adapter).

Every module here needs the ``lm`` extra (torch, transformers, peft); importing this folder
loads none of them.
"""

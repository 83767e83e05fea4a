"""The transport attacks' names, importable from here too: they are registered in
:mod:`sapo_env.attacks` (where the config checks them), each by the module that defines it
(:mod:`sapo_env.defenses.transport_attacks`)."""

from sapo_env.attacks import TRANSPORT_ATTACK_NAMES, TransportAttack, check_adversaries

__all__ = ["TRANSPORT_ATTACK_NAMES", "TransportAttack", "check_adversaries"]

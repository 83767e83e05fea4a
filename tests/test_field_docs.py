"""Command-line help is the config fields' own docstrings (sapo_experiments.field_docs)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sapo_experiments.field_docs import field_docs, field_help
from sapo_experiments.format_propagation import cli as format_cli
from sapo_experiments.format_propagation.config import FormatConfig
from sapo_experiments.reproduce import cli as reproduce_cli
from sapo_experiments.reproduce.config import ReproduceConfig
from sapo_experiments.tiny_learners import TinyLearners


@dataclass
class Base:
    rounds: int = 10
    """Rounds per run,
    over two lines."""
    seeds: int = 3
    """Seeds of the base."""


@dataclass
class Child(Base):
    seeds: int = 4
    """Seeds per cell (``rounds`` each, 100%% sure: no, 100% sure)."""
    quiet: bool = False
    "not" + "a docstring"  # noqa: B018 - an expression, not a string literal


def test_field_docs_reads_the_string_under_each_field_bases_first():
    assert field_docs(Child) == {"rounds": "Rounds per run, over two lines.",
                                 "seeds": "Seeds per cell (``rounds`` each, 100%% sure: no, "
                                          "100% sure)."}


def test_field_help_drops_markup_names_options_and_escapes_percent():
    assert field_help(Child, "seeds", {"rounds": "--rounds"}, lead="sim: ", tail=" More.",
                      default=(1, 2)) == ("sim: seeds per cell (--rounds each, 100%%%% sure: "
                                          "no, 100%% sure). More. Default: 1 2.")
    assert field_help(Base, "rounds", default=True) == ("Rounds per run, over two lines. "
                                                        "Default: on.")
    with pytest.raises(KeyError):
        field_help(Child, "quiet")


def option_helps(parser) -> dict[str, str]:
    """Each option's help as ``--help`` prints it (argparse's ``%%`` unescaped), lower case."""
    return {option: (action.help % {}).lower() for action in parser._actions
            for option in action.option_strings if action.help}


def first_words(cls: type, name: str, options: dict[str, str] | None = None) -> str:
    """The start of a field's docstring as help prints it (up to its first parenthesis, at most
    40 characters), lower case."""
    return (field_help(cls, name, options) % {}).split(" (")[0][:40].lower()


@pytest.mark.parametrize("field, option", sorted(reproduce_cli.TINY_OPTIONS.items()))
def test_every_tiny_option_is_helped_by_its_field_docstring(field, option):
    helps = option_helps(reproduce_cli.build_parser())
    assert first_words(TinyLearners, field, reproduce_cli.TINY_OPTIONS) in helps[option]


@pytest.mark.parametrize("option, cls, field", [
    ("--protocol", ReproduceConfig, "protocol"), ("--learner", ReproduceConfig, "learner"),
    ("--model", ReproduceConfig, "model"), ("--experiments", ReproduceConfig, "experiments"),
    ("--seeds", ReproduceConfig, "seeds"), ("--held-out-every", ReproduceConfig,
                                            "held_out_every"),
    ("--held-out-questions", ReproduceConfig, "held_out_questions"),
    ("--swarm", ReproduceConfig, "swarm"), ("--checkpoint-every", ReproduceConfig,
                                            "checkpoint_every"),
    ("--quick", ReproduceConfig, "quick"), ("--base-seed", ReproduceConfig, "base_seed"),
    ("--tiny-copied-prompts", TinyLearners, "share_prompts"),
])
def test_reproduce_options_are_helped_by_their_field_docstrings(option, cls, field):
    assert first_words(cls, field) in option_helps(reproduce_cli.build_parser())[option]


@pytest.mark.parametrize("option, field", [
    ("--model", "model"), ("--lm-nodes", "lm_nodes"), ("--num-external", "num_external"),
    ("--max-new-tokens", "max_new_tokens"), ("--demo-accuracy", "demo_accuracy"),
    ("--demo-tag-probability", "demo_tag_probability"), ("--leave-round", "leave_round"),
    ("--threads", "threads"), ("--device", "device"), ("--base-seed", "base_seed"),
])
def test_format_propagation_options_are_helped_by_their_field_docstrings(option, field):
    assert first_words(FormatConfig, field) in option_helps(format_cli.build_parser())[option]

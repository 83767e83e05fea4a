import pytest

from sapo_env.scoring.answers import extract_lenient, extract_tag, get_extractor


@pytest.mark.parametrize("text,expected", [
    ("<answer>42</answer>", "42"),
    ("think <answer>1</answer> then <answer> 2 </answer>", "2"),  # last tag wins, stripped
    ("The answer is 42", None),
    ("", None),
])
def test_tag(text, expected):
    assert extract_tag(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("reasoning\n<answer>7</answer>\nAnswer: 9", "7"),  # a tag wins over everything
    ("2 + 2 makes 4.\nSo the answer is 4.", "4"),
    ("Final answer: **-12**", "-12"),
    ("answer: 3\nthen again, the answer is 5", "5"),  # the last phrase wins
    ("step one\nstep two\n  17  \n\n", "17"),  # else the last non-empty line
    ("P ∧ ¬Q", "P ∧ ¬Q"),
    ("   \n\n", None),
    ("", None),
])
def test_lenient(text, expected):
    assert extract_lenient(text) == expected


def test_get_extractor():
    assert get_extractor("tag") is extract_tag
    assert get_extractor("lenient") is extract_lenient
    custom = str.upper
    assert get_extractor(custom) is custom

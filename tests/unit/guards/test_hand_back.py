"""The hand-back detector: long legitimate answers of every shape pass, replies that only ask the
user what to do next or only announce work are caught (the corpus: tests/support/answer_shapes.py)."""

from __future__ import annotations

import pytest

from proxy.guards.hand_back import hands_back, substance
from proxy.policy.models import JudgeSettings
from tests.support.answer_shapes import HAND_BACKS, LEGITIMATE

MIN = JudgeSettings().hand_back_min_substance


@pytest.mark.parametrize("text", [pytest.param(text, id=name) for name, text in LEGITIMATE.items()])
def test_a_long_legitimate_answer_is_no_hand_back(text):
    assert len(text) >= JudgeSettings().judge_skip_threshold
    assert not hands_back(text, MIN)


@pytest.mark.parametrize("text", [pytest.param(text, id=name) for name, text in HAND_BACKS.items()])
def test_a_reply_that_only_asks_or_announces_hands_back(text):
    assert len(text) >= JudgeSettings().judge_skip_threshold
    assert hands_back(text, MIN)


def test_the_corpus_holds_at_least_twenty_legitimate_answers():
    assert len(LEGITIMATE) >= 20


@pytest.mark.parametrize(
    ("text", "handed"),
    [
        pytest.param("I found the weather. Would you like the time too?", True, id="a-status-line-is-no-substance"),
        pytest.param("Canberra is the capital of Australia. Want me to check more?", True, id="short-substance"),
        pytest.param(
            "Canberra is the capital of Australia, chosen in 1908 as a compromise. Want more?",
            False,
            id="enough-substance-before-an-offer",
        ),
        pytest.param("```python\nprint(1)\n```\nShall I run it?", True, id="a-small-fence-is-little-substance"),
        pytest.param("Paris is at 18 °C and Berlin at 11 °C.", False, id="no-question-no-announcement"),
    ],
)
def test_substance_below_the_minimum_with_a_question_hands_back(text, handed):
    assert hands_back(text, 40) is handed


def test_sentences_under_a_plans_heading_are_announcements():
    chars, handed = substance("I will:\n1. read the logs\n2. restart the worker")

    assert (chars, handed) == (0, True)


def test_a_fenced_block_is_substance_whole():
    code = "```\n" + "x = 1\n" * 20 + "```"

    assert substance(code + "\nShall I apply it?") == (len(code), True)

"""Pricing: prices per model, cost in micro-dollars, the pricing file (budget arithmetic: test_budgets.py)."""

from __future__ import annotations

import pytest

from proxy.books.pricing import Price, PriceTable, PricingError, load_pricing
from proxy.exchange import Usage

PRICES = PriceTable(
    {
        "gpt-4o": Price(prompt=2.5, completion=10.0, cached_prompt=1.25),
        "gpt-4o-mini": Price(prompt=0.15, completion=0.6),
        "claude-sonnet-4": Price(prompt=3.0, completion=15.0, cached_prompt=0.3, cache_write_prompt=3.75),
    }
)


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-4o", "gpt-4o"),
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-4o-mini-2024", "gpt-4o-mini"),
        ("llama", None),
        (None, None),
    ],
)
def test_price_lookup_exact_then_longest_prefix(model, expected):
    price = PRICES.price(model)

    assert price == (PRICES.prices[expected] if expected else None)


@pytest.mark.parametrize(
    ("usage", "micros"),
    [
        (Usage(1_000_000, 0), 2_500_000),
        (Usage(0, 1000), 10_000),
        (Usage(1000, 1000, cached_tokens=400), 600 * 2.5 + 400 * 1.25 + 1000 * 10),
        (Usage(100, 0, cached_tokens=500), 100 * 1.25),  # more cached than prompt: capped
    ],
)
def test_cost_in_micro_dollars_with_cached_prompt_tokens(usage, micros):
    assert PRICES.cost_micros("gpt-4o", usage) == round(micros)


def test_cached_price_defaults_to_the_prompt_price():
    assert PRICES.cost_micros("gpt-4o-mini", Usage(1000, 0, cached_tokens=1000)) == 150


@pytest.mark.parametrize(
    ("usage", "micros"),
    [
        (Usage(1000, 100, cached_tokens=200, cache_write_tokens=300), 500 * 3 + 200 * 0.3 + 300 * 3.75 + 100 * 15),
        (Usage(100, 0, cached_tokens=60, cache_write_tokens=90), 60 * 0.3 + 40 * 3.75),  # capped by the prompt
    ],
    ids=["read-written-fresh", "more-than-the-prompt"],
)
def test_tokens_written_to_the_cache_cost_their_own_price(usage, micros):
    assert PRICES.cost_micros("claude-sonnet-4", usage) == round(micros)


def test_cache_write_price_defaults_to_the_prompt_price():
    assert PRICES.cost_micros("gpt-4o", Usage(1000, 0, cache_write_tokens=1000)) == 2500


def test_unknown_model_has_no_cost():
    assert PRICES.cost_micros("my-local-llama", Usage(1000, 1000)) is None


def test_shipped_pricing_file_loads():
    table = load_pricing(__import__("pathlib").Path(__file__).parents[3] / "policies" / "pricing.yaml")

    assert table.price("gpt-4o-mini") is not None


def test_bad_pricing_file_names_the_field(tmp_path):
    path = tmp_path / "pricing.yaml"
    path.write_text("models: {m: {prompt: -1, completion: 1}}\n")

    with pytest.raises(PricingError, match=r"models.m.prompt"):
        load_pricing(path)

"""The cache is bounded by the weight of its entries: the least recently used go first."""

from __future__ import annotations

import pytest

from proxy.schemas.weighted_cache import WeightedCache


def cache_of(max_weight: int, *entries: tuple[str, int]) -> WeightedCache[str, str]:
    cache: WeightedCache[str, str] = WeightedCache(max_weight)
    for key, weight in entries:
        cache.put(key, key.upper(), weight)
    return cache


CASES = [
    # bound, entries put in order (key, weight), keys kept, total weight
    pytest.param(10, [("a", 3), ("b", 3)], ["a", "b"], 6, id="under-the-bound-keeps-all"),
    pytest.param(10, [("a", 5), ("b", 5)], ["a", "b"], 10, id="exactly-the-bound-keeps-all"),
    pytest.param(10, [("a", 5), ("b", 5), ("c", 1)], ["b", "c"], 6, id="past-the-bound-drops-the-oldest"),
    pytest.param(10, [("a", 2), ("b", 2), ("c", 9)], ["c"], 9, id="a-heavy-entry-drops-as-many-as-it-needs"),
    pytest.param(10, [("a", 4), ("b", 11)], ["a"], 4, id="an-entry-heavier-than-the-bound-is-not-kept"),
    pytest.param(10, [("a", 4), ("a", 6)], ["a"], 6, id="a-key-put-again-is-weighed-once"),
]


@pytest.mark.parametrize(("bound", "entries", "kept", "weight"), CASES)
def test_entries_are_kept_while_their_weight_fits_the_bound(bound, entries, kept, weight):
    cache = cache_of(bound, *entries)

    assert [key for key in "abc" if cache.get(key) is not None] == kept
    assert (len(cache), cache.weight) == (len(kept), weight)


def test_reading_an_entry_makes_it_the_last_to_go():
    cache = cache_of(10, ("a", 5), ("b", 5))

    assert cache.get("a") == "A"
    cache.put("c", "C", 5)

    assert (cache.get("a"), cache.get("b"), cache.get("c")) == ("A", None, "C")


def test_a_missing_key_is_none():
    assert cache_of(10, ("a", 1)).get("z") is None

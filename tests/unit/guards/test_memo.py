from proxy.guards.memo import _CACHED_CHARS, per_text


def counted():
    calls = []

    @per_text
    def upper(text):
        calls.append(text)
        return text.upper()

    return upper, calls


def test_a_text_seen_again_is_answered_from_memory():
    upper, calls = counted()
    assert upper("ok") == upper("ok") == "OK"
    assert calls == ["ok"]


def test_a_text_too_long_to_remember_is_computed_each_time():
    upper, calls = counted()
    long = "a" * (_CACHED_CHARS + 1)
    assert upper(long) == upper(long) == long.upper()
    assert len(calls) == 2



def counted_pair():
    calls = []

    @per_text
    def joined(first, second):
        calls.append((first, second))
        return first + second

    return joined, calls


def test_a_function_of_two_texts_is_remembered_per_pair():
    joined, calls = counted_pair()
    assert joined("a", "b") == joined("a", "b") == "ab"
    assert joined("a", "c") == "ac"
    assert calls == [("a", "b"), ("a", "c")]


def test_two_texts_too_long_together_are_computed_each_time():
    joined, calls = counted_pair()
    half = "a" * (_CACHED_CHARS // 2 + 1)
    assert joined(half, half) == joined(half, half)
    assert len(calls) == 2

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

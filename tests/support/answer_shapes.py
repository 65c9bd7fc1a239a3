"""Final replies of many shapes, for the hand-back detector and the bare-JSON rewrite.

``LEGITIMATE``: long (≥ 256 characters), legitimate final answers of varied shape — prose,
lists, tables, code, answers that end with an offer of more help *after* giving the answer.
None may be taken for a hand-back. ``HAND_BACKS``: replies of the same length that hand the
turn back (a question to the user) or only announce work: each must be. ``JSON_REPLIES``:
a valid JSON answer wrapped as models wrap it (a fence, a sentence), with the bare JSON it
carries.
"""

from __future__ import annotations

__all__ = ["HAND_BACKS", "JSON_REPLIES", "LEGITIMATE"]

LEGITIMATE: dict[str, str] = {
    "weather-prose": (
        "Right now it is 18 °C and sunny in Paris, and 11 °C with light rain in Berlin. Paris is the warmer of "
        "the two by seven degrees; the rain in Berlin is expected to ease by the evening, according to the same "
        "station network. Both readings were taken within the last ten minutes."
    ),
    "weather-with-offer": (
        "Paris: 18 °C, sunny. Berlin: 11 °C, light rain. Paris is seven degrees warmer at the moment, and "
        "the readings come from the national station networks, updated every ten minutes. If you are "
        "packing for both, a light rain jacket will do for Berlin.\n\nWould you like me to look up the "
        "forecast for the rest of the week as well?"
    ),
    "offer-let-me-know": (
        "The bug is in `parse_header`: it splits on the first colon, so a value that contains a colon (a URL, "
        "a time) is cut short. I changed it to `line.split(':', 1)` and added a test with "
        "`Location: http://x:8080/`; the whole suite passes now (212 tests). Let me know if you'd like me to "
        "backport the fix to the 1.x branch too."
    ),
    "bullet-list": (
        "Here is what I found about the three libraries:\n\n"
        "- httpx: sync and async clients, HTTP/2, a mock transport for tests; BSD licensed.\n"
        "- requests: sync only, the most widely used, no HTTP/2; Apache 2.0.\n"
        "- aiohttp: async only, client and server, websockets built in; Apache 2.0.\n\n"
        "For your async service, httpx is the closest fit, since it keeps one API for both modes."
    ),
    "numbered-steps-for-user": (
        "To rotate the key without downtime:\n\n"
        "1. Create the new key in the console and add it to the tenants file next to the old one.\n"
        "2. Reload the proxy (`kill -HUP`), which accepts both keys from then on.\n"
        "3. Move every client to the new key; the metrics show traffic per key.\n"
        "4. When the old key has no traffic for a day, delete it and reload again."
    ),
    "markdown-table": (
        "| City | Temperature | Sky |\n|---|---|---|\n| Paris | 18 °C | sunny |\n| Berlin | 11 °C | light rain |\n"
        "| Madrid | 24 °C | clear |\n| Oslo | 6 °C | overcast |\n\n"
        "Madrid is the warmest of the four, Oslo the coldest; all readings are from the last quarter hour, "
        "from the same national station networks."
    ),
    "code-answer": (
        "Here is the function, with the edge cases handled:\n\n```python\ndef chunks(items, size):\n"
        "    if size < 1:\n        raise ValueError('size must be positive')\n"
        "    for start in range(0, len(items), size):\n        yield items[start:start + size]\n```\n\n"
        "It yields the last, shorter chunk too, and raises for a size below one."
    ),
    "code-then-offer": (
        "The query that returns each customer's latest order:\n\n```sql\nSELECT DISTINCT ON (customer_id) "
        "customer_id, id, placed_at\nFROM orders\nORDER BY customer_id, placed_at DESC;\n```\n\n"
        "`DISTINCT ON` keeps the first row per customer in the sort order. Do you want me to write the same "
        "query for MySQL, which has no DISTINCT ON?"
    ),
    "shell-commands": (
        "The disk is full because of old container images: `docker system df` shows 41 GB of unused images. "
        "Run these to free the space:\n\n```bash\ndocker image prune -a --filter until=168h\n"
        "docker builder prune\n```\n\nThat removes images unused for a week and the build cache; "
        "running containers are not touched."
    ),
    "rhetorical-question": (
        "Why does the request time out only on Mondays? Because the weekly report job starts at 09:00 on "
        "Mondays and holds a lock on the orders table for about four minutes; every checkout in that window "
        "waits for the lock and hits the 30-second timeout. Moving the job to 03:00 fixed it in staging."
    ),
    "answer-then-next-steps-for-you": (
        "The migration failed because column `email` has 14 duplicate values, which the new unique index "
        "rejects. I listed them in `duplicates.csv`. Next steps for you: decide which account of each pair to "
        "keep, then run the migration again; it will pass once the duplicates are gone."
    ),
    "comparison-prose": (
        "Both plans cost about the same per month, but they differ in what you pay for. The Standard plan is "
        "$40 flat and includes 100 GB of transfer; the Usage plan is $12 plus $0.09 per GB. At your current "
        "300 GB a month, Standard costs $40 plus $18 of overage, Usage costs $39: Usage is cheaper by about $19."
    ),
    "summary-of-research": (
        "I checked all five regions. Latency from Frankfurt: eu-central 4 ms, eu-west 11 ms, us-east 88 ms, "
        "us-west 151 ms, ap-south 132 ms. Only eu-central and eu-west meet your 20 ms target, and eu-west is "
        "about 8% cheaper for the same instance type, so eu-west is the better choice."
    ),
    "json-like-explanation": (
        'The API returned {"status": "pending", "retry_after": 30}, which means the export is still being '
        "built. It is not an error: the server asks you to poll again after 30 seconds. Exports of this size "
        "usually take two to three minutes, so expect four or five polls before the download link appears."
    ),
    "answer-with-caveat-question": (
        "The contract allows termination with 30 days' written notice (section 12.2), and no penalty applies "
        "after the first year, which ended in March. The notice must go to the registered address in section "
        "1, not to the account manager. Is the registered address still the one in Leeds? If it moved, the "
        "notice should go to the new one."
    ),
    "translation": (
        'Here is the translation into German:\n\n"Sehr geehrte Damen und Herren, wir bestätigen den Eingang '
        "Ihrer Bestellung vom 3. Mai. Die Lieferung erfolgt voraussichtlich innerhalb von zehn Werktagen. "
        'Bei Fragen stehen wir Ihnen gern zur Verfügung."\n\nI kept the formal register of the original.'
    ),
    "headed-report": (
        "## Result\nAll 48 endpoints respond; 3 are slow.\n\n## Slow endpoints\n- `/search`: p95 1.8 s\n"
        "- `/export`: p95 4.2 s\n- `/reports/daily`: p95 2.6 s\n\n## Cause\nEach of them runs an unindexed "
        "query on `events`; an index on `(tenant_id, created_at)` brings all three under 300 ms in staging."
    ),
    "i-will-explain-then-does": (
        "I'll explain the difference briefly. A process has its own memory space; threads share the memory of "
        "their process. So two threads can read the same list without copying it, while two processes must "
        "send data through a pipe or shared memory. In CPython the GIL lets only one thread run Python code at "
        "a time, which is why CPU-bound work uses processes."
    ),
    "found-status-then-answer": (
        "I found the invoice. It is number 2024-0117, issued on 12 January for 1,250.00 EUR, and it was paid "
        "on 2 February by bank transfer; the payment reference matches. There is no open balance on the "
        "account, and no reminder was ever sent. Shall I send you a PDF copy of it?"
    ),
    "yes-no-with-reasons": (
        "Yes, you can upgrade from 3.9 to 3.12 directly. None of your dependencies pin an older Python; the "
        "two that needed new versions (numpy and pydantic) already have wheels for 3.12 at the versions you "
        "use. The only code change is in `utils.py`, which uses `asyncio.get_event_loop()` outside a loop, "
        "deprecated since 3.10: replace it with `asyncio.new_event_loop()`."
    ),
    "plan-done-report": (
        "Done. I did the three things you asked:\n1. Renamed `UserStore` to `AccountStore` in all 23 files.\n"
        "2. Updated the imports and the docs.\n3. Ran the tests: 340 passed, 0 failed.\n\nThe change is on "
        "branch `rename-store`, ready for review; nothing else in the repository changed."
    ),
    "ends-with-if-you-want": (
        "The two temperatures are 18 °C in Paris and 11 °C in Berlin, so Paris is warmer by 7 degrees. In "
        "Fahrenheit that is 64 °F and 52 °F. If you'd like me to, I can also check tomorrow's forecast for "
        "both cities or compare them with the seasonal average for early May."
    ),
}

HAND_BACKS: dict[str, str] = {
    "question-back": (
        "I found the weather. Would you like me to look up the local time as well, or would you rather I check "
        "the forecast for the coming days first, or perhaps compare the two cities' averages for this time of "
        "year, so that you can decide where to go? Just tell me which of these you prefer and I will do it."
    ),
    "announce-next": (
        "I have looked up the weather. Next I will check the current temperature in Berlin with the weather "
        "tool, and after that I will compare both readings and convert them to Fahrenheit in case you need "
        "them. Then I will write up a short summary with both values and the conditions in each city for you."
    ),
    "plan-list": (
        "Here is my plan:\n1. Call get_weather for Paris to get the current reading.\n2. Call get_weather for "
        "Berlin the same way.\n3. Compare the two temperatures and note the conditions.\n4. Write the final "
        "answer with both values in °C.\n\nI will start with Paris now and report back once I have both."
    ),
    "which-option": (
        "I checked the logs. There are several ways I could go from here. Should I roll back the last "
        "deployment, restart the workers one by one, or raise the memory limit of the pods first and watch "
        "whether the restarts stop? Do you want me to open an incident as well before I change anything at all?"
    ),
    "let-me-continue": (
        "Okay, I retrieved the file list. Let me now read each of the configuration files in turn to find "
        "where the timeout is set, and then I will look at the deployment manifests as well. I will need a "
        "few more steps for this; I'll get back to you with the full answer once I have gone through them all."
    ),
}

JSON_REPLIES: dict[str, tuple[str, str]] = {
    "json-fence": ('```json\n{"paris_c": 18, "berlin_c": 11}\n```', '{"paris_c": 18, "berlin_c": 11}'),
    "bare-fence": ('```\n{"paris_c": 18, "berlin_c": 11}\n```', '{"paris_c": 18, "berlin_c": 11}'),
    "in-a-sentence": (
        'Here is the answer: {"paris_c": 18, "berlin_c": 11}. Both values are in °C.',
        '{"paris_c": 18, "berlin_c": 11}',
    ),
    "fence-with-prose": (
        'Both readings are in.\n\n```json\n{\n  "paris_c": 18,\n  "berlin_c": 11\n}\n```\n\nLet me know if you '
        "need more.",
        '{\n  "paris_c": 18,\n  "berlin_c": 11\n}',
    ),
}

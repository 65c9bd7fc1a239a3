"""OpenAI Chat Completions: the only code that knows its shape."""

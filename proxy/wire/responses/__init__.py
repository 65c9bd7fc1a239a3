"""The OpenAI Responses API: the only code that knows its shape."""

"""Anthropic Messages: the only code that knows its shape."""

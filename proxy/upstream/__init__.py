"""Talking to the model API: the pooled client, its transport, retries, URL paths and address checks."""

"""Wire formats: parse a provider's JSON into :mod:`proxy.exchange` and render it back."""

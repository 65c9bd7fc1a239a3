"""What a model call cost, from ``policies/pricing.yaml``.

Costs are kept as integer micro-dollars so Redis can add them atomically (HINCRBY) and
no float rounding accumulates over a long session.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from proxy.exchange import Usage

__all__ = ["MICROS", "Price", "PriceTable", "PricingError", "load_pricing"]

MICROS = 1_000_000


class PricingError(ValueError):
    """The pricing file cannot be used; the message names the file and the field."""


class Price(BaseModel):
    """USD per million tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt: float = Field(ge=0)
    completion: float = Field(ge=0)
    cached_prompt: float | None = Field(None, ge=0, description="Defaults to the prompt price.")
    cache_write_prompt: float | None = Field(
        None, ge=0, description="Prompt tokens written to the cache (Anthropic's); defaults to the prompt price."
    )

    def cost_micros(self, usage: Usage) -> int:
        """Micro-dollars for one call's usage (cached and cache-written prompt tokens at their own price)."""
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        written = min(usage.cache_write_tokens, usage.prompt_tokens - cached)
        cached_price = self.prompt if self.cached_prompt is None else self.cached_prompt
        written_price = self.prompt if self.cache_write_prompt is None else self.cache_write_prompt
        dollars_per_m = (
            (usage.prompt_tokens - cached - written) * self.prompt
            + cached * cached_price
            + written * written_price
            + usage.completion_tokens * self.completion
        )
        return round(dollars_per_m)  # tokens times USD-per-million is micro-dollars


class _PricingFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    models: dict[str, Price] = Field(default_factory=dict)


_PREFIXED = 256
"""The most model names a table remembers its prefix match for (names come from clients)."""


@dataclass(frozen=True, slots=True)
class PriceTable:
    prices: Mapping[str, Price]
    _prefixed: dict[str, Price | None] = field(default_factory=dict, compare=False, repr=False)
    """Model name → its prefix match (None: unpriced), found once, not on every call's charge."""

    def price(self, model: str | None) -> Price | None:
        """Exact match, else the longest listed name the model starts with; None when unknown."""
        if not model:
            return None
        exact = self.prices.get(model)
        if exact is not None:
            return exact
        prefixed = self._prefixed
        if model in prefixed:
            return prefixed[model]
        matches = [name for name in self.prices if model.startswith(name)]
        found = self.prices[max(matches, key=len)] if matches else None
        if len(prefixed) >= _PREFIXED:
            prefixed.clear()
        prefixed[model] = found
        return found

    def cost_micros(self, model: str | None, usage: Usage) -> int | None:
        price = self.price(model)
        return None if price is None else price.cost_micros(usage)


def load_pricing(path: Path) -> PriceTable:
    """The price table; an absent file is an empty table (every model unpriced)."""
    if not path.exists():
        return PriceTable({})
    try:
        raw = yaml.safe_load(path.read_text()) or {}
        return PriceTable(_PricingFile.model_validate(raw).models)
    except (OSError, yaml.YAMLError) as exc:
        raise PricingError(f"{path}: cannot read pricing: {exc}") from exc
    except ValidationError as exc:
        details = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise PricingError(f"{path}: {details}") from exc

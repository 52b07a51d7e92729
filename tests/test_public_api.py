"""The curated public API: what users import from ``sentinel_core``, what adapters
import from ``sentinel_core.adapter``, and nothing of the machinery."""

from __future__ import annotations

import sentinel_core
import sentinel_core.adapter


def test_the_public_api_is_the_curated_list_and_adapters_have_their_own_module() -> None:
    assert len(sentinel_core.__all__) <= 25
    assert {"Sentinel", "Decision", "DecisionReason", "ConfigError", "hookimpl"} <= set(
        sentinel_core.__all__
    )
    assert not {"CircuitBreaker", "EmergencyLimiter", "Outcome", "AsyncStore"} & set(
        sentinel_core.__all__
    )
    assert all(hasattr(sentinel_core, name) for name in sentinel_core.__all__)
    assert all(hasattr(sentinel_core.adapter, name) for name in sentinel_core.adapter.__all__)

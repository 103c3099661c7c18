"""StreamConfig and ConsumerConfig declare one typed attribute per configuration field (issue 31:
what mypy and a reader see), so a field added to _DEFAULTS without its annotation, or the other
way round, fails here rather than as a wall of mypy errors."""

from __future__ import annotations

import pytest

from natserver.jetstream import consumer, stream


@pytest.mark.parametrize("module, cls", [(stream, stream.StreamConfig), (consumer, consumer.ConsumerConfig)])
def test_every_config_field_is_declared(module, cls):
    declared = list(cls.__annotations__)
    assert declared == list(module._DEFAULTS)
    assert cls.__slots__ == tuple(module._DEFAULTS)
    config = cls()
    assert all(getattr(config, name) == default for name, default in module._DEFAULTS.items())

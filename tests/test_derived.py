"""What is derived, not copied: each fact has one home, and the copies the SDK must keep agree.

Issue 13: Schema/1's keyword list is read from the shipped ``schema-1.json``; the
LocalName grammar is ``runner.protocol.names`` (the component SDK imports it too);
``[limits.channels]`` is the hub's own ``ChannelLimits``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from runner.config import ConfigError, HostConfig, load_config
from runner.contracts.schema1 import KEYWORDS
from runner.host.channels import ChannelLimits
from runner.protocol import names

NAMES = ["a", "a" * 64, "a" * 65, "abc\n", "\nabc", "a-b", "a--b", "-a", "a-", "A", "é", "a_b", ""]


def test_schema1_keywords_are_the_37_of_schema_1_json() -> None:
    assert len(KEYWORDS) == 37
    assert {"$schema", "$defs", "$ref", "dependentSchemas", "exclusiveMaximum"} <= KEYWORDS
    assert "unevaluatedProperties" not in KEYWORDS and "pattern" not in KEYWORDS


@pytest.mark.parametrize("text", NAMES)
def test_one_local_name_grammar(text: str) -> None:
    expected = text in {"a", "a" * 64, "a-b"}
    assert names.is_local_name(text) is expected


def test_channel_bounds_are_the_hubs() -> None:
    defaults = HostConfig().limits.channels.limits()
    assert defaults == ChannelLimits()
    fields = [field.name for field in dataclasses.fields(ChannelLimits)]
    assert fields == ["queue_items", "queue_bytes", "item_bytes", "source_bytes",
                      "pending_sends", "allocations"]  # fmt: skip


def test_a_channel_bound_out_of_range_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "flow-runner.toml"
    path.write_text("[limits.channels]\nqueue_items = 0\nbogus = 1\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert "limits.channels.queue_items: Input should be greater than or equal to 1" in message
    assert "limits.channels.bogus: unknown key" in message
    path.write_text("[limits.channels]\nqueue_items = 7\n")
    assert load_config(path).limits.channels.limits() == ChannelLimits(queue_items=7)

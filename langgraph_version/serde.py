"""`CheckpointSerializer`: LangGraph's checkpoint serializer, able to store what a hostile model can send.

A checkpoint holds the model's replies, tool-call arguments included, and LangGraph writes it with msgpack,
whose integers stop at 64 bits. A model that sends ``{"book_id": 10**30}`` (JSON has no such limit) made the
checkpoint write raise, so `GraphSession.ask` failed on the reply instead of answering the call with an error
result, as the hand-written loop and a graph without a checkpointer do. Such a value is rare, so only what
msgpack refuses is written another way: as JSON, LangChain objects in LangChain's own serialized form, which
LangGraph's serializer reads back (its "json" format) for LangChain's message types. Anything else it cannot
write still raises, as before.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.load.serializable import Serializable
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer


class CheckpointSerializer(JsonPlusSerializer):
    """msgpack as LangGraph writes it; JSON for the values msgpack cannot hold (integers beyond 64 bits)."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        try:
            return super().dumps_typed(obj)
        except TypeError as refused:  # what msgpack raises (ormsgpack.MsgpackEncodeError is a TypeError)
            try:
                return "json", json.dumps(obj, default=_langchain_json).encode()
            except (TypeError, ValueError):
                raise refused from None


def _langchain_json(value: Any) -> Any:
    """A LangChain object (a message) in the form LangGraph's serializer revives; nothing else is guessed at."""
    if isinstance(value, Serializable):
        return value.to_json()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")

"""`CheckpointSerializer`: LangGraph's checkpoint serializer, able to store what a hostile model can send.

msgpack's integers stop at 64 bits, and a model may send ``{"book_id": 10**30}``; only what msgpack refuses is
written another way, as JSON (LangChain objects in LangChain's serialized form), which LangGraph's serializer
reads back. Anything else it cannot write still raises.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.load.serializable import Serializable
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from shared_tools.conversation import DamagedCheckpoint


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

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """As LangGraph's, except that what cannot be read back (a type nobody writes, bytes that are not
        msgpack) is `DamagedCheckpoint`, naming the type, rather than whatever the decoder raised."""
        try:
            return super().loads_typed(data)
        except Exception as exc:
            kind = data[0] if isinstance(data, tuple) and data and isinstance(data[0], str) else "?"
            raise DamagedCheckpoint(
                f"a checkpoint of the thread cannot be read (stored as {kind[:40]!r}: {type(exc).__name__}: "
                f"{str(exc)[:200]})"
            ) from None


def _langchain_json(value: Any) -> Any:
    """A LangChain object (a message) in the form LangGraph's serializer revives; nothing else is guessed at."""
    if isinstance(value, Serializable):
        return value.to_json()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")

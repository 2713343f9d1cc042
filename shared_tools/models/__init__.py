"""The chat models both agents run on: a deterministic scripted model, and real ones, each checked first.

`make_model(spec)` is the one way in: ``scripted``, ``scripted:<persona>``, ``ollama:<model>``, ``local`` (the
bundled SmolLM2-135M) or ``openai:<model>``. Failures are `ModelUnavailable` (one line saying what to start, pull
or install), `ModelCallFailed` (a call broke mid-run) and `ModelRequestRefused` (the server refused a request).
"""

from shared_tools.models.errors import ModelCallFailed, ModelRequestRefused, ModelSpecError, ModelUnavailable
from shared_tools.models.factory import apply_base_url, make_model, ollama_base_url, openai_base_url
from shared_tools.models.personas import PERSONAS, ScriptExhausted
from shared_tools.models.scripted import ScriptedChatModel

__all__ = [
    "PERSONAS",
    "ModelCallFailed",
    "ModelRequestRefused",
    "ModelSpecError",
    "ModelUnavailable",
    "ScriptExhausted",
    "ScriptedChatModel",
    "apply_base_url",
    "make_model",
    "ollama_base_url",
    "openai_base_url",
]

"""The chat models both agents run on: a deterministic scripted model, and a checked Ollama model.

`make_model(spec)` is the one way in: ``"scripted"`` (the offline default), ``"scripted:<persona>"`` (a
persona from `personas.py`: shopper, looper, hallucinator, ...), or ``"ollama:<model>"`` (a real local model,
checked to be up and pulled first). `ScriptedChatModel` is the test double and demo model; its decisions live
in `personas.py`. Failures are `ModelUnavailable` (what to start or pull, one line) and `ModelCallFailed` (a
real call broke mid-run).
"""

from shared_tools.models.errors import ModelCallFailed, ModelSpecError, ModelUnavailable
from shared_tools.models.factory import make_model, ollama_base_url
from shared_tools.models.personas import PERSONAS, ScriptExhausted
from shared_tools.models.scripted import ScriptedChatModel

__all__ = [
    "PERSONAS",
    "ModelCallFailed",
    "ModelSpecError",
    "ModelUnavailable",
    "ScriptExhausted",
    "ScriptedChatModel",
    "make_model",
    "ollama_base_url",
]

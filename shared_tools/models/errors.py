"""What can go wrong when a model is chosen or called, as exceptions a caller can branch on.

`ModelSpecError` is a spec string `make_model` does not understand; `ModelUnavailable` is a real model that
cannot be used right now (its message is the one line a user needs: what to start or pull); `ModelCallFailed`
is a real model call that broke mid-run. Kept apart from the models so that the Ollama wrapper and the
factory can both raise them without importing each other.
"""

from __future__ import annotations


class ModelSpecError(ValueError):
    """A model spec string that `make_model` does not understand."""


class ModelUnavailable(RuntimeError):
    """The requested real model cannot be used right now; the message says what to run."""


class ModelCallFailed(ModelUnavailable):
    """A real model call failed mid-run (refused, cut off, garbled or timed out); see `ollama_model`."""

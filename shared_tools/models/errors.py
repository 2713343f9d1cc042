"""What can go wrong when a model is chosen or called, as exceptions a caller can branch on.

`ModelSpecError` is a spec string `make_model` does not understand; `ModelUnavailable` is a real model that
cannot be used right now (its message is the one line a user needs: what to start or pull); `ModelCallFailed`
is a real model call that broke mid-run; `ModelRequestRefused`, one kind of it, is one request the server refused
(a prompt over the context window). Kept apart so that the model wrappers and the factory can raise them.
"""

from __future__ import annotations


class ModelSpecError(ValueError):
    """A model spec string that `make_model` does not understand."""


class ModelUnavailable(RuntimeError):
    """The requested real model cannot be used right now; the message says what to run."""


class ModelCallFailed(ModelUnavailable):
    """A real model call failed mid-run (refused, cut off, garbled or timed out); see `ollama_model`."""


class ModelRequestRefused(ModelCallFailed):
    """The server answered, and refused this one request (HTTP 400 or 422: the history no longer fits the model's
    context, say): a failed call of this run, which the run's record shows, and every caller that goes on after a
    failed call (the comparison, `chat`) goes on after it too."""


def caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    """Is `exc` a `kind`, itself or as a cause or context a library wrapped it in (cycles are followed once)?"""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False

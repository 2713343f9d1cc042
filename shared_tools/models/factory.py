"""`make_model`: a spec string ("scripted", "scripted:<persona>", "ollama:<model>") to a chat model.

The scripted model needs nothing; a real model is checked first, cheaply (is Ollama up, is the model
pulled?), so a missing server is one clear line naming the command to run, not a traceback from deep inside
httpx. The Ollama client is imported only when an Ollama model is asked for, so scripted runs never load it.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import httpx
from langchain_core.language_models import BaseChatModel

from shared_tools.models.errors import ModelSpecError, ModelUnavailable
from shared_tools.models.personas import PERSONAS
from shared_tools.models.scripted import ScriptedChatModel

DEFAULT_OLLAMA_URL = "http://127.0.0.1:11434"
_REACHABILITY_TIMEOUT_S = 3.0


def ollama_base_url(host: str | None = None) -> str:
    """`OLLAMA_HOST` (or `host`) as a full URL: "host:port" and bare hosts get a scheme and the default port.

    Raises `ModelSpecError` naming `OLLAMA_HOST` for a value that is not a usable http(s) address.
    """
    given = (host if host is not None else os.environ.get("OLLAMA_HOST", "")).strip()
    if not given:
        return DEFAULT_OLLAMA_URL
    raw = given if "://" in given else "http://" + given
    try:
        parts = urlsplit(raw)
        port = parts.port or (443 if parts.scheme == "https" else 11434)
    except ValueError as exc:  # a port out of range or not a number, an unclosed IPv6 bracket
        raise ModelSpecError(f"OLLAMA_HOST={given!r} is not a usable address ({exc}); e.g. 127.0.0.1:11434") from None
    hostname = parts.hostname or "127.0.0.1"
    if parts.scheme not in ("http", "https") or any(c.isspace() for c in raw):
        raise ModelSpecError(f"OLLAMA_HOST={given!r} is not a usable http(s) address; e.g. 127.0.0.1:11434")
    if ":" in hostname:  # IPv6 literal
        hostname = f"[{hostname}]"
    return f"{parts.scheme}://{hostname}:{port}{parts.path.rstrip('/')}"


def _with_tag(name: str) -> str:
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def _check_ollama(base_url: str, model: str) -> None:
    """Raise `ModelUnavailable` (one line, with the command to run) unless `model` is pulled at `base_url`."""
    start = f"start it with `ollama serve`, then `ollama pull {model}`."
    try:
        response = httpx.get(f"{base_url}/api/tags", timeout=_REACHABILITY_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise ModelUnavailable(f"Ollama is not reachable at {base_url} - {start}") from exc
    if response.status_code != 200:
        raise ModelUnavailable(
            f"Ollama at {base_url} answered HTTP {response.status_code} to /api/tags - check the server, or {start}"
        )
    try:
        listed = response.json().get("models", [])
    except (ValueError, AttributeError) as exc:
        raise ModelUnavailable(f"{base_url} does not answer like Ollama (bad /api/tags) - {start}") from exc
    pulled = {_with_tag(str(m.get(k))) for m in listed if isinstance(m, dict) for k in ("name", "model") if m.get(k)}
    if _with_tag(model) not in pulled:
        raise ModelUnavailable(f"Model {model} is not pulled in Ollama at {base_url} - run `ollama pull {model}`.")


def _spec_error(spec: str) -> ModelSpecError:
    personas = ", ".join(f"scripted:{p}" for p in PERSONAS)
    return ModelSpecError(
        f"Unknown model spec {spec!r}; use 'scripted', {personas}, or 'ollama:<model>' (e.g. ollama:qwen3:4b)."
    )


def make_model(spec: str, *, timeout_s: float | None = 120.0, seed: int | None = None) -> BaseChatModel:
    """Build the model named by `spec`: "scripted", "scripted:<persona>" or "ollama:<model>".

    `seed` is the model's own seed (Ollama's sampling seed, 42 when not given; the noisy persona's dice, 0);
    an eval gives every trial a different one.
    """
    kind, colon, rest = spec.strip().partition(":")
    if kind == "scripted":
        persona = rest if colon else "shopper"
        if persona not in PERSONAS:
            raise _spec_error(spec)
        return ScriptedChatModel(persona=persona, seed=seed or 0)
    if kind == "ollama" and rest:
        base_url = ollama_base_url()  # first: the ollama package itself reads OLLAMA_HOST when imported
        # Imported here so scripted runs never load the Ollama client.
        from shared_tools.models.ollama import CheckedChatOllama

        _check_ollama(base_url, rest)
        return CheckedChatOllama(
            model=rest,
            temperature=0,
            seed=42 if seed is None else seed,
            reasoning=True,
            base_url=base_url,
            # The ollama client's default timeout is None (wait forever); a stuck server must not hang a run.
            client_kwargs={"timeout": timeout_s},
        )
    raise _spec_error(spec)

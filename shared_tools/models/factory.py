"""`make_model`: a spec string ("scripted", "scripted:<persona>", "ollama:<model>", "local", "openai:<model>")
to a chat model.

The scripted model needs nothing; a real model is checked first, cheaply (is the server up, is the model there?),
so a missing server is one clear line naming what to run, not a traceback from deep inside httpx. Each real
model's client is imported only when that model is asked for, so scripted runs never load one.
"""

from __future__ import annotations

import os
from typing import Literal
from urllib.parse import urlsplit

import httpx
from langchain_core.language_models import BaseChatModel

from shared_tools.models.errors import ModelSpecError, ModelUnavailable
from shared_tools.models.personas import PERSONAS
from shared_tools.models.scripted import ScriptedChatModel

DEFAULT_OLLAMA_URL = "http://127.0.0.1:11434"
_REACHABILITY_TIMEOUT_S = 3.0

BASE_URL_ENV = "OPENAI_BASE_URL"
"""Where `openai:<model>` is served when `make_model` is given no `base_url` (`--base-url` sets it)."""
BASE_URL_HELP = (
    f"the OpenAI-compatible server of --model openai:<model>, e.g. http://127.0.0.1:11434/v1 (default: ${BASE_URL_ENV})"
)
"""The help of every command's `--base-url`."""
DEFAULT_SEED = 42
"""A real model's sampling seed when none is given (with temperature 0 a rerun on one build repeats itself)."""
DEFAULT_TEMPERATURE = 0.0
"""A real model's sampling temperature when none is given: 0, so a run of the comparison repeats itself (an eval
samples instead: `comparison.eval.trials.EVAL_TEMPERATURE`)."""
MAX_TEMPERATURE = 2.0
"""The highest temperature OpenAI-style servers take."""


def checked_temperature(value: float | None) -> float:
    """`value` (None: `DEFAULT_TEMPERATURE`) as a temperature; `ModelSpecError` outside 0 to `MAX_TEMPERATURE`."""
    if value is None:
        return DEFAULT_TEMPERATURE
    if not 0 <= value <= MAX_TEMPERATURE:  # NaN fails both comparisons
        raise ModelSpecError(f"a temperature must be 0 to {MAX_TEMPERATURE:g}, got {value!r}")
    return float(value)


LOCAL_MAX_TOKENS = 256
"""The longest reply of `local`: a call's arguments are a few dozen tokens and an answer a few sentences. A call's
arguments are generated under a JSON grammar, measured at 0.25-0.9 s a token on 2 shared cores (30-70 tokens/s
free text): 256 tokens bound a runaway call at about a minute and a half there (one ran 7,592 tokens, uncapped)."""
REQUEST_TIMEOUT_S = 120.0
"""How long a real model's request may take, unless the caller says otherwise."""
LOCAL_REQUEST_TIMEOUT_S = 300.0
"""`local`'s: its worst reply on a busy machine, not a healthy server's. Measured on 2 cores shared by other
work: a cold 2,670-token prompt took 83 s (32 tokens/s), so a prompt near `local.CONTEXT_TOKENS` takes minutes,
plus a capped reply under the grammar (above). A timeout fails that run (`ModelCallFailed`, its record's error), so
it is set where only a stuck server reaches it."""
SERVER_MAX_TOKENS = 2048
"""The longest reply of an `openai:` or `ollama:` model: room for a small thinking model's reasoning, which
counts against the cap, before its answer; still a bound on a reply that never ends."""


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
        f"Unknown model spec {spec!r}; use 'scripted', {personas}, 'local', 'local:qwen2.5-1.5b', "
        "'local:smollm2-135m', 'openai:<model>' (with --base-url) "
        "or 'ollama:<model>' (e.g. ollama:qwen3:4b)."
    )


def openai_base_url(base_url: str | None = None) -> str:
    """`base_url`, else `OPENAI_BASE_URL`, as a usable http(s) URL; `ModelSpecError` names what is missing or bad."""
    given = (base_url if base_url is not None else os.environ.get(BASE_URL_ENV, "")).strip()
    where = "--base-url" if base_url is not None else BASE_URL_ENV
    if not given:
        raise ModelSpecError(
            f"openai:<model> needs the server's address: give --base-url URL or set {BASE_URL_ENV} "
            "(e.g. http://127.0.0.1:11434/v1 for Ollama, http://127.0.0.1:8000/v1 for vLLM)"
        )
    try:
        parts = urlsplit(given)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number or out of range
    except ValueError as exc:
        raise ModelSpecError(f"{where}={given!r} is not a usable address ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in given):
        raise ModelSpecError(f"{where}={given!r} is not an http(s) URL; e.g. http://127.0.0.1:11434/v1")
    return given.rstrip("/")


def apply_base_url(spec: str, base_url: str | None) -> None:
    """`--base-url URL`: checked, then set as `OPENAI_BASE_URL`, where every `make_model("openai:...")` of the
    command looks, in this process and in the worker processes it starts. `ModelSpecError` for a bad URL, or for
    a model that is not served at an address."""
    if base_url is None:
        return
    if not spec.strip().startswith("openai:"):
        raise ModelSpecError(
            f"--base-url is the address of the server of an openai:<model>; --model {spec} does not use one"
        )
    os.environ[BASE_URL_ENV] = openai_base_url(base_url)


def _openai_model(
    model: str, base_url: str, *, max_tokens: int, timeout_s: float | None, seed: int | None, temperature: float
) -> BaseChatModel:
    from shared_tools.models.openai_compat import NO_KEY, CompatChatOpenAI, async_http_client, sync_http_client

    return CompatChatOpenAI(
        model=model,
        base_url=base_url,
        api_key=os.environ.get("OPENAI_API_KEY") or NO_KEY,
        temperature=temperature,
        seed=DEFAULT_SEED if seed is None else seed,
        max_tokens=max_tokens,
        timeout=timeout_s,
        # The clients' transports bound the whole request by timeout_s, a stream's every chunk included
        # (`openai_compat.PerLoopTransport`); a second, per-chunk timer of the same length would only race it.
        stream_chunk_timeout=None,
        http_client=sync_http_client(timeout_s),
        http_async_client=async_http_client(timeout_s),
        # A retry would hide a failure behind minutes of waiting; the agents report it, once.
        max_retries=0,
        # Usage on the last streamed chunk, so a streamed reply's tokens are counted (OpenAI-style servers only
        # send it when asked; llama_server always does).
        stream_usage=True,
    )


def _ollama_model(model: str, *, timeout_s: float | None, seed: int | None, temperature: float) -> BaseChatModel:
    base_url = ollama_base_url()  # first: the ollama package itself reads OLLAMA_HOST when imported
    # Imported here so scripted runs never load the Ollama client.
    from shared_tools.models.ollama import CheckedChatOllama

    _check_ollama(base_url, model)
    return CheckedChatOllama(
        model=model,
        temperature=temperature,
        seed=DEFAULT_SEED if seed is None else seed,
        reasoning=True,
        base_url=base_url,
        num_predict=SERVER_MAX_TOKENS,
        # The ollama client's default timeout is None (wait forever); a stuck server must not hang a run.
        client_kwargs={"timeout": timeout_s},
    )


def make_model(
    spec: str,
    *,
    timeout_s: float | Literal["default"] | None = "default",
    seed: int | None = None,
    base_url: str | None = None,
    temperature: float | None = None,
) -> BaseChatModel:
    """Build the model named by `spec`: "scripted", "scripted:<persona>", "ollama:<model>", "local" (the
    strongest bundled model installed), "local:<name>" (a model of `local.BUNDLED`; its server started on first
    use) or "openai:<model>" (served at `base_url`, default `OPENAI_BASE_URL`).

    `seed` is the model's own seed (a real model's sampling seed, 42 when not given; the noisy persona's dice, 0);
    an eval gives every trial a different one. `temperature` is a real model's sampling temperature (None:
    `DEFAULT_TEMPERATURE`, 0; `ModelSpecError` outside 0 to 2); the scripted model takes none, its slips are
    seeded dice. Every real model has the request timeout `timeout_s` (None: none; "default":
    `LOCAL_REQUEST_TIMEOUT_S` for `local`, else `REQUEST_TIMEOUT_S`) and a cap on a reply's length
    (`LOCAL_MAX_TOKENS`, `SERVER_MAX_TOKENS`); a call may lower the cap with ``max_tokens=N``.
    """
    kind, colon, rest = spec.strip().partition(":")
    sampling = checked_temperature(temperature)
    if timeout_s == "default":
        timeout_s = LOCAL_REQUEST_TIMEOUT_S if kind == "local" else REQUEST_TIMEOUT_S
    if kind == "scripted":
        persona = rest if colon else "shopper"
        if persona not in PERSONAS:
            raise _spec_error(spec)
        return ScriptedChatModel(persona=persona, seed=seed or 0)
    if kind == "ollama" and rest:
        return _ollama_model(rest, timeout_s=timeout_s, seed=seed, temperature=sampling)
    if kind == "local":
        from shared_tools.models.local import BUNDLED, default_model, local_server  # the extra is checked there

        name = rest if colon else default_model()
        if name not in BUNDLED:
            raise _spec_error(spec)
        server = local_server(name)
        return _openai_model(
            name, server.base_url, max_tokens=LOCAL_MAX_TOKENS, timeout_s=timeout_s, seed=seed, temperature=sampling
        )
    if kind == "openai" and rest:
        url = openai_base_url(base_url)
        from shared_tools.models.openai_compat import NO_KEY, check_server

        check_server(url, rest, os.environ.get("OPENAI_API_KEY") or NO_KEY)
        return _openai_model(
            rest, url, max_tokens=SERVER_MAX_TOKENS, timeout_s=timeout_s, seed=seed, temperature=sampling
        )
    raise _spec_error(spec)

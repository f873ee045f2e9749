"""The wheel ships what the package needs at run time: Lua, py.typed, dashboard files."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from flo_redis._wire.lua import load_all
from flo_redis._wire.runner import SCRIPTS

pytestmark = pytest.mark.slow  # builds the wheel and the sdist

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # Build from a clean copy: a stale build/ folder in the checkout must not leak in.
    src = tmp_path_factory.mktemp("src") / "flo-redis"
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(
            "build", "dist", "*.egg-info", ".*", "__pycache__", "tests", "examples"
        ),
    )
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-q", "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    [path] = out.glob("flo_redis-*.whl")
    yield path


def test_the_wheel_holds_every_lua_file_and_py_typed(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"flo_redis/lua/{p.name}" for p in (ROOT / "lua").glob("*.lua")}
    expected |= {f"flo_redis/lua/lib/{p.name}" for p in (ROOT / "lua" / "lib").glob("*.lua")}
    assert expected <= names, sorted(expected - names)
    assert "flo_redis/py.typed" in names
    assert not any(n.startswith(("tests/", "lua/")) for n in names)


def test_the_wheel_holds_the_commands_entry_point_beside_the_package(wheel: Path) -> None:
    """The console script starts in a module outside ``flo_redis``, so that it runs
    before the package is imported (a Ctrl-C while loading is one line)."""
    archive = zipfile.ZipFile(wheel)
    assert "_flo_redis_cli.py" in archive.namelist()
    [points] = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
    assert "flo-redis = _flo_redis_cli:main" in archive.read(points).decode()


def test_the_loader_works_on_the_wheels_lua_folder(wheel: Path, tmp_path: Path) -> None:
    zipfile.ZipFile(wheel).extractall(tmp_path)
    scripts = load_all(tmp_path / "flo_redis" / "lua")
    assert set(scripts) == set(SCRIPTS)
    # Same flattened sources, so the same SHAs: an installed copy runs the same code.
    assert {n: s.sha for n, s in scripts.items()} == {n: s.sha for n, s in SCRIPTS.items()}


def test_the_installed_package_finds_its_lua_through_importlib(wheel: Path, tmp_path: Path) -> None:
    zipfile.ZipFile(wheel).extractall(tmp_path)
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from flo_redis._wire import lua; from pathlib import Path; "
        "root = lua.lua_root(); "
        "assert str(Path(str(root)).resolve()).startswith(sys.argv[1]), root; "
        "print(len(lua.load_all()))"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path.resolve())],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert int(run.stdout) == len(SCRIPTS)


def test_the_wheel_ships_the_dashboards_templates_and_stylesheet(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    folder = ROOT / "flo_redis" / "dashboard"
    expected = {f"flo_redis/dashboard/templates/{p.name}" for p in folder.glob("templates/*")}
    expected |= {f"flo_redis/dashboard/static/{p.name}" for p in folder.glob("static/*")}
    assert "flo_redis/dashboard/static/style.css" in expected
    assert expected <= names, sorted(expected - names)


def _pins() -> dict[str, str]:
    """The lock's pins, ``name -> version`` (names normalized as pip does)."""
    pins = {}
    for line in (ROOT / "requirements" / "dev.lock").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"requirements/dev.lock: {line!r} is not pinned with =="
            pins[canonicalize_name(name)] = version.split(";", 1)[0].strip()
    return pins


def test_the_lock_pins_every_dependency_within_the_declared_bounds() -> None:
    """Every requirement flo-redis declares (runtime and every extra ``dev`` pulls in) is
    pinned in requirements/dev.lock at a version its declared bounds admit, so CI's
    install from the lock is the set the bounds promise."""
    pins = _pins()
    extras = {"dev", "cli", "metrics", "valkey", "dashboard", "cron", "otel"}
    checked = 0
    for text in importlib.metadata.requires("flo-redis") or []:
        req = Requirement(text)
        if req.name == "flo-redis":
            continue  # the self-reference that names the dev extra's extras
        if req.marker is not None and not any(
            req.marker.evaluate({"extra": extra}) for extra in extras | {""}
        ):
            continue  # a platform this machine is not
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is required but not pinned in requirements/dev.lock"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"requirements/dev.lock pins {req.name}=={pins[name]}, outside {req.specifier}"
        )
        checked += 1
    assert checked >= 10


def test_ci_installs_the_locked_versions() -> None:
    """Under CI the environment holds exactly the lock's versions (``.ci/run`` installs
    with ``-c requirements/dev.lock``): a release published since cannot change a run."""
    if not os.environ.get("CI"):
        pytest.skip("only CI's environment is installed from the lock")
    drift = {}
    for name, version in _pins().items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # a pin for another platform's marker
        if installed != version:
            drift[name] = (version, installed)
    assert not drift, f"installed versions differ from requirements/dev.lock: {drift}"

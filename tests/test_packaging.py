"""The package installs like a library: a built wheel gives a working ``attnlab`` command.

Also: the license and typing markers ship, and the torch floor in pyproject.toml is the
version the Makefile installs (the version CI tests).
"""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> str:
    return (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def test_torch_floor_is_the_tested_version():
    pin = re.search(r"^TORCH_SPEC \?= torch==([0-9.]+)$", (ROOT / "Makefile").read_text(), re.M)
    floor = re.search(r'"torch>=([0-9.]+)"', _pyproject())
    assert pin and floor, "Makefile TORCH_SPEC or the torch requirement in pyproject.toml not found"
    tested = tuple(int(x) for x in pin.group(1).split(".")[:2])
    assert tuple(int(x) for x in floor.group(1).split(".")[:2]) == tested, (
        f"pyproject says torch>={floor.group(1)} but CI tests torch=={pin.group(1)}"
    )


def test_optional_integrations_take_ranges_and_dev_pins_the_tested_versions():
    import tomllib

    extras = tomllib.loads(_pyproject())["project"]["optional-dependencies"]
    for name in ("lab", "viz", "vision", "onnx", "hf", "tensorboard"):
        pinned = [r for r in extras[name] if "==" in r]
        assert not pinned, f"[{name}] pins {pinned}: a user's other packages may need another version"
    assert "transformers==5.23.0" in extras["dev"] and "tensorboard==2.21.0" in extras["dev"]


def test_make_demo_installs_only_what_the_demo_needs():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    demo = re.search(r"^demo: (\S+)$", makefile, re.M).group(1)
    recipe = re.search(rf"^{re.escape(demo)}: .*?\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert '-e ".[lab,viz]"' in recipe and "[dev]" not in recipe


def test_license_is_spdx_and_ships():
    assert re.search(r'^license = "MIT"$', _pyproject(), re.M)
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (whl,) = out.glob("attnlab-*.whl")
    return whl


def test_wheel_holds_data_license_and_typing_marker(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "attnlab/py.typed" in names
    assert "attnlab/viz/viewer.html" in names
    assert "attnlab/explain/examples/tutorial1-additive.toml" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), sorted(n for n in names if "dist-info" in n)
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "attnlab = attnlab.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()


def test_wheel_holds_every_shipped_model_within_its_size_budget(wheel):
    from attnlab import pretrained

    names = set(zipfile.ZipFile(wheel).namelist())
    for name in pretrained.names():
        folder = pretrained.folder(name)
        for f in folder.rglob("*"):
            if f.is_file():
                assert f"attnlab/pretrained/{f.relative_to(folder.parent).as_posix()}" in names, f
    assert wheel.stat().st_size < 25_000_000, f"the wheel is {wheel.stat().st_size / 1e6:.1f} MB; the budget is 25 MB"


def test_wheel_installs_into_a_fresh_venv_and_runs(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = Path(subprocess.check_output([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
    # The dependencies (torch, numpy, ...) come from this environment's site-packages, added as a
    # plain path entry (its .pth files, the editable install of attnlab among them, are not read).
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
    )
    where = subprocess.check_output([str(py), "-c", "import attnlab; print(attnlab.__file__)"], text=True, cwd=tmp_path)
    assert Path(where.strip()).is_relative_to(site), f"attnlab imported from {where.strip()}, not the installed wheel"
    run = subprocess.run([str(venv / "bin" / "attnlab"), "explain", "--list"], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "tutorial1-additive" in run.stdout
    run = subprocess.run([str(venv / "bin" / "attnlab"), "translate", "--pretrained", "zh-en-numbers", "三千零五",
                          "--no-alignment"], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "三千零五 → three thousand and five"

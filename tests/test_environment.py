"""environment.yml (conda users) must describe the same dependency set as pyproject.toml."""
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[ ;]", req.strip(), maxsplit=1)[0].lower()


# conda packages that are not Python packages (so not in pyproject.toml): the CJK font for Chinese charts
CONDA_ONLY = {"font-ttf-noto-cjk"}


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    # the workshop extra is in the image too (repo2docker builds it from environment.yml)
    wanted = {_name(r): r for r in project["dependencies"] + extras["test"] + extras["workshop"]}
    text = (ROOT / "environment.yml").read_text()
    dependencies = text.split("dependencies:", 1)[1]          # skip the channels list
    lines = [l.strip()[2:].strip() for l in dependencies.splitlines()
             if l.strip().startswith("- ") and not l.strip().startswith("- pip")]
    lines = [l.split("#", 1)[0].strip() for l in lines]
    listed = {_name(l): l for l in lines if l and not l.startswith(("python", "-e")) and _name(l) not in CONDA_ONLY}
    assert set(listed) == set(wanted), (set(wanted) ^ set(listed))
    for name, req in wanted.items():
        assert listed[name].replace(" ", "") == req.replace(" ", ""), f"{name}: {listed[name]} != {req}"


def test_design_card_packages_are_dependencies():
    deps = {_name(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    for package in ("jupyterlab", "ipywidgets", "matplotlib", "cuda-python"):
        assert package in deps
    assert any(d.startswith("cupy") for d in deps)


def test_cupy_and_cuda_python_import_without_a_gpu():
    import cupy  # noqa: F401
    from cuda.bindings import driver, runtime  # noqa: F401


def test_the_course_environments_leave_out_the_slow_iri_checker():
    """jsonschema's optional IRI checker (rfc3987-syntax) builds its grammars whenever a process reads a
    notebook (1.1 s of CPU each): `make venv` and the workshop image remove it, and in the Makefile's
    environment reading a notebook does not import it."""
    assert "uninstall -y -q rfc3987-syntax" in (ROOT / "Makefile").read_text()
    assert "uninstall -y rfc3987-syntax" in (ROOT / "workshop" / "Dockerfile").read_text()
    if Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        return                                        # someone's own environment: theirs to keep
    imported = subprocess.run([sys.executable, "-c", "import sys, nbformat; print('rfc3987_syntax' in sys.modules)"],
                              capture_output=True, text=True, check=True).stdout.strip()
    assert imported == "False", "rfc3987-syntax is installed in .venv: make venv removes it"

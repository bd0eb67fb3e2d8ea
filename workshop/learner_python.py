"""Find or make the Python the learners' servers run (`make workshop` calls this; prints its path).

The hub runs as root, but each learner's server runs as that learner: their Python, its packages
and Jupyter's extension files must be readable by every user.  A course installed with pyenv or
conda under /root (a common root set-up) is not: /root is closed to others.  Then this makes a
virtual environment of the machine's own Python, where everyone can read it:

    workshop/.run/python/        (WORKSHOP_PYTHON_DIR: another folder; it is re-made each start)

* the same Python version found in /usr/bin or /usr/local/bin: the venv reads the course's own
  installed packages (a .pth file pointing at them), nothing downloaded;
* otherwise, or when those packages are closed too: `pip install '.[workshop]'` into it (PyPI).

Either way it proves the result as `nobody` (`import jupyterhub.singleuser, nbgitpuller,
allocator_ref`) before the hub starts, and says what it made.  WORKSHOP_PYTHON, when set, is used
as it is (the hub checks it).
"""
from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_DIR = HERE / ".run" / "python"
PROBE = "import jupyterhub.singleuser, nbgitpuller, allocator_ref"


def open_to_everyone(path: Path) -> bool:
    """Can any user read `path` (and pass through every folder above it)?"""
    path = path.resolve()
    if not path.exists() or not path.stat().st_mode & stat.S_IROTH:
        return False
    return all(p.stat().st_mode & stat.S_IXOTH for p in path.parents)


def works_for_others(python: Path) -> bool:
    """Does `python` import what a learner's server needs, run as `nobody`?  (Only root can ask.)"""
    if os.getuid() != 0:
        return open_to_everyone(python)
    nobody = pwd.getpwnam("nobody")
    out = subprocess.run([str(python), "-c", PROBE], user=nobody.pw_uid, group=nobody.pw_gid, extra_groups=[],
                         cwd="/", env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent",
                                       "PYTHONPATH": str(HERE.parent)},
                         capture_output=True, text=True)
    return out.returncode == 0


def system_python() -> tuple[Path | None, bool]:
    """(a Python of the machine that everyone can run, whether it is this one's version)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for folder in ("/usr/bin", "/usr/local/bin"):
        if open_to_everyone(Path(folder) / version):
            return Path(folder) / version, True
    for name in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if open_to_everyone(Path(name)):
            return Path(name), False
    return None, False


def open_up(folder: Path) -> None:
    for p in [folder, *folder.rglob("*")]:
        if not p.is_symlink():
            p.chmod(p.stat().st_mode | 0o044 | (0o011 if p.is_dir() or p.stat().st_mode & 0o100 else 0))


def make_venv(target: Path) -> Path:
    base, same_version = system_python()
    if base is None:
        sys.exit("workshop: the course's Python is closed to the learners' users and this machine has no "
                 "python3 in /usr/bin or /usr/local/bin that everyone can run: install one "
                 "(Debian: apt-get install python3-venv), or set WORKSHOP_PYTHON")
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(base), "-m", "venv", "--without-pip" if same_version else "--upgrade-deps", str(target)],
                   check=True)
    packages = Path(sysconfig.get_paths()["purelib"])
    if same_version and open_to_everyone(packages):
        site = next((target / "lib").glob("python*/site-packages"))
        # site.addsitedir, not a bare path line: the course's editable install is itself a .pth there
        (site / "course.pth").write_text(f"import site; site.addsitedir({str(packages)!r})\n")
        for folder in ("etc", "share"):          # Jupyter's extension settings (jupyterlab, nbgrader, ...)
            if (Path(sys.prefix) / folder).exists():
                (target / folder).symlink_to(Path(sys.prefix) / folder)
        how = f"reading the course's packages in {packages}"
    else:
        print(f"workshop: installing the course into {target} from PyPI (a few minutes) ...", file=sys.stderr)
        subprocess.run([str(target / "bin" / "python"), "-m", "pip", "install", "-q",
                        f"{HERE.parent}[workshop]"], check=True)
        how = "with the course installed from PyPI"
    open_up(target)
    print(f"workshop: the course's Python ({sys.executable}) is closed to the learners' users; they run "
          f"{target / 'bin' / 'python'}, a venv of {base} {how}", file=sys.stderr)
    return target / "bin" / "python"


def learner_python() -> Path:
    if os.environ.get("WORKSHOP_PYTHON"):
        return Path(os.environ["WORKSHOP_PYTHON"])
    own = Path(sys.executable)
    if open_to_everyone(own) and open_to_everyone(Path(sysconfig.get_paths()["purelib"])) and works_for_others(own):
        return own
    made = make_venv(Path(os.environ.get("WORKSHOP_PYTHON_DIR") or DEFAULT_DIR).absolute())
    if not works_for_others(made):
        sys.exit(f"workshop: {made} cannot import the course as another user ({PROBE}); set WORKSHOP_PYTHON "
                 "to a Python every user can run with the course installed (pip install '.[workshop]')")
    return made


if __name__ == "__main__":
    print(learner_python())

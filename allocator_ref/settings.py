"""The course's settings, in one place.

Every chapter, lab and tool asks this module, so a workshop sets a thing once
and the whole course follows it.  Each setting is read, in this order, from:

1. its environment variable (``ALLOCATOR_REF_PROFILE=t4-16gb make lab``);
2. the settings file: ``$ALLOCATOR_REF_SETTINGS``, else the first
   ``course-settings.toml`` found in the working folder or the folders above
   it (a notebook runs in ``chapters/`` or ``labs/student/``, so the file at
   the course root is found from both);
3. the default below.

The file is TOML with one table::

    [course]
    device = "sim"            # auto | sim | cuda
    profile = "t4-16gb"       # a simulated GPU: h100-80gb, h200-141gb, t4-16gb, tiny-1gb
    lab_seed = "user"         # "user" (derived from each learner's user name) or a whole number
    traces = "/srv/traces"    # where the real snapshots are (see the traces command)
    max_snapshot_mb = 512     # the snapshot loader's size cap (allocator_ref/trace/snapshot.py)

An unknown key or a value of the wrong kind is an error that names the file,
the key and what it may be: a workshop should not discover a typo halfway in.
"""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

FILE_NAME = "course-settings.toml"
FILE_ENV = "ALLOCATOR_REF_SETTINGS"

# setting -> (environment variable, default)
SETTINGS = {
    "device": ("ALLOCATOR_REF_DEVICE", "auto"),
    "profile": ("ALLOCATOR_REF_PROFILE", "h100-80gb"),
    "lab_seed": ("ALLOCATOR_REF_LAB_SEED", "user"),
    "traces": ("ALLOCATOR_REF_TRACES", ""),
    "max_snapshot_mb": ("ALLOCATOR_REF_MAX_SNAPSHOT_MB", "512"),
}


class SettingsError(ValueError):
    """A settings file or variable the course cannot use; the message says how to fix it."""


@dataclass(frozen=True)
class Setting:
    name: str
    value: str
    source: str          # "ALLOCATOR_REF_PROFILE", "course-settings.toml at /path", or "default"


def settings_file(start: Optional[Path] = None) -> Optional[Path]:
    """The settings file in force, or None."""
    named = os.environ.get(FILE_ENV)
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise SettingsError(f"{FILE_ENV}={named!r} is not a file; point it at a {FILE_NAME} "
                                f"or unset it")
        return path
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / FILE_NAME
        if candidate.is_file():
            return candidate
    return None


def _read_file(path: Path) -> dict[str, str]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"{path}: cannot read the course settings ({exc})") from None
    table = data.get("course", {})
    extra = set(data) - {"course"}
    if extra or not isinstance(table, dict):
        raise SettingsError(f"{path}: put the settings under one [course] table "
                            f"(found {sorted(extra) or type(table).__name__})")
    out = {}
    for key, value in table.items():
        if key not in SETTINGS:
            raise SettingsError(f"{path}: unknown setting {key!r}; known: {', '.join(SETTINGS)}")
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise SettingsError(f"{path}: {key} must be a string or a whole number, "
                                f"not {value!r}")
        out[key] = str(value)
    return out


def get(name: str, start: Optional[Path] = None) -> Setting:
    """One setting with where it came from (environment, file, or default)."""
    if name not in SETTINGS:
        raise KeyError(f"no course setting {name!r}; known: {', '.join(SETTINGS)}")
    env_name, default = SETTINGS[name]
    env = os.environ.get(env_name)
    if env not in (None, ""):
        return Setting(name, env, env_name)
    path = settings_file(start)
    if path is not None:
        values = _read_file(path)
        if name in values:
            return Setting(name, values[name], f"{FILE_NAME} at {path}")
    return Setting(name, default, "default")


def value(name: str, start: Optional[Path] = None) -> str:
    return get(name, start).value


def describe(start: Optional[Path] = None) -> str:
    """One line per setting: value and where it came from (for a notebook's first cell)."""
    return "\n".join(f"{s.name} = {s.value!r}  ({s.source})"
                     for s in (get(n, start) for n in SETTINGS))

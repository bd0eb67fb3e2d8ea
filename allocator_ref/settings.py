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
    lab_quick = 0             # 1: check() runs two hidden cases, not all (CI notebook runs)
    language = "auto"         # auto | en | zh: the tools' language (allocator_ref/editions/language.py)
    grader_python = ""        # grading as root: an absolute path to a Python other users may run
                              # (allocator_ref/labs/sandbox.py; empty: this one, else make autograde finds one)
    live_view = 0             # 1: check() keeps its results for the instructor's live view (the hub sets it)
    workers = "auto"          # doctor FOLDER's processes: "auto" (one per core this process may use) or
                              # a cap (allocator_ref/memory_doctor/workers.py; never more than the cores)

An unknown key or a value of the wrong kind is an error that names the file,
the key and what it may be: a workshop should not discover a typo halfway in.
Whatever the file or variable holds (a huge file, tables nested a million deep,
an over-long path, ``~nosuchuser``), what escapes is one :class:`SettingsError`.

The file is parsed once per change (its size, times and inode are the key), not
once per lookup: ``describe()`` asks for every setting.
"""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

FILE_NAME = "course-settings.toml"
FILE_ENV = "ALLOCATOR_REF_SETTINGS"
MAX_FILE_BYTES = 1 << 20     # a settings file is a few lines; refusing more keeps a lookup cheap

# setting -> (environment variable, default)
SETTINGS = {
    "device": ("ALLOCATOR_REF_DEVICE", "auto"),
    "profile": ("ALLOCATOR_REF_PROFILE", "h100-80gb"),
    "lab_seed": ("ALLOCATOR_REF_LAB_SEED", "user"),
    "traces": ("ALLOCATOR_REF_TRACES", ""),
    "max_snapshot_mb": ("ALLOCATOR_REF_MAX_SNAPSHOT_MB", "512"),
    "lab_quick": ("ALLOCATOR_REF_LAB_QUICK", "0"),
    "language": ("ALLOCATOR_REF_LANG", "auto"),
    "grader_python": ("ALLOCATOR_REF_GRADER_PYTHON", ""),
    "live_view": ("ALLOCATOR_REF_LIVE_VIEW", "0"),
    "workers": ("ALLOCATOR_REF_WORKERS", "auto"),
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
        try:
            path = Path(named).expanduser()
            found = path.is_file()
        except (OSError, RuntimeError, ValueError) as exc:     # too long, ~nosuchuser, a NUL byte
            raise SettingsError(f"{FILE_ENV}={_short(named)}: cannot use this path ({_why(exc)}); point it "
                                f"at a {FILE_NAME} or unset it") from None
        if not found:
            raise SettingsError(f"{FILE_ENV}={_short(named)} is not a file; point it at a {FILE_NAME} "
                                f"or unset it")
        return path
    found = None
    try:
        here = (start or Path.cwd()).resolve()
        found = next((folder / FILE_NAME for folder in (here, *here.parents) if (folder / FILE_NAME).is_file()), None)
        if found is not None:
            st, folder_st = found.stat(), found.parent.stat()
    except (OSError, RuntimeError, ValueError) as exc:         # a deleted working folder, a folder we may not read
        raise SettingsError(f"cannot look for {FILE_NAME} from {_short(str(start or '.'))} ({_why(exc)}); "
                            f"set {FILE_ENV} to the file, or run from another folder") from None
    if found is not None:
        _refuse_foreign(found, st, folder_st)
    return found


def _refuse_foreign(path: Path, st: os.stat_result, folder: os.stat_result) -> None:
    """A settings file found by looking up the folders is honoured only when it is this user's or root's
    and sits in a folder no one else may write (as git refuses a repository another user owns since
    CVE-2022-24765): else anyone with a shared or learner-writable folder above the working one would
    choose the course's settings for whoever runs there."""
    me = os.getuid() if hasattr(os, "getuid") else st.st_uid
    if st.st_uid not in (me, 0):
        raise SettingsError(f"{path} belongs to another user (uid {st.st_uid}), so it is not used: remove it, "
                            f"or point {FILE_ENV} at the course's own {FILE_NAME}")
    if folder.st_mode & 0o002 and not folder.st_mode & 0o1000:     # anyone may write there (no sticky bit)
        raise SettingsError(f"{path} is in a folder others may write ({path.parent}), so it is not used: "
                            f"move it, or point {FILE_ENV} at the course's own {FILE_NAME}")


def _short(text: str, cap: int = 200) -> str:
    return repr(text) if len(text) <= cap else repr(text[:cap]) + f"... ({len(text):,} characters)"


def _why(exc: BaseException) -> str:
    return type(exc).__name__ + (f": {exc.strerror}" if getattr(exc, "strerror", None) else "")


_PARSED: dict = {}           # path -> (stat key, values): the file is parsed once per change


def _read_file(path: Path) -> dict[str, str]:
    try:
        st = path.stat()
        key = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        cached = _PARSED.get(str(path))
        if cached is not None and cached[0] == key:
            return cached[1]
        if st.st_size > MAX_FILE_BYTES:
            raise SettingsError(f"{path}: the course settings file is {st.st_size:,} bytes; a settings file is a "
                                f"few lines, and more than {MAX_FILE_BYTES:,} bytes is refused")
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise SettingsError(f"{path}: the course settings file grew past {MAX_FILE_BYTES:,} bytes while "
                                "it was read; a settings file is a few lines")
        text = raw.decode("utf-8")
        _refuse_deep_keys(path, text)
        data = tomllib.loads(text)
    except SettingsError:
        raise
    except RecursionError:
        raise SettingsError(f"{path}: cannot read the course settings (its tables or arrays are nested too "
                            "deep); write the keys flat under [course]") from None
    except MemoryError:
        raise SettingsError(f"{path}: cannot read the course settings (not enough memory to parse it)") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, ValueError) as exc:
        raise SettingsError(f"{path}: cannot read the course settings ({_why(exc) if isinstance(exc, OSError) else exc})") from None
    out = _check_table(path, data)
    _PARSED[str(path)] = (key, out)
    return out


MAX_KEY_DOTS = 256           # '.' outside strings and comments, in the whole file


def _refuse_deep_keys(path: Path, text: str) -> None:
    """Refuse dotted keys nested thousands deep before tomllib sees them: it takes quadratic
    time and memory on them (10,000 parts, 20 KB of text: 6 s and 600 MB).  A settings
    file has a flat [course] table, so a few dots (in a float) are all it needs."""
    dots, i, n = 0, 0, len(text)
    while i < n:
        c = text[i]
        if c == "#":                                   # a comment: to the end of the line
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif c in "\"'":
            quote = c * 3 if text.startswith(c * 3, i) else c
            i += len(quote)
            while i < n and not text.startswith(quote, i):
                i += 2 if (c == '"' and text[i] == "\\") else 1
            i += len(quote)
            continue
        elif c == ".":
            dots += 1
            if dots > MAX_KEY_DOTS:
                raise SettingsError(f"{path}: more than {MAX_KEY_DOTS} dots outside strings: keys dotted this "
                                    "deep are not course settings; write the keys flat under [course]")
        i += 1


def _check_table(path: Path, data: dict) -> dict[str, str]:
    table = data.get("course", {})
    extra = set(data) - {"course"}
    if extra or not isinstance(table, dict):
        raise SettingsError(f"{path}: put the settings under one [course] table "
                            f"(found {_short(str(sorted(extra))) if extra else type(table).__name__})")
    out = {}
    for key, value in table.items():
        if key not in SETTINGS:
            raise SettingsError(f"{path}: unknown setting {_short(key)}; known: {', '.join(SETTINGS)}")
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise SettingsError(f"{path}: {key} must be a string or a whole number, "
                                f"not a {type(value).__name__}")
        if isinstance(value, int) and abs(value) > 10 ** 30:
            raise SettingsError(f"{path}: {key} = a {len(str(abs(value)))}-digit number; no setting needs one")
        out[key] = str(value)
    return out


def get(name: str, start: Optional[Path] = None) -> Setting:
    """One setting with where it came from (environment, file, or default); a value the course
    cannot use is a SettingsError here, naming the variable or file, whoever asks."""
    if name not in SETTINGS:
        raise KeyError(f"no course setting {name!r}; known: {', '.join(SETTINGS)}")
    env_name, default = SETTINGS[name]
    env = os.environ.get(env_name)
    if _PINNED is not None:
        setting = Setting(name, _PINNED[name], PINNED)
    elif env not in (None, ""):
        setting = Setting(name, env, env_name)
    else:
        path = settings_file(start)
        values = _read_file(path) if path is not None else {}
        setting = (Setting(name, values[name], f"{FILE_NAME} at {path}") if name in values
                   else Setting(name, default, "default"))
    CHECKS.get(name, lambda s: None)(setting)
    return setting


PINNED = "pinned by the autograder"
_PINNED: Optional[dict] = None


def pinned(start: Optional[Path] = None) -> dict[str, str]:
    """Every setting as this process reads it now (what the autograder hands its judges: pin())."""
    return {name: get(name, start).value for name in SETTINGS}


def pin(values: Optional[dict]) -> None:
    """From now on this process answers ``values`` (from pinned()) and reads no variable and no file: a
    judge runs next to folders learners write (submitted/), and a course-settings.toml planted there must
    not change its hidden cases or stop it.  ``pin(None)`` reads them again."""
    global _PINNED
    _PINNED = None if values is None else {name: str(values[name]) for name in SETTINGS}


def bad(setting: Setting, what: str) -> SettingsError:
    """The settings error for a value the course cannot use: names the variable (or key and file)."""
    return _bad(setting, what)


def _bad(setting: Setting, what: str) -> SettingsError:
    if setting.source in ENV_NAMES:
        return SettingsError(f"{setting.source}={_short(setting.value)} {what}")
    return SettingsError(f"{setting.name}={_short(setting.value)} (from {setting.source}) {what}")


def _check_device(setting: Setting) -> None:
    if setting.value.strip().lower() not in ("auto", "sim", "cuda"):
        raise _bad(setting, "is not a device kind; use one of auto, sim, cuda")


def _check_lab_seed(setting: Setting) -> None:
    if setting.value != "user":
        try:
            int(setting.value)
        except ValueError:
            raise _bad(setting, "must be 'user' or a whole number") from None


def _check_traces(setting: Setting) -> None:
    folder(setting)


# the names a reader may give a language (ALLOCATOR_REF_LANG=zh_CN.UTF-8 is a locale, and means zh)
LANGUAGE_NAMES = {"en": "en", "en_us": "en", "en_gb": "en", "english": "en", "c": "en", "posix": "en",
                  "zh": "zh", "zh_cn": "zh", "zh_hans": "zh", "zh_sg": "zh", "chinese": "zh", "中文": "zh"}


def normalise_language(text: str) -> Optional[str]:
    """``'zh-CN'`` -> ``'zh'``, ``'auto'`` -> None; an unknown name raises ValueError."""
    key = text.strip().lower().replace("-", "_").split(".")[0].split("@")[0]
    if key in ("", "auto"):
        return None
    if key not in LANGUAGE_NAMES:
        raise ValueError(f"{text!r} is not a language the course speaks; use one of en, zh, auto")
    return LANGUAGE_NAMES[key]


def _check_language(setting: Setting) -> None:
    try:
        normalise_language(setting.value)
    except ValueError:
        raise _bad(setting, "is not a language the course speaks; use one of auto, en, zh") from None


MAX_SNAPSHOT_MIB = 2**40


def _check_max_snapshot_mb(setting: Setting) -> None:
    try:
        mib = float(setting.value)
    except ValueError:
        mib = float("nan")
    if not 0 < mib < MAX_SNAPSHOT_MIB:             # also refuses nan and inf
        raise _bad(setting, "is not a positive number of MiB (the snapshot loader's size cap, e.g. 512)")


def _check_lab_quick(setting: Setting) -> None:
    if setting.value not in ("0", "1"):
        raise _bad(setting, "must be 1 (check() runs two hidden cases) or 0 (all of them)")


def _check_grader_python(setting: Setting) -> None:
    text = setting.value
    if not text:
        return
    if "\0" in text or len(text) > 4096 or not os.path.isabs(text):
        raise _bad(setting, "is not an absolute path to a Python (the one the autograder runs submissions "
                            "with as another user: `python workshop/learner_python.py` prints one); or unset it")


def _check_live_view(setting: Setting) -> None:
    if setting.value not in ("0", "1"):
        raise _bad(setting, "must be 1 (check() keeps its results for the instructor's live view) or 0")


def _check_workers(setting: Setting) -> None:
    if setting.value != "auto" and not (setting.value.isascii() and setting.value.isdigit()
                                       and 0 < int(setting.value) <= 4096):
        raise _bad(setting, "is not \"auto\" (one process per core) or a whole number of processes from 1 "
                            "(doctor FOLDER's ranks one after another)")


# (profile: the device layer knows the profiles, and checks the name where it opens one: device/select.py)
CHECKS = {"device": _check_device, "lab_seed": _check_lab_seed,
          "traces": _check_traces, "max_snapshot_mb": _check_max_snapshot_mb, "lab_quick": _check_lab_quick,
          "language": _check_language, "grader_python": _check_grader_python, "live_view": _check_live_view,
          "workers": _check_workers}
ENV_NAMES = {env for env, _ in SETTINGS.values()}
OFF = "none"                 # a folder setting turned off (traces = "none": no real snapshots)


def folder(setting: Setting) -> Optional[Path]:
    """A folder-valued setting as a Path (``~`` expanded), or None when empty or 'none'."""
    if not setting.value or setting.value.lower() == OFF:
        return None
    try:
        path = Path(setting.value).expanduser()
        os.fspath(path).encode()                  # a lone surrogate from undecodable bytes
        if "\0" in setting.value or len(os.fsencode(path)) > 4096:
            raise ValueError("a NUL byte or more than 4096 bytes")
    except (RuntimeError, ValueError, UnicodeError, OSError) as exc:   # ~nosuchuser, no home, NUL, too long
        raise _bad(setting, f"cannot be used as a folder ({_why(exc)}: {exc}); set it to a folder, "
                            f"'{OFF}', or unset it") from None
    return path


def value(name: str, start: Optional[Path] = None) -> str:
    return get(name, start).value


def describe(start: Optional[Path] = None) -> str:
    """One line per setting: value and where it came from (for a notebook's first cell)."""
    return "\n".join(f"{s.name} = {s.value!r}  ({s.source})"
                     for s in (get(n, start) for n in SETTINGS))

"""allocator_ref.predict's public names stay what they are, whichever of its modules were imported."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str) -> str:
    """A fresh interpreter: which submodules were imported before is the whole point."""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("first", ["import allocator_ref.predict.forecast",
                                   "from allocator_ref.predict.forecast import Prediction",
                                   "import allocator_ref.predict as P; P.forecast"])
def test_forecast_is_the_function_after_its_module_is_imported(first):
    out = _run(f"{first}\n"
               "import types, allocator_ref.predict as P\n"
               "from allocator_ref.predict import forecast\n"
               "from allocator_ref.predict.forecast import forecast as direct\n"
               "print(P.forecast is direct, forecast is direct, isinstance(P.forecast, types.FunctionType),\n"
               "      type(sys.modules['allocator_ref.predict.forecast']).__name__)"
               .replace("import types,", "import sys, types,"))
    assert out == "True True True module"


def test_an_unknown_name_is_still_an_attribute_error():
    out = _run("import allocator_ref.predict as P\n"
               "try:\n    P.no_such_thing\nexcept AttributeError as e:\n    print('AttributeError')")
    assert out == "AttributeError"

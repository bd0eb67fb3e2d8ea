"""The chapters' display helpers for the Chinese edition: ``import _course`` here loads ``../_course.py``.

The Chinese notebooks run the English notebooks' code cells unchanged, and those import
``_course`` from the notebook's folder; this file makes that the one module in ``chapters/``
(no second copy of the code to keep in step).
"""
import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("_course", Path(__file__).resolve().parent.parent / "_course.py")
_module = importlib.util.module_from_spec(_spec)
sys.modules["_course"] = _module        # `import _course` returns what this leaves in sys.modules
_spec.loader.exec_module(_module)

"""Chapter 7's "Predict before you run" recordings, kept for a reader without torch.

Recording a step needs PyTorch (meta tensors); replaying a recording on the reference allocator
does not.  So the chapter's cells record the step when torch is there, and otherwise replay the
recording this tool made with torch, of the very functions the chapter defines (read from
chapters/07_diagnostics.md): either way the figures its prose states are figures its cells print.

    python tools/record_chapter7.py          # rewrite chapters/predict_recordings/*.json
    tests/test_predict_scripts.py checks that they are what the chapter's code records today.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "chapters" / "07_diagnostics.md"
OUT = ROOT / "chapters" / "predict_recordings"
PROFILE = "t4-16gb"
# file name -> (the chapter's function, its keywords): the batch the first cell predicts, the sweep's values
RUNS = {f"mlp_step_{b}": ("mlp_step", {"batch_size": b}) for b in (64, 1024, 4096, 16384)}
RUNS["attention_step"] = ("attention_step", {})


def chapter_functions() -> dict:
    """The chapter's step functions (their definitions only; nothing else of the cells runs)."""
    import jupytext
    import torch
    namespace: dict = {"torch": torch}
    for cell in jupytext.read(CHAPTER).cells:
        if cell.cell_type != "code":
            continue
        for node in ast.parse(cell.source).body:
            if isinstance(node, ast.FunctionDef) and node.name in {fn for fn, _ in RUNS.values()}:
                exec(compile(ast.Module([node], []), str(CHAPTER), "exec"), namespace)
    return namespace


def normalized(program: dict) -> dict:
    """A recording without what changes from run to run (the clock)."""
    for event in program["device_traces"][0]:
        event["time_us"] = 0
    program.pop("recorded_with", None)
    return program


def recordings() -> dict:
    from allocator_ref.predict import record_program
    functions = chapter_functions()
    return {name: normalized(record_program(functions[fn], profile=PROFILE, stacks=False, **kwargs))
            for name, (fn, kwargs) in RUNS.items()}


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for name, program in recordings().items():
        (OUT / f"{name}.json").write_text(json.dumps(program, sort_keys=True, separators=(",", ":")) + "\n")
        print(f"{name}: {sum(e['action'] == 'alloc' for e in program['device_traces'][0])} allocations")


if __name__ == "__main__":
    main()

"""check()'s sizes never hide the bytes that decide an edge (issue 31: '10 MiB is between 1 MiB and 10 MiB')."""
import re

from hypothesis import given, strategies as st

from allocator_ref.labs.check import fmt

UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def read_back(text: str) -> int:
    """The exact size a learner can read off fmt's text."""
    exact = re.search(r"\(([\d,]+) bytes\)$", text)
    if exact:
        return int(exact.group(1).replace(",", ""))
    number, unit = text.split()
    assert float(number) * UNITS[unit] == int(float(number) * UNITS[unit])
    return int(float(number) * UNITS[unit])


@given(st.integers(min_value=0, max_value=1 << 40))
def test_every_size_reads_back_exactly(n):
    assert read_back(fmt(n)) == n


def test_one_step_either_side_of_an_edge_reads_differently_from_the_edge():
    for edge in (1 << 20, 10 << 20, 2 << 30):
        texts = {fmt(edge - 512), fmt(edge), fmt(edge + 512)}
        assert len(texts) == 3, texts
    assert fmt(10 << 20) == "10 MiB" and fmt((10 << 20) - 512) == "10 MiB (10,485,248 bytes)"

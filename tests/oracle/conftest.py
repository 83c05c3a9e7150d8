"""The oracle tests: the same scenario code run on llama_index.core 0.12.52 and on nbagent.

llama_index is a dev dependency (pyproject's dev extra): a missing import fails these tests,
it does not skip them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).parent

# llama_index warns, on every runner and agent built, that its lower-level agent API is
# deprecated, and more (the reference's own warnings, not findings of these tests)
_QUIET = [
    pytest.mark.filterwarnings("ignore:Call to deprecated class:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:ServiceManager is deprecated:DeprecationWarning"),
    # its workflows list a pydantic agent's members with inspect.getmembers, which reads
    # pydantic's deprecated attributes (nbagent's own runs are checked by the rest of the suite)
    pytest.mark.filterwarnings("ignore::DeprecationWarning:inspect"),
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.fspath)).parents:
            for mark in _QUIET:
                item.add_marker(mark)


@pytest.fixture(autouse=True)
def _deprecation_filter_respected(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``deprecated`` package llama_index uses forces its warning through with
    ``simplefilter("always")``; here it goes through the filters like any other warning, so the
    filter above applies (any other warning still shows or fails as usual)."""
    import warnings
    from types import SimpleNamespace

    import deprecated.classic

    shim = SimpleNamespace(
        catch_warnings=warnings.catch_warnings, simplefilter=lambda *a, **k: None, warn=warnings.warn
    )
    monkeypatch.setattr(deprecated.classic, "warnings", shim)

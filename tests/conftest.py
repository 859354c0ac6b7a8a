"""Settings every test module shares.

`make test` runs the suite on every core with pytest-xdist (``-n auto --dist loadgroup``). Each
module's tests stay on one worker, in their order: a module's fixtures, and some of its tests,
build on what an earlier test of the module made. Modules that share on-disk state outside
``tmp_path`` (the built demo and its indexes in the data root) name one group,
``xdist_group("data-root")``, and so share a worker. Without xdist the marks do nothing.
"""

from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # before xdist's own hook, which turns the group into the node id's @suffix
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny Llama built from a config and saved (`_tiny_llm.save_tiny_llm`, seed 0), one per
    module; a module may define its own ``tiny`` instead."""
    from _tiny_llm import save_tiny_llm

    folder = tmp_path_factory.mktemp("tiny-llm")
    save_tiny_llm(folder, seed=0)
    return folder

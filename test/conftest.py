"""pytest configuration for the test suite: how pytest-xdist shares it out.

Note [One pip build per test run]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
tools/run_tests.sh runs the tests over several processes with
`--dist loadgroup`. A class stays in one process, as under `--dist
loadscope`, so that what its setUpClass builds is built once: every test
without an `xdist_group` mark is put in a group named after its class (or
its module). The classes that pip-build the sources (test_import_hook.py and
test_packaging.py, through common_device_logging.build_wheel and
shared_source, which cache the build per process) carry the mark
`xdist_group("pip-build")`, so that they share one process and the sources
are compiled once per run rather than once per process that happens to get
one of them.
"""

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            scope = item.nodeid.rsplit("::", 1)[0] if item.cls else item.nodeid.split("::")[0]
            item.add_marker(pytest.mark.xdist_group(scope))

"""pytest fixtures for testing against NATS with natserver: no binary, no Docker.

Loaded automatically (entry point ``pytest11``) wherever natserver is installed; disable with
``-p no:natserver``. Importing this module does nothing but define the fixtures: the server
code is imported when a fixture is first used.

Fixtures:

``nats_server``
    A :class:`natserver.testing.NatsServer` for one test, on 127.0.0.1 and a random port, in a
    background thread: usable from plain, asyncio and trio tests. Options per test with the
    marker ``@pytest.mark.nats_server(max_payload=1024, user="u", password="p", ...)`` (on a
    test, class or module; the closest wins per keyword). ``jetstream=True``: JetStream with
    a private store in a temporary directory, removed after the test.
``nats_url``
    ``nats_server.url``.
``nats_server_session``
    One server for the whole session (options: override the ``nats_server_session_options``
    fixture). Its faults and recorded messages are reset before every test that uses it.
``trio_nats_server``
    Trio-native (needs pytest-trio): the server runs as a task in the test's nursery, no
    thread. Takes the same marker.
``nats_cluster``
    A :class:`natserver.testing_cluster.NatsCluster`: three natservers joined by routes, in
    threads of this process. ``@pytest.mark.nats_cluster(size=5, max_payload=1024, ...)``.

See docs/testing.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from natserver.testing import NatsServer

MARKER = "nats_server"
CLUSTER_MARKER = "nats_cluster"

# The nats_server_session server while it runs (on the config: in-process pytester sessions
# each have their own).
_SESSION_SERVER: pytest.StashKey[NatsServer] = pytest.StashKey()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(**options): natserver options for the nats_server / trio_nats_server fixtures "
        "(e.g. max_payload=1024, user='u', password='p', token='t', max_pending=65536, record=False, "
        "clock='manual')",
    )
    config.addinivalue_line(
        "markers",
        f"{CLUSTER_MARKER}(size=3, **options): the nats_cluster fixture's size and its nodes' natserver options",
    )


def _marker_options(request: pytest.FixtureRequest, name: str = MARKER) -> dict:
    """Keyword arguments of every ``name`` marker on the test, closest last (wins)."""
    options: dict = {}
    for marker in reversed(list(request.node.iter_markers(name))):
        if marker.args:
            raise pytest.UsageError(f"@pytest.mark.{name} takes keyword arguments only, got {marker.args!r}")
        options.update(marker.kwargs)
    from natserver.testing import check_option_names

    try:
        check_option_names({k: v for k, v in options.items() if k not in _NOT_OPTIONS})
    except TypeError as exc:
        raise pytest.UsageError(f"@pytest.mark.{name}: {exc}") from None
    return options


# NatsServer's keyword arguments that are not server options.
_NOT_OPTIONS = ("options", "record", "max_messages", "max_message_bytes", "clock", "size", "name")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    # With --strict-markers pytest itself refuses a misspelt marker while importing the
    # module ("'nats_sever' not found in `markers` configuration option"): add the hint.
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    import difflib
    import re

    found = re.search(r"'(\w+)' not found in `markers` configuration option", str(report.longrepr))
    if found and difflib.get_close_matches(found.group(1), [MARKER, "natserver"], n=1, cutoff=0.8):
        hint = f"did you mean @pytest.mark.{MARKER}?"
        try:
            report.longrepr.reprtraceback.reprentries[-1].lines.append(hint)
        except (AttributeError, IndexError):  # another pytest's report shape: keep its own
            pass


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    # A misspelt marker (@pytest.mark.nats_sever) would only be a warning without
    # --strict-markers, and the test would silently get a default server. The tests that carry
    # it fail when they run (pytest_runtest_setup); the others, and a run that deselects them
    # (-k), go on.
    import difflib

    for item in items:
        for marker in item.iter_markers():
            name = marker.name
            if name not in (MARKER, CLUSTER_MARKER) and difflib.get_close_matches(name, [MARKER, "natserver"], n=1,
                                                                                  cutoff=0.8):
                item.stash[_MISSPELT_MARKER] = (f"{item.nodeid}: unknown marker @pytest.mark.{name}: "
                                                f"did you mean @pytest.mark.{MARKER}?")
                break


# Why a collected test must fail before it runs: the misspelt marker it carries.
_MISSPELT_MARKER: pytest.StashKey[str] = pytest.StashKey()


@pytest.fixture
def nats_server(request: pytest.FixtureRequest):
    """A fresh natserver for this test (a background thread; stopped and joined after)."""
    from natserver.testing import NatsServer

    server = NatsServer(**_marker_options(request))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def nats_url(nats_server) -> str:
    """The URL of this test's ``nats_server``: ``nats://127.0.0.1:<port>``."""
    return nats_server.url


@pytest.fixture(scope="session")
def nats_server_session_options() -> dict:
    """Options of ``nats_server_session``; override this fixture to change them."""
    return {}


@pytest.fixture(scope="session")
def nats_server_session(request: pytest.FixtureRequest, nats_server_session_options: dict):
    """One natserver shared by the whole session (faults and records reset per test)."""
    from natserver.testing import NatsServer

    server = NatsServer(**nats_server_session_options)
    server.start()
    request.config.stash[_SESSION_SERVER] = server
    try:
        yield server
    finally:
        del request.config.stash[_SESSION_SERVER]
        server.stop()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Runs before the test's fixtures are set up: a test with a misspelt marker stops here,
    # and a test using the shared server starts without the faults and records of the
    # previous one (its clients stay connected).
    misspelt = item.stash.get(_MISSPELT_MARKER, None)
    if misspelt is not None:
        pytest.fail(misspelt, pytrace=False)
    if "trio_nats_server" in getattr(item, "fixturenames", ()) and not item.config.pluginmanager.hasplugin("trio"):
        pytest.fail("the trio_nats_server fixture needs pytest-trio: pip install pytest-trio "
                    "(and trio_mode = true, or @pytest.mark.trio on the test)", pytrace=False)
    server = item.config.stash.get(_SESSION_SERVER, None)
    if server is not None and "nats_server_session" in getattr(item, "fixturenames", ()):
        server.reset()


@pytest.fixture
async def trio_nats_server(request: pytest.FixtureRequest, nursery):
    """A natserver running in this trio test's nursery (pytest-trio's ``nursery`` fixture)."""
    from natserver.testing import NatsServer

    server = NatsServer(**_marker_options(request))
    await server.start_async(nursery)
    try:
        yield server
    finally:
        await server.stop_async()


@pytest.fixture
def nats_cluster(request: pytest.FixtureRequest):
    """Three natservers joined by routes (``@pytest.mark.nats_cluster(size=..., **options)``),
    stopped after the test."""
    from natserver.testing_cluster import NatsCluster

    cluster = NatsCluster(**_marker_options(request, CLUSTER_MARKER))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop_all()

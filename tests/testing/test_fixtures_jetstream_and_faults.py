"""Issue 18 items 9 and 10: every fixture server with JetStream gets a private store in a
temporary directory (kept across restarts, removed after); fault defaults are one rule; a
misspelt marker or option says what was meant; trio_nats_server without pytest-trio says
what to install."""

from __future__ import annotations

import asyncio
import inspect
import os
import tempfile

import nats
import pytest

from natserver.testing import DEFAULT_FAULT_COUNT, NatsServer

pytest_plugins = ["pytester"]

TIMEOUT = 10.0


def run(coro, timeout: float = TIMEOUT):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def _stream_messages(url: str, publish: int = 0) -> int:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.*"])
        for i in range(publish):
            await js.publish("orders.new", f"order {i}".encode())
        return (await js.stream_info("ORDERS")).state.messages
    finally:
        await nc.close()


# -- item 9 ---------------------------------------------------------------------------------------


def test_each_server_has_a_private_store_kept_across_restarts_removed_after():
    shared = os.path.join(tempfile.gettempdir(), "nats")
    with NatsServer(jetstream=True) as one, NatsServer(jetstream=True) as two:
        dirs = (one.store_dir, two.store_dir)
        assert dirs[0] != dirs[1]
        for d in dirs:
            assert os.path.isdir(os.path.join(d, "jetstream")) and not d.startswith(shared + os.sep)
        assert run(_stream_messages(one.url, publish=3)) == 3
        assert run(_stream_messages(two.url)) == 0  # not the other server's stream
        one.restart()
        assert one.store_dir == dirs[0]
        assert run(_stream_messages(one.url)) == 3  # a restart keeps the store
    assert not any(os.path.exists(d) for d in dirs)
    # The next start after a stop: a new, empty store.
    server = NatsServer(jetstream=True)
    with server:
        assert run(_stream_messages(server.url)) == 0
    assert server.store_dir == ""


def test_an_explicit_store_dir_is_used_and_kept(tmp_path):
    with NatsServer(jetstream=True, store_dir=str(tmp_path)) as server:
        assert run(_stream_messages(server.url, publish=1)) == 1
    assert os.path.isdir(tmp_path / "jetstream" / "$G" / "streams" / "ORDERS")


@pytest.mark.nats_server(jetstream=True)
def test_the_nats_server_fixture_with_jetstream(nats_server):
    assert nats_server.store_dir.startswith(os.path.join(tempfile.gettempdir(), "natserver-jetstream-"))
    assert run(_stream_messages(nats_server.url, publish=2)) == 2


@pytest.mark.nats_server(jetstream=True)
async def test_the_trio_fixture_with_jetstream(trio_nats_server):
    path = trio_nats_server.store_dir
    assert os.path.isdir(os.path.join(path, "jetstream"))
    await trio_nats_server.stop_async()
    assert not os.path.exists(path)


# -- item 10 --------------------------------------------------------------------------------------


def test_every_fault_has_the_same_default_count():
    for method in (NatsServer.drop, NatsServer.delay, NatsServer.no_responders, NatsServer.close_connections):
        assert inspect.signature(method).parameters["count"].default == DEFAULT_FAULT_COUNT == 1
    with NatsServer() as server:
        faults = [server.drop("a"), server.delay("b", 1), server.no_responders("c"),
                  server.close_connections("after_connect")]
        assert [f.count for f in faults] == [1, 1, 1, 1]


def test_delay_and_no_responders_act_once_by_default():
    async def main(server):
        nc = await nats.connect(server.url)
        try:
            async def respond(msg):
                await msg.respond(b"answer")

            await nc.subscribe("svc", cb=respond)
            await nc.flush()
            server.no_responders("svc")
            with pytest.raises(nats.errors.NoRespondersError):
                await nc.request("svc", b"", timeout=2)
            assert (await nc.request("svc", b"", timeout=2)).data == b"answer"
            fault = server.delay("svc", 5)
            with pytest.raises(nats.errors.TimeoutError):
                await nc.request("svc", b"", timeout=0.2)
            assert not fault.active
            assert (await nc.request("svc", b"", timeout=2)).data == b"answer"
        finally:
            await nc.close()

    with NatsServer() as server:
        run(main(server))


def test_a_misspelt_option_says_what_was_meant():
    with pytest.raises(TypeError, match=r"unknown natserver option 'max_paylod' \(did you mean 'max_payload'\?\)"):
        NatsServer(max_paylod=1024)


MISSPELT = """
import pytest

@pytest.mark.nats_sever(max_payload=1024)
def test_one(nats_server):
    pass

def test_other(nats_server):
    pass
"""

MISSPELT_OPTION = """
import pytest

@pytest.mark.nats_server(max_paylod=1024)
def test_one(nats_server):
    pass
"""

TRIO_ONLY = """
async def test_one(trio_nats_server):
    pass
"""


def test_a_misspelt_marker_says_did_you_mean(pytester):
    pytester.makepyfile(test_inner=MISSPELT)
    result = pytester.runpytest("-p", "no:cacheprovider", "-q")
    result.stdout.fnmatch_lines(["*unknown marker @pytest.mark.nats_sever: did you mean @pytest.mark.nats_server?*"])
    # Only the test that carries it fails; the run goes on.
    result.assert_outcomes(passed=1, errors=1)


def test_a_misspelt_marker_does_not_stop_a_run_that_deselects_it(pytester):
    pytester.makepyfile(test_inner=MISSPELT)
    result = pytester.runpytest("-p", "no:cacheprovider", "-q", "-k", "test_other")
    result.assert_outcomes(passed=1, deselected=1)


def test_a_misspelt_option_fails_only_that_test(pytester):
    pytester.makepyfile(test_inner=MISSPELT_OPTION + "\n\ndef test_other(nats_server):\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1, errors=1)


def test_a_misspelt_marker_with_strict_markers_says_did_you_mean(pytester):
    pytester.makepyfile(test_inner=MISSPELT)
    result = pytester.runpytest("-p", "no:cacheprovider", "-q", "--strict-markers")
    result.stdout.fnmatch_lines(["'nats_sever' not found in `markers` configuration option",
                                 "did you mean @pytest.mark.nats_server?"])
    assert result.ret != 0


def test_a_misspelt_marker_option_says_did_you_mean(pytester):
    pytester.makepyfile(test_inner=MISSPELT_OPTION)
    result = pytester.runpytest("-p", "no:cacheprovider", "-q")
    result.stdout.fnmatch_lines(["*@pytest.mark.nats_server: unknown natserver option 'max_paylod' "
                                 "(did you mean 'max_payload'?)*"])
    assert result.ret != 0


def test_trio_fixture_without_pytest_trio_says_to_install_it(pytester):
    pytester.makepyfile(test_inner=TRIO_ONLY)
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:trio", "-q")
    result.stdout.fnmatch_lines(["*the trio_nats_server fixture needs pytest-trio: pip install pytest-trio*"])
    result.assert_outcomes(errors=1)

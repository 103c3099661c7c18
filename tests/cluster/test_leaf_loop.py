"""Leaf node loop detection (leafnode.go): every account tells its leaf connections of
interest in its own ``$LDS.<unique>`` subject; when that interest comes back over a leaf
connection the leaves form a loop: ``-ERR 'Loop detected ...'``, the close, and a leaf that
dialled waits 30 s before it tries again."""

from __future__ import annotations

import functools
import json
import subprocess

import pytest
import trio

import natserver
from natserver.protocol.const import DEFAULT_LEAF_NODE_RECONNECT as LEAF_RECONNECT_DELAY
from tests.cluster.helpers import NATS_SERVER, STEP_TIMEOUT, free_port, skip_without_nats_server
from tests.conftest import RawClient, make_options

LOOP_ERROR = b"-ERR 'Loop detected for leafnode account=\"$G\". Delaying attempt to reconnect for 30s'\r\n"


async def start(nursery, **changes) -> natserver.Server:
    return await nursery.start(natserver.serve, make_options(no_system_account=True, **changes))


async def wait_for(predicate) -> None:
    with trio.fail_after(STEP_TIMEOUT):
        while not predicate():
            await trio.sleep(0.01)


async def test_our_loop_subject_coming_back_is_a_loop(nursery):
    hub = await start(nursery, leafnode_port=-1, leafnode_host="127.0.0.1")
    leaf = RawClient(await trio.open_tcp_stream("127.0.0.1", hub.cluster.leaf_port))
    await leaf.read_info()
    await leaf.send(b'CONNECT {"server_id":"L","name":"L","headers":true}\r\n')
    assert json.loads((await leaf.read_line())[5:])["connect_info"] is True
    lds = await leaf.read_line()
    assert lds.startswith(b"LS+ $LDS.")
    # Another server's loop subject is plain interest; ours back is a loop.
    await leaf.send(b"LS+ $LDS.someoneelse\r\n" + lds)
    await leaf.expect_eof(LOOP_ERROR)
    assert not hub.cluster.leafs


async def test_a_leaf_told_of_a_loop_waits_before_redialling(nursery):
    accepted = []

    async def fake_hub(stream):
        accepted.append(stream)
        client = RawClient(stream)
        await client.send(b'INFO {"server_id":"HUB","client_id":1,"leafnode_urls":[],"headers":true} \r\n')
        await client.read_until(b"CONNECT ")
        await client.send(LOOP_ERROR)
        await trio.sleep(0.1)
        await stream.aclose()

    listeners = await nursery.start(functools.partial(trio.serve_tcp, fake_hub, 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]
    leaf = await start(nursery, leafnode_remotes=[{"urls": [f"nats://127.0.0.1:{port}"], "account": ""}])
    await wait_for(lambda: accepted and not leaf.cluster.all_routes)
    await trio.sleep(2 * LEAF_RECONNECT_DELAY)  # past the usual redial delay: no second attempt
    assert len(accepted) == 1


async def test_two_natservers_leaf_of_each_other_detect_the_loop(nursery, caplog):
    a = await start(nursery, leafnode_port=-1, leafnode_host="127.0.0.1")
    b = await start(nursery, leafnode_port=-1, leafnode_host="127.0.0.1", leafnode_remotes=[
        {"urls": [f"nats://127.0.0.1:{a.cluster.leaf_port}"], "account": ""}])
    await wait_for(lambda: a.cluster.leafs)
    a.options.leafnode_remotes.append({"urls": [f"nats://127.0.0.1:{b.cluster.leaf_port}"], "account": ""})
    nursery.start_soon(a.cluster._leaf_loop, a.options.leafnode_remotes[0])
    await wait_for(lambda: 'Loop detected for leafnode account="$G"' in caplog.text)
    # The link that closed breaks the loop (the other may stay) and is not redialled for 30 s.
    await wait_for(lambda: len(a.cluster.leafs) <= 1)
    await trio.sleep(2 * LEAF_RECONNECT_DELAY)
    assert len(a.cluster.leafs) <= 1 and len(b.cluster.leafs) <= 1


@pytest.mark.needs_nats_server
@skip_without_nats_server
async def test_a_loop_through_nats_server_is_detected(nursery, tmp_path, caplog):
    a = await start(nursery, leafnode_port=-1, leafnode_host="127.0.0.1")
    their_leaf_port = free_port()
    conf = tmp_path / "n.conf"
    conf.write_text(f"listen: 127.0.0.1:{free_port()}\nleafnodes {{ listen: 127.0.0.1:{their_leaf_port}, "
                    f'remotes [ {{ url: "nats://127.0.0.1:{a.cluster.leaf_port}" }} ] }}\n')
    proc = subprocess.Popen([NATS_SERVER, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        await wait_for(lambda: a.cluster.leafs)
        remote = {"urls": [f"nats://127.0.0.1:{their_leaf_port}"], "account": ""}
        nursery.start_soon(a.cluster._leaf_loop, remote)
        await wait_for(lambda: 'Loop detected for leafnode account="$G"' in caplog.text)
        await wait_for(lambda: len(a.cluster.leafs) <= 1)
        await trio.sleep(2 * LEAF_RECONNECT_DELAY)  # neither side redials within 30 s
        assert len(a.cluster.leafs) <= 1
    finally:
        proc.terminate()
        _, err = await trio.to_thread.run_sync(proc.communicate)
    # nats-server found it too, or was told: its log says so in the same words.
    assert b'Loop detected for leafnode account="$G". Delaying attempt to reconnect for 30s' in err


async def test_a_second_connection_from_the_same_leaf_replaces_the_first(nursery):
    # leafnode.go addLeafNodeConnection: the same server, cluster and account again is a
    # stale connection being replaced (a loop is $LDS's business).
    hub = await start(nursery, leafnode_port=-1, leafnode_host="127.0.0.1")
    first = RawClient(await trio.open_tcp_stream("127.0.0.1", hub.cluster.leaf_port))
    second = RawClient(await trio.open_tcp_stream("127.0.0.1", hub.cluster.leaf_port))
    for leaf in (first, second):
        await leaf.read_info()
        await leaf.send(b'CONNECT {"server_id":"L","name":"L","headers":true}\r\nPING\r\n')
        await leaf.read_until(b"PONG\r\n")
    assert b"-ERR 'Duplicate Remote LeafNode Connection'\r\n" in await first.read_until_eof()
    (link,) = hub.cluster.leafs.values()
    assert link.rid == 2

"""The ROUTER's messages as (identity, frame) pairs (daemon/envelopes.py): the compiled
build's C receive and the pure one give the same pairs, on a real socket, for well-formed
and hostile messages alike; the receiver counts what is not ours."""

from __future__ import annotations

import zmq

import wtwin.daemon
from wtwin.daemon.config import ListenConfig
from wtwin.daemon.envelopes import Envelopes
from wtwin.daemon.receiver import Receiver
from helpers import wait_for

MESSAGES = [[b"one"], [b""], [b"a", b"b"], [b"x" * 70_000], [b"a", b"b", b"c", b"d"], [b"last"]]


def _pairs(tmp_path, native: bool) -> tuple[list, bool]:
    ctx = zmq.Context()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    router.bind(f"ipc://{tmp_path}/e-{native}.sock")
    dealer.connect(f"ipc://{tmp_path}/e-{native}.sock")
    env = Envelopes(router, native=native)
    assert env.next() is None                                # nothing waits: no blocking
    for parts in MESSAGES:
        dealer.send_multipart(parts)
    got = []
    wait_for(lambda: (got.append(env.next()) or len([g for g in got if g is not None]) == len(MESSAGES)),
             timeout=10)
    got = [g for g in got if g is not None]
    assert env.next() is None
    used = env.native
    env.close()
    dealer.close(linger=0)
    router.close(linger=0)
    ctx.term()
    return got, used


def test_both_ways_give_the_same_pairs_and_drop_extra_parts(tmp_path):
    native, used = _pairs(tmp_path, True)
    pure, pure_used = _pairs(tmp_path, False)
    assert pure_used is False
    assert used is wtwin.daemon.COMPILED                  # the C receive runs wherever compiled
    identity = native[0][0]
    assert all(type(i) is bytes and i == identity for i, _ in native)
    assert [f for _, f in native] == [b"one", b"", None, b"x" * 70_000, None, b"last"]
    assert [f for _, f in pure] == [f for _, f in native]


def test_a_closed_envelope_receives_nothing(tmp_path):
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.bind(f"ipc://{tmp_path}/c.sock")
    env = Envelopes(router)
    env.close()
    router.close(linger=0)
    try:
        env.next()
    except zmq.ZMQError as exc:      # ENOTSOCK, as pyzmq says of a closed socket
        assert exc.errno == zmq.ENOTSOCK
    else:
        raise AssertionError("a closed socket received")
    ctx.term()


def test_the_receiver_counts_bad_envelopes_and_hands_on_the_rest(tmp_path):
    ctx = zmq.Context()
    rx = Receiver(ListenConfig(endpoints=(f"ipc://{tmp_path}/r.sock",)), ctx=ctx)
    rx.bind()
    got = []
    rx.handler = lambda identity, frame, user, deadline: got.append(frame)
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(f"ipc://{tmp_path}/r.sock")
    for parts in MESSAGES:
        dealer.send_multipart(parts)
    wait_for(lambda: rx.drain() >= 0 and len(got) + rx.bad_envelopes == len(MESSAGES), timeout=10)
    assert got == [b"one", b"", b"x" * 70_000, b"last"] and rx.bad_envelopes == 2
    dealer.close(linger=0)
    rx.close()
    ctx.term()


def _curve_pairs(tmp_path, native: bool) -> tuple[list, str]:
    """The pairs and User-Ids a CURVE ROUTER receives from one client (a real ZAP handler)."""
    from zmq.auth.thread import ThreadAuthenticator

    ctx = zmq.Context()
    auth = ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve(domain="*", location=zmq.auth.CURVE_ALLOW_ANY)
    server_public, server_secret = zmq.curve_keypair()
    client_public, client_secret = zmq.curve_keypair()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    router.curve_secretkey, router.curve_publickey, router.curve_server = server_secret, server_public, True
    router.bind(f"ipc://{tmp_path}/k-{native}.sock")
    dealer.curve_secretkey, dealer.curve_publickey, dealer.curve_serverkey = client_secret, client_public, server_public
    dealer.connect(f"ipc://{tmp_path}/k-{native}.sock")
    env = Envelopes(router, native=native)
    for parts in MESSAGES:
        dealer.send_multipart(parts)
    got = []
    wait_for(lambda: (got.append(env.next_with_user()) or len([g for g in got if g is not None]) == len(MESSAGES)),
             timeout=10)
    env.close()
    dealer.close(linger=0)
    router.close(linger=0)
    auth.stop()
    ctx.term()
    return [g for g in got if g is not None], client_public.decode()


def test_with_curve_each_frame_carries_its_clients_key_both_ways(tmp_path):
    for native in (True, False):
        got, key = _curve_pairs(tmp_path, native)
        assert [f for _, f, _ in got] == [b"one", b"", None, b"x" * 70_000, None, b"last"], native
        assert [u for _, f, u in got] == [key if f is not None else None for _, f, _ in got], native


def test_without_a_user_id_both_ways_raise_as_pyzmq(tmp_path):
    """A frame with no ZAP User-Id (no CURVE) raises EINVAL, as ``Frame.get`` does."""
    ctx = zmq.Context()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    router.bind(f"ipc://{tmp_path}/u.sock")
    dealer.connect(f"ipc://{tmp_path}/u.sock")
    for native in (True, False):
        env = Envelopes(router, native=native)
        dealer.send(b"frame")
        wait_for(lambda: router.poll(0), timeout=10)
        try:
            env.next_with_user()
        except zmq.ZMQError as exc:
            assert exc.errno == zmq.EINVAL, native
        else:
            raise AssertionError("a frame without a User-Id passed")
        assert env.next() is None   # the frame was taken whole
    dealer.close(linger=0)
    router.close(linger=0)
    ctx.term()

"""The client API against a synthetic model on a router with 2 workers."""

import asyncio
import os
import re
import subprocess

import grpc
import numpy as np
import pytest
import torch

from conftest import SYNTHETIC
from moe_serve import AsyncMoeClient, MoeClient, MoeError, Timing, WorkerTiming

H = 64


def rand(n, seed=0):
    return np.random.default_rng(seed).standard_normal((n, H)).astype(np.float32)


def test_model_info_health_stats(synthetic):
    c = synthetic.client
    info = c.model_info()
    assert (info.hidden, info.experts, info.top_k) == (64, 8, 2)
    assert list(info.moe_layers) == [0, 1] and info.ready and info.num_workers == 2
    assert c.health() and c.health("moe.v1.MoeService") and c.health("liveness")
    c.expert_stats(1, reset=True)
    c.forward(1, rand(10))
    s = c.expert_stats(1, reset=True)
    assert s.layer == 1 and s.tokens == 10 and sum(s.tokens_per_expert) == 20
    assert c.expert_stats(1).tokens == 0


def test_dtypes_and_extras(synthetic):
    c = synthetic.client
    x = rand(7, 1)
    y = c.forward(0, x, routing=True, timing=True)
    assert y.routing.expert_ids.shape == (7, 2) and y.routing.slots == 2
    assert ((0 <= y.routing.expert_ids) & (y.routing.expert_ids < 8)).all()
    np.testing.assert_allclose(y.routing.weights.sum(1), 1, rtol=1e-5)
    assert y.timing.total_us > 0 and y.timing.batch_requests >= 1
    # Two workers: the critical path's worker and its own stages.
    cw = y.timing.critical_worker
    assert cw is not None and cw.rank in (0, 1) and cw.step_us > 0, y.timing
    assert not re.search(r"\.\d{4}", repr(y.timing)), repr(y.timing)
    assert c.forward(0, x).routing is None
    y16 = c.forward(0, x.astype(np.float16))
    assert y16.dtype == np.float16
    np.testing.assert_allclose(y16.astype(np.float32), y, atol=2e-2, rtol=2e-2)
    t16 = c.forward(0, torch.from_numpy(x).half())
    assert t16.dtype == torch.float16
    np.testing.assert_array_equal(t16.numpy(), y16)
    t = c.forward(0, torch.from_numpy(x), routing=True)
    np.testing.assert_array_equal(t.numpy(), y)
    np.testing.assert_array_equal(t.routing.expert_ids, y.routing.expert_ids)
    # float64 in, float64 out (F32 on the wire)
    assert c.forward(0, x.astype(np.float64)).dtype == np.float64


def test_timing_repr_rounds_to_3_decimals():
    # Microseconds computed in floating point print as 0.15, not as
    # 0.15000000000000002; the values themselves are kept.
    t = Timing(queue_us=0.1 + 0.05, route_us=1234.56789, plan_us=2.5,
               dispatch_us=0.0, experts_us=1 / 3, combine_us=0.0, shared_us=0.0,
               total_us=10.0, batch_tokens=8, batch_requests=2,
               critical_worker=WorkerTiming(rank=1, step_us=0.1 * 3))
    r = repr(t)
    assert r.startswith("Timing(queue_us=0.15, route_us=1234.568, plan_us=2.5, "), r
    assert "experts_us=0.333, " in r and "batch_tokens=8, batch_requests=2, " in r, r
    assert r.endswith("critical_worker=WorkerTiming(rank=1, decode_us=0.0, "
                      "gather_us=0.0, dispatch_wait_us=0.0, experts_us=0.0, "
                      "combine_wait_us=0.0, sum_us=0.0, step_us=0.3))"), r
    assert "critical_worker=None)" in repr(Timing(*[0.1 * 3] * 8, 1, 1))
    assert t.queue_us == 0.1 + 0.05 and t.critical_worker.step_us == 0.1 * 3


def test_stream_in_order_with_a_failure(synthetic):
    c = synthetic.client
    xs = [rand(n, n) for n in (1, 5, 9, 3)]
    items = [(i % 2, x) for i, x in enumerate(xs)]
    got = c.forward_many(items)
    for (layer, x), y in zip(items, got):
        np.testing.assert_array_equal(y, c.forward(layer, x))
    # A bad request answers with its error and the stream goes on.
    mixed = [(0, xs[0]), (0, np.zeros((2, H + 1), np.float32)),
             {"layer": 1, "x": torch.from_numpy(xs[1]), "routing": True}]
    out = c.forward_many(mixed, return_exceptions=True)
    assert isinstance(out[1], MoeError) and out[1].code == grpc.StatusCode.INVALID_ARGUMENT
    np.testing.assert_array_equal(out[0], got[0])
    assert isinstance(out[2], torch.Tensor) and out[2].routing.expert_ids.shape == (5, 2)
    with pytest.raises(MoeError) as e:
        c.forward_many(mixed)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_bad_input_codes(synthetic):
    c = synthetic.client
    with pytest.raises(MoeError) as e:
        c.forward(0, np.zeros((3, H + 2), np.float32))
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "hidden" in e.value.message
    with pytest.raises(MoeError) as e:
        c.forward(7, rand(2))
    assert e.value.code == grpc.StatusCode.NOT_FOUND and e.value.message
    bad = rand(2)
    bad[1, 3] = np.nan
    with pytest.raises(MoeError) as e:
        c.forward(0, bad)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(MoeError) as e:
        c.expert_stats(9)
    assert e.value.code == grpc.StatusCode.NOT_FOUND
    with pytest.raises(ValueError):
        c.forward(0, np.zeros((2, 3, H), np.float32))
    with pytest.raises(MoeError) as e:
        MoeClient("127.0.0.1:1", timeout=2).model_info()
    assert e.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def test_async_64_concurrent(synthetic):
    xs = [rand(1 + i % 8, 100 + i) for i in range(64)]
    want = [synthetic.client.forward(i % 2, x) for i, x in enumerate(xs)]

    async def main():
        async with AsyncMoeClient(synthetic.target, timeout=30) as ac:
            assert await ac.health("moe.v1.MoeService")
            assert (await ac.model_info()).hidden == H
            ys = await asyncio.gather(*[ac.forward(i % 2, x, timing=True)
                                        for i, x in enumerate(xs)])
            many = await ac.forward_many([(0, x) for x in xs[:10]])
            with pytest.raises(MoeError) as e:
                await ac.forward(5, xs[0])
            assert e.value.code == grpc.StatusCode.NOT_FOUND
            stats = await ac.expert_stats(0)
            return ys, many, stats

    ys, many, stats = asyncio.run(main())
    batched = 0
    for y, w in zip(ys, want):
        np.testing.assert_allclose(y, w, atol=1e-5, rtol=1e-5)
        batched = max(batched, y.timing.batch_requests)
    for i, y in enumerate(many):
        np.testing.assert_allclose(y, synthetic.client.forward(0, xs[i]),
                                   atol=1e-5, rtol=1e-5)
    assert stats.tokens > 0
    print(f"async: 64 concurrent requests, largest step held {batched} requests")


def test_remote_moe_module(synthetic):
    from moe_serve.torch import RemoteMoE
    m = RemoteMoE(synthetic.client, 1)
    h = torch.randn(2, 3, H)
    y = m(h)
    assert y.shape == h.shape
    np.testing.assert_allclose(
        y.reshape(-1, H).numpy(), synthetic.client.forward(1, h.reshape(-1, H)).numpy())


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("certs"))

    def ssl(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca", "rogue-ca"):
        ssl("req", "-x509", *ec, "-days", "2", "-subj", f"/CN={ca}",
            "-keyout", f"{ca}.key", "-out", f"{ca}.pem")
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    ssl("req", *ec, "-subj", "/CN=server", "-keyout", "server.key", "-out", "server.csr")
    ssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "server.ext", "-out", "server.pem")
    with open(os.path.join(d, "tokens"), "w") as f:
        f.write("old-token\n  s3cret \n")
    return d


def test_tls_and_token(certs, cluster_factory):
    p = lambda n: os.path.join(certs, n)  # noqa: E731
    c = cluster_factory(SYNTHETIC + [f"--tls-cert={p('server.pem')}",
                                     f"--tls-key={p('server.key')}",
                                     f"--auth-token-file={p('tokens')}"],
                        workers=0, client_kw={"tls_ca": p("ca.pem")})
    x = rand(4)
    ok = MoeClient(c.target, tls_ca=p("ca.pem"), token="s3cret", timeout=10)
    assert ok.forward(0, x).shape == (4, H)
    assert MoeClient(c.target, tls_ca=open(p("ca.pem"), "rb").read(), token="old-token",
                     timeout=10).model_info().hidden == H
    for kw, code in [({"tls_ca": p("ca.pem")}, grpc.StatusCode.UNAUTHENTICATED),
                     ({"tls_ca": p("ca.pem"), "token": "wrong"},
                      grpc.StatusCode.UNAUTHENTICATED),
                     ({"token": "s3cret"}, grpc.StatusCode.UNAVAILABLE),  # plaintext
                     ({"tls_ca": p("rogue-ca.pem"), "token": "s3cret"},
                      grpc.StatusCode.UNAVAILABLE)]:
        with pytest.raises(MoeError) as e:
            MoeClient(c.target, timeout=5, **kw).forward(0, x)
        assert e.value.code == code, (kw, e.value)
        # Only the plaintext client is told that the port may want TLS.
        assert ("pass tls_ca" in e.value.message) == ("tls_ca" not in kw), (kw, e.value)
    # Health needs no token.
    assert MoeClient(c.target, tls_ca=p("ca.pem"), timeout=5).health()

    async def main():
        async with AsyncMoeClient(c.target, tls_ca=p("ca.pem"), token="s3cret",
                                  timeout=10) as ac:
            return await ac.forward(0, x)
    np.testing.assert_array_equal(asyncio.run(main()), ok.forward(0, x))

    async def plaintext():
        async with AsyncMoeClient(c.target, token="s3cret", timeout=5) as ac:
            with pytest.raises(MoeError) as e:
                await ac.model_info()
            return e.value
    err = asyncio.run(plaintext())
    assert err.code == grpc.StatusCode.UNAVAILABLE and "pass tls_ca" in err.message, err

"""The client's UNAVAILABLE retry against an in-process fake router that
fails the first calls: retried by default (as the C++ client), seen with
retry=False; other codes are never retried."""

from __future__ import annotations

import threading
from concurrent import futures

import grpc
import numpy as np
import pytest

from moe_serve import MoeClient, MoeError
from moe_serve._stubs import moe_pb2, moe_pb2_grpc


class FlakyRouter(moe_pb2_grpc.MoeServiceServicer):
    """Fails the first `failures` calls with `code`, then answers."""

    def __init__(self, failures: int, code=grpc.StatusCode.UNAVAILABLE):
        self.failures = failures
        self.code = code
        self.calls = 0
        self.lock = threading.Lock()

    def _fail_first(self, context) -> bool:
        with self.lock:
            self.calls += 1
            if self.calls <= self.failures:
                context.abort(self.code, "worker group regrouping (test)")
        return False

    def GetModelInfo(self, request, context):
        self._fail_first(context)
        return moe_pb2.ModelInfo(hidden=8)

    def Forward(self, request, context):
        self._fail_first(context)
        x = request.hidden_states
        return moe_pb2.ForwardResponse(output=x)


@pytest.fixture
def flaky():
    servers = []

    def start(failures, code=grpc.StatusCode.UNAVAILABLE):
        router = FlakyRouter(failures, code)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        moe_pb2_grpc.add_MoeServiceServicer_to_server(router, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return router, f"127.0.0.1:{port}"

    yield start
    for s in servers:
        s.stop(grace=None)


def test_unavailable_is_retried_by_default(flaky):
    router, target = flaky(failures=2)
    with MoeClient(target, timeout=10) as c:
        assert c.model_info().hidden == 8
        x = np.ones((3, 8), dtype=np.float32)
        router.calls, router.failures = 0, 3  # the most 4 attempts absorb
        np.testing.assert_array_equal(np.asarray(c.forward(0, x)), x)
    assert router.calls == 4


def test_retry_off_sees_the_first_failure(flaky):
    router, target = flaky(failures=1)
    with MoeClient(target, timeout=10, retry=False) as c:
        with pytest.raises(MoeError) as e:
            c.model_info()
        assert e.value.code == grpc.StatusCode.UNAVAILABLE
    assert router.calls == 1


def test_retries_give_up_after_four_attempts(flaky):
    router, target = flaky(failures=100)
    with MoeClient(target, timeout=10) as c:
        with pytest.raises(MoeError) as e:
            c.model_info()
        assert e.value.code == grpc.StatusCode.UNAVAILABLE
    assert router.calls == 4


def test_other_codes_are_not_retried(flaky):
    router, target = flaky(failures=1, code=grpc.StatusCode.INVALID_ARGUMENT)
    with MoeClient(target, timeout=10) as c:
        with pytest.raises(MoeError) as e:
            c.model_info()
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert router.calls == 1

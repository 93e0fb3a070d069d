"""MoeClient (blocking) and AsyncMoeClient (grpc.aio) for moe.v1.MoeService."""

from __future__ import annotations

import json

from typing import Any, Iterable, List, Optional, Sequence

import grpc

from ._stubs import health_pb2, health_pb2_grpc, moe_pb2, moe_pb2_grpc
import numpy as np

from ._tensors import Routing, decode, encode, wire_name

_CODES = {c.value[0]: c for c in grpc.StatusCode}

# The C++ client's policy (client/moe_client.cc kRetryServiceConfig): every
# moe.v1.MoeService call is tried up to 4 times on UNAVAILABLE (a router
# draining, a worker group regrouping after a lost worker), backing off from
# 0.1 s to 1 s. gRPC retries only before the first response arrives and
# while the request fits the 16 MiB retry buffer, so an answered call is
# never sent twice.
RETRY_SERVICE_CONFIG = json.dumps({
    "methodConfig": [{
        "name": [{"service": "moe.v1.MoeService"}],
        "retryPolicy": {
            "maxAttempts": 4,
            "initialBackoff": "0.1s",
            "maxBackoff": "1s",
            "backoffMultiplier": 2,
            "retryableStatusCodes": ["UNAVAILABLE"],
        },
    }]
})
_WIRE = {"f32": moe_pb2.F32, "bf16": moe_pb2.BF16, "f16": moe_pb2.F16}


class MoeError(Exception):
    """Any failed call: `code` (grpc.StatusCode) and the server's `message`."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message

    @classmethod
    def from_rpc(cls, e: grpc.RpcError, plaintext: bool = False) -> "MoeError":
        """`plaintext`: the call's channel had no TLS; a server that closed
        it then gets a hint appended (see _plaintext_hint)."""
        message = e.details() or ""
        if plaintext:
            message += _plaintext_hint(e.code(), message)
        return cls(e.code(), message)

    @classmethod
    def from_value(cls, value: int, message: str) -> "MoeError":
        return cls(_CODES.get(value, grpc.StatusCode.UNKNOWN), message)


def _plaintext_hint(code: grpc.StatusCode, message: str) -> str:
    # A TLS port closes a plaintext connection without a word: gRPC says only
    # "Socket closed" (the C++ client's proto/connection_hints.cc says the same).
    closed = ("Socket closed", "Connection reset by peer", "Broken pipe")
    if code != grpc.StatusCode.UNAVAILABLE or not any(c in message for c in closed):
        return ""
    return (" (the server closed a plaintext connection: the port may want TLS;"
            " pass tls_ca)")


def _read(v):
    if v is None or isinstance(v, bytes):
        return v
    with open(v, "rb") as f:
        return f.read()


def _channel_args(target, tls_ca, tls_cert, tls_key, tls_server_name, retry):
    options = [("grpc.max_send_message_length", -1),
               ("grpc.max_receive_message_length", -1)]
    if retry:
        options += [("grpc.enable_retries", 1),
                    ("grpc.service_config", RETRY_SERVICE_CONFIG),
                    ("grpc.per_rpc_retry_buffer_size", 16 << 20)]
    else:
        options.append(("grpc.enable_retries", 0))
    if tls_server_name:
        options.append(("grpc.ssl_target_name_override", tls_server_name))
    creds = None
    if tls_ca is not None or tls_cert is not None:
        creds = grpc.ssl_channel_credentials(
            root_certificates=_read(tls_ca), private_key=_read(tls_key),
            certificate_chain=_read(tls_cert))
    return creds, options


_FORWARD_DEFAULTS = {"routing": False, "return_routing": None, "timing": False,
                     "dtype": None, "output_dtype": None, "token_ids": None,
                     "token_types": None, "router_logits": None,
                     "return_router_logits": False, "shared": "add"}


def _item(it: Any) -> dict:
    """A forward_many item: (layer, x), or a dict with layer, x and any of
    forward()'s keywords (routing, return_routing, timing, dtype,
    output_dtype, token_ids, token_types, router_logits, return_router_logits,
    shared)."""
    if isinstance(it, dict):
        d = dict(it)
    else:
        layer, x = it
        d = {"layer": layer, "x": x}
    unknown = set(d) - set(_FORWARD_DEFAULTS) - {"layer", "x"}
    if unknown:
        raise ValueError(f"forward_many: unknown item keys {sorted(unknown)}")
    for k, v in _FORWARD_DEFAULTS.items():
        d.setdefault(k, v)
    return d


def _token_ids(token_ids):
    # One int per row of x: a list, NumPy array or torch tensor of any shape
    # (flattened like x's leading dims); None: none sent.
    if token_ids is None:
        return []
    if hasattr(token_ids, "detach"):  # torch
        token_ids = token_ids.detach().cpu().reshape(-1).tolist()
    elif hasattr(token_ids, "reshape"):  # NumPy
        token_ids = token_ids.reshape(-1).tolist()
    return [int(t) for t in token_ids]


_SHARED = {"add": moe_pb2.SHARED_ADD, "separate": moe_pb2.SHARED_SEPARATE,
           "skip": moe_pb2.SHARED_SKIP}


def _shared_mode(shared) -> int:
    """moe_pb2.SharedMode from "add" | "separate" | "skip" (or the enum)."""
    if isinstance(shared, str):
        if shared.lower() not in _SHARED:
            raise ValueError(f"shared={shared!r}: expected 'add', 'separate' or 'skip'")
        return _SHARED[shared.lower()]
    if shared not in _SHARED.values():
        raise ValueError(f"shared={shared!r}: expected 'add', 'separate' or 'skip'")
    return int(shared)


def _as_numpy(a, dtype):
    if hasattr(a, "detach"):  # torch
        a = a.detach().cpu().numpy()
    return np.asarray(a, dtype=dtype)


def _caller_routing(routing) -> Optional["moe_pb2.Routing"]:
    """The request's Routing from forward()'s `routing`: None for a bool (it
    asks for the routing back), else a Routing result or an (expert_ids,
    weights) pair of [N, k] arrays or tensors. Only what the flattened
    message would hide is checked here: both are 2-D with the same shape
    (the server checks N, k, the ids and the weights)."""
    if routing is None or isinstance(routing, (bool, np.bool_)):
        return None
    if isinstance(routing, Routing):
        ids, weights = routing.expert_ids, routing.weights
    else:
        try:
            ids, weights = routing
        except (TypeError, ValueError):
            raise ValueError("routing: expected a bool (return the routing), a "
                             "Routing or an (expert_ids, weights) pair of [N, k] "
                             f"arrays; got {type(routing).__name__}") from None
    ids = _as_numpy(ids, None)
    weights = _as_numpy(weights, np.float32)
    if ids.ndim != 2 or weights.shape != ids.shape:
        raise ValueError("routing: expert_ids and weights must both be [N, k], got "
                         f"shapes {ids.shape} and {weights.shape}")
    if ids.size and not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"routing: expert_ids must be integers, got {ids.dtype}")
    return moe_pb2.Routing(tokens=ids.shape[0], slots=ids.shape[1],
                           expert_ids=ids.reshape(-1).astype(np.int64).tolist(),
                           weights=weights.reshape(-1).tolist())


def _returns_routing(routing, return_routing) -> bool:
    """Whether the answer carries its routing: `return_routing` when given,
    else `routing` when it is the old bool form."""
    if return_routing is not None:
        return bool(return_routing)
    return isinstance(routing, (bool, np.bool_)) and bool(routing)


def _request(layer, x, *, routing=False, return_routing=None, timing=False,
             dtype=None, output_dtype=None, request_id="", token_ids=None,
             token_types=None, router_logits=None, return_router_logits=False,
             shared="add"):
    tensor, kind = encode(x, dtype)
    req = moe_pb2.ForwardRequest(
        layer=int(layer), hidden_states=tensor,
        return_routing=_returns_routing(routing, return_routing),
        return_timing=bool(timing), request_id=request_id,
        token_ids=_token_ids(token_ids), token_types=_token_ids(token_types),
        return_router_logits=bool(return_router_logits), shared=_shared_mode(shared))
    caller = _caller_routing(routing)
    if caller is not None:
        req.routing.CopyFrom(caller)
    if router_logits is not None:
        # f32 on the wire unless the logits are bf16 already.
        logits, _ = encode(router_logits, None, what="router_logits")
        if logits.dtype == moe_pb2.F16:
            logits, _ = encode(router_logits, "f32", what="router_logits")
        req.router_logits.CopyFrom(logits)
    if output_dtype is not None:
        req.output_dtype = _WIRE[wire_name(output_dtype)]
    return req, kind


class _Base:
    def __init__(self, target: str, *, tls_ca=None, tls_cert=None, tls_key=None,
                 token: Optional[str] = None, timeout: Optional[float] = None,
                 tls_server_name: Optional[str] = None, retry: bool = True):
        self.target = target
        self.timeout = timeout
        self._metadata = (("authorization", f"Bearer {token.strip()}"),) if token else None
        self._creds, self._options = _channel_args(target, tls_ca, tls_cert, tls_key,
                                                   tls_server_name, retry)

    def _t(self, timeout):
        return self.timeout if timeout is None else timeout

    def _error(self, e: grpc.RpcError) -> MoeError:
        return MoeError.from_rpc(e, plaintext=self._creds is None)


class MoeClient(_Base):
    """Blocking client of the MoE layer service.

    `tls_ca` (PEM path or bytes) turns TLS on; `tls_cert`/`tls_key` add a
    client certificate; `token` is sent as `authorization: Bearer ...`;
    `timeout` (seconds) is every call's default deadline. `retry` (default
    on) retries a call that fails with UNAVAILABLE before any response, as
    the C++ client does (RETRY_SERVICE_CONFIG); off, every failure is seen.
    """

    def __init__(self, target: str, **kw):
        super().__init__(target, **kw)
        if self._creds is not None:
            self._channel = grpc.secure_channel(target, self._creds, self._options)
        else:
            self._channel = grpc.insecure_channel(target, self._options)
        self._stub = moe_pb2_grpc.MoeServiceStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, fn, req, timeout):
        try:
            return fn(req, timeout=self._t(timeout), metadata=self._metadata)
        except grpc.RpcError as e:
            raise self._error(e) from None

    def forward(self, layer: int, x, *, routing=False, return_routing=None,
                timing: bool = False, dtype=None, output_dtype=None,
                timeout: Optional[float] = None, token_ids=None, token_types=None,
                router_logits=None, return_router_logits: bool = False,
                shared="add"):
        """y = MoE layer `layer` of x [N, H] (NumPy array or torch tensor),
        returned as the same kind, dtype and device; `.routing`/`.timing`
        are set when asked. `dtype` is the dtype on the wire (f32, bf16,
        f16; default: the input's). `token_ids`: one token id per row, which
        a hash-routed layer (in model_info().hash_layers) needs and other
        layers ignore. `token_types`: each row's modality (0 text, 1 image,
        2 video), which a layer with vision experts (in
        model_info().vision_layers) needs and other layers ignore; its
        routing reports a vision expert e as E + e.

        Caller routing: `routing=(expert_ids, weights)` ([N, k] arrays or
        tensors, k the layer's top_k, or a previous answer's `.routing`)
        replaces the service's gate: exactly these experts with these final
        weights. `router_logits` [N, E] (f32 or bf16) are scored instead of
        x·Wᵀ (not on hash-routed layers, not with `routing`).
        `return_routing=True` sets `.routing` (`routing=True`, a bool, still
        means the same). `return_router_logits=True` sets `.router_logits`
        [N, E] float32. `shared`: "add" (default, the layer's y), "separate"
        (y without the shared experts, their part in `.shared_output`) or
        "skip" (they are not computed)."""
        req, kind = _request(layer, x, routing=routing, return_routing=return_routing,
                             timing=timing, dtype=dtype, output_dtype=output_dtype,
                             token_ids=token_ids, token_types=token_types,
                             router_logits=router_logits,
                             return_router_logits=return_router_logits, shared=shared)
        resp = self._call(self._stub.Forward, req, timeout)
        return decode(resp, kind, req.return_routing, timing)

    def forward_many(self, requests: Iterable[Any], *, return_exceptions: bool = False,
                     timeout: Optional[float] = None) -> List[Any]:
        """Many forwards over one ForwardStream, answers in request order.
        Items: (layer, x) or dicts {layer, x, and forward()'s keywords}. A failed
        item raises its MoeError, or is returned as one with return_exceptions."""
        items = [_item(it) for it in requests]
        built = _build_many(items)
        try:
            responses = list(self._stub.ForwardStream(
                iter([r for r, _ in built]), timeout=self._t(timeout),
                metadata=self._metadata))
        except grpc.RpcError as e:
            raise self._error(e) from None
        return _collect(items, built, responses, return_exceptions)

    def model_info(self, timeout: Optional[float] = None) -> moe_pb2.ModelInfo:
        return self._call(self._stub.GetModelInfo, moe_pb2.GetModelInfoRequest(), timeout)

    def expert_stats(self, layer: int, reset: bool = False,
                     timeout: Optional[float] = None) -> moe_pb2.ExpertStats:
        return self._call(self._stub.GetExpertStats,
                          moe_pb2.GetExpertStatsRequest(layer=layer, reset=reset), timeout)

    def health(self, service: str = "", timeout: Optional[float] = None) -> bool:
        """True when the service (default: overall) is SERVING."""
        r = self._call(self._health.Check, health_pb2.HealthCheckRequest(service=service),
                       timeout)
        return r.status == health_pb2.HealthCheckResponse.SERVING


def _build_many(items):
    """(request, kind) of each forward_many item, request_id its index."""
    built = []
    for i, d in enumerate(items):
        kw = {k: v for k, v in d.items() if k not in ("layer", "x")}
        built.append(_request(d["layer"], d["x"], request_id=str(i), **kw))
    return built


def _collect(items, built, responses, return_exceptions):
    if len(responses) != len(built):
        raise MoeError(grpc.StatusCode.INTERNAL,
                       f"stream answered {len(responses)} of {len(built)} requests")
    out = []
    for d, (req, kind), resp in zip(items, built, responses):
        if resp.error_code != 0:
            err = MoeError.from_value(resp.error_code, resp.error_message)
            if not return_exceptions:
                raise err
            out.append(err)
        else:
            out.append(decode(resp, kind, req.return_routing, d["timing"]))
    return out


class AsyncMoeClient(_Base):
    """The same API on grpc.aio: every call is a coroutine. Create it inside
    the event loop that uses it; `async with` closes the channel."""

    def __init__(self, target: str, **kw):
        super().__init__(target, **kw)
        if self._creds is not None:
            self._channel = grpc.aio.secure_channel(target, self._creds, self._options)
        else:
            self._channel = grpc.aio.insecure_channel(target, self._options)
        self._stub = moe_pb2_grpc.MoeServiceStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def _call(self, fn, req, timeout):
        try:
            return await fn(req, timeout=self._t(timeout), metadata=self._metadata)
        except grpc.RpcError as e:
            raise self._error(e) from None

    async def forward(self, layer: int, x, *, routing=False, return_routing=None,
                      timing: bool = False, dtype=None, output_dtype=None,
                      timeout: Optional[float] = None, token_ids=None,
                      token_types=None, router_logits=None,
                      return_router_logits: bool = False, shared="add"):
        """MoeClient.forward's API and answer."""
        req, kind = _request(layer, x, routing=routing, return_routing=return_routing,
                             timing=timing, dtype=dtype, output_dtype=output_dtype,
                             token_ids=token_ids, token_types=token_types,
                             router_logits=router_logits,
                             return_router_logits=return_router_logits, shared=shared)
        resp = await self._call(self._stub.Forward, req, timeout)
        return decode(resp, kind, req.return_routing, timing)

    async def forward_many(self, requests: Iterable[Any], *,
                           return_exceptions: bool = False,
                           timeout: Optional[float] = None) -> List[Any]:
        items = [_item(it) for it in requests]
        built = _build_many(items)
        try:
            call = self._stub.ForwardStream(iter([r for r, _ in built]),
                                            timeout=self._t(timeout),
                                            metadata=self._metadata)
            responses = [r async for r in call]
        except grpc.RpcError as e:
            raise self._error(e) from None
        return _collect(items, built, responses, return_exceptions)

    async def model_info(self, timeout: Optional[float] = None) -> moe_pb2.ModelInfo:
        return await self._call(self._stub.GetModelInfo, moe_pb2.GetModelInfoRequest(),
                                timeout)

    async def expert_stats(self, layer: int, reset: bool = False,
                           timeout: Optional[float] = None) -> moe_pb2.ExpertStats:
        return await self._call(self._stub.GetExpertStats,
                                moe_pb2.GetExpertStatsRequest(layer=layer, reset=reset),
                                timeout)

    async def health(self, service: str = "", timeout: Optional[float] = None) -> bool:
        r = await self._call(self._health.Check,
                             health_pb2.HealthCheckRequest(service=service), timeout)
        return r.status == health_pb2.HealthCheckResponse.SERVING

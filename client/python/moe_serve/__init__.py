"""Python client of the distributed MoE layer service (moe.v1.MoeService).

    from moe_serve import MoeClient
    client = MoeClient("127.0.0.1:50051")
    y = client.forward(0, x)          # x: NumPy array or torch tensor [N, H]

`moe_serve.torch` turns the MoE blocks of a PyTorch model into remote ones.
"""

from ._client import AsyncMoeClient, MoeClient, MoeError
from ._tensors import MoeArray, Routing, Timing, WorkerTiming

__all__ = ["MoeClient", "AsyncMoeClient", "MoeError", "MoeArray", "Routing", "Timing",
           "WorkerTiming"]
__version__ = "0.1.0"

# Type stubs of the extension module aggswitch._core (python/aggswitch_core.cc).
import enum
from typing import Any, Optional, Sequence

class Transport(enum.Enum):
    UDP: int
    AF_XDP: int

class TaskInfo(enum.Enum):
    NONE: int
    IN_BAND: int
    ANNOUNCE: int

class FloatMode(enum.Enum):
    FIXED_POINT: int
    FLOAT: int
    ORDERED: int

class Handle:
    def wait(self, timeout: Optional[float] = None) -> Any: ...
    def done(self) -> bool: ...

class Options:
    def __init__(
        self,
        switches: Sequence[str],
        job: int,
        key: int,
        rank: int,
        world: int,
        *,
        transport: Transport = ...,
        interface: str = "",
        queue: int = 0,
        task_info: TaskInfo = ...,
        node_count: int = 1,
        float_mode: FloatMode = ...,
        headroom: Optional[int] = None,
        window: int = 128,
        mtu: int = 1500,
        max_chunk_elements: int = 0,
        reserve_missing_ids: int = 32,
        retransmit_timeout: float = 0.02,
        progress_timeout: float = 10.0,
        deadline: float = 0.0,
        resend_to_parameter_node: bool = False,
        verify: bool = False,
        first_seq: int = 0,
        bind: str = "",
    ) -> None: ...
    @property
    def job(self) -> int: ...
    @property
    def rank(self) -> int: ...
    @property
    def world(self) -> int: ...

class Client:
    def __init__(self, options: Options) -> None: ...
    def allreduce_async(self, buffer: Any, op: str = "sum") -> Handle: ...
    def allreduce_ptr(self, address: int, count: int, dtype: str, op: str, owner: Any) -> Handle: ...
    def chunk_elements(self, dtype: str) -> int: ...
    @property
    def local_port(self) -> int: ...
    @property
    def transport_description(self) -> str: ...
    @property
    def stats(self) -> dict: ...
    def close(self) -> None: ...

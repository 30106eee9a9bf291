# Type stubs of the extension module aggswitch._torch (python/aggswitch_torch.cc).
import torch.distributed

from aggswitch._core import Options

def new_process_group(
    rank: int, size: int, options: Options, gloo: torch.distributed.ProcessGroup
) -> torch.distributed.ProcessGroup: ...

# CUDA graphs and private pools of the stand-in PyTorch: CUDAGraph (a capture makes its blocks
# in the graph's private pool: its own, id (n, 0), or a shared one from graph_pool_handle(),
# id (0, n)), torch.cuda.graph (the capture as a context manager), and MemPool with
# use_mem_pool (a user-made pool, id (0, n)); ids counted as PyTorch counts them. A replay
# makes nothing: what the graph uses was fixed at capture.
from . import memory

_graph_ids = [0]
_handle_ids = [0]


def graph_pool_handle():
    _handle_ids[0] += 1
    return (0, _handle_ids[0])


class CUDAGraph:
    def __init__(self):
        self._pool = None
        self._captured = False
        self.replays = 0

    def capture_begin(self, pool=None, capture_error_mode="global"):
        if pool is None:
            _graph_ids[0] += 1
            pool = (_graph_ids[0], 0)
        self._pool = tuple(pool)
        self._before = memory._pool
        memory._pool = self._pool

    def capture_end(self):
        memory._pool = self._before
        self._captured = True

    def replay(self):
        self.replays += 1

    def pool(self):
        # As PyTorch's: only once a capture has ended.
        if not self._captured:
            raise RuntimeError("Called CUDAGraph::pool() without a preceding successful capture.")
        return self._pool


class graph:
    def __init__(self, cuda_graph, pool=None, stream=None, capture_error_mode="global"):
        self.cuda_graph = cuda_graph
        self.pool = () if pool is None else (pool,)

    def __enter__(self):
        self.cuda_graph.capture_begin(*self.pool)

    def __exit__(self, *exc):
        self.cuda_graph.capture_end()
        return False


class MemPool:
    def __init__(self):
        self.id = graph_pool_handle()


class use_mem_pool:
    def __init__(self, pool, device=None):
        self.pool = pool

    def __enter__(self):
        self.before, memory._pool = memory._pool, self.pool.id

    def __exit__(self, *exc):
        memory._pool = self.before
        return False

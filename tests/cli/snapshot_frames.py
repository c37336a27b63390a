"""A training step's memory snapshot (PyTorch 2.11's layout) with frames shaped as PyTorch records
them: its C++ frames (stacks="all": the caching allocator's malloc innermost, the autograd
engine's evaluate_function / thread_main for a backward, AccumulateGrad for a gradient) and its
Python frames (Module.to's _apply, Module._call_impl around a forward, torch/optim/sgd.py's step);
as stacks="python" records it (no C++ frames: the engine's thread has no frames at all) and as
context=None does (no frames). Live at the end: parameters 4 + 1 MiB, an input 2 MiB, a gradient
4 MiB, a momentum buffer 4 MiB; made and freed: activations 3 + 1 MiB (freed in the backward),
temporaries of 1 MiB in the forward, the backward and the step.

    python3 snapshot_frames.py OUT.pickle all|python|none"""
import pickle
import sys
MiB = 1 << 20
A = 0x7F0000000000
T = 1_700_000_000_000_000
P = "/usr/lib/python3/dist-packages/torch/"
U = "/home/user/train.py"
def py(f, l, n): return {"filename": f, "line": l, "name": n}
ALLOC = [py("??", 0, "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)"),
         py("/pytorch/c10/cuda/CUDACachingAllocator.cpp", 3843, "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc(void**, signed char, unsigned long, CUstream_st*)"),
         py("/pytorch/aten/src/ATen/EmptyTensor.cpp", 62, "at::detail::empty_generic(c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, c10::ScalarType, std::optional<c10::MemoryFormat>)")]
ENGINE = [py("/pytorch/torch/csrc/autograd/engine.cpp", 1082, "torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&, torch::autograd::Node*, torch::autograd::InputBuffer&, std::shared_ptr<torch::autograd::ReadyQueue> const&)"),
          py("/pytorch/torch/csrc/autograd/engine.cpp", 614, "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)"),
          py("/pytorch/torch/csrc/autograd/python_engine.cpp", 95, "torch::autograd::python::PythonEngine::thread_init(int, std::shared_ptr<torch::autograd::ReadyQueue> const&, bool)")]
def stacks(python_only):
    cpp = lambda fr: [] if python_only else fr
    return {
      "param": cpp(ALLOC) + [py(P + "nn/modules/module.py", 1341, "convert"), py(P + "nn/modules/module.py", 930, "_apply"),
                             py(P + "nn/modules/module.py", 1355, "to"), py(U, 30, "<module>")],
      "input": cpp(ALLOC) + [py(U, 35, "<module>")],
      "fwd": cpp(ALLOC) + [py(P + "nn/modules/linear.py", 125, "forward"), py(P + "nn/modules/module.py", 1762, "_call_impl"),
                           py(P + "nn/modules/module.py", 1751, "_wrapped_call_impl"), py(U, 20, "forward"),
                           py(P + "nn/modules/module.py", 1762, "_call_impl"), py(P + "nn/modules/module.py", 1751, "_wrapped_call_impl"),
                           py(U, 36, "<module>")],
      "bwd": [] if python_only else ALLOC + [py("/pytorch/torch/csrc/autograd/generated/Functions.cpp", 2410, "torch::autograd::generated::AddmmBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)")] + ENGINE,
      "grad": [] if python_only else ALLOC + [py("/pytorch/torch/csrc/autograd/functions/accumulate_grad.cpp", 70, "torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)")] + ENGINE,
      "step": cpp(ALLOC) + [py(P + "optim/sgd.py", 349, "_single_tensor_sgd"), py(P + "optim/sgd.py", 279, "sgd"),
                            py(P + "optim/sgd.py", 125, "step"), py(P + "optim/optimizer.py", 485, "wrapper"), py(U, 38, "<module>")],
    }
def train(mode="all"):
    st = stacks(mode == "python")
    if mode == "none":
        st = {k: [] for k in st}
    tr = []
    def e(action, off, size, t, kind):
        tr.append({"action": action, "addr": A + off * MiB, "size": size * MiB, "stream": 0, "time_us": T + t,
                   "frames": st[kind], "compile_context": "N/A", "user_metadata": ""})
    e("segment_alloc", 0, 32, 0, "param")
    e("alloc", 0, 4, 1, "param"); e("alloc", 4, 1, 2, "param")
    e("alloc", 5, 2, 3, "input")
    e("alloc", 7, 3, 10, "fwd"); e("alloc", 10, 1, 11, "fwd"); e("free_completed", 10, 1, 12, "fwd")
    e("alloc", 11, 1, 13, "fwd")
    e("alloc", 12, 1, 20, "bwd"); e("free_completed", 12, 1, 21, "bwd")
    e("alloc", 13, 4, 22, "grad"); e("free_completed", 7, 3, 23, "bwd"); e("free_completed", 11, 1, 24, "bwd")
    e("alloc", 17, 4, 30, "step"); e("alloc", 21, 1, 31, "step"); e("free_completed", 21, 1, 32, "step")
    live = [(0, 4, "param"), (4, 1, "param"), (5, 2, "input"), (13, 4, "grad"), (17, 4, "step")]
    blocks, at = [], 0
    for off, size, kind in live:
        if off > at: blocks.append({"address": A + at * MiB, "size": (off - at) * MiB, "requested_size": 0, "state": "inactive", "frames": []})
        blocks.append({"address": A + off * MiB, "size": size * MiB, "requested_size": size * MiB, "state": "active_allocated", "frames": st[kind]})
        at = off + size
    blocks.append({"address": A + at * MiB, "size": (32 - at) * MiB, "requested_size": 0, "state": "inactive", "frames": []})
    segs = [{"device": 0, "address": A, "total_size": 32 * MiB, "allocated_size": 15 * MiB, "active_size": 15 * MiB,
             "requested_size": 15 * MiB, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
             "is_expandable": False, "frames": st["param"], "blocks": blocks}]
    return {"segments": segs, "device_traces": [tr], "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""},
            "external_annotations": []}
if __name__ == "__main__":
    with open(sys.argv[1], "wb") as f: pickle.dump(train(sys.argv[2]), f, protocol=4)

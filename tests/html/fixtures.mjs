// Report fixtures with the shapes of real workloads, for the HTML tests: a PyTorch ResNet-50
// that died of out-of-memory on an H200 under a per-process memory fraction (demangled kernel
// names of several hundred characters, deep Python stacks through CPython's own frames, the
// analysis fields: diagnosis, categories, modules, phases), a native CUDA program's OOM with the
// diagnosis the collector writes for it (no categories), and a big run (tens of thousands of
// blocks, a long timeline). Deterministic: no randomness, so the tests can assert exact figures.
const MiB = 1024 ** 2, GiB = 1024 ** 3;

// A demangled CUDA kernel name as PyTorch's builds have them: hundreds of characters.
// Odd ones as PyTorch's clamp kernel is named on an H200: lambdas with a call operator in the
// template arguments.
export const longKernel = (i) => i % 2 ?
  `void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#${i}}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#${i}}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>)` :
  `void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#${i + 1}}>(int, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#${i + 1}})`;

// Each frame with the class the collector gives it (collector/analysis/stacks.h) and, for
// PyTorch's native frames that call one, the operator.
const py = (fn, file, line) => ({ function: fn, file, line, python: true, class: "python" });
const nat = (fn, module, cls = "native", offset = "0x1a2b") => ({ function: fn, file: "", line: 0, module, offset, class: cls });
// CPython's and the C runtime's start-up frames; PyTorch's native frames.
const inat = (fn, module) => nat(fn, module, "interpreter");
const tnat = (fn, module, operator) => ({ ...nat(fn, module, "torch_native"), ...(operator ? { operator } : {}) });
// The native frames CPython puts between two Python frames, and those of the process start.
const cpython = () => [
  inat("_PyObject_MakeTpCall", "/usr/bin/python3.12"), inat("_PyEval_EvalFrameDefault", "/usr/bin/python3.12"),
  inat("_PyObject_Call_Prepend", "/usr/bin/python3.12"), inat("slot_tp_call", "/usr/bin/python3.12"),
  inat("_PyFunction_Vectorcall", "/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0")];
const start = () => [inat("Py_BytesMain", "/usr/bin/python3.12"), inat("__libc_start_call_main", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
  inat("__libc_start_main", "/usr/lib/x86_64-linux-gnu/libc.so.6"), inat("_start", "/usr/bin/python3.12")];
const libtorch = "/opt/venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so";
const libc10 = "/opt/venv/lib/python3.12/site-packages/torch/lib/libc10_cuda.so";
const nnmod = "/opt/venv/lib/python3.12/site-packages/torch/nn/modules/module.py";
// nn.Module's call machinery.
const callImpl = () => ({ ...py("_call_impl", nnmod, 1762), class: "module_call" });

// PyTorch's dispatcher between a Python call and the kernel that allocates, innermost first, as
// an H200 run's stacks have it: each operator's wrapper, the boxed kernel functor, at::_ops::X::call
// (redispatch through autograd's VariableType), up to the Python binding.
const libtorchCpu = "/opt/venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so";
const libtorchPy = "/opt/venv/lib/python3.12/site-packages/torch/lib/libtorch_python.so";
const functor = (sig) => tnat(`c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<c10::CompileTimeFunctionPointer<${sig}>, at::Tensor, c10::guts::typelist::typelist<at::Tensor const&> >, ${sig}>::call(c10::OperatorKernel*, c10::DispatchKeySet, at::Tensor const&)`, libtorchCpu);
const dispatcher = (bn) => bn ? [
  tnat("at::(anonymous namespace)::(anonymous namespace)::wrapper_CUDA__cudnn_batch_norm(at::Tensor const&, at::Tensor const&)", libtorch), functor("at::Tensor (at::Tensor const&)"),
  tnat("at::_ops::cudnn_batch_norm::call(at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&, bool, double, double)", libtorchCpu, "aten::cudnn_batch_norm"),
  tnat("at::native::_batch_norm_impl_index(at::Tensor const&, std::optional<at::Tensor> const&, bool, double, double, bool)", libtorchCpu), functor("at::Tensor (at::Tensor const&)"),
  tnat("at::_ops::_batch_norm_impl_index::call(at::Tensor const&, std::optional<at::Tensor> const&, bool, double, double, bool)", libtorchCpu, "aten::_batch_norm_impl_index"),
  tnat("at::native::batch_norm(at::Tensor const&, std::optional<at::Tensor> const&, bool, double, double, bool)", libtorchCpu), functor("at::Tensor (at::Tensor const&)"),
  tnat("at::_ops::batch_norm::call(at::Tensor const&, std::optional<at::Tensor> const&, bool, double, double, bool)", libtorchCpu, "aten::batch_norm"),
  tnat("torch::autograd::THPVariable_batch_norm(_object*, _object*, _object*)", libtorchPy, "aten::batch_norm")] : [
  tnat("at::(anonymous namespace)::(anonymous namespace)::wrapper_CUDA__cudnn_convolution(at::Tensor const&, at::Tensor const&, c10::ArrayRef<c10::SymInt>)", libtorch), functor("at::Tensor (at::Tensor const&, at::Tensor const&)"),
  tnat("at::_ops::cudnn_convolution::call(at::Tensor const&, at::Tensor const&, c10::ArrayRef<c10::SymInt>, c10::ArrayRef<c10::SymInt>, c10::ArrayRef<c10::SymInt>, c10::SymInt, bool, bool, bool)", libtorchCpu, "aten::cudnn_convolution"),
  tnat("at::native::_convolution(at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&, c10::ArrayRef<long>)", libtorchCpu), functor("at::Tensor (at::Tensor const&, at::Tensor const&)"),
  tnat("at::_ops::_convolution::call(at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&, c10::ArrayRef<c10::SymInt>)", libtorchCpu, "aten::_convolution"),
  tnat("at::native::convolution(at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&, c10::ArrayRef<long>)", libtorchCpu), functor("at::Tensor (c10::DispatchKeySet, at::Tensor const&)"),
  tnat("at::_ops::convolution::redispatch(c10::DispatchKeySet, at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&)", libtorchCpu, "aten::convolution"),
  tnat("torch::autograd::VariableType::(anonymous namespace)::convolution(c10::DispatchKeySet, at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&)", libtorchCpu), functor("at::Tensor (c10::DispatchKeySet, at::Tensor const&)"),
  tnat("at::_ops::convolution::call(at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&, c10::ArrayRef<c10::SymInt>)", libtorchCpu, "aten::convolution"),
  tnat("at::native::conv2d_symint(at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&, c10::ArrayRef<c10::SymInt>)", libtorchCpu), functor("at::Tensor (at::Tensor const&, at::Tensor const&)"),
  tnat("at::_ops::conv2d::call(at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&, c10::ArrayRef<c10::SymInt>)", libtorchCpu, "aten::conv2d"),
  tnat("torch::autograd::THPVariable_conv2d(_object*, _object*, _object*)", libtorchPy, "aten::conv2d")];

// A block's stack, innermost first as the report lists frames: the caching allocator under a
// convolution of a torchvision Bottleneck, through PyTorch's dispatcher, called through
// nn.Module's machinery and CPython.
const convLine = { conv1: 146, conv2: 150, conv3: 154, bn3: 155 };
const resnet = "/opt/venv/lib/python3.12/site-packages/torchvision/models/resnet.py";
function torchStack(layer, conv) {
  return [
    { function: "cuMemAlloc_v2", file: "", line: 0, module: "/usr/lib/x86_64-linux-gnu/libcuda.so.1", offset: "0x2f1c0", internal: true, class: "internal" },
    tnat("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)", libc10),
    tnat(conv === "bn3" ? "at::native::cudnn_batch_norm(at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&, std::optional<at::Tensor> const&, std::optional<at::Tensor> const&, bool, double, double)"
      : "at::native::cudnn_convolution(at::Tensor const&, at::Tensor const&, c10::ArrayRef<long>, c10::ArrayRef<long>, c10::ArrayRef<long>, long, bool, bool, bool)", libtorch),
    ...dispatcher(conv === "bn3"), ...cpython(),
    py(conv === "bn3" ? "batch_norm" : "_conv_forward", conv === "bn3" ? "/opt/venv/lib/python3.12/site-packages/torch/nn/functional.py" : "/opt/venv/lib/python3.12/site-packages/torch/nn/modules/conv.py", conv === "bn3" ? 2812 : 549),
    ...cpython(), callImpl(), ...cpython(),
    py("forward", resnet, convLine[conv]),
    ...cpython(), callImpl(), ...cpython(),
    py("forward", "/opt/venv/lib/python3.12/site-packages/torch/nn/modules/container.py", 250),
    ...cpython(), callImpl(), ...cpython(),
    py("_forward_impl", resnet, 272 + layer),
    ...cpython(), py("forward", resnet, 285), ...cpython(), callImpl(), ...cpython(),
    py("train_step", "/work/resnet/train.py", 88),
    ...cpython(), py("main", "/work/resnet/train.py", 131),
    ...cpython(), py("<module>", "/work/resnet/train.py", 140),
    ...start()];
}
// A tensor made by a factory (torch.empty, torch.randn, .to("cuda")) outside the modules.
const shortStack = (fn, file, line) => [tnat("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)", libc10),
  tnat("at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)", libtorch), functor("at::Tensor (c10::ArrayRef<c10::SymInt>)"),
  tnat("at::_ops::empty_memory_format::call(c10::ArrayRef<c10::SymInt>, std::optional<c10::ScalarType>)", libtorchCpu, "aten::empty_memory_format"),
  tnat("torch::autograd::THPVariable_empty(_object*, _object*, _object*)", libtorchPy, "aten::empty"),
  ...cpython(), py(fn, file, line), ...cpython(), py("main", "/work/resnet/train.py", 131), ...cpython(), py("<module>", "/work/resnet/train.py", 140), ...start()];

const cats = ["parameters", "gradients", "optimizer_state", "activations", "temporaries", "inputs", "workspaces",
  "communication", "private_pool", "allocator_cache", "context_other", "unclassified"];

// A training run: `iters` iterations of forward, backward and optimizer, activations growing in
// forward and freed in backward; the last forward dies of OOM (or, with oom false, completes).
function trainTimeline(iters, perIter, oom) {
  const points = [], phases = [];
  const params = 97 * MiB, grads = 97 * MiB, opt = 194 * MiB, inputs = 588 * MiB;
  let t = 1.2e9;
  let act = 0;
  const row = (o) => [Math.round(t), params, o.grads, o.opt, Math.round(o.act), o.tmp, inputs, 384 * MiB, 0, 128 * MiB, o.cache, 0, o.uncl];
  for (let it = 0; it < iters; it++) {
    const f0 = t;
    const last = oom && it === iters - 1;
    const steps = last ? perIter - 2 : perIter;
    for (let s = 0; s < steps; s++) { act += (last ? 1.12 : 1) * 11.5 * GiB / perIter; t += 4e6; points.push(row({ grads: it ? grads : 0, opt: it ? opt : 0, act, tmp: 256 * MiB, cache: 1.25 * GiB, uncl: 40 * MiB })); }
    phases.push({ phase: "forward", iteration: it, start_ns: Math.round(f0), end_ns: Math.round(t) });
    if (last) break;
    const b0 = t;
    for (let s = 0; s < perIter; s++) { act -= 11.5 * GiB / perIter; t += 6e6; points.push(row({ grads, opt: it ? opt : 0, act: Math.max(0, act), tmp: 512 * MiB, cache: 1.25 * GiB, uncl: 40 * MiB })); }
    act = 0;
    phases.push({ phase: "backward", iteration: it, start_ns: Math.round(b0), end_ns: Math.round(t) });
    const o0 = t; t += 3e6; points.push(row({ grads, opt, act: 0, tmp: 64 * MiB, cache: 1.5 * GiB, uncl: 40 * MiB }));
    phases.push({ phase: "optimizer", iteration: it, start_ns: Math.round(o0), end_ns: Math.round(t) });
  }
  return { points, phases, end: t };
}

export function torchOom() {
  const deviceTotal = 143771 * MiB;
  const limit = 16 * GiB;
  const tl = trainTimeline(4, 40, true);
  const oomAt = tl.end + 2.5e6;
  const lastRow = tl.points[tl.points.length - 1];
  const liveAt = lastRow.slice(1).reduce((s, v) => s + v, 0);
  const atPeak = Object.fromEntries(cats.map((c, i) => [c, lastRow[i + 1]]));
  // The activations by module (ResNet-50's bottlenecks), summing to the activations at the peak.
  const layers = [[1, 3], [2, 4], [3, 6], [4, 3]];
  const units = [];
  for (const [layer, blocks] of layers)
    for (let b = 0; b < blocks; b++)
      for (const conv of ["conv1", "conv2", "conv3", "bn3"]) units.push({ layer, b, conv, w: (conv === "bn3" ? 1 : 2.5) * (layer === 3 ? 1.4 : 1) });
  const wsum = units.reduce((s, u) => s + u.w, 0);
  let given = 0;
  const modules = [], stacks = [], largest = [], bySite = new Map(), blocks = [];
  units.forEach((u, k) => {
    const bytes = k === units.length - 1 ? atPeak.activations - given : Math.round(atPeak.activations * u.w / wsum / MiB) * MiB;
    given += bytes;
    const stack = torchStack(u.layer, u.conv);
    // As the collector writes a Python site: the function and its file's whole path.
    const site = `forward (${resnet}:${convLine[u.conv]})`;
    modules.push({ module: `layer${u.layer}.${u.b}.${u.conv}`, bytes, category: "activations", site });
    // PyTorch's own blocks: this module's output, made in the forward that train.py:88 called.
    blocks.push({ bytes, address: 0x7f0000000000 + k * 0x10000000, category: "activations", module: `layer${u.layer}.${u.b}.${u.conv}`,
      site: "/work/resnet/train.py:88", phase: "forward", iteration: 3, what: `layer${u.layer}.${u.b}.${u.conv} (${u.conv === "bn3" ? "BatchNorm2d" : "Conv2d"}) at /work/resnet/train.py:88` });
    stacks.push({ bytes, count: 4, stack });
    const g = bySite.get(site) || { site, bytes: 0, count: 0, library: "libtorch_cuda.so", stack, sizes: [] };
    g.bytes += bytes; g.count += 4;
    bySite.set(site, g);
    largest.push({ address: "0x7f" + (1000 + k).toString(16), bytes, api: "cudaMalloc", kind: "device", time_ns: 1.5e9 + k * 1e6, thread: 4242, site, library: "libtorch_cuda.so",
      last_kernel: longKernel(k), stack, phase: "forward" });
  });
  // The other categories, each at its own Python line.
  const others = [["inputs", "forward (train.py:80)", "/work/resnet/train.py", 80], ["optimizer_state", "_init_group (adam.py:155)", "/opt/venv/lib/python3.12/site-packages/torch/optim/adam.py", 155],
    ["parameters", "_apply (module.py:942)", nnmod, 942], ["gradients", "backward (graph.py:825)", "/opt/venv/lib/python3.12/site-packages/torch/autograd/graph.py", 825],
    ["workspaces", "getCUDABlasLtWorkspace (CUDABlas.cpp:212)", null, 0]];
  for (const [cat, site, file, line] of others) {
    // cuBLASLt's workspace, made through the caching allocator at the first matmul.
    const stack = file ? shortStack(site.split(" ")[0], file, line) : [tnat("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)", libc10),
      tnat("at::cuda::getCUDABlasLtWorkspace()", libtorch), tnat("at::native::(anonymous namespace)::addmm_out_cuda_impl(at::Tensor&, at::Tensor const&, at::Tensor const&)", libtorch),
      functor("at::Tensor (at::Tensor const&, at::Tensor const&)"), tnat("at::_ops::addmm::call(at::Tensor const&, at::Tensor const&, at::Tensor const&)", libtorchCpu, "aten::addmm"),
      tnat("torch::autograd::THPVariable_addmm(_object*, _object*, _object*)", libtorchPy, "aten::addmm"), ...cpython(), py("forward", "/opt/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py", 134),
      ...cpython(), py("main", "/work/resnet/train.py", 131), ...start()];
    bySite.set(site, { site, bytes: atPeak[cat], count: 2, library: "libtorch_cuda.so", stack });
    stacks.push({ bytes: atPeak[cat], count: 2, stack });
  }
  // Temporaries: many small sites (the long tail of a real run).
  for (let j = 0; j < 32; j++) {
    const site = `forward (resnet.py:${160 + j})`, bytes = atPeak.temporaries / 32;
    const stack = shortStack("forward", resnet, 160 + j);
    bySite.set(site, { site, bytes, count: 1, library: "libtorch_cuda.so", stack });
    stacks.push({ bytes, count: 1, stack });
  }
  const sites = [...bySite.values()].sort((a, b) => b.bytes - a.bytes);
  // The model's state by name, at the lines that made it.
  blocks.push({ bytes: atPeak.parameters, address: 0x7e0000000000, category: "parameters", name: "fc.weight", what: "parameter fc.weight at /work/resnet/train.py:60", site: "/work/resnet/train.py:60" },
    { bytes: atPeak.optimizer_state, address: 0x7e1000000000, category: "optimizer_state", name: "fc.weight.exp_avg_sq", what: "optimizer state fc.weight.exp_avg_sq at /work/resnet/train.py:92", site: "/work/resnet/train.py:92", phase: "optimizer", iteration: 2 });
  blocks.sort((a, b) => b.bytes - a.bytes);
  const byLine = [{ site: "/work/resnet/train.py:88", bytes: atPeak.activations, count: units.length, categories: { activations: atPeak.activations }, module: "layer3.0.conv2" },
    { site: "/work/resnet/train.py:92", bytes: atPeak.optimizer_state, count: 161, categories: { optimizer_state: atPeak.optimizer_state } },
    { site: "/work/resnet/train.py:60", bytes: atPeak.parameters, count: 161, categories: { parameters: atPeak.parameters } }];
  largest.sort((a, b) => b.bytes - a.bytes);
  const atExit = { ...atPeak };
  const totalPoints = tl.points.map((p) => [p[0], p.slice(1).reduce((s, v) => s + v, 0)]);
  const requested = 2 * GiB;
  const oom = {
    device: 0, pid: 31337, thread: 4242, time_ns: oomAt, api: "pool PyTorch caching allocator", error: "CUDA_ERROR_OUT_OF_MEMORY", requested_bytes: requested,
    live_bytes: liveAt, free_bytes: Math.round(deviceTotal - liveAt - 1.1 * GiB), total_bytes: deviceTotal, held_by_others_bytes: Math.round(1.1 * GiB),
    fatal: true, phase: "forward", module: "layer4.0.conv2", iteration: 3, python_site: `${resnet}:150 in forward`,
    site: "forward (resnet.py:150)", library: "libtorch_cuda.so", stack: torchStack(4, "conv2"),
    allocator: { pool: "PyTorch caching allocator (large pool)", requested_bytes: requested },
    live_by_site: sites, live_by_library: [{ library: "libtorch_cuda.so", bytes: liveAt - atPeak.unclassified - atPeak.allocator_cache, count: 412 }, { library: "libcublasLt.so.12", bytes: atPeak.unclassified, count: 3 }],
    // PyTorch's memory at the OOM by category, as the collector writes it.
    categories: { ...atPeak },
    last_kernel: longKernel(3),
    // The driver's largest allocations live when it asked (its segments), as at the peak.
    largest_live: largest.slice(0, 5),
    exception: { type: "torch.OutOfMemoryError", message: "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.80 GiB of which 122.47 GiB is free. 16.00 GiB allowed" },
    findings: [{ kind: "near_capacity", score: 0.6, rank: 1, title: `This process held ${(liveAt / GiB).toFixed(2)} GiB when it asked for 2.00 GiB`,
      evidence: { live_bytes: liveAt, total_bytes: deviceTotal, requested_bytes: requested },
      evidence_shown: [{ label: "live in this process", bytes: liveAt }, { label: "requested", bytes: requested }, { label: "the GPU's capacity", bytes: deviceTotal },
        { label: "free blocks", count: 9 }, { label: "external fragmentation", fraction: 0.25 }, { label: "largest live sites", sites: [{ name: `forward (${resnet}:150)`, bytes: GiB }] }],
      suggestion: "Use less memory at the peak: activation checkpointing, a smaller batch (with gradient accumulation), or mixed precision (bf16/fp16)." }],
  };
  const actAt = atPeak.activations;
  return {
    schema: "vramtrace.report/1",
    // Its first CUDA work 1.2 s after the start (imports before it), where the timeline begins.
    run: { command: ["python3", "train.py", "--arch", "resnet50", "--batch-size", "512", "--amp", "off"], duration_ns: oomAt + 40e6, timeline_end_ns: oomAt + 40e6, cuda_start_ns: 1.2e9, complete: true, stand_in: false },
    diagnosis: {
      verdict: "oom", oom_index: 0, fatal: true, asked_bytes: requested, ooms_on_device: 1, device: 0, pid: 31337, held_bytes: liveAt, requested_bytes: requested,
      limit: { bytes: limit, kind: "per_process_fraction", title: "PyTorch's per-process memory fraction (16.00 GiB)" },
      headroom_bytes: limit - liveAt,
      cause: { kind: "activations", title: "Activations of the forward pass filled the memory: the batch of 512 keeps every layer's output for backward.",
        evidence: [{ label: "activations live", bytes: actAt }, { label: "of the limit", value: `${Math.round(100 * actAt / limit)} %` },
          { label: "largest module", value: "layer3 (6 blocks)" }, { label: "request", bytes: requested }, { label: "iteration", value: "3, forward" }] },
      remedies: [
        { kind: "mixed_precision", title: "Train in bf16 with autocast", saves_bytes: Math.round(actAt / 2), assumption: "activations halve in bf16", how: "with torch.autocast('cuda', dtype=torch.bfloat16):" },
        { kind: "activation_checkpointing", title: "Checkpoint layer3 and layer4", saves_bytes: Math.round(actAt * 0.6), assumption: "recomputes their forward in backward", how: "torch.utils.checkpoint.checkpoint_sequential(model.layer3, 2, x)" },
        { kind: "smaller_batch", title: "Halve the batch (512 → 256) and accumulate gradients over 2 steps", saves_bytes: Math.round(actAt / 2), assumption: "activations scale with the batch", how: "--batch-size 256 --accumulate 2" },
        { kind: "expandable_segments", title: "Let the caching allocator grow segments in place", saves_bytes: Math.round(1.25 * GiB), assumption: "the cached, free blocks become usable", how: "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" },
      ],
      recovered_ooms: 0, fatal_ooms: 1,
    },
    devices: [{
      index: 0, host: "gpu-node-07", name: "NVIDIA H200", total_bytes: deviceTotal,
      apis: { cuMemAlloc: { calls: 82, failed: 1, bytes: 8745438728, freed: 3 } },
      // The collector's levels: 15.23 GiB of the 16.00 GiB limit is past 90 %; the limit within 4x.
      limit_in_chart: true,
      peak: { bytes: liveAt, time_ns: lastRow[0], headroom_level: "over", phase: "forward", by_module: modules, by_site: sites.map(({ stack, ...s }) => s), blocks: blocks.slice(0, 50), by_line: byLine,
        // The tensors the hook named, as the collector writes them (its shape as "AxB"; the
        // largest of them, named_tensors counting all).
        named_tensors: 212,
        tensors: [{ name: "layer4.2.conv3.weight", kind: "param", category: "parameters", bytes: 4 * MiB, shape: "2048x512x1x1", dtype: "float32" },
          { name: "fc.weight", kind: "param", category: "parameters", bytes: 8 * MiB, shape: "1000x2048", dtype: "float32" },
          { name: "fc.weight.exp_avg", kind: "optimizer_state", category: "optimizer_state", bytes: 8 * MiB, shape: "1000x2048", dtype: "float32" }],
        by_top_module: [{ module: "layer3", bytes: atPeak.activations }, { module: "fc", bytes: atPeak.parameters }] },
      timeline: { points: totalPoints },
      // The collector's titles, which the page shows (a key's words only without them).
      categories: { order: cats, at_peak: atPeak, at_exit: atExit, timeline: { columns: ["time_ns", ...cats], points: tl.points },
        titles: { allocator_cache: "allocator cache (reserved, free)", inputs: "inputs and data", workspaces: "library workspaces", optimizer_state: "optimizer state" },
        note: "40.00 MiB unclassified: blocks allocated outside PyTorch's allocator trace (cuBLAS workspaces).",
        private_pools: [{ pool_id: [1, 0], cuda_graph: true, segments: 3, bytes: 96 * MiB, in_use_bytes: 80 * MiB },
          { pool_id: [0, 1], cuda_graph: false, segments: 1, bytes: 32 * MiB, in_use_bytes: 0 }] },
      phases: tl.phases,
    }],
    processes: [{
      pid: 31337, host: "gpu-node-07", exe: "/usr/bin/python3.12", cmdline: ["/usr/bin/python3.12", "train.py", "--arch", "resnet50", "--batch-size", "512"],
      clean_exit: false, died_of_oom: true, exit_code: 1, events: 184223, dropped_events: 0, profiled: true, torch_allocator_trace: { merged: true },
      launches: { recorded: true },
      devices: [{ index: 0, peak: { bytes: liveAt, by_site: sites, by_library: oom.live_by_library, by_stack: stacks, largest: largest.slice(0, 30), blocks: blocks.slice(0, 50), by_line: byLine },
        launches: { top: Array.from({ length: 12 }, (_, i) => ({ name: longKernel(i), launches: 20000 - i * 1000 })) },
        // The allocator's free memory over time: 3 buckets, its largest free block below it.
        allocator: { now: { reserved_bytes: 14 * GiB, in_use_bytes: 12 * GiB, free_bytes: 2 * GiB, free_blocks: 9, largest_free_block_bytes: GiB, external_fragmentation: 0.5 },
          free_timeline: { bucket_ns: 1e8, columns: ["time_ns", "max_bytes", "last_bytes", "min_bytes", "max_time_ns", "min_time_ns"], points: [[1.3e9, GiB, GiB, GiB, 1.3e9, 1.3e9], [1.4e9, 2 * GiB, 2 * GiB, GiB, 1.4e9, 1.4e9], [1.5e9, 2 * GiB, 2 * GiB, 2 * GiB, 1.5e9, 1.5e9]] },
          largest_free_timeline: { bucket_ns: 1e8, columns: ["time_ns", "max_bytes", "last_bytes", "min_bytes", "max_time_ns", "min_time_ns"], points: [[1.3e9, GiB, GiB, GiB, 1.3e9, 1.3e9], [1.4e9, GiB, GiB, GiB, 1.4e9, 1.4e9], [1.5e9, GiB, GiB, GiB, 1.5e9, 1.5e9]] }, pools: [] } }],
      iterations: { count: 4, source: "PyTorch optimizer steps" },
    }],
    oom: [oom],
    // The process died: what it held then is what was live at its death, not leaks.
    leaks: [],
    live_at_death: [{ device: 0, pid: 31337, site: sites[0].site, library: "libtorch_cuda.so", bytes: liveAt, count: 421, sizes: [{ bytes: 64 * MiB, count: 200 }], stack: sites[0].stack }],
    growth: [], retained: [], ranks: [],
  };
}

// A native CUDA program's OOM, with no categories and an OOM that lacks the device's total
// (the page takes the device's own): the collector's diagnosis, findings and remedies are in
// CUDA's terms, never PyTorch's.
export function nativeOom() {
  const total = 80 * GiB;
  const points = [];
  for (let i = 0; i <= 50; i++) points.push([i * 20e6, Math.min(i, 38) * 2 * GiB]);
  const stack = [nat("cudaMalloc", "/usr/local/cuda/lib64/libcudart.so.13"), nat("Solver::allocate_workspace(unsigned long)", "/opt/solver/bin/solver"),
    nat("main", "/opt/solver/bin/solver"), inat("__libc_start_call_main", "/usr/lib/x86_64-linux-gnu/libc.so.6"), inat("__libc_start_main", "/usr/lib/x86_64-linux-gnu/libc.so.6"), inat("_start", "/opt/solver/bin/solver")];
  const live = 76 * GiB;
  const site = "Solver::allocate_workspace(unsigned long) (solver.cu:88)";
  const growthTitle = `Live memory grew by 2.00 GiB per iteration since iteration 0, led by ${site}`;
  return {
    schema: "vramtrace.report/1",
    run: { command: ["/opt/solver/bin/solver", "--grid", "4096"], duration_ns: 1.25e9, complete: true },
    // As run_diagnosis.cpp writes it for a native program: the growth's remedy first, then the
    // working set cut to the device (82 GiB needed of 80 GiB).
    diagnosis: {
      verdict: "oom", fatal_ooms: 1, recovered_ooms: 0, oom_index: 0, fatal: true, asked_bytes: 6 * GiB, ooms_on_device: 1, device: 0, pid: 777,
      limit: { bytes: total, kind: "device", title: "the GPU's capacity (80.00 GiB)" },
      held_bytes: live, requested_bytes: 6 * GiB, headroom_bytes: total - live,
      cause: { kind: "growth", title: growthTitle, evidence: [{ label: "growth per iteration", bytes: 2 * GiB }, { label: "grown in all", bytes: live }] },
      growth: { kind: "growth", bytes_per_iteration: 2 * GiB, kept_bytes: live },
      remedies: [
        { kind: "free_per_iteration", title: `Free or reuse the memory allocated at ${site} each iteration`, saves_bytes: live,
          assumption: "it kept 2.00 GiB per iteration that no later iteration freed", how: "cudaFree (or cudaFreeAsync) it when the iteration is done, or allocate one buffer before the loop and reuse it",
          predicted_peak_bytes: 6 * GiB },
        { kind: "smaller_working_set", title: "Use a smaller working set: process the data in chunks, or keep fewer buffers live at once", saves_bytes: 2 * GiB,
          assumption: "what the program held with its last request exceeded the limit by this much: at least that must go for it to fit", how: "split the largest buffers (or the batch) into chunks processed in turn",
          predicted_peak_bytes: total, predicted_peak_is_upper_bound: true, leaves_growth: true },
      ],
    },
    devices: [{ index: 0, name: "NVIDIA H100 80GB HBM3", total_bytes: total, limit_in_chart: true, peak: { bytes: live, time_ns: 0.76e9, headroom_level: "over", by_site: [{ site: "Solver::allocate_workspace(unsigned long) (solver.cu:88)", bytes: live, count: 38 }] }, timeline: { points } }],
    processes: [{ pid: 777, exe: "/opt/solver/bin/solver", cmdline: ["/opt/solver/bin/solver", "--grid", "4096"], clean_exit: false, died_of_oom: true, exit_code: 134, events: 120, dropped_events: 0,
      // What the library said of itself, and the allocations refused other than for memory.
      notices: ["CUPTI: 3 activity records dropped"], failed_allocations: [{ error: "CUDA error 1 (invalid value)", count: 2 }],
      devices: [{ index: 0, peak: { by_site: [{ site: "Solver::allocate_workspace(unsigned long) (solver.cu:88)", bytes: live, count: 38, library: "solver", stack }], by_library: [{ library: "solver", bytes: live, count: 38 }], largest: [] } }] }],
    oom: [{ device: 0, pid: 777, thread: 777, time_ns: 1.2e9, api: "cudaMalloc", requested_bytes: 6 * GiB, live_bytes: live, free_bytes: 3.5 * GiB, fatal: true,
      site: "Solver::allocate_workspace(unsigned long) (solver.cu:88)", stack, live_by_site: [{ site: "Solver::allocate_workspace(unsigned long) (solver.cu:88)", bytes: live, count: 38 }],
      // The findings' advice as oom_findings.cpp words it for a program without PyTorch.
      findings: [{ kind: "growth", score: 0.85, title: growthTitle,
        evidence: { bytes_per_iteration: 2 * GiB, grown_bytes: live, iterations: 38, since_ns: 482735 },
        suggestion: "Memory is kept across iterations: free (cudaFree/cudaFreeAsync) what each iteration allocates before the next one, or reuse one buffer sized for the largest iteration." },
      { kind: "near_capacity", score: 0.6, title: "This process held 76.00 GiB (95% of the GPU) when it asked for 6.00 GiB",
        evidence: { live_bytes: live, total_bytes: total, requested_bytes: 6 * GiB },
        suggestion: "Use less memory at the peak: process the data in smaller chunks (smaller buffers or batches), reuse buffers across steps (a stream-ordered pool, cudaMallocAsync, with a release threshold), and free temporaries before the largest request." }] }],
    leaks: [],
    live_at_death: [{ device: 0, pid: 777, site: "Solver::allocate_workspace(unsigned long) (solver.cu:88)", library: "solver", bytes: live, count: 38, stack }],
  };
}

// `vramtrace plan` on the stand-in PyTorch (tests/programs/py_torch_plan.py, as
// tests/cli/plan_test.py runs it on an 80 MiB stand-in device): the process stopped before its
// first training step, holding only the weights and the batch; report.json's plan is copied
// from real runs: at batch 10240 under a 0.875 per-process fraction the step runs out of memory
// (96 MiB predicted, 26 MiB over 70 MiB); with `fits`, at batch 4096 and no fraction, it fits
// (46 MiB of 75 MiB). The rest of the report is the 10240 run's, in both (its own diagnosis:
// the 22 MiB it held at the stop, and a remedy from the replay of that much completed by
// prediction).
const unseenPlan = ["gradients assumed set to none at zero_grad (PyTorch's default; set_to_none=False keeps them)",
  "cuBLAS and cuDNN workspaces and the kernels' own scratch: fake tensors do not see them (the largest batch keeps 1.5 % of the limit free for them)"];
const estimatedLimit = "the device's capacity less an estimated 5.00 MiB for the CUDA context (no OOM recorded to measure it)";
const planOver = { processes: [{ batch: 10240, pid: 10774, stopped_ns: 1520519, fake_step_seconds: 0.000351512, loss: "", rng_restored: false, unseen: unseenPlan,
  devices: [{ batch: 10240, device: 0, predicted: true, predicted_batches: [5120, 10240], fits: false, fraction_limit_bytes: 73400320, free_bytes: 0,
    largest_batch: 6826, largest_batch_at_least: false, limit_bytes: 78643200, limit_source: estimatedLimit, outside_bytes: 0, over_bytes: 27262976,
    peak_bytes: 100663296, reserved_peak_bytes: 100663296,
    remedies: [{ kind: "smaller_batch", label: "halve the batch", replayed: true, peak_bytes: 48234496, fits: true }, { kind: "mixed_precision", label: "bf16 autocast", replayed: true, peak_bytes: 58720256, fits: true },
      { kind: "activation_checkpointing", label: "checkpoint the repeated blocks", replayed: true, peak_bytes: 79691776, fits: false }, { kind: "expandable_segments", label: "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", replayed: true, peak_bytes: 90177536, fits: false }] }] }] };
const planFits = { processes: [{ batch: 4096, pid: 18886, stopped_ns: 5926519, fake_step_seconds: 0.000358863, loss: "", rng_restored: false, unseen: unseenPlan,
  devices: [{ batch: 4096, device: 0, predicted: true, predicted_batches: [2048, 4096], fits: true, free_bytes: 30408704,
    largest_batch: 7168, largest_batch_at_least: false, limit_bytes: 78643200, limit_source: estimatedLimit, outside_bytes: 0, over_bytes: 0,
    peak_bytes: 48234496, reserved_peak_bytes: 48234496,
    remedies: [{ kind: "smaller_batch", label: "halve the batch", replayed: true, peak_bytes: 27262976, fits: true }, { kind: "mixed_precision", label: "bf16 autocast", replayed: true, peak_bytes: 27262976, fits: true },
      { kind: "activation_checkpointing", label: "checkpoint the repeated blocks", replayed: true, peak_bytes: 48234496, fits: true }, { kind: "expandable_segments", label: "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", replayed: true, peak_bytes: 48234496, fits: true }] }] }] };
export function torchPlan({ fits = false } = {}) {
  const prog = "/work/plan/tests/programs/py_torch_plan.py";
  const weights = 2 * MiB, batch = 20 * MiB, held = weights + batch;
  const order = ["parameters", "gradients", "optimizer_state", "activations", "temporaries", "inputs", "workspaces", "communication", "private_pool", "allocator_cache", "outside_pytorch", "unclassified"];
  const atPeak = Object.fromEntries(order.map((c) => [c, { parameters: weights, inputs: batch }[c] || 0]));
  const row = (t, p, i, cache) => [t, p, 0, 0, 0, 0, i, 0, 0, 0, cache, 0, 0];
  const weightsStack = [py("__init__", "/work/plan/tests/programs/fake_torch/torch/nn/parameter.py", 9), py("__init__", prog, 103), py("__init__", prog, 112), py("__init__", prog, 121), py("main", prog, 134), py("<module>", prog, 157), ...start()];
  const batchStack = [py("to", "/work/plan/tests/programs/fake_torch/torch/_tensor.py", 72), py("main", prog, 136), py("<module>", prog, 157), ...start()];
  const sites = [{ site: `main (${prog}:136)`, bytes: batch, count: 1, library: "libffi.so.8", sizes: [{ bytes: batch, count: 1 }], stack: batchStack },
    { site: `__init__ (${prog}:103)`, bytes: weights, count: 1, library: "libffi.so.8", sizes: [{ bytes: weights, count: 1 }], stack: weightsStack }];
  const blocks = [{ address: 140017632542720, bytes: batch, category: "inputs", site: `${prog}:136`, what: `moved to the GPU at ${prog}:136` },
    { address: 140017653514240, bytes: MiB, category: "parameters", name: "block1.fc.weight", what: "parameter block1.fc.weight" },
    { address: 140017654562816, bytes: MiB, category: "parameters", name: "block2.fc.weight", what: "parameter block2.fc.weight" }];
  const limit = 73400320;
  return {
    schema: "vramtrace.report/1",
    run: { command: ["python3", "tests/programs/py_torch_plan.py", ...(fits ? ["--batch", "4096"] : ["--fraction", "0.875"])], complete: true, cuda_start_ns: 196658, dropped_events: 0, duration_ns: 32554687,
      events: 205, exit_code: 0, problems: [], processes_not_profiled: 0, stand_in: true },
    diagnosis: {
      verdict: "peak", device: 0, pid: 10774, fatal_ooms: 0, recovered_ooms: 0, held_bytes: held, requested_bytes: 0, headroom_bytes: limit - held,
      limit: { bytes: limit, kind: "per_process_fraction", title: "PyTorch's per-process memory fraction (0.875 of 0.08 GiB: 0.07 GiB)" },
      categories: atPeak,
      remedies: [{ kind: "smaller_batch", title: "Halve the batch (with gradient accumulation to keep its effect)", saves_bytes: 52428800, predicted_peak_bytes: 48234496,
        assumption: "activations, temporaries and inputs scale with the batch; parameters, gradients and optimizer state do not",
        how: "the largest batch that fits the limit, replayed, is 6833 (this one: 10240)",
        replayed: { verdict: "fits", limit_bytes: limit, reserved_peak_bytes: 48234496, up_to_recorded_oom: false,
          completed_by_prediction: { batch: 5120, batches: [5120, 10240], method: "predicted at batch 5120", modules: ["block1.fc", "block2.fc"], predicted_requests: 10, recorded_batch: 10240 } } }],
    },
    devices: [{
      index: 0, host: "vm", name: "vramtrace stand-in (CPU)", total_bytes: 80 * MiB, final_live_bytes: held, limit_in_chart: true,
      peak: { bytes: held, time_ns: 889053, fraction_of_capacity: 0.275, headroom_level: "ok", by_site: sites.map(({ stack, ...x }) => x), blocks, by_module: [],
        by_line: [{ site: `${prog}:136`, bytes: batch, count: 1, categories: { inputs: batch } }, { site: "(line unknown)", bytes: weights, count: 2, categories: { parameters: weights } }] },
      timeline: { points: [[319139, 2 * MiB], [888139, held]] },
      categories: { order, at_peak: atPeak, at_exit: atPeak, at_peak_moment: { bytes: held, time_ns: 1036308, what: "the device's peak" },
        timeline: { columns: ["time_ns", ...order], points: [row(319139, MiB, 0, MiB), row(660308, MiB, 0, MiB), row(728308, weights, 0, 0), row(889053, weights, batch, 0), row(1036308, weights, batch, 0), row(32554687, weights, batch, 0)] } },
      phases: [],
    }],
    processes: [{
      pid: 10774, host: "vm", exe: "/usr/bin/python3.11", cmdline: ["/usr/bin/python3", "tests/programs/py_torch_plan.py", "--fraction", "0.875"],
      clean_exit: true, exit_code: 0, events: 205, dropped_events: 0, profiled: true, torch_allocator_trace: { merged: true }, launches: { recorded: true },
      iterations: { count: 0, source: "" },
      devices: [{ index: 0, peak: { bytes: held, by_site: sites, by_library: [{ library: "libffi.so.8", bytes: held, count: 2 }], blocks,
        largest: [{ address: "0x7f5865400000", api: "cuMemAlloc", bytes: batch, kind: "device", library: "libffi.so.8", site: sites[0].site, thread: 10774, time_ns: 889053, stack: batchStack },
          { address: "0x7f5866800000", api: "cuMemAlloc", bytes: weights, kind: "device", library: "libffi.so.8", site: sites[1].site, thread: 10774, time_ns: 319139, stack: weightsStack }] },
        launches: { recorded: true, top: [] } }],
    }],
    oom: [], leaks: [], growth: [], retained: [], ranks: [],
    plan: JSON.parse(JSON.stringify(fits ? planFits : planOver)),
  };
}

// A big run: `blocks` sites and stacks live at the peak, a timeline of 2048 points in 12
// categories, 2,000 phases.
export function big(blocks) {
  const r = torchOom();
  const d = r.devices[0], pd = r.processes[0].devices[0];
  const sites = [], stacks = [];
  for (let i = 0; i < blocks; i++) {
    // Deep stacks for the first 100 (the report keeps stacks of its largest groups).
    const stack = i < 100 ? torchStack(i % 4 + 1, ["conv1", "conv2", "conv3", "bn3"][i % 4])
      : [tnat(`at::native::kernel_${i}(at::Tensor const&)`, libtorch), py("forward", "/work/resnet/model.py", i % 400)];
    sites.push({ site: `${longKernel(i).slice(0, 200)} (kernels_${i}.cu:${i % 1000})`, bytes: MiB + (i % 4096) * 1024, count: 1 + (i % 5), library: "libtorch_cuda.so", stack });
    stacks.push({ bytes: MiB + (i % 4096) * 1024, count: 1, stack });
  }
  pd.peak.by_site = sites;
  pd.peak.by_stack = stacks;
  pd.peak.largest = sites.slice(0, 200).map((s, i) => ({ ...s, time_ns: i * 1e6, api: "cudaMalloc", last_kernel: longKernel(i) }));
  const pts = [];
  for (let i = 0; i < 2048; i++) pts.push([i * 5e6, ...cats.map((c, j) => (j + 1) * 64 * MiB + ((i * (j + 3)) % 97) * MiB)]);
  d.categories.timeline.points = pts;
  d.timeline.points = pts.map((p) => [p[0], p.slice(1).reduce((s, v) => s + v, 0)]);
  d.phases = Array.from({ length: 2000 }, (_, i) => ({ phase: ["forward", "backward", "optimizer"][i % 3], iteration: Math.floor(i / 3), start_ns: i * 5e6, end_ns: (i + 1) * 5e6 }));
  d.peak.by_module = Array.from({ length: 5000 }, (_, i) => ({ module: `blocks.${i % 50}.layers.${i % 100}.mlp.fc${i % 2}`, bytes: MiB * (1 + (i % 7)), category: "activations", site: `model.py:${i % 400}` }));
  r.oom[0].live_by_site = sites;
  r.run.duration_ns = 2048 * 5e6;
  r.oom[0].time_ns = 2047 * 5e6;
  return r;
}

"""Can a forked child of a CUDA program run a training step on PyTorch's fake tensors, and leave
its parent as it was? What a pre-flight of the program's own loop would do: fork at the first
training call, run the loop on fake tensors in the child, go on for real in the parent.

  [FORK_CASES="0 2"] python3 scripts/gpu/fork_probe.py [SHIM.so [libvramtrace.so]]

Given the probe's pass-through of the CUDA runtime (scripts/gpu/fork_shim/make.sh), the cases
run with it preloaded instead: the child then answers the device's index and count as the parent
had them, and lists each CUDA runtime function it called (`cuda_calls`); given the preloaded
library too, once more with it preloaded alone and its own answer asked for in the child
(vramtrace_v1_forked_copy, as a pre-flight's copy asks; `rebound`: how many imports it rebound).

Each case forks once and prints what the child could run (or where it stopped) and whether the
parent's real step afterwards gives the same loss as the same step in a process that never
forked."""
import os
import sys
import time
import json
import traceback

import torch
import torchvision


KIND = ["resnet"]
SHIM_DEVICE = [0, 1]


class Llama(torch.nn.Module):
    """A small transformers Llama (SDPA attention) whose call returns logits of (B*T, V)."""

    def __init__(self):
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=512,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                          max_position_embeddings=128, attn_implementation="sdpa")
        self.m = LlamaForCausalLM(cfg)

    def forward(self, x):
        return self.m(input_ids=x).logits.flatten(0, 1)


def make():
    torch.manual_seed(0)
    if KIND[0] == "llama":
        model = Llama().cuda()
        x = torch.randint(0, 1000, (8, 128), device="cuda")
        y = torch.randint(0, 1000, (8 * 128,), device="cuda")
    else:
        model = torchvision.models.resnet18(num_classes=10).cuda()
        x = torch.randn(32, 3, 64, 64, device="cuda")
        y = torch.randint(0, 10, (32,), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, opt, x, y


def real_step(model, opt, x, y):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


def child(model, opt, x, y, patch):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.nn.utils.stateless import _reparametrize_module
    out = {"patch": patch}
    shim = None
    if os.environ.get("VT_FORK_SHIM"):
        import ctypes
        import tempfile
        shim = tempfile.TemporaryFile()
        ctypes.CDLL(None).vt_shim_child(SHIM_DEVICE[0], SHIM_DEVICE[1], shim.fileno())
    if os.environ.get("VT_FORK_LIB"):  # the preloaded library's own answer, as a pre-flight's
        import ctypes
        out["rebound"] = ctypes.CDLL(None).vramtrace_v1_forked_copy(SHIM_DEVICE[0],
                                                                    SHIM_DEVICE[1])
    if patch:
        torch.cuda._lazy_init = lambda: None
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    stage = "fake parameters"
    try:
        with mode:
            fakes = {n: torch.nn.Parameter(torch.empty_strided(tuple(p.shape), tuple(p.stride()),
                                                               dtype=p.dtype, device=p.device))
                     for n, p in model.named_parameters()}
            bufs = {n: torch.empty_strided(tuple(b.shape), tuple(b.stride()), dtype=b.dtype,
                                           device=b.device) for n, b in model.named_buffers()}
        stage = "optimizer"
        opt.param_groups[0]["params"] = list(fakes.values())
        opt.state = {}
        with _reparametrize_module(model, {**fakes, **bufs}), mode:
            for i in range(2):
                stage = "forward %d" % i
                loss = torch.nn.functional.cross_entropy(model(x), y)
                stage = "backward %d" % i
                loss.backward()
                stage = "optimizer step %d" % i
                opt.step()
                opt.zero_grad(set_to_none=True)
        stage = "torch.cuda.max_memory_allocated"
        out["max_memory_allocated"] = torch.cuda.max_memory_allocated()
        stage = "torch.cuda.synchronize"
        torch.cuda.synchronize()
        stage = "done"
        out["ok"] = True
        # Calls a training loop makes besides its step: each tried alone.
        calls = {}
        for name, f in (("current_device", lambda: torch.cuda.current_device()),
                        ("device_properties", lambda: torch.cuda.get_device_properties(0)
                         .total_memory),
                        ("memory_reserved", lambda: torch.cuda.memory_reserved()),
                        ("empty_cache", lambda: torch.cuda.empty_cache()),
                        ("x.cuda()", lambda: str(type(torch.ones(4).cuda()))),
                        ("batch.cpu()", lambda: float(x.float().sum().cpu()) if not
                         x.is_floating_point() else float(x.sum().cpu())),
                        ("pin_memory", lambda: torch.ones(4).pin_memory().is_pinned())):
            try:
                calls[name] = repr(f())[:80]
            except BaseException as ex:
                calls[name] = "%s: %s" % (type(ex).__name__, str(ex).splitlines()[0][:120]
                                          if str(ex) else "")
        try:
            with mode:
                scaler = torch.amp.GradScaler("cuda")
                with _reparametrize_module(model, {**fakes, **bufs}), \
                        torch.autocast("cuda", dtype=torch.float16):
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            calls["GradScaler fp16 step"] = "ok"
        except BaseException as ex:
            calls["GradScaler fp16 step"] = "%s: %s" % (type(ex).__name__,
                                                       str(ex).splitlines()[0][:160])
        out["calls"] = calls
    except BaseException as ex:
        out["ok"] = False
        out["error"] = "%s: %s" % (type(ex).__name__, str(ex).splitlines()[0][:300]
                                   if str(ex) else "")
        # Where in PyTorch the CUDA call came from: the innermost Python frames.
        out["where"] = ["%s:%d %s" % (f.filename, f.lineno, f.name)
                        for f in traceback.extract_tb(ex.__traceback__)[-8:]]
    out["stage"] = stage
    if shim is not None:
        shim.seek(0)
        out["cuda_calls"] = [line.split()[1] for line in shim.read().decode().splitlines()]
    return out


def case(name, backward_before, patch):
    model, opt, x, y = make()
    if backward_before:
        real_step(model, opt, x, y)
    torch.cuda.synchronize()
    if patch:
        # The fake tensors' CUDA context, made once per device: here, in the parent.
        from torch._subclasses.fake_tensor import init_gpu_context
        init_gpu_context(x.device)
    SHIM_DEVICE[:] = [torch.cuda.current_device(), torch.cuda.device_count()]
    r, w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = child(model, opt, x, y, patch)
        except BaseException as ex:
            out = {"ok": False, "error": repr(ex)}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    forked = time.perf_counter() - t0
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    waited = time.perf_counter() - t0
    try:
        out = json.loads(data.decode() or "{}")
    except ValueError:
        out = {"raw": data[:300].decode(errors="replace")}
    after = real_step(model, opt, x, y)
    # The same in a model that never forked.
    m2, o2, x2, y2 = make()
    if backward_before:
        real_step(m2, o2, x2, y2)
    same = real_step(m2, o2, x2, y2)
    print("%s: child status %s, fork %.3f s, child done %.2f s; child: %s; parent's next step "
          "loss %.6f, unforked %.6f: %s" % (name, status, forked, waited, json.dumps(out), after,
                                            same, "same" if after == same else "DIFFERENT"))
    sys.stdout.flush()


torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False
CASES = (("resnet", "resnet18: no backward before, _lazy_init patched, fake context made first",
          False, True),
         ("resnet", "resnet18: a backward before, the same", True, True),
         ("llama", "llama (sdpa), device properties read before the fork, the same", False,
          True))
if sys.argv[1:2] == ["case"]:
    kind, name, before, patch = CASES[int(sys.argv[2])]
    KIND[0] = kind
    if "properties" in name:
        torch.cuda.get_device_properties(torch.cuda.current_device())
    case(name, before, patch)
else:
    import subprocess
    runs = [] if sys.argv[1:] else [(i, None) for i in range(len(CASES))]
    which = [int(i) for i in os.environ.get("FORK_CASES", "").split()] or range(len(CASES))
    for arg in sys.argv[1:3]:
        runs += [(i, os.path.abspath(arg)) for i in which]
    for i, shim in runs:  # each in a process of its own: nothing warmed by another
        env = dict(os.environ)
        if shim:
            env["LD_PRELOAD"] = ":".join(filter(None, [shim, env.get("LD_PRELOAD")]))
            env["VT_FORK_LIB" if "libvramtrace" in shim else "VT_FORK_SHIM"] = "1"
        r = subprocess.run([sys.executable, __file__, "case", str(i)], capture_output=True,
                           text=True, timeout=120, env=env)
        print(("[%s] " % os.path.basename(shim) if shim else "") +
              (r.stdout.strip() or "%s: no output" % CASES[i][1]) +
              ("" if r.returncode == 0 else " [rc %d: %s]" % (r.returncode,
                                                               r.stderr.strip()[-300:])))
        sys.stdout.flush()

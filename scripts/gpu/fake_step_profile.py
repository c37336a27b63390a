"""Where a fake step's time goes: one model built on the GPU, its copy as shapes (ShapeCopy)
timed, then the stand-in step (_vramtrace_step.predict_step: two iterations) run on it under
cProfile; prints the seconds (without the profiler first), the requests recorded and the 25 functions of most own time.

    python3 scripts/gpu/fake_step_profile.py MODEL BATCH     (MODEL: llama1b, gpt2, resnet50)

Except for llama1b, the step is also run on the model itself, and the two lists of requests
compared (the copy must stand for the model exactly)."""
import cProfile
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python", "vramtrace", "_hook"))
import torch  # noqa: E402
import _vramtrace_step as step  # noqa: E402


def build(name, batch):
    if name == "llama1b":
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                          num_hidden_layers=18, num_attention_heads=16, num_key_value_heads=16,
                          max_position_embeddings=1024)
        model = LlamaForCausalLM(cfg).cuda()
        x = torch.randint(0, 32000, (batch, 1024), device="cuda")
        return model, (x,), {"labels": x}
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        model = GPT2LMHeadModel(GPT2Config(n_positions=1024)).cuda()
        x = torch.randint(0, 50257, (batch, 1024), device="cuda")
        return model, (x,), {"labels": x}
    import torchvision
    model = torchvision.models.resnet50().cuda()
    return model, (torch.randn(batch, 3, 224, 224, device="cuda"),), {}


def main():
    name, batch = sys.argv[1], int(sys.argv[2])
    model, args, kwargs = build(name, batch)
    opt = torch.optim.AdamW(model.parameters())
    call, b = step.describe_call(torch, args, kwargs)
    t = time.perf_counter()
    shape = step.ShapeCopy(torch, model, opt, lambda m: 0)
    copy_s = time.perf_counter() - t
    before = torch.cuda.memory_allocated()
    t = time.perf_counter()
    plain = step.predict_step(torch, shape.model, call, b, b, shape.optimizer, True, True,
                              None, shape.module_ids, devices=shape.devices)
    print("%s b%d: fake step (2 iterations), not profiled: %.2f s, %d requests"
          % (name, batch, time.perf_counter() - t, len(plain)))
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    requests = step.predict_step(torch, shape.model, call, b, b, shape.optimizer, True, True,
                                 None, shape.module_ids, devices=shape.devices)
    prof.disable()
    fake_s = time.perf_counter() - t
    print("%s b%d: %.2e parameters; ShapeCopy %.1f ms; fake step (2 iterations) %.2f s, %d "
          "requests; device memory allocated by them: %d bytes"
          % (name, batch, sum(p.numel() for p in model.parameters()), copy_s * 1e3, fake_s,
             len(requests), torch.cuda.memory_allocated() - before))
    if name != "llama1b":
        # The copy as shapes stands for the model: the same requests from the model itself.
        same = step.predict_step(torch, model, call, b, b, opt, True, True, None, lambda m: 0)
        print("the same requests from the model itself: %s (%d)" % (same == requests, len(same)))
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()

# torch.autograd of the stand-in PyTorch: one graph, the outputs that nn.functional.linear
# saved for backward with the weights they need gradients for. backward() walks it from the
# last output: makes each weight's .grad (once: later backwards accumulate into it), frees
# the output it saved, and forgets the graph.
_graph = []  # (saved output, weight)


def _save(output, weight):
    _graph.append((output, weight))


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    from ._tensor import empty_like
    while _graph:
        output, weight = _graph.pop()
        if weight.grad is None:
            weight.grad = empty_like(weight)
        output.free()

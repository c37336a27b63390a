# torch.compiler of the stand-in PyTorch: nothing is ever compiled.
def is_compiling():
    return False

# Test script (stand-in PyTorch of tests/programs/fake_torch): a recurrent model scored chunk
# by chunk, its state carried from one chunk to the next, as an LSTM's (h, c) is. Recurrent
# holds cell and head, 1 MiB weights each (512x512 float32); a chunk is 2048 x 512 float32
# (4 MiB), the state 256 x 512 (0.5 MiB). Each forward takes a 16 MiB workspace (freed inside,
# as cuDNN's is), and cell makes the chunk's 4 MiB hidden output and the next 0.5 MiB state, head
# the 4 MiB scores: 24.5 MiB made per forward. With autograd on, every output linear() makes
# is saved for a backward that never comes (8.5 MiB per chunk: 4.5 of them cell's, saved
# activations, and head's 4, the forward's outputs), and the state returned goes back into the
# next forward. With --no-grad the same chunks run under torch.no_grad(): nothing is saved.
# With --lstm the cell is an LSTM whose state is two tensors, (h, c), 0.5 MiB each: 9 MiB
# saved per chunk.
import sys

import torch
import torch.nn.functional as F

FEATURES = 512
CHUNKS = 6


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter((FEATURES, FEATURES))

    def forward(self, x, h=None):
        if h is None:
            return F.linear(x, self.weight)
        return F.linear(x, self.weight), F.linear(h, self.weight)


class LSTM(Linear):
    def forward(self, x, state):
        h, c = state
        return F.linear(x, self.weight), (F.linear(h, self.weight), F.linear(c, self.weight))


class Recurrent(torch.nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.cell = cell
        self.head = Linear()

    def forward(self, x, h):
        workspace = torch.empty(x.shape[0], 4 * FEATURES)  # py_torch_state.py:45
        del workspace
        y, h = self.cell(x, h)
        return self.head(y), h


def main():
    no_grad = "--no-grad" in sys.argv[1:]
    lstm = "--lstm" in sys.argv[1:]
    model = Recurrent(LSTM() if lstm else Linear())
    h = (torch.empty(256, FEATURES), torch.empty(256, FEATURES)) if lstm else torch.empty(256, FEATURES)
    for chunk in range(CHUNKS):
        x = torch.empty(2048, FEATURES, device="cpu").to("cuda")
        if no_grad:
            with torch.no_grad():
                scores, h = model(x, h)
        else:
            scores, h = model(x, h)  # py_torch_state.py:62
        del scores
        print("chunk", chunk, "scored", flush=True)


main()

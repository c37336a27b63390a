# torch.cuda.memory of the plugin's stand-in PyTorch: what vramtrace's start-up hook calls.
def _record_memory_history(**kwargs):
    pass


def _snapshot():
    return {"device_traces": [[]]}

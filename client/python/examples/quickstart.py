# The README's example: python3 quickstart.py SOCKET RANK WORLD_SIZE
import sys

import torch
from torch import nn

import shardd.torch as st
from shardd.client import TrainerClient
from shardd.errors import DaemonUnavailable, JobFailed, StepAborted

socket, rank, world_size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
steps = 60
torch.manual_seed(0)  # Every rank starts from the same parameters.
net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))


def batch(step):  # This rank's rows of the global batch of `step`.
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(step))
    y = x[:, :4] * 2 - x[:, 4:]  # The function to learn.
    rows = 16 // world_size
    return x[rank * rows:][:rows], y[rank * rows:][:rows]


try:
    with TrainerClient(socket) as client:
        model = st.wrap(net, client, units=["0", "2"],
                        optimizer=st.AdamW(lr=1e-2), max_grad_norm=1.0)
        while model.next_step <= steps:
            x, y = batch(model.next_step)
            try:
                loss = nn.functional.mse_loss(model(x), y)
                model.backward(loss)  # Gradients to the daemon (ReduceGrad).
                model.step()  # The optimizer runs in the daemon.
            except (StepAborted, DaemonUnavailable):
                model.recover()  # Re-attach, wait until ready, redo the step.
                continue
            print(f"step {model.next_step - 1} loss {loss.item():.4f}")
except JobFailed as e:  # Terminal (a shard lost for good): no retry helps.
    print(f"job failed: {e}", file=sys.stderr)
    sys.exit(2)  # The status a JobSet's podFailurePolicy ends the job on.

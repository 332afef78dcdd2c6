"""A torch trainer process of test_torch.py, and what the test shares with it.

Run as a script, it trains the model below through shardd.torch against one
daemon for a number of steps (rank R of W takes rows [R*B/W, (R+1)*B/W) of
each global batch), then writes the committed parameters, gathered from the
daemon, to --out (torch.save) and, with --export, makes a FULL export.
"""

import argparse
import os
import signal
import sys

import torch
from torch import nn

SEED = 1913
IN, HIDDEN, OUT = 8, 32, 4
GLOBAL_BATCH = 16
LR = 1e-2
BETAS = (0.9, 0.99)
WEIGHT_DECAY = 0.05
MAX_GRAD_NORM = 0.5  # Small enough that every step is clipped.


MOMENTUM = 0.9


def make_model(deep=False):
    """Linear-ReLU-Linear; deep: Linear-ReLU-Linear-ReLU-Linear."""
    torch.manual_seed(SEED)
    if deep:
        return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(),
                             nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                             nn.Linear(HIDDEN, OUT))
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(),
                         nn.Linear(HIDDEN, OUT))


def make_optimizer(name, param_groups, lr=LR):
    """The torch optimizer the daemon's must match (reference side)."""
    if name == "sgd":
        return torch.optim.SGD(param_groups, lr=lr, momentum=MOMENTUM,
                               weight_decay=WEIGHT_DECAY, nesterov=True)
    return torch.optim.AdamW(param_groups, lr=lr, betas=BETAS,
                             weight_decay=WEIGHT_DECAY)


# The GPT example's model (examples/train_gpt.py), tiny: 2 blocks, d_model
# 32, context 16 (~42k parameters); its data is the example's (stdlib text).
GPT_CONFIG = {"layers": 2, "d_model": 32, "heads": 2, "context": 16}
GPT_GLOBAL_BATCH = 8
GPT_DATA_BYTES = 100_000
GPT_UNITS = "blocks.0,blocks.1"


def gpt_example():
    """The example's module (imported from examples/, not copied)."""
    examples = os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "examples")
    if examples not in sys.path:
        sys.path.insert(0, examples)
    import train_gpt  # pylint: disable=import-outside-toplevel
    return train_gpt


class Task:
    """What a trainer and the reference share for one kind of model: the
    seeded module, the batches (a function of the step), the loss and the
    parameters without weight decay."""

    def __init__(self, kind):
        if kind not in ("mlp", "deep", "gpt"):
            raise ValueError(f"unknown model {kind!r}")
        self.kind = kind
        self._text = None

    def make_model(self):
        if self.kind != "gpt":
            return make_model(self.kind == "deep")
        torch.manual_seed(SEED)
        return gpt_example().GPT(**GPT_CONFIG)

    def local_batch(self, step, rank, world_size):
        if self.kind != "gpt":
            return local_batch(step, rank, world_size)
        example = gpt_example()
        if self._text is None:
            self._text = example.load_text(GPT_DATA_BYTES)
        x, y = example.global_batch(self._text, step, SEED, GPT_GLOBAL_BATCH,
                                    GPT_CONFIG["context"])
        rows = GPT_GLOBAL_BATCH // world_size
        return (x[rank * rows:(rank + 1) * rows],
                y[rank * rows:(rank + 1) * rows])

    def loss(self, output, target):
        if self.kind != "gpt":
            return nn.functional.mse_loss(output, target)
        return nn.functional.cross_entropy(output.reshape(-1, output.shape[-1]),
                                           target.reshape(-1))

    def no_weight_decay(self, fqn, param):
        if self.kind != "gpt":
            return no_weight_decay(fqn, param)
        return param.ndim < 2  # As the example: matrices only.


def schedule(epoch):
    """LambdaLR's factor: warm up over 2 steps, then decay."""
    return (epoch + 1) / 2 if epoch < 2 else 1.0 / (epoch - 0.5)


def no_weight_decay(fqn, _param):
    return fqn.endswith("bias")


def global_batch(step):
    """(inputs, targets) of step `step`: a function of the step alone."""
    generator = torch.Generator().manual_seed(SEED * 1000 + step)
    x = torch.randn(GLOBAL_BATCH, IN, generator=generator)
    y = torch.randn(GLOBAL_BATCH, OUT, generator=generator)
    return x, y


def local_batch(step, rank, world_size):
    x, y = global_batch(step)
    rows = GLOBAL_BATCH // world_size
    return x[rank * rows:(rank + 1) * rows], y[rank * rows:(rank + 1) * rows]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world_size", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--strategy", default="FULL_SHARD")
    parser.add_argument("--sharding_factor", type=int, default=0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--export", default="")
    parser.add_argument("--units", default="0,2")
    parser.add_argument("--schedule", action="store_true")
    parser.add_argument("--deep", action="store_true")
    parser.add_argument("--optimizer", default="adamw")
    parser.add_argument("--param_dtype", default="")
    parser.add_argument("--lr", type=float, default=LR)
    parser.add_argument("--init", default="", help="a safetensors file")
    parser.add_argument("--load_from", default="")
    parser.add_argument("--export_optimizer", action="store_true")
    parser.add_argument("--zero_copy", action="store_true")
    parser.add_argument("--model", default="", help="mlp, deep or gpt")
    parser.add_argument("--micro_batches", type=int, default=1,
                        help="each rank's batch in this many micro-batches")
    parser.add_argument("--stop_in_step", type=int, default=0,
                        help="stop (SIGSTOP) once, after that step's forward")
    args = parser.parse_args()
    task = Task(args.model or ("deep" if args.deep else "mlp"))

    torch.set_num_threads(1)
    sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
    # pylint: disable=import-outside-toplevel
    import shardd.torch as st
    from shardd.client import TrainerClient
    from shardd.errors import DaemonUnavailable, StepAborted

    with TrainerClient(args.socket, default_timeout=60,
                       register_timeout=60) as client:
        client.wait_connected(timeout=30)
        optimizer = (st.SGD(lr=args.lr, momentum=MOMENTUM,
                            weight_decay=WEIGHT_DECAY, nesterov=True)
                     if args.optimizer == "sgd" else
                     st.AdamW(lr=args.lr, betas=BETAS,
                              weight_decay=WEIGHT_DECAY))
        model = st.wrap(task.make_model(), client,
                        units=args.units.split(","), optimizer=optimizer,
                        max_grad_norm=MAX_GRAD_NORM,
                        no_weight_decay=task.no_weight_decay,
                        strategy=args.strategy,
                        sharding_factor=args.sharding_factor,
                        param_dtype=(getattr(torch, args.param_dtype)
                                     if args.param_dtype else None),
                        init=args.init or None,
                        load_from=args.load_from or None,
                        zero_copy=args.zero_copy)
        print(f"registered at committed step {model.committed_step}"
              f"{' (re-attached)' if model.registered.reattached else ''}",
              flush=True)
        scheduler = None
        if args.schedule:
            scheduler = torch.optim.lr_scheduler.LambdaLR(
                model.optimizer, schedule)
        losses, norms, lrs, aborted = {}, {}, {}, []
        stop_in_step = args.stop_in_step
        while model.next_step <= args.steps:
            step = model.next_step
            try:
                x, y = task.local_batch(step, args.rank, args.world_size)
                xs = x.chunk(args.micro_batches)
                ys = y.chunk(args.micro_batches)
                # Gradient accumulation: plain backward for all micro-
                # batches but the last, whose model.backward reduces.
                for xi, yi in zip(xs[:-1], ys[:-1]):
                    (task.loss(model(xi), yi) / len(xs)).backward()
                loss = task.loss(model(xs[-1]), ys[-1]) / len(xs)
                if step == stop_in_step:
                    # Its gathers issued, its reductions not: a trainer
                    # stopped mid-step until the test continues it.
                    stop_in_step = 0
                    print(f"stopping in step {step}", flush=True)
                    os.kill(os.getpid(), signal.SIGSTOP)
                model.backward(loss)
                response = model.step()
            except (StepAborted, DaemonUnavailable) as e:
                print(f"step {step} aborted ({type(e).__name__}: {e}); "
                      "recovering", flush=True)
                aborted.append(step)
                model.recover(timeout=120)
                print(f"recovered at committed step {model.committed_step}",
                      flush=True)
                continue
            print(f"step {step} committed, loss {loss.item():.6f}",
                  flush=True)
            if scheduler is not None:
                scheduler.step()
            losses[step] = loss.item()
            norms[step] = response.grad_norm
            lrs[step] = response.learning_rate
        # Parameter memory the module holds between steps.
        module_bytes = sum(p.data.storage().nbytes()
                           for p in model.module.parameters())
        params = model.state_dict()  # Collective: the committed values.
        if args.export:
            model.export(args.export,
                         include_optimizer_state=args.export_optimizer)
        torch.save({"params": params, "losses": losses, "norms": norms,
                    "aborted": aborted, "lrs": lrs,
                    "reattached": model.registered.reattached,
                    "stats": dict(model.stats), "module_bytes": module_bytes,
                    "registered_step": model.registered.committed_step,
                    "units": model.units,
                    "export_names": model.export_names()}, args.out)


if __name__ == "__main__":
    main()

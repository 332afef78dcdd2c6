"""A small GPT-style character (byte) language model trained through shardd.

Every rank runs this script against its node's shardd daemon, with the same
--seed (the model's initial parameters are registered as the job's) and the
same data: the Python standard library's own sources (the first
--data_bytes bytes of the sorted top-level *.py files of this interpreter's
stdlib, e.g. /usr/lib/python3.11/*.py; the same on every Debian machine of
one release). Tokens are bytes (vocabulary 256), so nothing is built from
the data.

Data is indexed by step: the global batch of step N is a function of
(--seed, N) alone (random windows of the text), and rank R takes rows
[R*B/W, (R+1)*B/W) of it, so a step redone after a failure uses the same
batch. The model: token + position embeddings, --layers pre-LN transformer
blocks (causal self-attention, GELU MLP), a final LayerNorm and an untied
head (shardd rejects a parameter shared between two units). Units: one per
block ("blocks.0", ...), the rest (embeddings, final norm, head) in the root
unit. AdamW with weight decay on matrices only, clipping at --max_grad_norm,
in the daemons; warm-up then cosine decay, the rate a function of the step.

StepAborted / DaemonUnavailable (a peer or this node's daemon died): the
step is redone after model.recover(); JobFailed: exit 2 with the reason.

    /usr/bin/python3 client/python/examples/train_gpt.py \
        --socket=/run/shardd.sock --rank=0 --world_size=4 --steps=100 \
        --strategy=HYBRID_SHARD --sharding_factor=2

Prints "step N loss L" every --log_every steps (L: the mean of this rank's
losses, before each update, over the steps since the previous line), and at the end "final params sha256 H" of the committed
parameters (state_dict(), a collective): equal runs print equal hashes.
"""

import argparse
import glob
import hashlib
import math
import os
import sys
import sysconfig
import time

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# pylint: disable=wrong-import-position
import shardd.torch as st  # noqa: E402
from shardd.client import TrainerClient  # noqa: E402
from shardd.errors import DaemonUnavailable, JobFailed, StepAborted  # noqa: E402

VOCAB = 256  # Bytes.


def load_text(max_bytes, stdlib=None):
    """The corpus: sorted top-level stdlib *.py files, up to max_bytes."""
    stdlib = stdlib or sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(stdlib, "*.py")))
    if not files:
        raise SystemExit(f"no *.py files under {stdlib}")
    chunks, total = [], 0
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        chunks.append(data)
        total += len(data)
        if total >= max_bytes:
            break
    text = b"".join(chunks)[:max_bytes]
    return torch.frombuffer(bytearray(text), dtype=torch.uint8).long()


class Block(nn.Module):
    """Pre-LN transformer block: causal self-attention, then a GELU MLP."""

    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        shape = (b, t, self.heads, d // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):

    def __init__(self, layers, d_model, heads, context):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d_model)
        self.pos = nn.Embedding(context, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, VOCAB, bias=False)
        for name, p in self.named_parameters():
            if p.ndim == 2:  # GPT-2's init: N(0, 0.02).
                nn.init.normal_(p, std=0.02)
            if name.endswith(("proj.weight", "out.weight")):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * layers))

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def global_batch(text, step, seed, batch, context):
    """(inputs, targets) of `step`: random windows, a function of the step."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(0, len(text) - context - 1, (batch,), generator=g)
    rows = torch.stack([text[s:s + context + 1] for s in starts.tolist()])
    return rows[:, :-1], rows[:, 1:]


def learning_rate(step, args):
    """Linear warm-up over --warmup steps, then cosine decay to lr / 10.

    A function of the step (passed to model.step), so a redone step uses
    the same rate."""
    if step <= args.warmup:
        return args.lr * step / args.warmup
    done = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, done))))


def local_batch(text, step, args):
    x, y = global_batch(text, step, args.seed, args.batch, args.context)
    rows = args.batch // args.world_size
    return (x[args.rank * rows:(args.rank + 1) * rows],
            y[args.rank * rows:(args.rank + 1) * rows])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--socket", required=True, help="this node's shardd socket")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world_size", type=int, required=True)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--strategy", default="FULL_SHARD")
    p.add_argument("--sharding_factor", type=int, default=0)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d_model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--batch", type=int, default=64, help="global batch")
    p.add_argument("--lr", type=float, default=3e-3, help="peak")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--weight_decay", type=float, default=0.1)
    p.add_argument("--max_grad_norm", type=float, default=1.0)
    p.add_argument("--data_bytes", type=int, default=2_000_000)
    p.add_argument("--log_every", type=int, default=20)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (1: bit-reproducible)")
    p.add_argument("--timeout", type=float, default=120,
                   help="seconds for each RPC and for a recovery")
    args = p.parse_args()
    if args.batch % args.world_size:
        p.error("--batch must be a multiple of --world_size")

    torch.set_num_threads(args.threads)
    text = load_text(args.data_bytes)
    torch.manual_seed(args.seed)
    net = GPT(args.layers, args.d_model, args.heads, args.context)
    n_params = sum(q.numel() for q in net.parameters())
    if args.rank == 0:
        print(f"GPT: {args.layers} layers, d_model {args.d_model}, context "
              f"{args.context}, {n_params / 1e6:.2f}M parameters; "
              f"{len(text)} bytes of stdlib text; global batch {args.batch}",
              flush=True)

    with TrainerClient(args.socket, default_timeout=args.timeout,
                       register_timeout=args.timeout) as client:
        client.wait_connected(timeout=args.timeout)
        model = st.wrap(
            net, client,
            units=[f"blocks.{i}" for i in range(args.layers)],
            optimizer=st.AdamW(lr=args.lr, betas=(0.9, 0.95),
                               weight_decay=args.weight_decay),
            max_grad_norm=args.max_grad_norm,
            no_weight_decay=lambda name, q: q.ndim < 2,
            strategy=args.strategy, sharding_factor=args.sharding_factor)
        print(f"rank {args.rank}: registered, committed step "
              f"{model.committed_step}", flush=True)
        start = time.monotonic()
        window = []
        while model.next_step <= args.steps:
            step = model.next_step
            try:
                x, y = local_batch(text, step, args)
                logits = model(x)
                loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
                model.backward(loss)
                response = model.step(lr=learning_rate(step, args))
            except (StepAborted, DaemonUnavailable) as e:
                print(f"rank {args.rank}: step {step} aborted "
                      f"({type(e).__name__}); recovering", flush=True)
                model.recover(timeout=args.timeout)
                print(f"rank {args.rank}: recovered, redoing step "
                      f"{model.next_step}", flush=True)
                continue
            except JobFailed as e:
                print(f"rank {args.rank}: job failed: {e}", file=sys.stderr,
                      flush=True)
                return 2
            window.append(loss.item())
            if step % args.log_every == 0 or step in (1, args.steps):
                # The mean over the steps since the last line: this rank's
                # batches are small, so one step's loss is noisy.
                print(f"step {step} loss {sum(window) / len(window):.4f} "
                      f"(last {loss.item():.4f}) lr {response.learning_rate:.2e}"
                      f" grad_norm "
                      f"{response.grad_norm:.3f} "
                      f"({time.monotonic() - start:.1f} s)", flush=True)
                window = []
        try:
            params = model.state_dict()  # Collective: the committed values.
        except JobFailed as e:
            print(f"rank {args.rank}: job failed: {e}", file=sys.stderr)
            return 2
        digest = hashlib.sha256()
        for name in sorted(params):
            digest.update(name.encode())
            digest.update(params[name].detach().contiguous().numpy().tobytes())
        print(f"final params sha256 {digest.hexdigest()}", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except JobFailed as failure:  # E.g. at registration or in recover().
        print(f"job failed: {failure}", file=sys.stderr)
        sys.exit(2)

"""shardd.torch: train a torch nn.Module with its state sharded in shardd.

One call wraps the model, one runs backward, one steps:

    import shardd.torch as st
    from shardd.client import TrainerClient

    client = TrainerClient("/run/shardd.sock")
    model = st.wrap(net, client, units=["0", "2"],
                    optimizer=st.AdamW(lr=1e-3), max_grad_norm=1.0)
    for step in range(model.next_step, steps + 1):   # data indexed by step
        loss = loss_fn(model(x[step]), y[step])        # forward: gathers
        model.backward(loss)                           # gradients -> daemon
        model.step()                                   # optimizer, in shardd

What wrap does:
  - Units: one per named submodule (or per module a policy picks), the
    remaining parameters in a root unit. Tensors keep their fully qualified
    names: a unit named after its module prefix holds the tensors by their
    suffix, so the daemon's FULL export names them "<unit>.<tensor>" = the
    parameter's own name (load_export maps the root unit's back too).
  - Initial values: the module's current parameters, written once into a
    file under /dev/shm that the daemons read (TensorInit.shared_memory, any
    size; removed when RegisterModel has returned). A daemon that already
    holds the model (a restarted trainer) re-attaches and keeps its state.
  - Optimizer: runs in the daemon (AdamW or SGD, torch's hyper-parameters
    and semantics), with max_grad_norm (clip_grad_norm_) and weight-decay
    exclusions.

How a step runs (the first slice, simplest correct design):
  - Forward: a forward pre-hook on each unit's module gathers the unit
    (FORWARD, with a prefetch hint for the next unit), copies the daemon's
    read-only views into the module's own parameter tensors, and releases
    the unit at once. Autograd then works on ordinary tensors: saved
    activations stay valid until backward whatever the daemon does with its
    buffer. A unit is gathered once per committed step (a second forward
    before the next step, e.g. evaluation, reuses the copy).
    Trade-off: the trainer process holds a full, unsharded copy of the
    parameters (and their .grad during backward), as DDP does; what is
    sharded is the daemons' state (fp32 masters, reduced gradients and
    AdamW's two moments: 16 bytes per parameter, divided by F).
  - Forward with wrap(..., zero_copy=True), ZeRO-3 in the trainer too: the
    pre-hook points the unit's parameters at the daemon's read-only
    gathered views (param.data, so autograd and AccumulateGrad work as
    usual), the post-hook releases the unit and leaves placeholders that
    hold no memory. A tensor autograd saves that is a view of a gathered
    buffer (a weight kept for the input's gradient) is packed as (unit,
    offset, shape, stride) by saved_tensors_hooks and unpacked in backward
    from the unit gathered again (BACKWARD): valid whatever the buffer held
    in between. Costs: a BACKWARD gather per unit whose views were saved
    (the daemon answers from the buffer when it still holds the unit), and
    the module's parameters may only be read inside their unit's forward.
    Bit-equal to the copying mode (tested).
  - Backward: backward(loss) runs loss.backward(); a hook on each
    parameter's AccumulateGrad node notes its gradient complete, and as
    soon as a unit's gradients are all complete (and every later unit's
    are handed over: the reduction order is the reverse unit order on every
    rank), the unit is gathered BACKWARD (which names the daemon's gradient
    slot), its .grad copied into the slot, ReduceGrad, Release, and its
    .grad reset to None: the daemon's reduce-scatter of a unit overlaps the
    backward of the units before it. Gradients are averaged over the W
    ranks by the daemon, so each rank's loss is the mean over its own part
    of the batch.
  - step(lr=None): Step(committed + 1) in the daemon; the next forward
    gathers the new parameters.

Failures: StepAborted (a peer failed) or DaemonUnavailable (this node's
daemon died; a replacement takes its socket) from any of these calls means
the step was not applied: call recover() (it re-attaches when needed and
waits until the daemon is ready) and run the step again with the same data
(model.next_step says which):

    while model.next_step <= steps:
        try:
            model.backward(loss_fn(model(x[model.next_step]), ...))
            model.step()
        except (StepAborted, DaemonUnavailable):
            model.recover()

JobFailed is terminal: exit non-zero with its message.

LR schedules: model.optimizer is a torch Optimizer whose lr goes into each
Step, so torch.optim.lr_scheduler works with it (ShardedOptimizer).

Gradient accumulation over micro-batches: gradients accumulate in .grad as
in plain torch, so run (loss_i / n).backward() for all but the last micro-
batch and model.backward(loss_n / n) for the last (one ReduceGrad per unit).

Mixed precision: wrap(..., param_dtype=torch.bfloat16) gathers bf16
parameters and reduces bf16 gradients around fp32 masters in the daemon.

Not yet: zero_copy as the default (it needs more mileage: parameters read
outside their unit, in-place writes), accumulation in the daemon
(ReduceGrad.accumulate_only), a shared parameter (rejected with a clear
error), buffers (kept by each trainer, not synced).
"""

import itertools
import json
import os
import struct
import time

import grpc
import torch
from torch import nn

from shardd import client as _client
from shardd import errors
from shardd.v1 import common_pb2
from shardd.v1 import trainer_pb2

__all__ = [
    "AdamW", "SGD", "ShardedModule", "ShardedOptimizer", "wrap",
    "load_export", "read_safetensors", "save_safetensors"
]

_DTYPES = {
    torch.float32: common_pb2.DTYPE_FP32,
    torch.bfloat16: common_pb2.DTYPE_BF16,
    torch.float16: common_pb2.DTYPE_FP16,
}

_STRATEGIES = {
    "FULL_SHARD": common_pb2.SHARDING_STRATEGY_FULL_SHARD,
    "SHARD_GRAD_OP": common_pb2.SHARDING_STRATEGY_SHARD_GRAD_OP,
    "NO_SHARD": common_pb2.SHARDING_STRATEGY_NO_SHARD,
    "HYBRID_SHARD": common_pb2.SHARDING_STRATEGY_HYBRID_SHARD,
}

ROOT_UNIT = "root"


class AdamW:
    """torch.optim.AdamW's hyper-parameters (and defaults), run by the daemon."""

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=1e-2):
        self.lr, self.betas, self.eps = lr, tuple(betas), eps
        self.weight_decay = weight_decay

    def to_proto(self, config):
        adamw = config.adamw
        adamw.lr, adamw.eps, adamw.weight_decay = (self.lr, self.eps,
                                                   self.weight_decay)
        adamw.beta1, adamw.beta2 = self.betas


class SGD:
    """torch.optim.SGD's hyper-parameters (and defaults), run by the daemon."""

    def __init__(self, lr, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False):
        self.lr, self.momentum, self.dampening = lr, momentum, dampening
        self.weight_decay, self.nesterov = weight_decay, nesterov

    def to_proto(self, config):
        sgd = config.sgd
        sgd.lr, sgd.momentum, sgd.dampening = (self.lr, self.momentum,
                                               self.dampening)
        sgd.weight_decay, sgd.nesterov = self.weight_decay, self.nesterov


class ShardedOptimizer(torch.optim.Optimizer):
    """The daemon's optimizer as torch sees it: for LR schedulers.

    Its one param group's "lr" is the learning rate the next step() sends
    to the daemon, so torch.optim.lr_scheduler drives it as usual:

        scheduler = torch.optim.lr_scheduler.LambdaLR(model.optimizer, f)
        ...; model.step(); scheduler.step()

    step() commits the step (ShardedModule.step); zero_grad() clears the
    module's .grad (backward() already does). It holds no state: the
    moments live in the daemon (export them with include_optimizer_state).
    """

    def __init__(self, sharded, lr):
        self._sharded = sharded
        params = [p for u in sharded._units for _, _, p in u.tensors]  # pylint: disable=protected-access
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):  # pylint: disable=arguments-differ
        if closure is not None:
            raise NotImplementedError("ShardedOptimizer.step: no closures")
        return self._sharded._commit(self.param_groups[0]["lr"])  # pylint: disable=protected-access


class _Live:
    """zero_copy: a unit gathered for its forward, and its buffer's range."""

    def __init__(self, gathered, flat):
        self.gathered = gathered
        self.begin = flat.data_ptr()
        self.end = self.begin + flat.numel() * flat.element_size()
        self.dtype = flat.dtype
        self.depth = 0


class _SavedView:
    """zero_copy: a saved tensor that is a view of a unit's parameters."""

    def __init__(self, unit, offset, shape, stride):
        self.unit, self.offset = unit, offset
        self.shape, self.stride = shape, stride


class _Unit:
    """One unit: its module, name, and (tensor name, fqn, parameter) list."""

    def __init__(self, name, module, prefix):
        self.name = name
        self.module = module
        self.prefix = prefix  # Stripped from fqns to name tensors.
        self.tensors = []

    def tensor_name(self, fqn):
        return fqn[len(self.prefix):] if self.prefix else fqn


def _unit_modules(module, units):
    """[(prefix, submodule)] of the units, in module order."""
    named = list(module.named_modules())
    if callable(units) and not isinstance(units, type):
        chosen = [n for n, m in named if n and units(n, m)]
    elif isinstance(units, type) or (isinstance(units, tuple) and units and
                                     all(isinstance(u, type) for u in units)):
        chosen = [n for n, m in named if n and isinstance(m, units)]
    else:
        chosen = [units] if isinstance(units, str) else list(units or ())
        for n in chosen:
            if not isinstance(n, str) or not n:
                raise ValueError(f"units: {n!r} is not a submodule name")
        known = dict(named)
        missing = [n for n in chosen if n not in known]
        if missing:
            raise ValueError(f"units: no submodule named {missing[0]!r}")
        if len(set(chosen)) != len(chosen):
            raise ValueError("units: a submodule is named twice")
        order = {n: i for i, (n, _) in enumerate(named)}
        chosen.sort(key=order.__getitem__)
    modules = dict(named)
    return [(n, modules[n]) for n in chosen]


def _build_units(module, units):
    """The units, root first, each with its trainable parameters."""
    holders = {}  # id(param) -> fqn, to reject a parameter in two places.
    params = []
    for mname, m in module.named_modules(remove_duplicate=False):
        for pname, p in m._parameters.items():  # pylint: disable=protected-access
            if p is None:
                continue
            fqn = f"{mname}.{pname}" if mname else pname
            if id(p) in holders:
                if holders[id(p)] != fqn:
                    raise NotImplementedError(
                        f"parameter {fqn!r} is the same tensor as "
                        f"{holders[id(p)]!r}: shared (tied) parameters are "
                        "not supported by shardd.torch yet")
                continue
            holders[id(p)] = fqn
            params.append((fqn, p))
    named_units = _unit_modules(module, units)
    taken = {n for n, _ in named_units}
    root = _Unit(ROOT_UNIT if ROOT_UNIT not in taken else "__root__", module,
                 "")
    result = [_Unit(n, m, n + ".") for n, m in named_units]
    for fqn, p in params:
        if not p.requires_grad:
            continue  # Frozen: stays in the module, not sharded.
        if p.dtype not in _DTYPES:
            raise NotImplementedError(
                f"parameter {fqn!r}: dtype {p.dtype} (shardd holds fp32, bf16 "
                "and fp16)")
        owner = root
        for unit in result:  # The deepest unit whose prefix holds fqn.
            if fqn.startswith(unit.prefix) and len(unit.prefix) > len(
                    owner.prefix):
                owner = unit
        owner.tensors.append((owner.tensor_name(fqn), fqn, p))
    result = [u for u in result if u.tensors]
    if root.tensors:
        result.insert(0, root)
    if not result:
        raise ValueError("the module has no trainable parameters")
    for unit in result:
        dtypes = {p.dtype for _, _, p in unit.tensors}
        if len(dtypes) > 1:
            raise NotImplementedError(
                f"unit {unit.name!r} mixes dtypes {sorted(map(str, dtypes))}: "
                "a unit's flat buffer has one dtype")
    return result


class _InitValuesFile:
    """The parameters' values, one after another, in a new file (O_EXCL).

    For TensorInit.shared_memory (the Python twin of client/init_values_file):
    each daemon maps only its shard's slice, so the model may have any size.
    Removed by close(), once RegisterModel has returned.
    """

    _counter = itertools.count()

    def __init__(self, directory, tensors):
        self.path = os.path.join(
            directory, f"shardd-init-{os.getpid()}-{next(self._counter)}")
        self.ranges = []
        fd = os.open(self.path,
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            offset = 0
            for t in tensors:
                data = t.detach().contiguous().view(-1)
                raw = data.view(torch.uint8) if data.element_size() != 1 else data
                view = memoryview(raw.numpy())
                written = 0
                while written < len(view):
                    written += os.write(fd, view[written:])
                self.ranges.append((offset, len(view)))
                offset += len(view)
            self.bytes = offset
        except BaseException:
            os.close(fd)
            self.close()
            raise
        os.close(fd)

    def ref(self, i, out):
        out.path = self.path
        out.segment_bytes = self.bytes
        out.byte_offset, out.byte_length = self.ranges[i]

    def close(self):
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class ShardedModule(nn.Module):
    """A module whose parameters live in shardd (made by wrap()).

    Calling it runs the module's forward (the hooks gather what it needs).
    Attributes: module (the wrapped module), client, units (names, in
    order), committed_step, next_step, registered (RegisterModelResponse),
    optimizer (a ShardedOptimizer, for LR schedulers), zero_copy, stats.
    The module's own parameters are not the committed ones between steps
    (the last forward's copy, or placeholders with zero_copy): read those
    with state_dict(), full_state_dict() or export().
    """

    def __init__(self, module, client, units, spec, lr, register_timeout,
                 shm_dir, init=None, load_from=None, zero_copy=False):
        super().__init__()
        self.module = module
        self.client = client
        self.zero_copy = zero_copy
        self._units = units
        self._spec = spec
        self._fresh = set()  # Units whose module copy is current.
        self._live = {}  # zero_copy: unit -> _Live, gathered for forward.
        self._backward_gathered = {}  # zero_copy: unit -> GatheredUnit.
        # Releases the next Gather carries (release_first): (unit, pass).
        # A unit the trainer no longer reads is released in the call that
        # gathers the next one, a round trip less per unit.
        self._deferred_releases = []
        self._release_queued = False
        # zero_copy: saved tensors kept as views of a unit, and the units
        # gathered again for backward because of them (cumulative); exports
        # done again after a node was lost during one.
        self.stats = {"saved_views": 0, "backward_regathers": 0,
                      "export_retries": 0}
        self._hooks = []
        self.registered = self._register(register_timeout, shm_dir, init,
                                         load_from)
        self.committed_step = self.registered.committed_step
        self.optimizer = ShardedOptimizer(self, lr)
        self._armed = False  # Inside backward(): the hooks reduce.
        self._hook_error = None
        self._waiting, self._cursor = [], -1
        self._install_grad_hooks()
        for index, unit in enumerate(units):
            if zero_copy:
                self._hooks.append(
                    unit.module.register_forward_pre_hook(
                        lambda _m, _args, i=index: self._enter_unit(i)))
                self._hooks.append(
                    unit.module.register_forward_hook(
                        lambda _m, _args, _out, i=index: self._leave_unit(i)))
            else:
                self._hooks.append(
                    unit.module.register_forward_pre_hook(
                        lambda _m, _args, i=index: self._gather_forward(i)))
        if zero_copy:
            self._free_module_parameters()

    # -- registration --------------------------------------------------
    def _register(self, timeout, shm_dir, init, load_from):
        values = None
        if load_from:
            pass  # The file's state replaces any initial values.
        elif isinstance(init, (str, os.PathLike)):
            # Each daemon reads its shard's elements from the file itself.
            path = os.path.abspath(os.fspath(init))
            for unit, unit_spec in zip(self._units, self._spec.units):
                for (_, fqn, _), tensor in zip(unit.tensors,
                                               unit_spec.tensors):
                    tensor.init.file.path = path
                    tensor.init.file.tensor = fqn
        else:
            tensors = []
            for unit in self._units:
                for _, fqn, p in unit.tensors:
                    value = p if init is None else init.get(fqn)
                    if value is None or tuple(value.shape) != tuple(p.shape):
                        raise ValueError(
                            f"init: {fqn!r} is missing or not of shape "
                            f"{tuple(p.shape)}")
                    tensors.append(value.detach().to(p.dtype))
            values = _InitValuesFile(shm_dir, tensors)
            i = 0
            for unit_spec in self._spec.units:
                for tensor in unit_spec.tensors:
                    values.ref(i, tensor.init.shared_memory)
                    i += 1
        try:
            request = trainer_pb2.RegisterModelRequest(
                model=self._spec,
                transport=common_pb2.TRANSPORT_SHARED_MEMORY,
                load_from=(os.path.abspath(os.fspath(load_from))
                           if load_from else ""))
            response = self._register_until_answered(request, timeout)
        finally:
            if values is not None:
                values.close()
        # The init refs name a file that is gone now; a re-attaching
        # registration ignores init, so keep the spec without them.
        for unit_spec in self._spec.units:
            for tensor in unit_spec.tensors:
                tensor.ClearField("init")
        self.client.wait_ready(timeout=timeout)
        return response

    # -- the step ------------------------------------------------------
    @property
    def units(self):
        return [u.name for u in self._units]

    @property
    def next_step(self):
        """The step to run now: committed_step + 1."""
        return self.committed_step + 1

    def forward(self, *args, **kwargs):  # pylint: disable=arguments-differ
        if not self.zero_copy:
            return self.module(*args, **kwargs)
        with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
            return self.module(*args, **kwargs)

    # -- zero_copy: the module computes on the daemon's buffers ----------
    def _free_module_parameters(self):
        """Each parameter's data becomes a placeholder of its shape that
        holds no memory (a broadcast scalar), until its unit is gathered."""
        for unit in self._units:
            for _, _, p in unit.tensors:
                p.data = torch.zeros((), dtype=p.dtype).expand(p.shape)

    def _enter_unit(self, index):
        live = self._live.get(index)
        if live is not None:  # Called again inside its own forward.
            live.depth += 1
            return
        hint = [index + 1] if index + 1 < len(self._units) else []
        gathered = self._gather(index, _client.FORWARD, prefetch=hint)
        views = gathered.params.tensors
        for name, _, p in self._units[index].tensors:
            view = views[name]
            # Another dtype (param_dtype): a converted copy, saved as usual.
            p.data = view if view.dtype == p.dtype else view.to(p.dtype)
        flat = gathered.params.flat
        self._live[index] = _Live(gathered, flat)

    def _leave_unit(self, index):
        live = self._live[index]
        if live.depth > 0:
            live.depth -= 1
            return
        del self._live[index]
        for _, _, p in self._units[index].tensors:
            p.data = torch.zeros((), dtype=p.dtype).expand(p.shape)
        self._deferred_releases.append((index, _client.FORWARD))

    def _gather(self, index, pass_, prefetch=()):
        """Gather, carrying the deferred releases (done first, in the same
        call)."""
        releases, self._deferred_releases = self._deferred_releases, []
        return self.client.gather(index, pass_, prefetch=prefetch,
                                  release_first=releases)

    def _flush_releases(self):
        """The deferred releases, sent now (before Step or an export)."""
        releases, self._deferred_releases = self._deferred_releases, []
        for index, pass_ in releases:
            self.client.release(index, pass_)

    def _pack(self, tensor):
        """A tensor autograd saves that lies in a gathered buffer is kept
        as (unit, layout): the buffer is released after the unit's forward
        and may then hold another unit."""
        if self._live and tensor.device.type == "cpu":
            address = tensor.data_ptr()
            for index, live in self._live.items():
                if live.begin <= address < live.end and (
                        tensor.dtype == live.dtype):
                    self.stats["saved_views"] += 1
                    return _SavedView(index, (address - live.begin) //
                                      tensor.element_size(),
                                      tuple(tensor.shape), tensor.stride())
        return tensor

    def _unpack(self, saved):
        """Backward needs a saved parameter view: gather its unit again
        (BACKWARD; released once the unit's gradient is reduced)."""
        if not isinstance(saved, _SavedView):
            return saved
        gathered = self._backward_gathered.get(saved.unit)
        if gathered is None:
            try:
                gathered = self._gather(saved.unit, _client.BACKWARD)
            except errors.ShardError as e:
                # torch turns it into a RuntimeError: backward() re-raises
                # this one instead.
                if self._hook_error is None:
                    self._hook_error = e
                raise
            self._backward_gathered[saved.unit] = gathered
            self.stats["backward_regathers"] += 1
            if not self._release_queued:
                # Released when this backward ends, even a plain
                # loss.backward() (a micro-batch) outside backward().
                torch.autograd.Variable._execution_engine.queue_callback(  # pylint: disable=protected-access
                    self._release_backward_leftovers)
                self._release_queued = True
        return gathered.params.flat.as_strided(saved.shape, saved.stride,
                                               saved.offset)

    def _release_backward_leftovers(self):
        """The units gathered for saved views that no reduction released."""
        self._release_queued = False
        try:
            for index in sorted(self._backward_gathered, reverse=True):
                self.client.release(index, _client.BACKWARD)
        except errors.ShardError as e:
            if self._hook_error is None:
                self._hook_error = e
            raise
        finally:
            self._backward_gathered.clear()

    def _gather_forward(self, index):
        if index in self._fresh:
            return
        hint = [index + 1] if (index + 1 < len(self._units) and
                               index + 1 not in self._fresh) else []
        unit = self._units[index]
        gathered = self._gather(index, _client.FORWARD, prefetch=hint)
        try:
            views = gathered.params.tensors
            with torch.no_grad():
                for name, _, p in unit.tensors:
                    p.copy_(views[name])
        finally:
            del gathered
            self._deferred_releases.append((index, _client.FORWARD))
        self._fresh.add(index)

    def _install_grad_hooks(self):
        """A hook that runs once a parameter's .grad holds this backward's
        gradient: torch >= 2.1's register_post_accumulate_grad_hook where
        present, else (torch 1.13) a hook on the parameter's AccumulateGrad
        node. The nodes are kept alive here, as DDP does, so that every
        graph reuses them."""
        self._accumulators = []
        with torch.enable_grad():
            for index, unit in enumerate(self._units):
                for k, (_, _, p) in enumerate(unit.tensors):
                    if hasattr(p, "register_post_accumulate_grad_hook"):
                        p.register_post_accumulate_grad_hook(
                            lambda _p, i=index, k=k: self._grad_ready(i, k))
                        continue
                    node = p.expand_as(p).grad_fn.next_functions[0][0]
                    node.register_hook(
                        lambda *_, i=index, k=k: self._grad_ready(i, k))
                    self._accumulators.append(node)

    def backward(self, loss, **kwargs):
        """loss.backward(**kwargs), handing each unit's gradient to shardd
        as soon as it is complete.

        Units are reduced last first, the same order on every rank whatever
        the order their gradients complete in: unit u goes when its
        parameters' gradients are all accumulated and every unit after it
        has gone, so its ReduceGrad (Gather BACKWARD for the slot, copy,
        ReduceGrad, Release) overlaps the backward of the units before it.
        Units whose parameters got no gradient go after loss.backward()
        returns (as zeros). The .grad of a reduced parameter is reset to
        None. A StepAborted or DaemonUnavailable met in the middle is raised
        once loss.backward() has returned.
        """
        count = len(self._units)
        self._waiting = [set(range(len(u.tensors))) for u in self._units]
        self._cursor = count - 1
        self._hook_error = None
        self._armed = True
        try:
            loss.backward(**kwargs)
        except RuntimeError:
            if self._hook_error is None:
                raise  # torch's own, not a failed call of ours.
        finally:
            self._armed = False
        if self._hook_error is not None:
            error, self._hook_error = self._hook_error, None
            raise error
        self._reduce_from_cursor(final=True)

    def _grad_ready(self, index, k):
        if not self._armed or self._hook_error is not None:
            return  # A plain loss.backward() (accumulation), or failed.
        self._waiting[index].discard(k)
        try:
            self._reduce_from_cursor(final=False)
        except Exception as e:  # pylint: disable=broad-except
            # Raised from backward() in the caller's thread, with its type.
            self._hook_error = e

    def _reduce_from_cursor(self, final):
        while self._cursor >= 0 and (final or
                                     not self._waiting[self._cursor]):
            self._reduce_unit(self._cursor)
            self._cursor -= 1

    def reduce_gradients(self):
        """Hands the .grad of every unit's parameters to the daemon, last
        unit first (after your own loss.backward() calls)."""
        self._cursor = len(self._units) - 1
        self._reduce_from_cursor(final=True)

    def _reduce_unit(self, index):
        unit = self._units[index]
        hint = [index - 1] if index > 0 else []
        gathered = self._gather(index, _client.BACKWARD, prefetch=hint)
        slots = gathered.grad.tensors
        for name, _, p in unit.tensors:
            if p.grad is None:
                slots[name].zero_()
            else:
                slots[name].copy_(p.grad)
        # Released by the same call (its BACKWARD gather, and the one
        # _unpack made).
        self.client.reduce_grad(index, gathered.grad, release=True)
        del gathered, slots
        self._backward_gathered.pop(index, None)
        for _, _, p in unit.tensors:
            p.grad = None

    def step(self, lr=None):
        """Commits the step in the daemon (its optimizer); the StepResponse.

        `lr`: this step's learning rate (the same on every rank); None: the
        optimizer object's (self.optimizer.param_groups[0]["lr"]: what an
        LR scheduler set, else the configured one).
        """
        if lr is not None:
            return self._commit(lr)
        return self.optimizer.step()  # Counted by a scheduler's wrapper.

    def _commit(self, lr):
        self._flush_releases()
        response = self.client.step(self.next_step, learning_rate=lr)
        self.committed_step = response.committed_step
        self._fresh.clear()
        return response

    def recover(self, timeout=None):
        """After StepAborted or DaemonUnavailable: back to a ready daemon.

        Drops what the failed step left (gathered units, .grad, the module
        copies), re-attaches when the daemon is unavailable (RegisterModel
        with the same model, retried until a daemon, e.g. the replacement
        at the same socket, answers; it recovers the state from a replica
        and ignores initial values), then waits until the daemon is ready.
        Run next_step again afterwards, with the same data. `timeout`:
        seconds in all (None: the client's register_timeout). Raises
        DaemonUnavailable when no daemon answered in time, JobFailed when
        the job has failed.
        """
        timeout = self.client.register_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        for unit in self._units:
            for _, _, p in unit.tensors:
                p.grad = None
        self._fresh.clear()
        self._backward_gathered.clear()
        self._deferred_releases = []  # Released below, with the rest.
        self._release_queued = False
        self._live.clear()
        if self.zero_copy:
            self._free_module_parameters()
        while True:
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise errors.DaemonUnavailable(
                        grpc.StatusCode.UNAVAILABLE,
                        f"recover: no ready daemon within {timeout} s")
                if not self.client.get_status(timeout=remaining).registered:
                    # A replacement daemon that already listens.
                    self._reattach(deadline)
                    continue
                for index in range(len(self._units)):
                    for pass_ in (_client.FORWARD, _client.BACKWARD):
                        self.client.release(index, pass_, timeout=remaining)
                ready = self.client.wait_ready(timeout=remaining)
                self.committed_step = ready.committed_step
                return ready
            except errors.DaemonUnavailable:
                if time.monotonic() >= deadline:
                    raise
                self._reattach(deadline)

    def _register_until_answered(self, request, timeout):
        """RegisterModel until the daemon answers it, within `timeout` s.

        The daemon may not listen yet (a sidecar, or a supervisor, starting
        both at once) or be replaced meanwhile (DaemonUnavailable), and the
        epoch may change while the ranks register (StepAborted): both are
        retried, as trainer.proto says; any other error is raised.
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.client.wait_connected(
                    timeout=max(0.05, deadline - time.monotonic()))
                return self.client.register_model(
                    request, timeout=max(0.05, deadline - time.monotonic()))
            except (errors.DaemonUnavailable, errors.StepAborted):
                if time.monotonic() >= deadline:
                    raise

    def _reattach(self, deadline):
        """RegisterModel again once a daemon listens (until `deadline`)."""
        try:
            # Blocks until the channel connects (the replacement listens).
            self.client.wait_connected(
                timeout=max(0.05, min(1.0, deadline - time.monotonic())))
            request = trainer_pb2.RegisterModelRequest(
                model=self._spec,
                transport=common_pb2.TRANSPORT_SHARED_MEMORY)
            self.registered = self.client.register_model(
                request, timeout=max(0.05, deadline - time.monotonic()))
            self.committed_step = self.registered.committed_step
        except (errors.DaemonUnavailable, errors.StepAborted):
            pass  # Not there yet, or its epoch changed: the caller retries.

    # -- state ---------------------------------------------------------
    def full_state_dict(self):
        """{fqn: tensor} of the committed parameters (a copy).

        Collective: every rank of the shard group must call it between
        steps (each unit is gathered FORWARD and released).
        """
        state = {}
        self._flush_releases()
        for index, unit in enumerate(self._units):
            gathered = self.client.gather(index, _client.FORWARD)
            try:
                views = gathered.params.tensors
                for name, fqn, _ in unit.tensors:
                    state[fqn] = views[name].clone()
            finally:
                del gathered
                self.client.release(index, _client.FORWARD)
        return state

    def state_dict(self, destination=None, prefix="", keep_vars=False):  # pylint: disable=arguments-differ
        """The module's state dict with the committed parameters, by fqn.

        Collective (every rank of the shard group, between steps), like
        FSDP's full state dict: the parameters come from full_state_dict()
        (in param_dtype; the fp32 masters: export()); buffers and frozen
        parameters from the module. Keys are the module's own ("0.weight"),
        so it loads into an unwrapped module.
        """
        state = self.module.state_dict(destination=destination, prefix=prefix,
                                       keep_vars=keep_vars)
        for fqn, value in self.full_state_dict().items():
            state[prefix + fqn] = value
        return state

    def load_state_dict(self, state_dict, strict=True):
        raise NotImplementedError(
            "shardd.torch: the parameters live in the daemons; give initial "
            "values to wrap(init=...), or continue from an export with "
            "wrap(load_from=...)")

    def export(self, path, include_optimizer_state=False, overwrite=True,
               timeout=None, attempts=3):
        """FULL export (ExportState) to the safetensors file `path`.

        Collective: every rank calls it between steps; rank 0's daemon
        writes the file, and every rank returns or raises what rank 0's
        export ended with. load_export(path, self) reads it back by fqn.
        A node lost during the export aborts it on every rank (StepAborted
        or DaemonUnavailable): export() then recover()s and exports again,
        `attempts` times in all before it raises; a rank that did not learn
        how an attempt ended is told at once when rank 0 wrote the file in
        it. `timeout`: seconds per attempt and per recovery.
        """
        for attempt in range(1, attempts + 1):
            request = trainer_pb2.ExportStateRequest(
                path=os.path.abspath(path),
                layout=trainer_pb2.EXPORT_LAYOUT_FULL,
                include_optimizer_state=include_optimizer_state,
                overwrite=overwrite, step=self.committed_step)
            self._flush_releases()
            try:
                return self.client.export_state(request, timeout=timeout)
            except (errors.StepAborted, errors.DaemonUnavailable):
                if attempt == attempts:
                    raise
                self.stats["export_retries"] += 1
                self.recover(timeout=timeout)

    def export_names(self):
        """{name in a FULL export: fqn} of every sharded parameter."""
        return {f"{u.name}.{name}": fqn
                for u in self._units for name, fqn, _ in u.tensors}

    def remove_hooks(self):
        for hook in self._hooks:
            hook.remove()
        self._hooks = []


def wrap(module, client, units=(), optimizer=None, max_grad_norm=0.0,
         no_weight_decay=None, strategy="FULL_SHARD", sharding_factor=0,
         param_dtype=None, init=None, load_from=None, zero_copy=False,
         register_timeout=None, shm_dir="/dev/shm"):
    """Registers `module` with the daemon behind `client`; a ShardedModule.

    Args:
      module: the nn.Module; its current parameters are the initial values
        (same on every rank: seed the model identically).
      client: a shardd.client.TrainerClient of this node's daemon.
      units: submodule names (["0", "2"]; one name alone: "layers"), a
        tuple of module classes (every instance is a unit, like FSDP's
        auto-wrap), or a callable (name, module) -> bool. A unit holds the
        parameters under its module that no deeper unit holds; the rest
        form the root unit (named "root"), gathered first. Units are
        ordered as their modules are (named_modules); the prefetch hints
        assume that forward runs them in that order.
      optimizer: AdamW(...) or SGD(...) (torch's hyper-parameters).
      max_grad_norm: clip the global gradient norm to it (0: no clipping),
        as torch.nn.utils.clip_grad_norm_.
      no_weight_decay: parameters without weight decay: an iterable of fqns,
        or a callable (fqn, param) -> bool (e.g. lambda n, p: p.ndim == 1).
      strategy: "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD" or
        "HYBRID_SHARD" (then sharding_factor F is required).
      param_dtype: torch.bfloat16 or torch.float16: the daemon hands out
        (gathers) parameters in that dtype and takes and reduces gradients
        in it, while its masters and optimizer state stay fp32 (mixed
        precision). The module computes in its own dtype, on the gathered
        values converted to it. None: the module's dtype.
      init: the initial values. None: the module's parameters now. A state
        dict ({fqn: tensor}): those values. A path: a safetensors file with
        a tensor per fqn (save_safetensors(module.state_dict(), path), or
        safetensors' save_file), which each daemon reads itself (its
        shard's elements only; the path must be the same on every rank).
        Ignored when the daemon already holds the model (re-attach).
      load_from: continue a job: a FULL export made with
        include_optimizer_state=True (parameters, optimizer state and step)
        or a directory of a SHARDED export, at any W and F
        (RegisterModelRequest.load_from); names are the export's
        ("<unit>.<tensor>"). Replaces init.
      zero_copy: the module computes on the daemon's gathered buffers
        themselves (read-only mappings), and holds no parameter memory
        outside its units' forward and backward: ZeRO-3 in the trainer
        too. Saved activations that are views of a unit's parameters are
        kept as (unit, layout) and the unit is gathered again when backward
        needs them (saved_tensors_hooks). False: the module keeps its own
        copy (see the module docstring). Requires that the parameters are
        only read inside their unit's forward, and never written.
      register_timeout: seconds for RegisterModel and the first WaitReady
        (None: the client's register_timeout).
      shm_dir: where the initial values file goes (a tmpfs).
    """
    if optimizer is None:
        raise ValueError("optimizer: AdamW(...) or SGD(...) is required")
    if strategy not in _STRATEGIES:
        raise ValueError(f"strategy: one of {sorted(_STRATEGIES)}, got "
                         f"{strategy!r}")
    if callable(no_weight_decay):
        excluded = no_weight_decay
    else:
        names = set(no_weight_decay or ())
        excluded = lambda fqn, _p: fqn in names  # pylint: disable=unnecessary-lambda-assignment
    built = _build_units(module, units)
    if not callable(no_weight_decay):
        unknown = names - {fqn for u in built for _, fqn, _ in u.tensors}
        if unknown:
            raise ValueError(
                f"no_weight_decay: no sharded parameter {sorted(unknown)[0]!r}")
    spec = common_pb2.ModelSpec()
    for unit in built:
        unit_spec = spec.units.add(name=unit.name)
        for name, fqn, p in unit.tensors:
            unit_spec.tensors.add(name=name, shape=list(p.shape),
                                  dtype=_DTYPES[p.dtype],
                                  exclude_from_weight_decay=bool(
                                      excluded(fqn, p)))
    config = spec.config
    config.strategy = _STRATEGIES[strategy]
    config.sharding_factor = sharding_factor
    config.max_grad_norm = max_grad_norm
    if param_dtype is not None:
        if param_dtype not in _DTYPES:
            raise ValueError(f"param_dtype: one of {list(_DTYPES)}, got "
                             f"{param_dtype}")
        config.param_dtype = _DTYPES[param_dtype]
    optimizer.to_proto(config.optimizer)
    if register_timeout is None:
        register_timeout = client.register_timeout
    if zero_copy:
        # The units live at once in a forward (a unit and those nesting
        # it), plus one for the prefetch of the next.
        nesting = max(sum(1 for o in built if o.prefix == "" or
                          u.prefix.startswith(o.prefix)) for u in built)
        config.max_gathered_units = max(2, nesting + 1)
    return ShardedModule(module, client, built, spec, optimizer.lr,
                         register_timeout, shm_dir, init, load_from,
                         zero_copy)


_SAFETENSORS_DTYPES = {
    "F32": torch.float32,
    "BF16": torch.bfloat16,
    "F16": torch.float16,
    "F64": torch.float64,
}


_SAFETENSORS_NAMES = {dtype: name for name, dtype in _SAFETENSORS_DTYPES.items()}


def save_safetensors(tensors, path, metadata=None):
    """Writes {name: tensor} to a safetensors file (torch 1.13 has no writer).

    E.g. save_safetensors(module.state_dict(), path) for wrap(init=path).
    """
    header, offset, blobs = {}, 0, []
    for name, tensor in tensors.items():
        tensor = tensor.detach().contiguous().cpu()
        if tensor.dtype not in _SAFETENSORS_NAMES:
            raise ValueError(f"{name}: dtype {tensor.dtype} not supported")
        raw = tensor.view(-1).view(torch.uint8).numpy().tobytes() if (
            tensor.numel()) else b""
        header[name] = {"dtype": _SAFETENSORS_NAMES[tensor.dtype],
                        "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)  # The data starts 8-aligned.
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for raw in blobs:
            f.write(raw)


def read_safetensors(path):
    """({name: tensor}, metadata) of a safetensors file (copies)."""
    with open(path, "rb") as f:
        (header_bytes,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_bytes))
        data = f.read()
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = _SAFETENSORS_DTYPES[info["dtype"]]
        raw = bytearray(data[begin:end])
        flat = (torch.frombuffer(raw, dtype=dtype)
                if raw else torch.empty(0, dtype=dtype))
        tensors[name] = flat.view(info["shape"]) if info["shape"] else (
            flat.view(()))
    return tensors, metadata


def load_export(path, sharded):
    """A FULL export's parameters as a state dict keyed by fqn.

    `sharded`: the ShardedModule that exported it, or its export_names()
    (the root unit's tensors are exported as "root.<fqn>"). Optimizer state
    in the file is left out; read it with read_safetensors. The result
    loads into a fresh module with load_state_dict (strict=False when the
    module has buffers or frozen parameters, which are not sharded).
    """
    tensors, _ = read_safetensors(path)
    names = (sharded.export_names()
             if isinstance(sharded, ShardedModule) else dict(sharded))
    missing = [name for name in names if name not in tensors]
    if missing:
        raise KeyError(f"{path}: no tensor {missing[0]!r} in the export")
    return {fqn: tensors[name] for name, fqn in names.items()}

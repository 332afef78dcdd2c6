"""shardd.torch without a daemon: the ModelSpec wrap registers, and the
order and content of the reductions backward() makes (a fake client).

A fake client records the RegisterModelRequest and reads the initial
values file while RegisterModel "runs" (the file is removed afterwards).
"""

import json
import os
import struct

import grpc
import pytest
import torch
from torch import nn

import shardd.torch as st
from shardd import errors
from shardd.v1 import common_pb2, trainer_pb2


class FakeClient:
    register_timeout = 5.0

    def __init__(self):
        self.request = None
        self.init_files = {}
        self.steps = []

    def wait_connected(self, timeout=None):  # pylint: disable=unused-argument
        """Connected from the start (a daemon that listens)."""

    def register_model(self, request, timeout=None):
        assert 0 < timeout <= self.register_timeout
        self.request = request
        for unit in request.model.units:
            for tensor in unit.tensors:
                ref = tensor.init.shared_memory
                if (tensor.init.HasField("shared_memory") and
                        ref.path not in self.init_files):
                    assert os.path.getsize(ref.path) == ref.segment_bytes
                    with open(ref.path, "rb") as f:
                        self.init_files[ref.path] = f.read()
        return trainer_pb2.RegisterModelResponse(committed_step=3)

    def wait_ready(self, timeout=None):
        return trainer_pb2.WaitReadyResponse(committed_step=3)

    def step(self, step, learning_rate=None, timeout=None):
        self.steps.append((step, learning_rate))
        return trainer_pb2.StepResponse(committed_step=step,
                                        learning_rate=learning_rate)


def nested_model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(3, 4),
        nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 4)),
        nn.Linear(4, 2))


def spec_layout(spec):
    return [(u.name, [t.name for t in u.tensors]) for u in spec.units]


def test_named_units_nest_and_the_rest_is_the_root_unit(shm_dir):
    client = FakeClient()
    model = st.wrap(nested_model(), client, units=["1.0", "1"],
                    optimizer=st.SGD(lr=0.1), shm_dir=shm_dir)
    spec = client.request.model
    # Root first, then the named units in module order; a unit holds what
    # no deeper unit holds, its tensors named relative to its module.
    assert spec_layout(spec) == [
        ("root", ["0.weight", "0.bias", "2.weight", "2.bias"]),
        ("1", ["2.weight", "2.bias"]),
        ("1.0", ["weight", "bias"]),
    ]
    assert model.units == ["root", "1", "1.0"]
    assert model.export_names() == {
        "root.0.weight": "0.weight", "root.0.bias": "0.bias",
        "root.2.weight": "2.weight", "root.2.bias": "2.bias",
        "1.2.weight": "1.2.weight", "1.2.bias": "1.2.bias",
        "1.0.weight": "1.0.weight", "1.0.bias": "1.0.bias",
    }
    assert model.committed_step == 3 and model.next_step == 4
    assert client.request.transport == common_pb2.TRANSPORT_SHARED_MEMORY
    # The init refs are dropped from the kept spec (their file is gone).
    assert all(not t.HasField("init") for u in model._spec.units  # pylint: disable=protected-access
               for t in u.tensors)


def test_initial_values_are_the_modules_in_a_removed_shm_file(shm_dir):
    client = FakeClient()
    module = nested_model()
    st.wrap(module, client, units=(nn.Linear,), optimizer=st.SGD(lr=0.1),
            shm_dir=shm_dir)
    spec = client.request.model
    assert [u.name for u in spec.units] == ["0", "1.0", "1.2", "2"]
    params = dict(module.named_parameters())
    (path,) = client.init_files
    data = client.init_files[path]
    for unit in spec.units:
        for tensor in unit.tensors:
            ref = tensor.init.shared_memory
            assert ref.path == path and path.startswith(shm_dir)
            assert tensor.dtype == common_pb2.DTYPE_FP32
            value = params[f"{unit.name}.{tensor.name}"]
            assert list(tensor.shape) == list(value.shape)
            raw = data[ref.byte_offset:ref.byte_offset + ref.byte_length]
            assert raw == value.detach().numpy().tobytes()
    assert not os.path.exists(path)
    assert os.listdir(shm_dir) == []


def test_policy_callable_optimizer_clip_and_weight_decay(shm_dir):
    client = FakeClient()
    st.wrap(nested_model(), client,
            units=lambda name, m: isinstance(m, nn.Sequential) and name,
            optimizer=st.AdamW(), max_grad_norm=1.5,
            no_weight_decay=lambda fqn, p: p.ndim == 1,
            strategy="HYBRID_SHARD", sharding_factor=2,
            param_dtype=torch.bfloat16, shm_dir=shm_dir)
    spec = client.request.model
    assert [u.name for u in spec.units] == ["root", "1"]
    for unit in spec.units:
        for tensor in unit.tensors:
            assert tensor.exclude_from_weight_decay == (tensor.name.endswith(
                "bias")), tensor.name
    config = spec.config
    assert config.strategy == common_pb2.SHARDING_STRATEGY_HYBRID_SHARD
    assert config.sharding_factor == 2
    assert config.max_grad_norm == 1.5
    assert config.param_dtype == common_pb2.DTYPE_BF16
    # The model's tensors (and init values) stay fp32: the masters' dtype.
    assert {t.dtype for u in spec.units for t in u.tensors
           } == {common_pb2.DTYPE_FP32}
    # torch.optim.AdamW's defaults, taken literally by the daemon.
    defaults = torch.optim.AdamW([torch.zeros(1)]).defaults
    adamw = config.optimizer.adamw
    assert (adamw.lr, (adamw.beta1, adamw.beta2), adamw.eps,
            adamw.weight_decay) == (defaults["lr"], defaults["betas"],
                                    defaults["eps"],
                                    defaults["weight_decay"])


def test_sgd_and_weight_decay_by_name(shm_dir):
    client = FakeClient()
    st.wrap(nested_model(), client, units=["1"],
            optimizer=st.SGD(lr=0.5, momentum=0.9, weight_decay=0.1,
                             nesterov=True),
            no_weight_decay=["0.bias"], strategy="NO_SHARD", shm_dir=shm_dir)
    config = client.request.model.config
    assert config.param_dtype == common_pb2.DTYPE_UNSPECIFIED
    sgd = config.optimizer.sgd
    assert (sgd.lr, sgd.momentum, sgd.dampening, sgd.weight_decay,
            sgd.nesterov) == (0.5, 0.9, 0.0, 0.1, True)
    assert config.strategy == common_pb2.SHARDING_STRATEGY_NO_SHARD
    excluded = [(u.name, t.name) for u in client.request.model.units
                for t in u.tensors if t.exclude_from_weight_decay]
    assert excluded == [("root", "0.bias")]


def test_one_unit_named_alone(shm_dir):
    client = FakeClient()
    st.wrap(nested_model(), client, units="1", optimizer=st.SGD(lr=0.1),
            shm_dir=shm_dir)
    assert [u.name for u in client.request.model.units] == ["root", "1"]


class InterruptedClient(FakeClient):
    """RegisterModel fails first as the daemon being replaced, then as the
    epoch changing while the ranks register (both retryable), then works;
    or fails for good with a code that is not retried."""

    def __init__(self, failures):
        super().__init__()
        self.failures = list(failures)
        self.attempts = 0

    def register_model(self, request, timeout=None):
        self.attempts += 1
        if self.failures:
            raise self.failures.pop(0)
        return super().register_model(request, timeout)


def test_registration_is_retried_while_the_daemon_or_epoch_changes(shm_dir):
    client = InterruptedClient([
        errors.DaemonUnavailable(grpc.StatusCode.UNAVAILABLE,
                                 "no shardd daemon at unix:/s (Socket closed)"),
        errors.StepAborted(grpc.StatusCode.ABORTED,
                           "rendezvous wait in epoch 2: epoch 2 is stale"),
    ])
    sharded = st.wrap(nested_model(), client, units="1",
                      optimizer=st.SGD(lr=0.1), shm_dir=shm_dir)
    assert client.attempts == 3
    assert sharded.committed_step == 3


def test_registration_errors_that_are_answers_are_not_retried(shm_dir):
    refused = errors.ShardError(grpc.StatusCode.FAILED_PRECONDITION,
                                "model differs from rank 1's")
    client = InterruptedClient([refused])
    with pytest.raises(errors.ShardError) as raised:
        st.wrap(nested_model(), client, units="1",
                optimizer=st.SGD(lr=0.1), shm_dir=shm_dir)
    assert raised.value is refused
    assert client.attempts == 1


def test_frozen_parameters_stay_out(shm_dir):
    client = FakeClient()
    module = nested_model()
    module[0].weight.requires_grad_(False)
    st.wrap(module, client, optimizer=st.SGD(lr=0.1), shm_dir=shm_dir)
    (unit,) = client.request.model.units
    assert "0.weight" not in [t.name for t in unit.tensors]
    assert len(unit.tensors) == 7  # 4 Linear layers, 8 parameters, 1 frozen.


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(units=["nope"]), ValueError, "no submodule named 'nope'"),
    (dict(units=["1", "1"]), ValueError, "named twice"),
    (dict(units=[""]), ValueError, "not a submodule name"),
    (dict(strategy="ZERO3"), ValueError, "strategy"),
    (dict(optimizer=None), ValueError, "optimizer"),
    (dict(no_weight_decay=["0.b"]), ValueError, "no sharded parameter '0.b'"),
    (dict(param_dtype=torch.float64), ValueError, "param_dtype"),
])
def test_bad_arguments_are_refused_before_registering(shm_dir, kwargs, error,
                                                      match):
    client = FakeClient()
    args = dict(optimizer=st.SGD(lr=0.1), shm_dir=shm_dir)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        st.wrap(nested_model(), client, **args)
    assert client.request is None
    assert os.listdir(shm_dir) == []


def test_a_shared_parameter_is_refused_clearly(shm_dir):
    module = nested_model()
    module[2].weight = module[1][0].weight  # Tied (shapes do not matter).
    with pytest.raises(NotImplementedError, match="shared"):
        st.wrap(module, FakeClient(), optimizer=st.SGD(lr=0.1),
                shm_dir=shm_dir)


def test_read_safetensors(tmp_path):
    a = torch.arange(6, dtype=torch.float32).view(2, 3)
    b = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)
    header = {
        "__metadata__": {"optimizer": "adamw"},
        "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
        "b": {"dtype": "BF16", "shape": [2], "data_offsets": [24, 28]},
    }
    raw = json.dumps(header).encode()
    path = tmp_path / "t.safetensors"
    path.write_bytes(
        struct.pack("<Q", len(raw)) + raw + a.numpy().tobytes() +
        b.view(torch.int16).numpy().tobytes())
    tensors, metadata = st.read_safetensors(str(path))
    assert metadata == {"optimizer": "adamw"}
    assert torch.equal(tensors["a"], a) and torch.equal(tensors["b"], b)
    state = st.load_export(str(path), {"a": "layer.weight"})
    assert list(state) == ["layer.weight"]
    with pytest.raises(KeyError, match="no tensor 'c'"):
        st.load_export(str(path), {"c": "x"})


def test_an_lr_scheduler_drives_the_learning_rate_of_each_step(shm_dir):
    client = FakeClient()
    model = st.wrap(nested_model(), client, optimizer=st.AdamW(lr=0.5),
                    shm_dir=shm_dir)
    assert isinstance(model.optimizer, torch.optim.Optimizer)
    scheduler = torch.optim.lr_scheduler.StepLR(model.optimizer, 1, gamma=0.5)
    for _ in range(3):
        model.step()
        scheduler.step()
    model.step(lr=0.01)  # An explicit lr wins for this step only.
    model.optimizer.step()
    assert client.steps == [(4, 0.5), (5, 0.25), (6, 0.125), (7, 0.01),
                            (8, 0.0625)]
    assert model.committed_step == 8


class _View:
    def __init__(self, tensors):
        # One flat buffer that the tensors are views of, as the daemon's.
        self.flat = torch.cat([t.reshape(-1) for t in tensors.values()])
        self.tensors, offset = {}, 0
        for name, t in tensors.items():
            self.tensors[name] = self.flat[offset:offset + t.numel()].view(
                t.shape)
            offset += t.numel()


class _Gathered:
    def __init__(self, params, grad):
        self.params = _View(params)
        self.grad = None if grad is None else _View(grad)


class StepClient(FakeClient):
    """Serves gathers from the initial values; records the reductions."""

    def __init__(self, module):
        super().__init__()
        self.module = module
        self.values = {n: p.detach().clone()
                       for n, p in module.named_parameters()}
        self.reduced = []  # (unit, {tensor: grad}, 0.weight's grad then)
        self.fail_unit = None
        self.fail_gather = None
        self.gathers = []

    def _unit_tensors(self, unit):
        spec = self.request.model.units[unit]
        return [(t.name,
                 t.name if spec.name == "root" else f"{spec.name}.{t.name}")
                for t in spec.tensors]

    def gather(self, unit, pass_, prefetch=(), timeout=None,
               release_first=()):
        for released, pass_released in release_first:  # As the daemon.
            self.release(released, pass_released)
        self.gathers.append((unit, pass_))
        if (unit, pass_) == self.fail_gather:
            raise errors.StepAborted(grpc.StatusCode.ABORTED, "peer")
        params = {n: self.values[fqn] for n, fqn in self._unit_tensors(unit)}
        grad = None
        if pass_ == 2:  # BACKWARD
            grad = {n: torch.full_like(v, float("nan"))
                    for n, v in params.items()}
        return _Gathered(params, grad)

    def release(self, unit, pass_=1, reshard=False, timeout=None):
        self.gathers.append((unit, -pass_))

    def calls(self):
        """Round trips so far: a release carried by a gather or a
        reduction is not one."""
        return len(self.gathers) - sum(1 for _, p in self.gathers if p < 0)

    def held(self):
        """Units gathered BACKWARD and not released since."""
        held = set()
        for unit, pass_ in self.gathers:
            if pass_ == 2:
                held.add(unit)
            elif pass_ == -2:
                held.discard(unit)
        return held

    def reduce_grad(self, unit, grad, accumulate_only=False, timeout=None,
                    release=False):
        if unit == self.fail_unit:
            raise errors.StepAborted(grpc.StatusCode.ABORTED, "peer")
        first = self.module[0].weight.grad
        self.reduced.append((unit, {n: t.clone()
                                    for n, t in grad.tensors.items()},
                             None if first is None else first.clone()))
        if release:
            self.release(unit, 2)


def three_layers():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 4),
                         nn.ReLU(), nn.Linear(4, 2))


def expected_grads(x):
    reference = three_layers()
    reference(x).square().sum().backward()
    return {n: p.grad for n, p in reference.named_parameters()}


def test_backward_reduces_each_unit_as_its_gradients_complete(shm_dir):
    module = three_layers()
    client = StepClient(module)
    model = st.wrap(module, client, units=(nn.Linear,),
                    optimizer=st.SGD(lr=0.1), shm_dir=shm_dir)
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(2))
    model.backward(model(x).square().sum())
    assert [unit for unit, _, _ in client.reduced] == [2, 1, 0]
    # Units 2 and 1 went while backward had not reached layer 0 yet.
    assert client.reduced[0][2] is None and client.reduced[1][2] is None
    expected = expected_grads(x)
    names = ["0", "2", "4"]
    for unit, grads, _ in client.reduced:
        for tensor, value in grads.items():
            assert torch.equal(value, expected[f"{names[unit]}.{tensor}"])
    assert all(p.grad is None for p in module.parameters())


def test_accumulated_micro_batches_are_reduced_once(shm_dir):
    module = three_layers()
    client = StepClient(module)
    model = st.wrap(module, client, units=(nn.Linear,),
                    optimizer=st.SGD(lr=0.1), shm_dir=shm_dir)
    x = torch.randn(6, 3, generator=torch.Generator().manual_seed(2))
    model(x[:3]).square().sum().backward()  # No reduction: plain backward.
    assert client.reduced == []
    model.backward(model(x[3:]).square().sum())
    assert [unit for unit, _, _ in client.reduced] == [2, 1, 0]
    expected = expected_grads(x)
    for tensor, value in client.reduced[2][1].items():
        assert torch.allclose(value, expected[f"0.{tensor}"], atol=1e-6)


def test_a_failure_inside_backward_is_raised_with_its_type(shm_dir):
    module = three_layers()
    client = StepClient(module)
    model = st.wrap(module, client, units=(nn.Linear,),
                    optimizer=st.SGD(lr=0.1), shm_dir=shm_dir)
    client.fail_unit = 1
    with pytest.raises(errors.StepAborted):
        model.backward(model(torch.ones(2, 3)).sum())
    assert [unit for unit, _, _ in client.reduced] == [2]


def test_init_from_a_state_dict_or_a_safetensors_file(shm_dir, tmp_path):
    source = nested_model()
    with torch.no_grad():
        for p in source.parameters():
            p.add_(1.0)
    state = source.state_dict()
    client = FakeClient()
    st.wrap(nested_model(), client, units=["1"], optimizer=st.SGD(lr=0.1),
            init=state, shm_dir=shm_dir)
    ((path, data),) = client.init_files.items()
    for unit in client.request.model.units:
        for tensor in unit.tensors:
            ref = tensor.init.shared_memory
            fqn = (tensor.name if unit.name == "root" else
                   f"{unit.name}.{tensor.name}")
            assert data[ref.byte_offset:ref.byte_offset + ref.byte_length] == (
                state[fqn].numpy().tobytes()), fqn
    assert not os.path.exists(path)

    file = str(tmp_path / "init.safetensors")
    st.save_safetensors(state, file)
    tensors, _ = st.read_safetensors(file)
    assert all(torch.equal(tensors[n], v) for n, v in state.items())
    client = FakeClient()
    st.wrap(nested_model(), client, units=["1"], optimizer=st.SGD(lr=0.1),
            init=file, shm_dir=shm_dir)
    inits = [(t.init.file.path, t.init.file.tensor)
             for u in client.request.model.units for t in u.tensors]
    assert inits == [(file, n) for n in ["0.weight", "0.bias", "2.weight",
                                         "2.bias", "1.0.weight", "1.0.bias",
                                         "1.2.weight", "1.2.bias"]]
    assert client.init_files == {} and os.listdir(shm_dir) == []

    del state["2.bias"]
    with pytest.raises(ValueError, match="'2.bias' is missing"):
        st.wrap(nested_model(), FakeClient(), optimizer=st.SGD(lr=0.1),
                init=state, shm_dir=shm_dir)


def test_load_from_names_the_export_and_writes_no_values(shm_dir, tmp_path):
    client = FakeClient()
    model = st.wrap(nested_model(), client, optimizer=st.AdamW(),
                    load_from=str(tmp_path / "x.safetensors"),
                    shm_dir=shm_dir)
    assert client.request.load_from == str(tmp_path / "x.safetensors")
    assert all(not t.HasField("init") for u in client.request.model.units
               for t in u.tensors)
    assert os.listdir(shm_dir) == []
    with pytest.raises(NotImplementedError, match="live in the daemons"):
        model.load_state_dict({})


class RecoveringClient(FakeClient):
    """A daemon replaced under the trainer: first gone, then unregistered."""

    def __init__(self):
        super().__init__()
        self.script = ["gone", "unregistered", "registered"]
        self.calls = []

    def get_status(self, timeout=None):
        state = self.script[0]
        self.calls.append(("status", state))
        if state == "gone":
            self.script.pop(0)
            raise errors.DaemonUnavailable(grpc.StatusCode.UNAVAILABLE, "gone")
        return trainer_pb2.GetStatusResponse(
            registered=state == "registered")

    def wait_connected(self, timeout=None):
        self.calls.append(("connect",))

    def register_model(self, request, timeout=None):
        if self.request is not None:  # A re-attach.
            self.calls.append(("register",))
            self.script = ["registered"]
            assert all(not t.HasField("init") for u in request.model.units
                       for t in u.tensors)
            return trainer_pb2.RegisterModelResponse(committed_step=5)
        return super().register_model(request, timeout=self.register_timeout)

    def release(self, unit, pass_=1, reshard=False, timeout=None):
        self.calls.append(("release", unit, pass_))

    def wait_ready(self, timeout=None):
        return trainer_pb2.WaitReadyResponse(committed_step=5)


@pytest.mark.parametrize("first", ["gone", "unregistered"])
def test_recover_reattaches_to_a_replacement_daemon(shm_dir, first):
    """The daemon is gone (UNAVAILABLE), or its replacement already listens
    but holds no model: either way recover() registers again, and never
    sends the replacement a Release before that."""
    client = RecoveringClient()
    model = st.wrap(nested_model(), client, units=["1"],
                    optimizer=st.SGD(lr=0.1), shm_dir=shm_dir)
    client.calls.clear()
    client.script = [first]
    ready = model.recover(timeout=10)
    assert ready.committed_step == 5 and model.next_step == 6
    kinds = [c[0] for c in client.calls]
    assert kinds[:3] == ["status", "connect", "register"], kinds
    assert kinds[3:] == ["status"] + ["release"] * 4, kinds


def test_zero_copy_computes_on_gathered_views_and_regathers_saved_ones(
        shm_dir):
    module = three_layers()
    client = StepClient(module)
    model = st.wrap(module, client, units=(nn.Linear,),
                    optimizer=st.SGD(lr=0.1), zero_copy=True, shm_dir=shm_dir)
    assert client.request.model.config.max_gathered_units == 2
    assert all(p.data.stride() == (0,) * p.ndim for p in module.parameters())
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(2))
    model.backward(model(x).square().sum())
    # Layers 1 and 2 saved their weights (layer 0's input needs no grad).
    assert model.stats == {"saved_views": 2, "backward_regathers": 2,
                           "export_retries": 0}
    assert [unit for unit, _, _ in client.reduced] == [2, 1, 0]
    expected = expected_grads(x)
    names = ["0", "2", "4"]
    for unit, grads, _ in client.reduced:
        for tensor, value in grads.items():
            assert torch.equal(value, expected[f"{names[unit]}.{tensor}"])
    # No parameter memory left in the module, no unit left gathered.
    assert all(p.data.stride() == (0,) * p.ndim for p in module.parameters())
    assert client.held() == set()


def test_a_step_carries_each_release_in_the_next_call(shm_dir):
    """Copy mode, three units: each forward release rides on the next
    Gather, each backward one on its ReduceGrad; nothing is held at Step."""
    module = three_layers()
    client = StepClient(module)
    model = st.wrap(module, client, units=(nn.Linear,),
                    optimizer=st.SGD(lr=0.1), shm_dir=shm_dir)
    model.backward(model(torch.ones(2, 3)).sum())
    model.step()
    forward = [(0, 1), (0, -1), (1, 1), (1, -1), (2, 1)]
    backward = [(2, -1), (2, 2), (2, -2), (1, 2), (1, -2), (0, 2), (0, -2)]
    assert client.gathers == forward + backward
    assert client.calls() == 6 and len(client.reduced) == 3
    assert client.held() == set() and len(client.steps) == 1


def test_zero_copy_plain_backward_of_a_micro_batch_releases_its_gathers(
        shm_dir):
    module = three_layers()
    client = StepClient(module)
    model = st.wrap(module, client, units=(nn.Linear,),
                    optimizer=st.SGD(lr=0.1), zero_copy=True, shm_dir=shm_dir)
    x = torch.randn(6, 3, generator=torch.Generator().manual_seed(2))
    model(x[:3]).square().sum().backward()
    assert model.stats["backward_regathers"] == 2 and client.held() == set()
    assert client.reduced == []
    model.backward(model(x[3:]).square().sum())
    assert client.held() == set()
    expected = expected_grads(x)
    for tensor, value in client.reduced[2][1].items():
        assert torch.allclose(value, expected[f"0.{tensor}"], atol=1e-6)


def test_zero_copy_failure_in_a_backward_regather_keeps_its_type(shm_dir):
    module = three_layers()
    client = StepClient(module)
    model = st.wrap(module, client, units=(nn.Linear,),
                    optimizer=st.SGD(lr=0.1), zero_copy=True, shm_dir=shm_dir)
    client.fail_gather = (1, 2)  # Unit 1, BACKWARD: the saved weight's.
    with pytest.raises(errors.StepAborted):
        model.backward(model(torch.ones(2, 3)).sum())


def small_transformer():
    torch.manual_seed(3)
    return nn.Sequential(
        nn.Embedding(16, 8),
        nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16,
                                   dropout=0.0, batch_first=True),
        nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16,
                                   dropout=0.0, batch_first=True),
        nn.LayerNorm(8), nn.Linear(8, 16))


@pytest.mark.parametrize("zero_copy", [False, True], ids=["copy", "zero_copy"])
def test_a_small_transformer_gets_torchs_gradients_bit_for_bit(shm_dir,
                                                                zero_copy):
    """Attention, LayerNorm, an embedding: the gradients handed to
    ReduceGrad are torch's own, bit for bit, with or without zero_copy
    (which computes on gathered views and re-gathers the saved ones)."""
    module = small_transformer()
    client = StepClient(module)
    model = st.wrap(module, client, units=(nn.TransformerEncoderLayer,),
                    optimizer=st.AdamW(), zero_copy=zero_copy,
                    shm_dir=shm_dir)
    assert model.units == ["root", "1", "2"]
    tokens = torch.randint(0, 16, (2, 5),
                           generator=torch.Generator().manual_seed(4))

    def loss_of(net):
        logits = net(tokens[:, :-1])
        return nn.functional.cross_entropy(logits.reshape(-1, 16),
                                           tokens[:, 1:].reshape(-1))

    model.backward(loss_of(model))
    reference = small_transformer()
    loss_of(reference).backward()
    expected = {n: p.grad for n, p in reference.named_parameters()}
    names = {0: "", 1: "1.", 2: "2."}
    seen = set()
    for unit, grads, _ in client.reduced:
        for tensor, value in grads.items():
            fqn = names[unit] + tensor
            assert torch.equal(value, expected[fqn]), fqn
            seen.add(fqn)
    assert seen == set(expected)
    assert client.held() == set()
    if zero_copy:
        assert model.stats["saved_views"] > 0

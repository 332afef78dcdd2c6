"""The generated stubs import as shardd.v1 and describe our API."""

import subprocess
import sys

import pytest

from conftest import PYTHON_DIR


def test_stubs_import_and_name_the_trainer_service():
    from shardd.v1 import common_pb2, trainer_pb2, trainer_pb2_grpc

    service = trainer_pb2.DESCRIPTOR.services_by_name["Trainer"]
    methods = {m.name for m in service.methods}
    assert {"RegisterModel", "Gather", "Release", "ReduceGrad", "Step",
            "WaitReady", "ExportState", "GetStatus", "WatchEvents",
            "CheckMemory"} <= methods
    assert hasattr(trainer_pb2_grpc, "TrainerStub")
    # trainer.proto's messages use common.proto's types: one descriptor pool.
    request = trainer_pb2.RegisterModelRequest()
    request.model.config.optimizer.sgd.lr = 0.5
    assert request.model.config.optimizer.WhichOneof("kind") == "sgd"
    assert common_pb2.DTYPE_BF16 == 2


def test_every_proto_file_has_stubs():
    from shardd.v1 import (common_pb2, coordinator_pb2, coordinator_pb2_grpc,
                           peer_pb2, peer_pb2_grpc)

    assert coordinator_pb2.DESCRIPTOR.package == "shardd.v1"
    assert peer_pb2.DESCRIPTOR.package == "shardd.v1"
    assert common_pb2.DESCRIPTOR.name == "shardd/v1/common.proto"
    assert hasattr(coordinator_pb2_grpc, "CoordinatorStub")
    assert hasattr(peer_pb2_grpc, "PeerStub")


def test_client_imports_and_maps_without_torch(shm_dir):
    # A trainer without torch (a tool) still gets the client and the raw
    # bytes of a segment; torch is needed only for tensors.
    code = f"""
import sys
sys.modules["torch"] = None  # any "import torch" now fails
sys.path.insert(0, {PYTHON_DIR!r})
import shardd, shardd.client, shardd.segments
from shardd.v1 import common_pb2
path = {shm_dir!r} + "/seg"
with open(path, "wb") as f:
    f.write(bytes(range(16)))
ref = common_pb2.DataRef(dtype=common_pb2.DTYPE_FP32, byte_length=8)
ref.shared_memory.path = path
ref.shared_memory.segment_bytes = 16
ref.shared_memory.byte_offset = 4
ref.shared_memory.byte_length = 8
view = shardd.segments.SegmentCache().read_view(ref)
assert bytes(view.data) == bytes(range(4, 12)), bytes(view.data)
try:
    view.flat
except ImportError:
    print("no torch, as expected")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert "no torch, as expected" in out.stdout


def test_bazel_stubs_equal_the_scripts():
    # //client/python:stubs and gen_stubs.sh run the same protoc: a user of
    # either gets the same modules. Only once Bazel has built them.
    import glob  # pylint: disable=import-outside-toplevel
    import os  # pylint: disable=import-outside-toplevel

    from conftest import REPO  # pylint: disable=import-outside-toplevel

    built = sorted(glob.glob(os.path.join(
        REPO, "bazel-bin/client/python/shardd/v1/*_pb2*.py")))
    if not built:
        pytest.skip("bazel build //client/python:stubs has not run")
    for path in built:
        ours = os.path.join(PYTHON_DIR, "shardd/v1", os.path.basename(path))
        with open(path, "rb") as a, open(ours, "rb") as b:
            assert a.read() == b.read(), path

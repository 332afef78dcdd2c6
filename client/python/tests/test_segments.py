"""SegmentCache and BufferView on real /dev/shm files, without a daemon.

Each test writes a segment file the way the daemon lays one out (a header
region, then a unit's tensors back to back, then padding), describes it with
a DataRef, and checks what the cache maps, refuses or unmaps.
"""

import os
import signal
import subprocess
import sys

import grpc
import pytest
import torch

from conftest import PYTHON_DIR
from shardd.errors import SegmentError
from shardd.segments import SegmentCache
from shardd.v1 import common_pb2

DTYPES = {
    common_pb2.DTYPE_FP32: torch.float32,
    common_pb2.DTYPE_BF16: torch.bfloat16,
    common_pb2.DTYPE_FP16: torch.float16,
}
HEADER = 64  # Bytes before the range: offsets must be honoured.


def tensor_bytes(t):
    """The little-endian bytes of a tensor (numpy has no bf16: via int16)."""
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    return t.contiguous().numpy().tobytes()


def make_segment(directory, dtype, name="seg", generation=1):
    """Writes weight [3, 4] and bias [4] of `dtype` after a header.

    Returns (ref, weight, bias): the DataRef naming them and their values.
    """
    torch_type = DTYPES[dtype]
    weight = (torch.arange(12, dtype=torch.float32).view(3, 4) * 0.25 -
              1).to(torch_type)
    bias = torch.tensor([0.5, -2.0, 3.0, 1024.0]).to(torch_type)
    element = torch.tensor([], dtype=torch_type).element_size()
    payload = tensor_bytes(weight) + tensor_bytes(bias) + bytes(2 * element)
    path = os.path.join(directory, name)
    with open(path, "wb") as f:
        f.write(bytes(range(HEADER)) + payload + bytes(100))
    ref = common_pb2.DataRef(dtype=dtype, byte_length=len(payload))
    shm = ref.shared_memory
    shm.path = path
    shm.segment_bytes = HEADER + len(payload) + 100
    shm.byte_offset = HEADER
    shm.byte_length = len(payload)
    shm.generation = generation
    ref.views.add(name="weight", shape=[3, 4], dtype=dtype, byte_offset=0,
                  numel=12)
    ref.views.add(name="bias", shape=[4], dtype=dtype,
                  byte_offset=12 * element, numel=4)
    return ref, weight, bias


def mapped(path):
    with open("/proc/self/maps", encoding="utf-8") as f:
        return sum(path in line for line in f)


@pytest.mark.parametrize("dtype", list(DTYPES), ids=lambda d: common_pb2.DType.Name(d))
def test_read_view_shows_the_files_values_in_each_dtype(shm_dir, dtype):
    ref, weight, bias = make_segment(shm_dir, dtype)
    view = SegmentCache().read_view(ref, "params")
    assert not view.writable and view.data.readonly
    assert view.flat.dtype == DTYPES[dtype]
    assert view.flat.numel() == 18  # padding included
    assert list(view.tensors) == ["weight", "bias"]
    assert torch.equal(view.tensor("weight"), weight)
    assert torch.equal(view.tensor("bias"), bias)
    assert view.tensor("weight").shape == (3, 4)


@pytest.mark.parametrize("dtype", list(DTYPES), ids=lambda d: common_pb2.DType.Name(d))
def test_write_view_writes_the_files_bytes_in_each_dtype(shm_dir, dtype):
    ref, _, _ = make_segment(shm_dir, dtype)
    cache = SegmentCache()
    grad = cache.write_view(ref, "grad_buffer")
    assert grad.writable and not grad.data.readonly
    grad.tensor("bias").copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    # Zero copy: the file itself changed, and a read view of it agrees.
    with open(ref.shared_memory.path, "rb") as f:
        f.seek(HEADER + 12 * grad.flat.element_size())
        written = f.read(4 * grad.flat.element_size())
    assert written == tensor_bytes(torch.tensor([1.0, 2.0, 3.0, 4.0]).to(
        DTYPES[dtype]))
    assert torch.equal(cache.read_view(ref).tensor("bias"),
                       grad.tensor("bias"))


def test_read_only_views_refuse_writes(shm_dir):
    ref, weight, _ = make_segment(shm_dir, common_pb2.DTYPE_FP32)
    view = SegmentCache().read_view(ref)
    with pytest.raises(TypeError):
        view.data[0] = 1
    # torch 1.13 has no read-only tensors: the mapping itself is PROT_READ,
    # so a write through the tensor faults instead of changing the bytes.
    code = f"""
import sys
sys.path.insert(0, {PYTHON_DIR!r})
from shardd.segments import SegmentCache
from shardd.v1 import common_pb2
ref = common_pb2.DataRef.FromString(bytes.fromhex({ref.SerializeToString().hex()!r}))
SegmentCache().read_view(ref).tensor("weight").fill_(7.0)
print("the write went through")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == -signal.SIGSEGV, (out.returncode, out.stdout,
                                               out.stderr)
    assert torch.equal(SegmentCache().read_view(ref).tensor("weight"), weight)


def test_maps_each_segment_once_per_generation(shm_dir):
    ref, _, _ = make_segment(shm_dir, common_pb2.DTYPE_FP32)
    cache = SegmentCache()
    first = cache.read_view(ref)
    cache.read_view(ref)
    assert (cache.map_count, cache.mapped_segments) == (1, 1)
    cache.write_view(ref)  # Another access is another mapping.
    assert (cache.map_count, cache.mapped_segments) == (2, 2)
    ref.shared_memory.generation = 2  # The daemon recreated the file.
    again = cache.read_view(ref)
    assert (cache.map_count, cache.mapped_segments) == (3, 2)
    # The old view keeps its old mapping and still reads.
    assert torch.equal(first.tensor("bias"), again.tensor("bias"))


def test_close_unmaps_and_views_keep_their_mapping(shm_dir):
    ref, _, bias = make_segment(shm_dir, common_pb2.DTYPE_FP32)
    path = ref.shared_memory.path
    cache = SegmentCache()
    cache.read_view(ref)  # No view kept.
    kept = cache.write_view(ref).tensor("bias")  # A tensor outlives its view.
    assert mapped(path) == 2
    cache.close()
    assert cache.mapped_segments == 0
    assert mapped(path) == 1  # Only the tensor's mapping is left.
    assert torch.equal(kept, bias)
    del kept
    assert mapped(path) == 0


def expect_error(ref, code, needle, writable=False):
    cache = SegmentCache()
    with pytest.raises(SegmentError) as raised:
        (cache.write_view if writable else cache.read_view)(ref, "params")
    assert raised.value.code == code, raised.value
    assert needle in raised.value.message, raised.value.message
    assert cache.map_count == 0


def test_a_range_past_the_segment_is_invalid(shm_dir):
    ref, _, _ = make_segment(shm_dir, common_pb2.DTYPE_FP32)
    ref.shared_memory.byte_offset = ref.shared_memory.segment_bytes - 4
    expect_error(ref, grpc.StatusCode.INVALID_ARGUMENT,
                 "params.shared_memory: range")


def test_a_file_shorter_than_announced_is_data_loss(shm_dir):
    ref, _, _ = make_segment(shm_dir, common_pb2.DTYPE_FP32)
    os.truncate(ref.shared_memory.path, ref.shared_memory.segment_bytes - 1)
    expect_error(ref, grpc.StatusCode.DATA_LOSS, "shorter than")


def test_a_missing_file_is_not_found(shm_dir):
    ref, _, _ = make_segment(shm_dir, common_pb2.DTYPE_FP32)
    os.unlink(ref.shared_memory.path)
    expect_error(ref, grpc.StatusCode.NOT_FOUND, "params.shared_memory")


def test_a_relative_path_is_invalid(shm_dir):
    ref, _, _ = make_segment(shm_dir, common_pb2.DTYPE_FP32)
    ref.shared_memory.path = "seg"
    expect_error(ref, grpc.StatusCode.INVALID_ARGUMENT, "must be absolute")


def test_byte_length_disagreeing_with_the_range_is_invalid(shm_dir):
    ref, _, _ = make_segment(shm_dir, common_pb2.DTYPE_FP32)
    ref.byte_length += 4
    expect_error(ref, grpc.StatusCode.INVALID_ARGUMENT, "params.byte_length")


def test_an_unsupported_or_mismatched_dtype_is_invalid(shm_dir):
    ref, _, _ = make_segment(shm_dir, common_pb2.DTYPE_FP32)
    ref.dtype = common_pb2.DTYPE_UNSPECIFIED
    expect_error(ref, grpc.StatusCode.INVALID_ARGUMENT, "params.dtype")
    ref, _, _ = make_segment(shm_dir, common_pb2.DTYPE_FP32)
    ref.views[1].dtype = common_pb2.DTYPE_BF16
    expect_error(ref, grpc.StatusCode.INVALID_ARGUMENT, "params.views[1].dtype")


def test_a_misaligned_range_is_invalid(shm_dir):
    ref, _, _ = make_segment(shm_dir, common_pb2.DTYPE_FP32)
    ref.shared_memory.byte_offset += 2
    expect_error(ref, grpc.StatusCode.INVALID_ARGUMENT, "not 4-byte aligned")


def test_a_view_of_the_wrong_length_is_invalid(shm_dir):
    ref, _, _ = make_segment(shm_dir, common_pb2.DTYPE_FP32)
    ref.views[0].numel = 11
    expect_error(ref, grpc.StatusCode.INVALID_ARGUMENT,
                 "params.views[0].numel")
    ref, _, _ = make_segment(shm_dir, common_pb2.DTYPE_FP32)
    ref.views[1].shape[:] = [8]
    ref.views[1].numel = 8  # 12 + 8 elements > the 18 of the range
    expect_error(ref, grpc.StatusCode.INVALID_ARGUMENT,
                 "params.views[1].byte_offset", writable=True)
    ref, _, _ = make_segment(shm_dir, common_pb2.DTYPE_FP32)
    ref.views[0].shape[:] = [3, 0, 4]
    expect_error(ref, grpc.StatusCode.INVALID_ARGUMENT,
                 "params.views[0].shape[1]")


def test_inline_and_cuda_refs_are_not_mapped():
    ref = common_pb2.DataRef(dtype=common_pb2.DTYPE_FP32, byte_length=4,
                             inline_data=b"abcd")
    expect_error(ref, grpc.StatusCode.UNIMPLEMENTED, "inline")
    expect_error(common_pb2.DataRef(dtype=common_pb2.DTYPE_FP32),
                 grpc.StatusCode.INVALID_ARGUMENT, "no location")
    ref = common_pb2.DataRef(dtype=common_pb2.DTYPE_FP32, byte_length=8)
    ref.cuda_ipc.mem_handle = bytes(64)
    ref.cuda_ipc.allocation_bytes = 8
    ref.cuda_ipc.byte_length = 8
    expect_error(ref, grpc.StatusCode.UNIMPLEMENTED, "CUDA IPC")
    ref.cuda_ipc.mem_handle = bytes(10)
    expect_error(ref, grpc.StatusCode.INVALID_ARGUMENT,
                 "params.cuda_ipc.mem_handle")

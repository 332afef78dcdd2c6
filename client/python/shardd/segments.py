"""Zero-copy views of the buffers a shardd daemon names in its replies.

The daemon hands gathered parameters and gradient slots to the trainer as
DataRefs naming a byte range of a shared-memory file (common.proto). This
module maps each file once (SegmentCache, like client/segment_cache.h),
checks every range, dtype and tensor view of a DataRef against the reply and
the file before anything is touched, and returns BufferViews: a memoryview
of the range, and torch tensors over the very same bytes (torch.frombuffer;
numpy has no bf16, torch has every dtype we support: fp32, bf16, fp16).

Access follows ownership. Gathered parameters belong to the daemon: they are
mapped read-only (PROT_READ), their memoryview refuses writes, and a write
through their torch tensors faults (SIGSEGV) instead of silently changing the
daemon's bytes (torch 1.13 has no read-only tensors). The gradient slot is the
trainer's to fill before ReduceGrad: it is mapped read-write.

Lifetime: a view (and every tensor made from it) keeps its mapping alive, so
the cache may drop or replace a mapping while views are still in use; it is
unmapped when the cache has dropped it and the last view is gone. close()
unmaps at once every mapping no view uses. A mapping is never unmapped under
a live view: the views hold exports of the mmap, which refuses to close then.

torch is imported only when a view's tensors are first asked for, so the
rest of the client works without it.
"""

import mmap
import os
import stat
import threading
import warnings

import grpc

from shardd.errors import SegmentError
from shardd.v1 import common_pb2

# Bytes per element of each dtype the daemon hands out.
ELEMENT_BYTES = {
    common_pb2.DTYPE_FP32: 4,
    common_pb2.DTYPE_BF16: 2,
    common_pb2.DTYPE_FP16: 2,
}

_CUDA_IPC_HANDLE_BYTES = 64


def dtype_name(dtype):
    """'DTYPE_FP32' for a DType value, its number when it has no name."""
    try:
        return common_pb2.DType.Name(dtype)
    except ValueError:
        return str(dtype)


def torch_dtype(dtype):
    """The torch dtype of a proto DType (imports torch)."""
    import torch  # pylint: disable=import-outside-toplevel

    by_proto = {
        common_pb2.DTYPE_FP32: torch.float32,
        common_pb2.DTYPE_BF16: torch.bfloat16,
        common_pb2.DTYPE_FP16: torch.float16,
    }
    if dtype not in by_proto:
        raise ValueError(f"no torch dtype for {dtype_name(dtype)}")
    return by_proto[dtype]


def _invalid(message):
    return SegmentError(grpc.StatusCode.INVALID_ARGUMENT, message)


def _check_views(ref, range_bytes, element_bytes, what):
    """Every tensor view: the buffer's dtype, numel = shape's product, inside."""
    for i, view in enumerate(ref.views):
        field = f"{what}.views[{i}]"
        # A unit's flat buffer has one element type (common.proto TensorSpec).
        if view.dtype != ref.dtype:
            raise _invalid(
                f"{field}.dtype: {dtype_name(view.dtype)} differs from the "
                f"buffer's {dtype_name(ref.dtype)}")
        product = 1
        for d, dim in enumerate(view.shape):
            if dim < 1:
                raise _invalid(f"{field}.shape[{d}]: bad dim {dim}")
            product *= dim
        if view.numel != product:
            raise _invalid(
                f"{field}.numel: {view.numel} is not the shape's {product}")
        if (view.byte_offset < 0 or view.byte_offset % element_bytes != 0 or
                view.byte_offset + view.numel * element_bytes > range_bytes):
            raise _invalid(
                f"{field}.byte_offset: tensor '{view.name}' at "
                f"{view.byte_offset} with {view.numel} "
                f"{dtype_name(ref.dtype)} elements does not fit the range of "
                f"{range_bytes} bytes")


def _check_range(ref, offset, length, capacity, field, buffer, what):
    """[offset, +length) inside `capacity`, agreeing with ref, aligned."""
    if (offset < 0 or length < 0 or offset > capacity or
            length > capacity - offset):
        raise _invalid(
            f"{what}.{field}: range [{offset}, +{length}) does not fit the "
            f"{buffer} of {capacity} bytes")
    if ref.byte_length != length:
        raise _invalid(
            f"{what}.byte_length: {ref.byte_length} differs from "
            f"{field}.byte_length {length}")
    element_bytes = ELEMENT_BYTES[ref.dtype]
    if offset % element_bytes != 0 or length % element_bytes != 0:
        raise _invalid(
            f"{what}.{field}: range [{offset}, +{length}) is not "
            f"{element_bytes}-byte aligned for {dtype_name(ref.dtype)}")
    _check_views(ref, length, element_bytes, what)


def check_ref(ref, what):
    """Checks what can be checked without the file; returns (offset, length).

    Raises SegmentError naming the field, with the C++ client's codes.
    """
    location = ref.WhichOneof("location")
    if location == "inline_data":
        raise SegmentError(
            grpc.StatusCode.UNIMPLEMENTED,
            f"{what}: inline buffers have no mapping; ask for shared memory")
    if location is None:
        raise _invalid(
            f"{what}: no location (shared_memory and cuda_ipc unset)")
    if ref.dtype not in ELEMENT_BYTES:
        raise _invalid(
            f"{what}.dtype: must be DTYPE_FP32, DTYPE_BF16 or DTYPE_FP16, got "
            f"{dtype_name(ref.dtype)}")
    if location == "cuda_ipc":
        cuda = ref.cuda_ipc
        if len(cuda.mem_handle) != _CUDA_IPC_HANDLE_BYTES:
            raise _invalid(
                f"{what}.cuda_ipc.mem_handle: must be 64 bytes, got "
                f"{len(cuda.mem_handle)}")
        if cuda.device_ordinal < 0:
            raise _invalid(
                f"{what}.cuda_ipc.device_ordinal: must be >= 0, got "
                f"{cuda.device_ordinal}")
        _check_range(ref, cuda.byte_offset, cuda.byte_length,
                     cuda.allocation_bytes, "cuda_ipc", "allocation", what)
        # The ref is well formed; opening CUDA IPC handles is not done yet.
        raise SegmentError(
            grpc.StatusCode.UNIMPLEMENTED,
            f"{what}: the daemon's buffers are on a GPU (CUDA IPC); the "
            "Python client maps shared memory only (ask for "
            "TRANSPORT_SHARED_MEMORY from a daemon on the CPU)")
    shm = ref.shared_memory
    if not shm.path.startswith("/"):
        raise _invalid(
            f"{what}.shared_memory.path: must be absolute, got '{shm.path}'")
    if shm.segment_bytes < 1:
        raise _invalid(
            f"{what}.shared_memory.segment_bytes: must be >= 1, got "
            f"{shm.segment_bytes}")
    _check_range(ref, shm.byte_offset, shm.byte_length, shm.segment_bytes,
                 "shared_memory", "segment", what)
    return shm.byte_offset, shm.byte_length


def _map_file(path, size, writable, what):
    """mmaps the first `size` bytes of the file at `path` (shared)."""
    flags = (os.O_RDWR if writable else os.O_RDONLY) | os.O_NOFOLLOW
    flags |= os.O_CLOEXEC
    field = f"{what}.shared_memory"
    try:
        fd = os.open(path, flags)
    except FileNotFoundError as e:
        raise SegmentError(grpc.StatusCode.NOT_FOUND,
                           f"{field}: open '{path}': {e.strerror}") from e
    except PermissionError as e:
        raise SegmentError(grpc.StatusCode.PERMISSION_DENIED,
                           f"{field}: open '{path}': {e.strerror}") from e
    except OSError as e:
        raise SegmentError(grpc.StatusCode.UNKNOWN,
                           f"{field}: open '{path}': {e.strerror}") from e
    try:
        info = os.fstat(fd)
        # The reply and the file disagree: DATA_LOSS, as the C++ client says.
        if not stat.S_ISREG(info.st_mode):
            raise SegmentError(grpc.StatusCode.DATA_LOSS,
                               f"{field}: '{path}' is not a regular file")
        if info.st_size < size:
            raise SegmentError(
                grpc.StatusCode.DATA_LOSS,
                f"{field}: segment '{path}' is shorter than {size} bytes: the "
                f"file has {info.st_size}")
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        # Pre-fault the pages now: first touch of a page is slow on these
        # machines (DESIGN.md), and the daemon pre-faults its side too.
        map_flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        try:
            return mmap.mmap(fd, size, flags=map_flags, prot=prot)
        except OSError as e:
            raise SegmentError(grpc.StatusCode.UNKNOWN,
                               f"{field}: mmap '{path}': {e.strerror}") from e
    finally:
        os.close(fd)


class BufferView:
    """A DataRef resolved to this process's memory.

    Attributes:
      ref: the DataRef (common_pb2.DataRef) as the daemon sent it.
      data: a memoryview of the whole range (padding included); read-only
        unless `writable`.
      writable: the gradient slot (True) or the daemon's parameters (False).
      flat: a 1-D torch tensor over `data`, in the buffer's dtype.
      tensors: {name: torch tensor} in the unit's tensor order, each a view
        of `flat` with its shape.
    The tensors are made on first use (that is when torch is imported) and
    share the bytes of the mapping, which they keep alive. Never call
    data.release(): tensors made from it would then outlive the mapping.
    """

    def __init__(self, ref, data, writable):
        self.ref = ref
        self.data = data
        self.writable = writable
        self._flat = None
        self._tensors = None

    @property
    def dtype(self):
        """The buffer's proto DType (common_pb2.DTYPE_*)."""
        return self.ref.dtype

    @property
    def flat(self):
        if self._flat is None:
            import torch  # pylint: disable=import-outside-toplevel

            dtype = torch_dtype(self.ref.dtype)
            if len(self.data) == 0:
                # frombuffer refuses an empty buffer; nothing to share.
                self._flat = torch.empty(0, dtype=dtype)
            else:
                with warnings.catch_warnings():
                    # torch warns that a read-only buffer makes a tensor it
                    # cannot protect: known, and documented above (writes
                    # fault rather than reach the daemon's bytes).
                    warnings.simplefilter("ignore", UserWarning)
                    self._flat = torch.frombuffer(self.data, dtype=dtype)
        return self._flat

    @property
    def tensors(self):
        if self._tensors is None:
            element_bytes = ELEMENT_BYTES[self.ref.dtype]
            flat = self.flat
            tensors = {}
            for view in self.ref.views:
                start = view.byte_offset // element_bytes
                tensors[view.name] = flat[start:start + view.numel].view(
                    tuple(view.shape))
            self._tensors = tensors
        return self._tensors

    def tensor(self, name):
        """The tensor called `name` (KeyError if the buffer has none)."""
        return self.tensors[name]


class _Entry:
    """One cached mapping and the identity of the file it maps."""

    def __init__(self, generation, segment_bytes, mapping):
        self.generation = generation
        self.segment_bytes = segment_bytes
        self.mapping = mapping


def _unmap_if_unused(mapping):
    """Unmaps now if no view uses the mapping; else its last view will."""
    try:
        mapping.close()
    except BufferError:
        # Views still export it: the mmap is freed (unmapped) with the last.
        pass


class SegmentCache:
    """Maps the daemon's shared-memory segments once and hands out views.

    Keyed by (path, writable), like the C++ cache: a new generation or
    segment size for a path replaces the mapping (a re-registration may
    recreate the file). Thread-safe: one lock around the cache, held while
    mapping, so two threads never map the same segment twice.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._entries = {}
        self._map_count = 0

    def read_view(self, ref, what="params"):
        """A read-only view of `ref` (the daemon's bytes, e.g. parameters).

        `what` prefixes field names in errors. Raises SegmentError.
        """
        return self._view(ref, what, writable=False)

    def write_view(self, ref, what="grad_buffer"):
        """A writable view of `ref` (the gradient slot). Raises SegmentError."""
        return self._view(ref, what, writable=True)

    def _view(self, ref, what, writable):
        offset, length = check_ref(ref, what)
        mapping = self._map(ref.shared_memory, writable, what)
        return BufferView(ref, memoryview(mapping)[offset:offset + length],
                          writable)

    def _map(self, shm, writable, what):
        key = (shm.path, writable)
        with self._lock:
            entry = self._entries.get(key)
            if (entry is not None and entry.generation == shm.generation and
                    entry.segment_bytes == shm.segment_bytes):
                return entry.mapping
            mapping = _map_file(shm.path, shm.segment_bytes, writable, what)
            if entry is not None:
                _unmap_if_unused(entry.mapping)
            self._entries[key] = _Entry(shm.generation, shm.segment_bytes,
                                        mapping)
            self._map_count += 1
            return mapping

    @property
    def mapped_segments(self):
        """Mappings cached now."""
        with self._lock:
            return len(self._entries)

    @property
    def map_count(self):
        """Times a segment was mapped (cache misses)."""
        with self._lock:
            return self._map_count

    def clear(self):
        """Drops every cached mapping; unmaps those that no view uses."""
        with self._lock:
            entries, self._entries = self._entries, {}
        for entry in entries.values():
            _unmap_if_unused(entry.mapping)

    close = clear

"""shardd: the Python client of a shardd daemon (client/python/README.md).

  shardd.client    TrainerClient, the typed Trainer API client
  shardd.errors    the exceptions its calls raise, one per reaction
  shardd.segments  zero-copy views of the daemon's shared-memory buffers
  shardd.v1        the generated stubs (client/python/gen_stubs.sh)

Importing the package needs grpcio and protobuf; torch is imported only when
a view's tensors are first used.
"""

import os as _os

if not _os.path.exists(_os.path.join(_os.path.dirname(__file__), "v1",
                                     "trainer_pb2.py")):
    # The stubs are generated, not checked in: say how to make them rather
    # than fail later with a bare ModuleNotFoundError.
    raise ImportError(
        "shardd: the generated stubs are missing; run "
        "client/python/gen_stubs.sh")

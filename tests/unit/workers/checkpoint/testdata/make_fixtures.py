#!/usr/bin/env python3
"""Writes the torch.save-style fixtures the model tests read, with CPython's own pickle
and zipfile modules: a second implementation of the writing side, independent of coil's.

Stand-in `torch` modules make the pickler emit the globals torch.save emits
(collections.OrderedDict, torch._utils._rebuild_tensor_v2, torch.HalfStorage, ...), and
persistent_id emits ('storage', StorageType, key, 'cpu', numel) as torch.save does.

  python3 make_fixtures.py OUT_DIR

torch_like.bin     a state dict (values listed in torch_pickle_test.cc)
evil_reduce.bin    the same archive whose data.pkl calls posix.system
deflated.bin       torch_like.bin's entries deflate-compressed
"""
import collections
import os
import pickle
import struct
import sys
import types
import zipfile

torch = types.ModuleType("torch")
torch_utils = types.ModuleType("torch._utils")
torch._utils = torch_utils
sys.modules["torch"] = torch
sys.modules["torch._utils"] = torch_utils


def _rebuild_tensor_v2(*args):
    raise RuntimeError("never called: only pickled")


_rebuild_tensor_v2.__module__ = "torch._utils"
torch_utils._rebuild_tensor_v2 = _rebuild_tensor_v2
for name in ("FloatStorage", "HalfStorage", "BFloat16Storage"):
    cls = type(name, (), {})
    cls.__module__ = "torch"
    setattr(torch, name, cls)


class Storage:
    def __init__(self, cls, key, data, numel):
        self.cls, self.key, self.data, self.numel = cls, key, data, numel


class Tensor:
    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, size, stride)

    def __reduce_ex__(self, protocol):
        storage, offset, size, stride = self.args
        return (_rebuild_tensor_v2,
                (storage, offset, size, stride, False, collections.OrderedDict()))


class TorchLikePickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", obj.cls, obj.key, "cpu", obj.numel)
        return None


def half(values):
    return b"".join(struct.pack("<e", v) for v in values)


def single(values):
    return b"".join(struct.pack("<f", v) for v in values)


def bfloat(values):
    return b"".join(struct.pack("<f", v)[2:] for v in values)


def state_dict():
    embedding = Storage(torch.HalfStorage, "0", half([0.5, -1, 2, 0.25, 3, -0.125]), 6)
    vector = Storage(torch.FloatStorage, "1", single([1.5, -2.5, 1e-3]), 3)
    # 6 bf16 elements; the tensor views elements [2, 6) as [2, 2].
    packed = Storage(torch.BFloat16Storage, "2", bfloat([9, 9, 1, -2, 0.5, 4]), 6)
    conv = Storage(torch.HalfStorage, "3", half([1, 2, 3, 4, 5, 6]), 6)
    sd = collections.OrderedDict()
    # Fresh tuples per tensor, as tensor.size() and tensor.stride() return.
    sd["backbone.embedding.weight"] = Tensor(embedding, 0, tuple([2, 3]), tuple([3, 1]))
    sd["backbone.norm_f.weight"] = Tensor(vector, 0, tuple([3]), tuple([1]))
    sd["packed"] = Tensor(packed, 2, tuple([2, 2]), tuple([2, 1]))
    sd["conv"] = Tensor(conv, 0, tuple([3, 1, 2]), tuple([2, 2, 1]))
    # Tied: a second tensor on the same storage.
    sd["lm_head.weight"] = Tensor(embedding, 0, tuple([2, 3]), tuple([3, 1]))
    sd._metadata = collections.OrderedDict([("", {"version": 1})])
    return sd, [embedding, vector, packed, conv]


def write(path, pickle_bytes, storages, compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        archive.writestr("archive/data.pkl", pickle_bytes)
        archive.writestr("archive/byteorder", "little")
        for storage in storages:
            archive.writestr("archive/data/" + storage.key, storage.data)
        archive.writestr("archive/version", "3\n")


class Evil:
    def __reduce__(self):
        return (os.system, ("echo owned",))


def main():
    out = sys.argv[1]
    sd, storages = state_dict()
    with open(os.path.join(out, "torch_like.pkl"), "wb") as raw:
        TorchLikePickler(raw, protocol=2).dump(sd)
    with open(os.path.join(out, "torch_like.pkl"), "rb") as raw:
        good = raw.read()
    write(os.path.join(out, "torch_like.bin"), good, storages)
    write(os.path.join(out, "deflated.bin"), good, storages, zipfile.ZIP_DEFLATED)
    sd["backbone.norm_f.weight"] = Evil()
    with open(os.path.join(out, "evil.pkl"), "wb") as raw:
        TorchLikePickler(raw, protocol=2).dump(sd)
    with open(os.path.join(out, "evil.pkl"), "rb") as raw:
        evil = raw.read()
    os.remove(os.path.join(out, "evil.pkl"))
    write(os.path.join(out, "evil_reduce.bin"), evil, storages)


if __name__ == "__main__":
    main()

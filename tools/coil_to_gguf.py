#!/usr/bin/env python3
"""Writes a GGUF file (llama.cpp's model format, architecture "mamba2") from a coil model
directory, so that llama.cpp and coil can run the very same weights.

  tools/coil_to_gguf.py --model DIR --out model.gguf [--no-vocab]

DIR is what coil-serve reads: config.json (mamba_ssm or Hugging Face) and the weights as
model.safetensors, sharded safetensors with an index, or pytorch_model.bin. Matrices (the
embedding, in_proj, out_proj and an untied lm_head) keep their stored type (bf16, f16 or
f32); every other tensor is written as f32, which llama.cpp's Mamba2 ops read. A_log is
written as A = -exp(A_log), as llama.cpp expects. With tokenizer.json in DIR its byte-level
BPE vocabulary and merges go in too (llama.cpp's "gpt2" tokenizer); --no-vocab writes a
vocabulary of size only, enough for llama-bench. Only pure Mamba2 models (no attention
layers) have a GGUF architecture to map to. Python standard library only.
"""

import argparse
import io
import json
import math
import os
import pickle
import struct
import sys
import zipfile

# ---------------------------------------------------------------- reading coil checkpoints

DTYPE_SIZES = {"F32": 4, "F16": 2, "BF16": 2}


class StoredTensor:
    """A tensor's raw little-endian bytes, its element type and its shape."""

    def __init__(self, dtype, shape, data):
        if dtype not in DTYPE_SIZES:
            raise ValueError(f"element type {dtype} is not supported (bf16, f16 or f32)")
        count = 1
        for dim in shape:
            count *= dim
        if len(data) != count * DTYPE_SIZES[dtype]:
            raise ValueError(f"tensor of shape {shape} has {len(data)} bytes")
        self.dtype, self.shape, self.data = dtype, list(shape), bytes(data)

    def floats(self):
        """The values as Python floats (exact: every bf16, f16 and f32 is a double)."""
        n = len(self.data) // DTYPE_SIZES[self.dtype]
        if self.dtype == "F32":
            return list(struct.unpack(f"<{n}f", self.data))
        if self.dtype == "F16":
            return list(struct.unpack(f"<{n}e", self.data))
        words = struct.unpack(f"<{n}H", self.data)
        return list(struct.unpack(f"<{n}f", struct.pack(f"<{n}I", *(w << 16 for w in words))))


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (header_len,) = struct.unpack_from("<Q", blob, 0)
    header = json.loads(blob[8 : 8 + header_len])
    base = 8 + header_len
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        tensors[name] = StoredTensor(info["dtype"], info["shape"], blob[base + begin : base + end])
    return tensors


class _StorageType:
    def __init__(self, dtype):
        self.dtype = dtype


class _Storage:
    def __init__(self, dtype, key):
        self.dtype, self.key = dtype, key


class _TensorRef:
    def __init__(self, storage, offset, shape, stride):
        self.storage, self.offset, self.shape, self.stride = storage, offset, shape, stride


class _StateDict(dict):
    """collections.OrderedDict as torch.save pickles it (with a _metadata attribute)."""


def _rebuild_tensor_v2(storage, offset, shape, stride, *unused):
    return _TensorRef(storage, offset, tuple(shape), tuple(stride))


class _StateDictUnpickler(pickle.Unpickler):
    """Resolves only what a torch.save state dict names; builds nothing else."""

    GLOBALS = {
        ("collections", "OrderedDict"): _StateDict,
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
        ("torch", "FloatStorage"): _StorageType("F32"),
        ("torch", "HalfStorage"): _StorageType("F16"),
        ("torch", "BFloat16Storage"): _StorageType("BF16"),
    }

    def find_class(self, module, name):
        try:
            return self.GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a state dict") from None

    def persistent_load(self, pid):
        # ('storage', storage type, key, location, element count)
        if not isinstance(pid, tuple) or pid[0] != "storage":
            raise pickle.UnpicklingError(f"unexpected persistent id {pid!r}")
        return _Storage(pid[1].dtype, str(pid[2]))


def read_pytorch(path):
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        pkl = next((n for n in names if n.endswith("/data.pkl")), None)
        if pkl is None:
            raise ValueError(f"{path}: no data.pkl (not a torch.save zip)")
        prefix = pkl[: -len("data.pkl")]
        state = _StateDictUnpickler(io.BytesIO(archive.read(pkl))).load()
        storages, tensors = {}, {}
        for name, ref in state.items():
            if not isinstance(ref, _TensorRef):
                continue
            key = ref.storage.key
            if key not in storages:
                storages[key] = archive.read(prefix + "data/" + key)
            size = DTYPE_SIZES[ref.storage.dtype]
            count = 1
            for dim in ref.shape:
                count *= dim
            expected = []
            step = 1
            for dim in reversed(ref.shape):
                expected.insert(0, step)
                step *= dim
            if count > 1 and list(ref.stride) != expected:
                raise ValueError(f"{name}: not contiguous (stride {ref.stride})")
            begin = ref.offset * size
            tensors[name] = StoredTensor(
                ref.storage.dtype, ref.shape, storages[key][begin : begin + count * size]
            )
        return tensors


def read_checkpoint(model_dir):
    single = os.path.join(model_dir, "model.safetensors")
    index = os.path.join(model_dir, "model.safetensors.index.json")
    torch_file = os.path.join(model_dir, "pytorch_model.bin")
    if os.path.exists(single):
        return read_safetensors(single)
    if os.path.exists(index):
        with open(index) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        tensors = {}
        for shard in shards:
            tensors.update(read_safetensors(os.path.join(model_dir, shard)))
        return tensors
    if os.path.exists(torch_file):
        return read_pytorch(torch_file)
    raise ValueError(
        f"{model_dir}: no model.safetensors, model.safetensors.index.json or pytorch_model.bin"
    )


def canonical(name):
    """coil's canonical tensor name: the mamba_ssm key without "backbone."."""
    if name.startswith("backbone."):
        name = name[len("backbone.") :]
    return "embedding.weight" if name == "embeddings.weight" else name


# ---------------------------------------------------------------- the model's configuration


def read_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        raw = json.load(f)
    hf = "ssm_cfg" not in raw and ("hidden_size" in raw or raw.get("model_type") == "mamba2")
    if hf:
        c = {
            "d_model": raw["hidden_size"],
            "n_layer": raw["num_hidden_layers"],
            "vocab_size": raw["vocab_size"],
            "pad": raw.get("pad_vocab_size_multiple", 1),
            "d_state": raw.get("state_size", 128),
            "d_conv": raw.get("conv_kernel", 4),
            "expand": raw.get("expand", 2),
            "headdim": raw.get("head_dim", 64),
            "ngroups": raw.get("n_groups", 1),
            "eps": raw.get("layer_norm_epsilon", 1e-5),
            "tie": raw.get("tie_word_embeddings", True),
            "attention": [],
        }
    else:
        ssm = raw.get("ssm_cfg", {})
        if ssm.get("layer", "Mamba2") != "Mamba2":
            raise ValueError(f"ssm_cfg.layer {ssm.get('layer')}: only Mamba2 has a GGUF mapping here")
        c = {
            "d_model": raw["d_model"],
            "n_layer": raw["n_layer"],
            "vocab_size": raw["vocab_size"],
            "pad": raw.get("pad_vocab_size_multiple", 8),
            "d_state": ssm.get("d_state", 128),
            "d_conv": ssm.get("d_conv", 4),
            "expand": ssm.get("expand", 2),
            "headdim": ssm.get("headdim", 64),
            "ngroups": ssm.get("ngroups", 1),
            "eps": raw.get("norm_epsilon", 1e-5),
            "tie": raw.get("tie_embeddings", True),
            "attention": raw.get("attn_layer_idx", []),
        }
    if c["attention"]:
        raise ValueError(
            f"attention layers {c['attention']}: GGUF's mamba2 architecture has none; "
            "only pure Mamba2 models can be written"
        )
    c["d_inner"] = c["expand"] * c["d_model"]
    c["heads"] = c["d_inner"] // c["headdim"]
    c["padded_vocab"] = -(-c["vocab_size"] // c["pad"]) * c["pad"]
    return c


# ---------------------------------------------------------------- writing GGUF

GGUF_MAGIC = 0x46554747  # "GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32
# Metadata value types.
T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 6, 7, 8, 9
# Tensor element types (ggml_type) and the file type (llama_ftype) of mostly that type.
GGML_TYPES = {"F32": 0, "F16": 1, "BF16": 30}
FILE_TYPES = {"F32": 0, "F16": 1, "BF16": 32}
# Token types.
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5


def _string(value):
    raw = value.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def _value(kind, value):
    if kind == T_UINT32:
        return struct.pack("<I", value)
    if kind == T_INT32:
        return struct.pack("<i", value)
    if kind == T_FLOAT32:
        return struct.pack("<f", value)
    if kind == T_BOOL:
        return struct.pack("<B", 1 if value else 0)
    if kind == T_STRING:
        return _string(value)
    raise ValueError(kind)


class GgufWriter:
    def __init__(self):
        self.kv = []  # encoded key-value pairs
        self.tensors = []  # (name, ggml shape (innermost first), ggml type, bytes)

    def add(self, key, kind, value):
        self.kv.append(_string(key) + struct.pack("<I", kind) + _value(kind, value))

    def add_array(self, key, kind, values):
        body = b"".join(_value(kind, v) for v in values)
        self.kv.append(
            _string(key) + struct.pack("<IIQ", T_ARRAY, kind, len(values)) + body
        )

    def add_tensor(self, name, numpy_shape, dtype, data):
        self.tensors.append((name, list(reversed(numpy_shape)), GGML_TYPES[dtype], data))

    def write(self, path):
        infos, offset = [], 0
        for name, shape, kind, data in self.tensors:
            infos.append(
                _string(name)
                + struct.pack("<I", len(shape))
                + b"".join(struct.pack("<Q", d) for d in shape)
                + struct.pack("<IQ", kind, offset)
            )
            offset += -(-len(data) // ALIGNMENT) * ALIGNMENT
        header = struct.pack("<IIQQ", GGUF_MAGIC, GGUF_VERSION, len(self.tensors), len(self.kv))
        header += b"".join(self.kv) + b"".join(infos)
        with open(path, "wb") as f:
            f.write(header)
            f.write(b"\0" * (-len(header) % ALIGNMENT))
            for _, _, _, data in self.tensors:
                f.write(data)
                f.write(b"\0" * (-len(data) % ALIGNMENT))


def f32_bytes(values):
    return struct.pack(f"<{len(values)}f", *values)


def add_vocab(writer, model_dir, padded_vocab, no_vocab):
    path = os.path.join(model_dir, "tokenizer.json")
    if no_vocab or not os.path.exists(path):
        if not no_vocab:
            print(f"coil_to_gguf: {path} not found; writing a vocabulary of size only",
                  file=sys.stderr)
        writer.add("tokenizer.ggml.model", T_STRING, "no_vocab")
        writer.add("mamba2.vocab_size", T_UINT32, padded_vocab)
        return
    with open(path, encoding="utf-8") as f:
        tok = json.load(f)
    model = tok.get("model", {})
    if model.get("type") != "BPE":
        raise ValueError(f"{path}: a {model.get('type')} tokenizer; only byte-level BPE is written")
    tokens = [None] * padded_vocab
    types = [TOKEN_UNUSED] * padded_vocab
    for text, i in model["vocab"].items():
        if i < padded_vocab:
            tokens[i], types[i] = text, TOKEN_NORMAL
    eos = None
    for added in tok.get("added_tokens", []):
        i = added["id"]
        if i < padded_vocab:
            tokens[i] = added["content"]
            types[i] = TOKEN_CONTROL if added.get("special") else TOKEN_USER_DEFINED
            if added["content"] == "<|endoftext|>":
                eos = i
    for i, text in enumerate(tokens):
        if text is None:
            tokens[i] = f"[PAD{i}]"
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    writer.add("tokenizer.ggml.model", T_STRING, "gpt2")
    # The GPT-NeoX-20B pre-tokenizer is GPT-2's byte-level split, which llama.cpp knows under
    # the name of a model family that ships this tokenizer.
    writer.add("tokenizer.ggml.pre", T_STRING, "olmo")
    writer.add_array("tokenizer.ggml.tokens", T_STRING, tokens)
    writer.add_array("tokenizer.ggml.token_type", T_INT32, types)
    writer.add_array("tokenizer.ggml.merges", T_STRING, merges)
    if eos is not None:
        writer.add("tokenizer.ggml.bos_token_id", T_UINT32, eos)
        writer.add("tokenizer.ggml.eos_token_id", T_UINT32, eos)
    writer.add("tokenizer.ggml.add_bos_token", T_BOOL, False)


def convert(model_dir, out_path, no_vocab=False):
    c = read_config(model_dir)
    stored = {canonical(k): v for k, v in read_checkpoint(model_dir).items()}

    def take(name, shape):
        if name not in stored:
            raise ValueError(f"{model_dir}: tensor {name} is missing")
        t = stored.pop(name)
        count = 1
        for d in shape:
            count *= d
        flat = 1
        for d in t.shape:
            flat *= d
        if flat != count:
            raise ValueError(f"{name}: shape {t.shape}, expected {shape}")
        return t

    def matrix(name, gguf_name, shape):
        t = take(name, shape)
        writer.add_tensor(gguf_name, shape, t.dtype, t.data)
        return t.dtype

    def vector(name, gguf_name, shape, transform=None):
        values = take(name, shape).floats()
        if transform is not None:
            values = [transform(v) for v in values]
        writer.add_tensor(gguf_name, shape, "F32", f32_bytes(values))

    d, di, n, h, g = c["d_model"], c["d_inner"], c["d_state"], c["heads"], c["ngroups"]
    conv_dim = di + 2 * g * n
    writer = GgufWriter()
    writer.add("general.architecture", T_STRING, "mamba2")
    writer.add("general.name", T_STRING, os.path.basename(os.path.normpath(model_dir)))
    writer.add("mamba2.context_length", T_UINT32, 1 << 20)
    writer.add("mamba2.embedding_length", T_UINT32, d)
    writer.add("mamba2.feed_forward_length", T_UINT32, 0)
    writer.add("mamba2.attention.head_count", T_UINT32, 0)
    writer.add("mamba2.block_count", T_UINT32, c["n_layer"])
    writer.add("mamba2.ssm.conv_kernel", T_UINT32, c["d_conv"])
    writer.add("mamba2.ssm.inner_size", T_UINT32, di)
    writer.add("mamba2.ssm.state_size", T_UINT32, n)
    writer.add("mamba2.ssm.time_step_rank", T_UINT32, h)
    writer.add("mamba2.ssm.group_count", T_UINT32, g)
    writer.add("mamba2.attention.layer_norm_rms_epsilon", T_FLOAT32, c["eps"])

    vocab = c["padded_vocab"]
    matrix_type = matrix("embedding.weight", "token_embd.weight", [vocab, d])
    vector("norm_f.weight", "output_norm.weight", [d])
    if not c["tie"]:
        matrix("lm_head.weight", "output.weight", [vocab, d])
    else:
        stored.pop("lm_head.weight", None)  # a tied head's second name for the embedding
    for layer in range(c["n_layer"]):
        src, dst = f"layers.{layer}.", f"blk.{layer}."
        vector(src + "norm.weight", dst + "attn_norm.weight", [d])
        matrix(src + "mixer.in_proj.weight", dst + "ssm_in.weight", [2 * di + 2 * g * n + h, d])
        vector(src + "mixer.conv1d.weight", dst + "ssm_conv1d.weight", [conv_dim, c["d_conv"]])
        vector(src + "mixer.conv1d.bias", dst + "ssm_conv1d.bias", [conv_dim])
        vector(src + "mixer.dt_bias", dst + "ssm_dt.bias", [h])
        vector(src + "mixer.A_log", dst + "ssm_a", [h, 1], lambda v: -math.exp(v))
        vector(src + "mixer.D", dst + "ssm_d", [h, 1])
        vector(src + "mixer.norm.weight", dst + "ssm_norm.weight", [g, di // g])
        matrix(src + "mixer.out_proj.weight", dst + "ssm_out.weight", [d, di])
    if stored:
        raise ValueError(f"tensors with no GGUF name: {sorted(stored)}")
    writer.add("general.file_type", T_UINT32, FILE_TYPES[matrix_type])
    add_vocab(writer, model_dir, vocab, no_vocab)
    writer.write(out_path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="coil model directory")
    parser.add_argument("--out", required=True, help="GGUF file to write")
    parser.add_argument("--no-vocab", action="store_true",
                        help="write the vocabulary's size only, not its tokens and merges")
    args = parser.parse_args()
    try:
        convert(args.model, args.out, args.no_vocab)
    except (OSError, ValueError, KeyError, pickle.UnpicklingError, zipfile.BadZipFile) as e:
        print(f"coil_to_gguf: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""tools/coil_to_gguf.py against a GGUF reader of this test's own and the checkpoints
coil-make-model writes:
  - the keys llama.cpp's mamba2 loader reads, with the config's values;
  - every tensor llama.cpp's mamba2 loader creates, with the dims (innermost first) and the
    element type it expects, and no other; data offsets aligned to 32;
  - the values: matrices byte for byte as stored, 1-D tensors widened to f32, conv1d
    reshaped, A = -exp(A_log), each read back from the safetensors file by this test;
  - the same GGUF bytes from the same weights in every layout and format coil-make-model
    writes (it draws the same values for each);
  - a missing tensor or a model with attention layers refused with exit status 1 and a
    message naming the cause.

  COIL_MAKE_MODEL=build/tools/make_model/coil-make-model python3 coil_to_gguf_test.py
"""

import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "..", "tools", "coil_to_gguf.py")
MAKE_MODEL = os.environ.get("COIL_MAKE_MODEL", "")


def read_gguf(path):
    """(metadata dict, {name: (dims, ggml type, bytes)}, data section offsets)."""
    with open(path, "rb") as f:
        blob = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        values = struct.unpack_from("<" + fmt, blob, pos)
        pos += struct.calcsize("<" + fmt)
        return values if len(values) > 1 else values[0]

    def string():
        nonlocal pos
        n = take("Q")
        s = blob[pos : pos + n].decode("utf-8")
        pos += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(kind):
        if kind == 8:
            return string()
        if kind == 9:
            elem, count = take("I"), take("Q")
            return [value(elem) for _ in range(count)]
        return take(scalar[kind])

    magic, version, n_tensors, n_kv = take("I"), take("I"), take("Q"), take("Q")
    assert magic == 0x46554747 and version == 3, (magic, version)
    meta = {}
    for _ in range(n_kv):
        key = string()
        meta[key] = value(take("I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        dims = [take("Q") for _ in range(take("I"))]
        kind, offset = take("I"), take("Q")
        infos.append((name, dims, kind, offset))
    base = -(-pos // 32) * 32
    sizes = {0: 4, 1: 2, 30: 2}
    tensors, offsets = {}, []
    for name, dims, kind, offset in infos:
        count = 1
        for d in dims:
            count *= d
        begin = base + offset
        tensors[name] = (dims, kind, blob[begin : begin + count * sizes[kind]])
        offsets.append(offset)
    return meta, tensors, offsets


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack_from("<Q", blob, 0)
    header = json.loads(blob[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name != "__metadata__":
            begin, end = info["data_offsets"]
            out[name] = (info["dtype"], info["shape"], blob[8 + n + begin : 8 + n + end])
    return out


def bf16_floats(raw):
    n = len(raw) // 2
    words = struct.unpack(f"<{n}H", raw)
    return list(struct.unpack(f"<{n}f", struct.pack(f"<{n}I", *(w << 16 for w in words))))


def f32_floats(raw):
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def run(args):
    return subprocess.run([sys.executable, SCRIPT] + args, capture_output=True, text=True)


def make_model(out, *flags):
    subprocess.run([MAKE_MODEL, "--shape", "tiny", "--dtype", "bf16", "--out", out, *flags],
                   check=True, capture_output=True)


@unittest.skipUnless(MAKE_MODEL, "set COIL_MAKE_MODEL to coil-make-model")
class CoilToGgufTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = os.path.join(cls.tmp.name, "st", "m")
        make_model(cls.dir, "--format", "safetensors")
        cls.gguf = os.path.join(cls.tmp.name, "st.gguf")
        result = run(["--model", cls.dir, "--out", cls.gguf])
        assert result.returncode == 0, result.stderr
        cls.meta, cls.tensors, cls.offsets = read_gguf(cls.gguf)
        with open(os.path.join(cls.dir, "config.json")) as f:
            cls.config = json.load(f)
        cls.stored = read_safetensors(os.path.join(cls.dir, "model.safetensors"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def dims(self):
        c, ssm = self.config, self.config["ssm_cfg"]
        d, n, g = c["d_model"], ssm["d_state"], ssm["ngroups"]
        di = ssm["expand"] * d
        h = di // ssm["headdim"]
        vocab = -(-c["vocab_size"] // c["pad_vocab_size_multiple"]) * c["pad_vocab_size_multiple"]
        return d, di, n, g, h, vocab, ssm["d_conv"]

    def test_metadata_is_what_the_mamba2_loader_reads(self):
        d, di, n, g, h, _, conv = self.dims()
        m = self.meta
        self.assertEqual(m["general.architecture"], "mamba2")
        self.assertEqual(m["mamba2.embedding_length"], d)
        self.assertEqual(m["mamba2.block_count"], self.config["n_layer"])
        self.assertEqual(m["mamba2.ssm.conv_kernel"], conv)
        self.assertEqual(m["mamba2.ssm.inner_size"], di)
        self.assertEqual(m["mamba2.ssm.state_size"], n)
        self.assertEqual(m["mamba2.ssm.time_step_rank"], h)
        self.assertEqual(m["mamba2.ssm.group_count"], g)
        self.assertAlmostEqual(m["mamba2.attention.layer_norm_rms_epsilon"], 1e-5, places=9)
        self.assertEqual(m["general.file_type"], 32)  # mostly bf16
        self.assertEqual(m["tokenizer.ggml.model"], "gpt2")
        self.assertEqual(len(m["tokenizer.ggml.tokens"]), len(m["tokenizer.ggml.token_type"]))

    def test_tensors_are_the_ones_the_mamba2_loader_creates(self):
        d, di, n, g, h, vocab, conv = self.dims()
        conv_dim = di + 2 * g * n
        bf16, f32 = 30, 0
        # (dims innermost first, type), as src/models/mamba2.cpp creates them.
        expected = {"token_embd.weight": ([d, vocab], bf16), "output_norm.weight": ([d], f32)}
        for i in range(self.config["n_layer"]):
            expected.update({
                f"blk.{i}.attn_norm.weight": ([d], f32),
                f"blk.{i}.ssm_in.weight": ([d, di + conv_dim + h], bf16),
                f"blk.{i}.ssm_conv1d.weight": ([conv, conv_dim], f32),
                f"blk.{i}.ssm_conv1d.bias": ([conv_dim], f32),
                f"blk.{i}.ssm_dt.bias": ([h], f32),
                f"blk.{i}.ssm_a": ([1, h], f32),
                f"blk.{i}.ssm_d": ([1, h], f32),
                f"blk.{i}.ssm_norm.weight": ([di // g, g], f32),
                f"blk.{i}.ssm_out.weight": ([di, d], bf16),
            })
        got = {name: (dims, kind) for name, (dims, kind, _) in self.tensors.items()}
        self.assertEqual(got, expected)
        self.assertTrue(all(o % 32 == 0 for o in self.offsets))

    def test_values_match_the_checkpoint(self):
        s = self.stored
        self.assertEqual(self.tensors["token_embd.weight"][2], s["backbone.embedding.weight"][2])
        self.assertEqual(self.tensors["blk.1.ssm_in.weight"][2],
                         s["backbone.layers.1.mixer.in_proj.weight"][2])
        self.assertEqual(f32_floats(self.tensors["blk.0.ssm_conv1d.weight"][2]),
                         bf16_floats(s["backbone.layers.0.mixer.conv1d.weight"][2]))
        a_log = bf16_floats(s["backbone.layers.1.mixer.A_log"][2])
        a = f32_floats(self.tensors["blk.1.ssm_a"][2])
        for x, y in zip(a_log, a):
            self.assertEqual(y, struct.unpack("<f", struct.pack("<f", -math.exp(x)))[0])
        self.assertEqual(f32_floats(self.tensors["blk.0.ssm_norm.weight"][2]),
                         bf16_floats(s["backbone.layers.0.mixer.norm.weight"][2]))

    def test_every_layout_and_format_gives_the_same_file(self):
        for name, flags in (("pt", ["--format", "pytorch"]), ("hf", ["--layout", "hf"]),
                            ("sh", ["--format", "safetensors", "--shards", "3"])):
            model = os.path.join(self.tmp.name, name, "m")  # same basename: same general.name
            make_model(model, *flags)
            out = os.path.join(self.tmp.name, name + ".gguf")
            result = run(["--model", model, "--out", out])
            self.assertEqual(result.returncode, 0, result.stderr)
            with open(out, "rb") as a, open(self.gguf, "rb") as b:
                self.assertTrue(a.read() == b.read(), name)

    def test_no_vocab_writes_the_size_only(self):
        out = os.path.join(self.tmp.name, "nv.gguf")
        self.assertEqual(run(["--model", self.dir, "--out", out, "--no-vocab"]).returncode, 0)
        meta, tensors, _ = read_gguf(out)
        self.assertEqual(meta["tokenizer.ggml.model"], "no_vocab")
        self.assertEqual(meta["mamba2.vocab_size"], self.dims()[5])
        self.assertNotIn("tokenizer.ggml.tokens", meta)
        self.assertEqual(tensors.keys(), self.tensors.keys())

    def test_bad_models_are_refused_by_name(self):
        broken = os.path.join(self.tmp.name, "broken", "m")
        make_model(broken, "--format", "safetensors")
        path = os.path.join(broken, "model.safetensors")
        with open(path, "rb") as f:
            blob = f.read()
        (n,) = struct.unpack_from("<Q", blob, 0)
        header = json.loads(blob[8 : 8 + n])
        del header["backbone.layers.1.mixer.D"]
        raw = json.dumps(header).encode()
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw + blob[8 + n :])
        result = run(["--model", broken, "--out", os.path.join(self.tmp.name, "x.gguf")])
        self.assertEqual(result.returncode, 1)
        self.assertIn("layers.1.mixer.D", result.stderr)

        hybrid = os.path.join(self.tmp.name, "hybrid", "m")
        make_model(hybrid, "--format", "safetensors")
        with open(os.path.join(hybrid, "config.json")) as f:
            config = json.load(f)
        config["attn_layer_idx"] = [1]
        with open(os.path.join(hybrid, "config.json"), "w") as f:
            json.dump(config, f)
        result = run(["--model", hybrid, "--out", os.path.join(self.tmp.name, "y.gguf")])
        self.assertEqual(result.returncode, 1)
        self.assertIn("attention", result.stderr)


if __name__ == "__main__":
    unittest.main()

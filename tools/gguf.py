"""gguf.py - read and write GGUF v3 files from Python (numpy only).

The converters (hf_to_gguf.py, llama2c_to_gguf, random_model) write models with
GGUFWriter; tools that copy a vocabulary read one with GGUFReader.

    w = GGUFWriter("out.gguf")
    w.add("general.architecture", "llama")            # type inferred
    w.add("llama.block_count", 2, GGUF_UINT32)         # or explicit
    w.add("tokenizer.ggml.tokens", ["a", "b"])         # array of strings
    w.add_tensor("token_embd.weight", np_array_f32)    # stored as F32
    w.add_tensor_raw("blk.0.attn_q.weight", GGML_Q8_0, (64, 64), raw_bytes)
    w.write(progress=True)

Shapes are given numpy-style (rows, cols); GGUF stores them reversed
(ne[0] = cols). Layout: header, key/values, tensor infos, padding to
general.alignment (32), data with each tensor aligned.
"""
import mmap
import struct
import sys

import numpy as np

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

(GGUF_UINT8, GGUF_INT8, GGUF_UINT16, GGUF_INT16, GGUF_UINT32, GGUF_INT32,
 GGUF_FLOAT32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY, GGUF_UINT64, GGUF_INT64,
 GGUF_FLOAT64) = range(13)

_SCALAR_FMT = {
    GGUF_UINT8: "<B", GGUF_INT8: "<b", GGUF_UINT16: "<H", GGUF_INT16: "<h",
    GGUF_UINT32: "<I", GGUF_INT32: "<i", GGUF_FLOAT32: "<f", GGUF_BOOL: "<?",
    GGUF_UINT64: "<Q", GGUF_INT64: "<q", GGUF_FLOAT64: "<d",
}

# ggml tensor types: id -> (name, block size, bytes per block)
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q4_1 = 0, 1, 2, 3
GGML_Q5_0, GGML_Q5_1, GGML_Q8_0 = 6, 7, 8
GGML_Q4_K, GGML_Q5_K, GGML_Q6_K = 12, 13, 14
GGML_BF16 = 30
GGML_TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    30: ("BF16", 1, 2),
}


def tensor_nbytes(ggml_type, shape):
    name, blck, size = GGML_TYPES[ggml_type]
    cols = shape[-1]
    if cols % blck:
        raise ValueError(f"row length {cols} is not a multiple of {name}'s block size {blck}")
    rows = 1
    for d in shape[:-1]:
        rows *= d
    return rows * (cols // blck) * size


def _pack_string(s):
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def _infer_type(v):
    if isinstance(v, bool):
        return GGUF_BOOL
    if isinstance(v, int):
        return GGUF_UINT32 if 0 <= v < 2**32 else GGUF_INT64
    if isinstance(v, float):
        return GGUF_FLOAT32
    if isinstance(v, (str, bytes)):
        return GGUF_STRING
    if isinstance(v, (list, tuple, np.ndarray)):
        return GGUF_ARRAY
    raise TypeError(f"cannot store {type(v)} in GGUF")


def _pack_value(v, vtype, elem_type=None):
    if vtype == GGUF_STRING:
        return _pack_string(v)
    if vtype == GGUF_ARRAY:
        items = list(v) if not isinstance(v, np.ndarray) else v
        if elem_type is None:
            elem_type = _infer_type(items[0]) if len(items) else GGUF_UINT32
            if elem_type == GGUF_UINT32 and any(isinstance(x, int) and x < 0 for x in items):
                elem_type = GGUF_INT32
        out = [struct.pack("<IQ", elem_type, len(items))]
        if elem_type == GGUF_STRING:
            out.extend(_pack_string(x) for x in items)
        else:
            np_type = {GGUF_UINT8: "<u1", GGUF_INT8: "<i1", GGUF_UINT16: "<u2",
                       GGUF_INT16: "<i2", GGUF_UINT32: "<u4", GGUF_INT32: "<i4",
                       GGUF_FLOAT32: "<f4", GGUF_BOOL: "<u1", GGUF_UINT64: "<u8",
                       GGUF_INT64: "<i8", GGUF_FLOAT64: "<f8"}[elem_type]
            out.append(np.asarray(items).astype(np_type).tobytes())
        return b"".join(out)
    return struct.pack(_SCALAR_FMT[vtype], v)


class GGUFWriter:
    def __init__(self, path, alignment=ALIGNMENT):
        self.path = path
        self.alignment = alignment
        self.kv = []       # (key, type, packed value)
        self.tensors = []  # (name, ggml type, shape, bytes or callable)

    def add(self, key, value, vtype=None, elem_type=None):
        if vtype is None:
            vtype = _infer_type(value)
        self.kv.append((key, vtype, _pack_value(value, vtype, elem_type)))

    def add_tensor(self, name, array, ggml_type=None):
        """Store a numpy array as F32 (default), F16 or BF16."""
        a = np.ascontiguousarray(array)
        if ggml_type is None:
            ggml_type = GGML_F16 if a.dtype == np.float16 else GGML_F32
        if ggml_type == GGML_F32:
            data = a.astype("<f4").tobytes()
        elif ggml_type == GGML_F16:
            data = a.astype("<f2").tobytes()
        elif ggml_type == GGML_BF16:
            u = a.astype("<f4").view("<u4")
            u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
            data = u.tobytes()
        else:
            raise ValueError("add_tensor stores float types; use add_tensor_raw for quantized data")
        self.add_tensor_raw(name, ggml_type, a.shape, data)

    def add_tensor_raw(self, name, ggml_type, shape, data):
        """data: bytes, or a callable returning bytes (called while writing)."""
        shape = tuple(int(d) for d in shape)
        if not callable(data) and len(data) != tensor_nbytes(ggml_type, shape):
            raise ValueError(f"{name}: {len(data)} bytes, expected {tensor_nbytes(ggml_type, shape)}")
        self.tensors.append((name, ggml_type, shape, data))

    def _pad(self, n):
        return (-n) % self.alignment

    def write(self, progress=False):
        if self.alignment != ALIGNMENT and not any(k == "general.alignment" for k, _, _ in self.kv):
            self.add("general.alignment", self.alignment, GGUF_UINT32)
        head = [GGUF_MAGIC, struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.kv))]
        for key, vtype, packed in self.kv:
            head += [_pack_string(key), struct.pack("<I", vtype), packed]
        offset = 0
        offsets = []
        for name, gtype, shape, _ in self.tensors:
            offsets.append(offset)
            ne = list(reversed(shape))
            head += [_pack_string(name), struct.pack("<I", len(ne)),
                     struct.pack(f"<{len(ne)}Q", *ne), struct.pack("<IQ", gtype, offset)]
            nbytes = tensor_nbytes(gtype, shape)
            offset += nbytes + self._pad(nbytes)
        header = b"".join(head)
        total = len(header) + self._pad(len(header)) + offset
        with open(self.path, "wb") as f:
            f.write(header)
            f.write(b"\0" * self._pad(len(header)))
            done = 0
            for i, (name, gtype, shape, data) in enumerate(self.tensors):
                if callable(data):
                    data = data()
                nbytes = tensor_nbytes(gtype, shape)
                if len(data) != nbytes:
                    raise ValueError(f"{name}: {len(data)} bytes, expected {nbytes}")
                f.write(data)
                f.write(b"\0" * self._pad(nbytes))
                done += nbytes
                if progress:
                    sys.stderr.write(f"\rwriting {self.path}: {i + 1}/{len(self.tensors)} tensors, "
                                     f"{done / 2**20:.1f} MiB")
                    sys.stderr.flush()
            if progress:
                sys.stderr.write("\n")
        return total


class GGUFReader:
    """Reads metadata (self.kv: key -> (type, value, elem_type)) and tensor
    infos (self.tensors: name -> (ggml type, numpy-style shape, absolute offset))."""

    def __init__(self, path):
        self.path = path
        # stdlib mmap: slicing it yields bytes directly, far faster than a
        # numpy memmap for the ~300k small strings of a vocabulary.
        with open(path, "rb") as f:
            self.data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.pos = 0
        if self.data[:4] != GGUF_MAGIC:
            raise ValueError(f"{path}: not a GGUF file")
        self.version, n_tensors, n_kv = struct.unpack_from("<IQQ", self.data, 4)
        self.pos = 24
        self.kv = {}
        for _ in range(n_kv):
            key = self._str()
            vtype = self._u("<I")
            value, elem = self._value(vtype)
            self.kv[key] = (vtype, value, elem)
        self.alignment = int(self.get("general.alignment", ALIGNMENT))
        infos = []
        for _ in range(n_tensors):
            name = self._str()
            nd = self._u("<I")
            ne = [self._u("<Q") for _ in range(nd)]
            gtype = self._u("<I")
            off = self._u("<Q")
            infos.append((name, gtype, tuple(reversed(ne)), off))
        base = self.pos + ((-self.pos) % self.alignment)
        self.tensors = {n: (t, s, base + o) for n, t, s, o in infos}

    def _u(self, fmt):
        v = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def _str(self):
        n = self._u("<Q")
        s = self.data[self.pos:self.pos + n].decode("utf-8", errors="surrogateescape")
        self.pos += n
        return s

    def _value(self, vtype):
        if vtype == GGUF_STRING:
            return self._str(), None
        if vtype == GGUF_ARRAY:
            elem = self._u("<I")
            n = self._u("<Q")
            if elem == GGUF_STRING:
                return [self._str() for _ in range(n)], elem
            if elem == GGUF_ARRAY:
                return [self._value(GGUF_ARRAY)[0] for _ in range(n)], elem
            fmt = _SCALAR_FMT[elem]
            size = struct.calcsize(fmt)
            arr = np.frombuffer(self.data[self.pos:self.pos + n * size], dtype=fmt.replace("?", "u1"))
            self.pos += n * size
            return arr.tolist(), elem
        return self._u(_SCALAR_FMT[vtype]), None

    def get(self, key, default=None):
        return self.kv[key][1] if key in self.kv else default

    def tensor_bytes(self, name):
        gtype, shape, off = self.tensors[name]
        return self.data[off:off + tensor_nbytes(gtype, shape)]

    def copy_kv(self, writer, prefix):
        """Copy every key starting with prefix (e.g. "tokenizer.") into writer."""
        for key, (vtype, value, elem) in self.kv.items():
            if key.startswith(prefix):
                writer.add(key, value, vtype, elem)

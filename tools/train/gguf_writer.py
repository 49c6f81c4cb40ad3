"""gguf_writer.py — kakeya's own GGUF v3 writer and reader (stdlib + numpy).

Writer: GGUFWriter(path).add_kv(key, value, type) ... add_tensor(name, array,
ggml_type) ... write(). Arrays are given in PyTorch layout ([out, in]); the
GGUF dims are written reversed (ne[0] = row length = in), as llama.cpp does.
Types: F32 (0), F16 (1), Q8_0 (8: blocks of 32, f16 scale d = max|x|/127,
int8 q = round(x/d), 34 bytes a block, exactly llama.cpp's reference
quantizer). Reader: read_gguf(path) -> (kv dict, {name: float32 ndarray in
PyTorch layout}), dequantizing Q8_0/F16.
"""
import struct

import numpy as np

GGUF_MAGIC = b"GGUF"
ALIGN = 32
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY, T_UINT64, \
    T_INT64, T_FLOAT64 = range(13)
F32, F16, Q8_0 = 0, 1, 8
_SCALAR = {T_UINT8: "<B", T_INT8: "<b", T_UINT16: "<H", T_INT16: "<h", T_UINT32: "<I", T_INT32: "<i",
           T_FLOAT32: "<f", T_BOOL: "<?", T_UINT64: "<Q", T_INT64: "<q", T_FLOAT64: "<d"}


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def quantize_q8_0(a):
    """float32 [rows, n] (n % 32 == 0) -> bytes of Q8_0 blocks, and the dequantized array."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    assert a.shape[-1] % 32 == 0, a.shape
    blocks = a.reshape(-1, 32)
    amax = np.abs(blocks).max(axis=1)
    d = amax / 127.0
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0.0).astype(np.float32)
    v = blocks * inv[:, None]
    q = (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int8)  # roundf: half away from zero
    d16 = d.astype(np.float16)
    rec = np.zeros(len(blocks), dtype=[("d", "<f2"), ("q", "i1", (32,))])
    rec["d"], rec["q"] = d16, q
    deq = (q.astype(np.float32) * d16.astype(np.float32)[:, None]).reshape(a.shape)
    return rec.tobytes(), deq


def dequantize_q8_0(buf, shape):
    n = int(np.prod(shape))
    rec = np.frombuffer(buf, dtype=[("d", "<f2"), ("q", "i1", (32,))], count=n // 32)
    return (rec["q"].astype(np.float32) * rec["d"].astype(np.float32)[:, None]).reshape(shape)


def tensor_nbytes(ggml_type, n):
    return {F32: 4 * n, F16: 2 * n, Q8_0: n // 32 * 34}[ggml_type]


class GGUFWriter:
    def __init__(self, path):
        self.path = path
        self.kvs = []      # (key, bytes)
        self.tensors = []  # (name, shape(pytorch), type, bytes)

    def add_kv(self, key, value, vtype, elem_type=None):
        out = struct.pack("<I", vtype)
        if vtype == T_STRING:
            out += _str(value)
        elif vtype == T_ARRAY:
            out += struct.pack("<IQ", elem_type, len(value))
            if elem_type == T_STRING:
                out += b"".join(_str(s) for s in value)
            else:
                out += np.asarray(value, dtype=np.dtype(_SCALAR[elem_type])).tobytes()
        else:
            out += struct.pack(_SCALAR[vtype], value)
        self.kvs.append((key, out))

    def add_tensor(self, name, arr, ggml_type):
        arr = np.asarray(arr, dtype=np.float32)
        if ggml_type == F32:
            data = arr.astype("<f4").tobytes()
        elif ggml_type == F16:
            data = arr.astype("<f2").tobytes()
        elif ggml_type == Q8_0:
            data, _ = quantize_q8_0(arr)
        else:
            raise ValueError(ggml_type)
        self.tensors.append((name, arr.shape, ggml_type, data))

    def write(self):
        head = GGUF_MAGIC + struct.pack("<IQQ", 3, len(self.tensors), len(self.kvs))
        for k, v in self.kvs:
            head += _str(k) + v
        off = 0
        offsets = []
        for name, shape, t, data in self.tensors:
            ne = list(reversed(shape))
            head += _str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", x) for x in ne)
            head += struct.pack("<IQ", t, off)
            offsets.append(off)
            off += len(data)
            off += (-off) % ALIGN
        head += b"\0" * ((-len(head)) % ALIGN)
        with open(self.path, "wb") as f:
            f.write(head)
            for (name, shape, t, data), o in zip(self.tensors, offsets):
                pos = f.tell() - len(head)
                assert pos <= o
                f.write(b"\0" * (o - pos))
                f.write(data)


def read_gguf(path, want_tensors=True):
    buf = open(path, "rb").read()
    assert buf[:4] == GGUF_MAGIC, "not a GGUF file"
    version, n_t, n_kv = struct.unpack_from("<IQQ", buf, 4)
    assert version == 3
    p = 24

    def rstr():
        nonlocal p
        n, = struct.unpack_from("<Q", buf, p)
        s = buf[p + 8:p + 8 + n].decode("utf-8")
        p += 8 + n
        return s

    def rval(t):
        nonlocal p
        if t == T_STRING:
            return rstr()
        if t == T_ARRAY:
            et, n = struct.unpack_from("<IQ", buf, p)
            p += 12
            if et == T_STRING:
                return [rstr() for _ in range(n)]
            dt = np.dtype(_SCALAR[et])
            a = np.frombuffer(buf, dtype=dt, count=n, offset=p)
            p += dt.itemsize * n
            return a.tolist()
        fmt = _SCALAR[t]
        v, = struct.unpack_from(fmt, buf, p)
        p += struct.calcsize(fmt)
        return v

    kv = {}
    for _ in range(n_kv):
        k = rstr()
        t, = struct.unpack_from("<I", buf, p)
        p += 4
        kv[k] = rval(t)
    infos = []
    for _ in range(n_t):
        name = rstr()
        nd, = struct.unpack_from("<I", buf, p)
        p += 4
        ne = struct.unpack_from("<" + "Q" * nd, buf, p)
        p += 8 * nd
        t, off = struct.unpack_from("<IQ", buf, p)
        p += 12
        infos.append((name, ne, t, off))
    align = kv.get("general.alignment", ALIGN)
    data0 = p + (-p) % align
    tensors, types = {}, {}
    if want_tensors:
        for name, ne, t, off in infos:
            shape = tuple(reversed(ne))
            n = int(np.prod(shape))
            o = data0 + off
            nb = tensor_nbytes(t, n)
            assert o + nb <= len(buf), f"{name} past end of file"
            if t == F32:
                a = np.frombuffer(buf, "<f4", n, o).reshape(shape).copy()
            elif t == F16:
                a = np.frombuffer(buf, "<f2", n, o).astype(np.float32).reshape(shape)
            elif t == Q8_0:
                a = dequantize_q8_0(buf[o:o + nb], shape)
            else:
                raise ValueError(f"{name}: type {t}")
            tensors[name] = a
            types[name] = t
    kv["__tensor_types"] = types
    return kv, tensors

"""Reading one tensor's values at offsets a validated header gave, without reading the shard.

Only the tensor's own bytes are read (one `source.read`, or bounded chunks of them into one
buffer with a `TensorStream` when the tensor may be too large to hold). Native dtypes come back as
read-only numpy views of those bytes; BF16 and the 8-bit floats are widened to float32
exactly (BF16 by a 16-bit shift, FP8 through a 256-entry table). Returned arrays are
read-only either way; `.copy()` one to write into it. numpy is imported where values are
decoded: the NaN/Inf count of float32 bytes (`count_nonfinite_f32`) needs none.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Callable, Iterator

from hccli.base.bounded import one_line
from hccli.checkpoint.safetensors.header_types import DTYPES, Header, TensorInfo, quote
from hccli.checkpoint.source import ByteSource
from hccli.base.errors import HcError

if TYPE_CHECKING:
    import numpy as np

# Stored little-endian, as the safetensors format says.
_NATIVE: dict[str, str] = {
    "BOOL": "?",
    "U8": "u1",
    "I8": "i1",
    "I16": "<i2",
    "U16": "<u2",
    "F16": "<f2",
    "I32": "<i4",
    "U32": "<u4",
    "F32": "<f4",
    "C64": "<c8",
    "F64": "<f8",
    "I64": "<i8",
    "U64": "<u8",
}


class TensorReadError(HcError):
    """A tensor's values could not be read. code: "no_such_tensor", "unsupported_dtype",
    "file_changed"."""

    def __init__(self, message: str, code: str):
        super().__init__(message, exit_code=2)
        self.code = code


def _minifloat_table(exp_bits: int, man_bits: int, bias: int, *, ieee_specials: bool,
                     nan_is_all_ones: bool, fnuz: bool) -> np.ndarray:
    """float32 value of every byte of a sign/exponent/mantissa 8-bit float."""
    import numpy as np

    out = np.empty(256, dtype=np.float32)
    top = (1 << exp_bits) - 1
    for byte in range(256):
        sign = -1.0 if byte >> 7 else 1.0
        exp = (byte >> man_bits) & top
        man = byte & ((1 << man_bits) - 1)
        if fnuz and byte == 0x80:
            value = float("nan")  # FNUZ: the negative-zero pattern is the only NaN
        elif ieee_specials and exp == top:
            value = sign * float("inf") if man == 0 else float("nan")
        elif nan_is_all_ones and exp == top and man == (1 << man_bits) - 1:
            value = float("nan")
        elif exp == 0:
            value = sign * man / (1 << man_bits) * 2.0 ** (1 - bias)
        else:
            value = sign * (1 + man / (1 << man_bits)) * 2.0 ** (exp - bias)
        out[byte] = value
    out.flags.writeable = False
    return out


def _e8m0_table() -> np.ndarray:
    # OCP MX scale: unsigned power of two 2^(b-127); 0xFF is NaN. 2^-127 is a float32 subnormal.
    import numpy as np

    out = np.array([2.0 ** (b - 127) for b in range(255)] + [float("nan")], dtype=np.float32)
    out.flags.writeable = False
    return out


@cache
def _tables() -> dict[str, np.ndarray]:
    return {
        "F8_E4M3": _minifloat_table(4, 3, 7, ieee_specials=False, nan_is_all_ones=True, fnuz=False),
        "F8_E5M2": _minifloat_table(5, 2, 15, ieee_specials=True, nan_is_all_ones=False, fnuz=False),
        "F8_E4M3FNUZ": _minifloat_table(4, 3, 8, ieee_specials=False, nan_is_all_ones=False, fnuz=True),
        "F8_E5M2FNUZ": _minifloat_table(5, 2, 16, ieee_specials=False, nan_is_all_ones=False, fnuz=True),
        "F8_E8M0": _e8m0_table(),
    }


# Dtypes read_tensor can return values for; F4 and F6 stay raw bytes (read_tensor_bytes).
READABLE_DTYPES: tuple[str, ...] = tuple(_NATIVE) + ("BF16", "F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ",
                                                    "F8_E8M0")


def _lookup(header: Header, name: str) -> TensorInfo:
    info = header.get(name)
    if info is None:
        raise TensorReadError(
            f"{one_line(header.name)}: no tensor named {quote(name)} in this file", "no_such_tensor"
        )
    return info


def _check_size(source: ByteSource, header: Header) -> None:
    size = source.size()
    if size != header.file_size:
        raise TensorReadError(
            f"{one_line(source.name)}: file has {size:,} bytes, expected {header.file_size:,}"
            " as when its header was read (changed on disk, or another file?)",
            "file_changed",
        )


def _readable(header: Header, name: str) -> TensorInfo:
    info = _lookup(header, name)
    if info.dtype not in READABLE_DTYPES:
        raise TensorReadError(
            f"{one_line(header.name)}: tensor {quote(name)} is {info.dtype}, whose values cannot be"
            f" decoded here, expected one of {', '.join(READABLE_DTYPES)}",
            "unsupported_dtype",
        )
    return info


def _decode(raw: bytes, dtype: str) -> np.ndarray:
    import numpy as np

    if dtype in _NATIVE:
        return np.frombuffer(raw, dtype=np.dtype(_NATIVE[dtype]))
    if dtype == "BF16":
        # BF16 is the top half of a float32: widening by a shift is exact, NaN payloads included.
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32)
    return _tables()[dtype][np.frombuffer(raw, dtype=np.uint8)]


def read_tensor_bytes(source: ByteSource, header: Header, name: str) -> bytes:
    """Exactly the stored bytes of tensor `name`."""
    info = _lookup(header, name)
    _check_size(source, header)
    return source.read(info.abs_begin, info.nbytes)


def read_tensor(source: ByteSource, header: Header, name: str) -> np.ndarray:
    """The values of tensor `name`, shaped as the header says (read-only array)."""
    info = _readable(header, name)
    values = _decode(read_tensor_bytes(source, header, name), info.dtype).reshape(info.shape)
    values.flags.writeable = False
    return values


class TensorStream:
    """One tensor's stored bytes read a chunk at a time into one buffer reused all along (no
    allocation a read), and decoded to float64 only where the caller asks: the value path of
    `diff --values all` and `inspect --stats`. A unit is the least run of values that decodes
    alone: one element of a safetensors type, a block of a GGML quant (`decode_block`)."""

    def __init__(self, header: Header, info: TensorInfo, open_source: Callable[[], ByteSource],
                 block: tuple[int, int] | None = None, decode_block: Callable[[memoryview], np.ndarray] | None = None):
        """block: (values, bytes) of a GGML quant's block, which decode_block dequantises; None for
        a type of values.py's own."""
        self.header, self.info, self.open = header, info, open_source
        self.unit_values, self.unit_bytes = block if block is not None else (1, DTYPES[info.dtype] // 8)
        self.elements = info.n_elements
        self._decode_block = decode_block

    @property
    def dtype(self) -> str:
        return self.info.dtype

    def chunks(self, src: ByteSource, step: int, start: int = 0, stop: int | None = None) -> Iterator[memoryview]:
        """The stored bytes of values start .. stop (whole units; stop None: the last), `step`
        values (whole units) a read, each a view of the start of one buffer that the next read
        overwrites."""
        _check_size(src, self.header)
        at = self.info.abs_begin + self.nbytes(start)
        end = self.info.abs_begin + self.nbytes(self.elements if stop is None else stop)
        step_bytes = self.nbytes(step)
        buf = memoryview(bytearray(min(step_bytes, end - at)))
        read = src.read_into
        while at < end:  # per chunk as little Python as can be: it runs under the GIL
            n = end - at
            into = buf if n >= step_bytes else buf[:n]
            read(at, into)
            yield into
            at += step_bytes

    def nbytes(self, values: int) -> int:
        """Stored bytes of that many values (whole units)."""
        return values // self.unit_values * self.unit_bytes

    def decode(self, raw: memoryview) -> np.ndarray:
        """Whole units' bytes as float64 values, flat."""
        import numpy as np

        if self._decode_block is not None:
            return self._decode_block(raw).astype(np.float64).reshape(-1)
        return _decode(raw, self.info.dtype).astype(np.float64)


def tensor_stream(source: Callable[[], ByteSource], header: Header, name: str) -> TensorStream:
    """A stream of tensor `name` of a readable dtype; source() opens the file anew."""
    return TensorStream(header, _readable(header, name), source)


# A float32 is NaN or Inf when its 8 exponent bits are all ones: the high byte (little-endian)
# holds the sign and 7 of them, the byte below it the eighth in its top bit.
_EXP_HIGH7 = bytes(1 if b & 0x7F == 0x7F else 0 for b in range(256))
_EXP_LOW1 = bytes(1 if b & 0x80 else 0 for b in range(256))


def count_nonfinite_f32(raw: bytes) -> int:
    """NaN and Inf values among little-endian float32 values, by C-level passes over the bytes
    (no numpy): a value can be one only where its high byte has the 7 exponent bits set, which
    no value of magnitude below 2^127 has, so the usual tensor is one look at those bytes."""
    view = memoryview(raw)
    high = view[3::4].tobytes()
    if b"\x7f" not in high and b"\xff" not in high:  # (two memchr: no table pass over the usual tensor)
        return 0
    return (int.from_bytes(high.translate(_EXP_HIGH7), "little")
            & int.from_bytes(view[2::4].tobytes().translate(_EXP_LOW1), "little")).bit_count()

"""Reading the kernel commands' input files (mixes, hidden states, golden vectors), bounded.

Anything read from a file is hostile: every reader checks that the path is a
regular file (a FIFO would block `open`, /dev/zero never ends) and works out how
many elements an array holds from its header before it allocates anything, and
refuses what is beyond limits.py's bounds, naming the file and the bound. Safetensors
go through the project's hardened header parser and value reader
(checkpoint/safetensors/header.py, checkpoint/values.py); .npy headers through numpy's
header reader (bounded) with the data size checked against the file; JSON is
capped in size, nesting and digits.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from hccli.base.bounded import read_json, read_small_file, regular_file_size
from hccli.base.errors import HcError
from hccli.base.limits import MAX_ELEMENTS, MAX_JSON_BYTES, MAX_JSON_DIGITS

FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")


def regular_file(path: Path, what: str = "file") -> int:
    """The size of `path` if it is a regular file; HcError naming it otherwise (checked before any open)."""
    return regular_file_size(path, f"a {what}")


def check_elements(path: Path, what: str, shape: tuple[int, ...] | list[int], limit: int = MAX_ELEMENTS) -> int:
    count = math.prod(int(d) for d in shape)
    if count > limit:
        raise HcError(f"{path}: {what} has shape {list(shape)}, {count:,} elements; hc reads at most {limit:,} "
                      "(base/limits.py's MAX_ELEMENTS)")
    return count


def load_float_array(path: Path, tensor: str) -> tuple[np.ndarray, str]:
    """(array of a float dtype, what it is in words) from .safetensors (named tensor), .npy or .json."""
    path = Path(path)
    size = regular_file(path, ".safetensors, .npy or .json file")
    suffix = path.suffix.lower()
    if suffix == ".safetensors":
        array, dtype = read_safetensors_tensors(path, (tensor,))[tensor]
        return array, f"tensor `{tensor}` {dtype}"
    if suffix == ".npy":
        array = _read_npy(path, size)
        return array, f"array {array.dtype.name}"
    if suffix == ".json":
        return _read_json(path, size), "nested list"
    raise HcError(f"{path}: unknown file type {suffix or '(none)'}; expected .safetensors, .npy or .json")


def read_safetensors_header(path: Path):  # -> (LocalFile, Header); the caller closes the source
    from hccli.checkpoint.safetensors.header import read_header
    from hccli.checkpoint.source import LocalFile

    regular_file(path, ".safetensors file")
    source = LocalFile(path)
    try:
        return source, read_header(source)
    except BaseException:
        source.close()
        raise


def read_safetensors_tensors(path: Path, names: tuple[str, ...], *, optional: tuple[str, ...] = (),
                             ) -> dict[str, tuple[np.ndarray, str]]:
    """name -> (float array, safetensors dtype) for each of `names` (and of `optional` that are present)."""
    from hccli.checkpoint.values import read_tensor

    source, header = read_safetensors_header(path)
    out = {}
    with source:
        for name in names + optional:
            info = header.get(name)
            if info is None:
                if name in optional:
                    continue
                found = sorted(header.by_name)
                listed = ", ".join(found[:8]) + (" ..." if len(found) > 8 else "") if found else "none"
                raise HcError(f"{path}: no tensor `{name}` (tensors found: {listed})")
            if info.dtype not in FLOAT_DTYPES:
                raise HcError(f"{path}: tensor `{name}` has dtype {info.dtype}, expected a float dtype "
                              f"({', '.join(FLOAT_DTYPES)})")
            check_elements(path, f"tensor `{name}`", info.shape)
            # a writable copy: the reader's arrays are read-only, which torch.as_tensor warns about
            out[name] = (np.array(read_tensor(source, header, name)), info.dtype)
    return out


def _read_npy(path: Path, size: int) -> np.ndarray:
    fmt = np.lib.format
    with path.open("rb") as f:
        try:
            version = fmt.read_magic(f)
            read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            shape, fortran, dtype = read(f)  # numpy caps the header at 10,000 bytes
        except (ValueError, OSError, EOFError, SyntaxError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise HcError(f"{path}: not a readable .npy array ({first})") from None
        if dtype.kind != "f" or dtype.hasobject:
            raise HcError(f"{path}: array has dtype {dtype.name}, expected a float dtype (float16, float32, float64)")
        count = check_elements(path, "array", shape)
        want = f.tell() + count * dtype.itemsize
        if size != want:
            raise HcError(f"{path}: {size:,} bytes, but its header ({list(shape)} {dtype.name}) implies {want:,}")
        data = np.fromfile(f, dtype=dtype, count=count)
    order = "F" if fortran else "C"
    return data.reshape(shape, order=order)


def _read_json(path: Path, size: int) -> np.ndarray:
    if size > MAX_JSON_BYTES:
        raise HcError(f"{path}: {size:,} bytes of JSON; hc reads at most {MAX_JSON_BYTES:,} "
                      "(use .npy or .safetensors for more)")

    def number(s: str) -> float:
        if len(s) > MAX_JSON_DIGITS:
            raise HcError(f"{path}: a number of {len(s):,} characters; expected at most {MAX_JSON_DIGITS}")
        return float(s)

    raw = read_small_file(path, MAX_JSON_BYTES, "a .json file")
    if raw is None:
        raise HcError(f"{path}: no such file; expected a .json file")
    # NaN and Infinity are mixes too: such tokens run and are flagged
    data = read_json(raw, str(path), "nested lists of numbers [..., (2+hc)*hc]", parse_int=number, parse_float=number,
                     parse_constant=float)
    try:
        array = np.asarray(data)
    except ValueError:
        raise HcError(f"{path}: the nested lists are not rectangular") from None
    if array.dtype.kind not in "f":
        raise HcError(f"{path}: expected nested lists of numbers, found {array.dtype.name} values")
    check_elements(path, "nested list", array.shape)
    return array.astype(np.float64, copy=False)

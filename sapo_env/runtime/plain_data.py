"""Plain data to bytes and back, rebuilding nothing but containers, scalars and numeric numpy
arrays: the format of a checkpoint (:mod:`sapo_env.runtime.checkpoint`), and of anything else
that crosses from outside the process, so that reading it can neither run code nor corrupt
memory, whoever wrote it.

``encode(value) -> bytes`` and ``decode(data) -> value``; ``decode(encode(value))`` equals
``value`` type for type (a tuple stays a tuple, an ``np.float32`` an ``np.float32``, an array
keeps its dtype, shape, memory order and every bit). What it carries:

- ``None``, ``bool``, ``int`` (any size up to 8192 bits), ``float`` (NaN and infinities too),
  ``complex``, ``str``, ``bytes``, ``bytearray``;
- ``list``, ``tuple``, ``dict`` (any keys it carries that are hashable), ``OrderedDict``,
  ``set``, ``frozenset``, nested at most ``MAX_DEPTH`` levels;
- numpy arrays and scalars of bool, integer, floating or complex dtypes.

Nothing else: not object, structured, string or datetime arrays, and not subclasses (a
namedtuple, an ``IntEnum``, a masked array), which decoding could not give back. ``encode``
raises ``TypeError`` naming where the first such value sits (``value['agents'][0]: ...``).

Format: a zip (stored, uncompressed) of ``state.json`` and one ``arr_<k>.npy`` per array
(numpy's ``.npy`` format, written with ``allow_pickle=False``), so ``np.load(path,
allow_pickle=False)`` also reads its arrays. JSON's own values stand for themselves; what JSON
lacks is an object whose one key is a tag:

================  ===========================================================================
``$tuple``        ``[item, ...]``; likewise ``$set`` and ``$frozenset``
``$dict``         ``[[key, value], ...]``: a dict with a key that is not a str, or a str key
                  that starts with ``$`` (any other dict is a JSON object); ``$ordered_dict``
``$int``          an int beyond +-2**53 (what JSON readers keep exactly), as decimal digits
``$float``        ``"nan"``, ``"inf"`` or ``"-inf"``
``$complex``      ``[real, imag]``, a part that is not finite as in ``$float``
``$bytes``        base64; likewise ``$bytearray``
``$numpy``        ``[dtype, hex]``: a numpy scalar, its dtype (``"<f4"``) and its bytes
``$array``        ``k``: the array ``arr_<k>.npy``
================  ===========================================================================

``decode`` checks everything before it builds anything: a zip of exactly those members, stored
and unencrypted, no larger than ``max_bytes`` nor than the data itself, its ``state.json`` no
larger than ``max_json_bytes`` (parsing costs a multiple of it in memory); JSON nested at most
``MAX_DEPTH`` deep with no duplicate keys and no other ``$`` keys; each tag's payload; each
array's ``.npy`` header (one numeric dtype, never a structured one: nothing else is built) and
its size; every array referenced exactly once. Anything else raises ``ValueError`` saying what
is wrong; nothing is ever unpickled or called.

Example::

    >>> import numpy as np
    >>> from sapo_env.runtime import plain_data
    >>> state = {"round": 3, "rewards": np.array([0.5, 1.0]), "pair": (1, 2), 7: {"x"}}
    >>> again = plain_data.decode(plain_data.encode(state))
    >>> again["pair"], again[7], again["rewards"].dtype
    ((1, 2), {'x'}, dtype('float64'))
"""

from __future__ import annotations

import ast
import base64
import binascii
import io
import json
import math
import re
import zipfile
from collections import OrderedDict
from typing import Any

import numpy as np

MAX_DEPTH = 100
"""Levels of JSON nesting a file may hold (a tagged container counts two); the states this
library saves nest under 20."""
MAX_BYTES = 2**32
"""The default largest file ``decode`` reads."""
MAX_JSON_BYTES = 2**27
"""The default largest ``state.json`` ``decode`` parses (what parsing costs in memory is a
multiple of its bytes; a zip's arrays cost their bytes)."""
MAX_INT_BITS = 8192

_STATE = "state.json"
_ARRAY = re.compile(r"arr_(0|[1-9][0-9]{0,8})\.npy")
_DTYPE = re.compile(r"[<>|][biufc][0-9]{1,2}")  # one numeric dtype, as numpy's dtype.str
_DIGITS = re.compile(r"-?[0-9]{1,2500}")
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)  # a JSON string literal
_SAFE_INT = 2**53
_NPY_MAGIC = b"\x93NUMPY"
_MAX_HEADER = 10_000
_MAX_DIMS = 32
_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


# --- encode ---------------------------------------------------------------------------------------

class _Refused(Exception):
    """A value ``encode`` cannot carry; ``path`` is filled in on the way out."""

    def __init__(self, kind: type[Exception], message: str):
        super().__init__(message)
        self.kind, self.path = kind, []


def encode(value: Any) -> bytes:
    """``value`` as plain-data bytes (see the module docstring); ``TypeError`` naming where a
    value it cannot carry sits, ``ValueError`` for nesting deeper than ``MAX_DEPTH``."""
    arrays: list[np.ndarray] = []
    try:
        tree = _encode(value, arrays, 1)
    except _Refused as refused:
        raise refused.kind(f"value{''.join(reversed(refused.path))}: {refused}") from None
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr(_STATE, json.dumps(tree, allow_nan=False, separators=(",", ":")))
        for k, array in enumerate(arrays):
            with archive.open(f"arr_{k}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, array, allow_pickle=False)
    return buffer.getvalue()


def _encode(value: Any, arrays: list[np.ndarray], depth: int) -> Any:
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        if -_SAFE_INT < value < _SAFE_INT:
            return value
        if value.bit_length() > MAX_INT_BITS:
            raise _Refused(ValueError, f"an int of {value.bit_length()} bits (at most "
                                       f"{MAX_INT_BITS})")
        return {"$int": str(value)}
    if kind is float:
        return value if math.isfinite(value) else {"$float": repr(value)}
    if depth > MAX_DEPTH - 1:
        raise _Refused(ValueError, f"nested deeper than {MAX_DEPTH} levels")
    if kind is list:
        return _items(value, arrays, depth + 1)
    if kind is dict:
        plain = _object(value, arrays, depth + 1)
        if plain is not None:
            return plain
    if kind in (dict, OrderedDict):
        tag = "$dict" if kind is dict else "$ordered_dict"
        return {tag: _items(([k, v] for k, v in value.items()), arrays, depth + 2)}
    if kind in (tuple, set, frozenset):
        return {f"${kind.__name__}": _items(value, arrays, depth + 2)}
    if kind in (bytes, bytearray):
        return {f"${kind.__name__}": base64.b64encode(value).decode("ascii")}
    if kind is complex:
        return {"$complex": [x if math.isfinite(x) else repr(x) for x in (value.real, value.imag)]}
    if kind is np.ndarray or isinstance(value, np.generic):
        if not _numeric(value.dtype):
            raise _Refused(TypeError, f"a numpy {'array' if kind is np.ndarray else 'scalar'} of "
                                      f"dtype {value.dtype}: only bool, integer, floating and "
                                      "complex dtypes are plain data")
        if kind is np.ndarray:
            arrays.append(value)
            return {"$array": len(arrays) - 1}
        return {"$numpy": [value.dtype.str, value.tobytes().hex()]}
    raise _Refused(TypeError, f"a {kind.__module__}.{kind.__qualname__} is not plain data "
                              "(see sapo_env.runtime.plain_data)")


def _items(values: Any, arrays: list[np.ndarray], depth: int) -> list[Any]:
    out = []
    try:
        for item in values:
            kind = type(item)  # JSON's own scalars inline: most of a state, encoded fast
            if kind is str or kind is float and item - item == 0 or item is None \
                    or kind is int and -_SAFE_INT < item < _SAFE_INT or kind is bool:
                out.append(item)
            else:
                out.append(_encode(item, arrays, depth))
    except _Refused as refused:
        refused.path.append(f"[{len(out)}]")
        raise
    return out


def _object(value: dict, arrays: list[np.ndarray], depth: int) -> dict[str, Any] | None:
    """``value`` as a JSON object; None if a key is not a str or starts with ``$``."""
    out, first_array = {}, len(arrays)
    try:
        for key, item in value.items():
            if type(key) is not str or key[:1] == "$":
                del arrays[first_array:]  # it goes in as a $dict instead
                return None
            kind = type(item)
            if kind is str or kind is float and item - item == 0 or item is None \
                    or kind is int and -_SAFE_INT < item < _SAFE_INT or kind is bool:
                out[key] = item
            else:
                out[key] = _encode(item, arrays, depth)
    except _Refused as refused:
        refused.path.append(f"[{key!r}]")
        raise
    return out


def _numeric(dtype: np.dtype) -> bool:
    return (dtype.kind in "biufc" and dtype.names is None and dtype.subdtype is None
            and _DTYPE.fullmatch(dtype.str) is not None)


# --- decode ---------------------------------------------------------------------------------------

def decode(data: bytes | bytearray | memoryview, max_bytes: int = MAX_BYTES,
           max_json_bytes: int = MAX_JSON_BYTES) -> Any:
    """The value :func:`encode` wrote into ``data``; ``ValueError`` saying what is wrong with
    anything else (see the module docstring), or with a ``state.json`` of more than
    ``max_json_bytes``, before it is read."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"decode reads bytes, got {type(data).__name__}")
    if len(data) > max_bytes:
        raise ValueError(f"{len(data)} bytes, more than the {max_bytes} allowed")
    try:
        with zipfile.ZipFile(io.BytesIO(bytes(data))) as archive:
            arrays = _Arrays(archive, len(data))
            if arrays.infos[_STATE].file_size > max_json_bytes:
                raise ValueError(f"{_STATE} is {arrays.infos[_STATE].file_size} bytes, more "
                                 f"than the {max_json_bytes} allowed")
            raw = archive.read(_STATE)
            depth = _depth(raw)
            if depth > MAX_DEPTH:
                raise ValueError(f"{_STATE} is nested {depth} levels deep, more than "
                                 f"{MAX_DEPTH}")
            value = json.loads(raw.decode("utf-8"), object_pairs_hook=arrays.untag,
                               parse_constant=_no_constant)
            arrays.check_all_used()
            return value
    except ValueError:
        raise
    except Exception as error:  # noqa: BLE001 (whatever a damaged or planted zip raises)
        raise ValueError(f"not a plain-data file: {type(error).__name__}: {error}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{_STATE} holds {name}, which is not JSON (a non-finite float is "
                     '{"$float": ...})')


def _depth(text: bytes) -> int:
    """The deepest nesting of brackets in JSON ``text``, outside its strings."""
    text = text.replace(b"\\\\", b"").replace(b'\\"', b"")  # escapes: no quote is left in a string
    marks = text.translate(None, _NOT_MARKS).split(b'"')[::2]  # brackets outside strings
    bare = np.frombuffer(b"".join(marks), np.uint8)
    step = (bare == ord("[")) | (bare == ord("{"))
    return int(np.cumsum(step.astype(np.int64) * 2 - 1).max(initial=0))


_NOT_MARKS = bytes(b for b in range(256) if b not in b'[]{}"')


class _Arrays:
    """The members of a plain-data zip, checked, and the tags of its JSON read against them."""

    def __init__(self, archive: zipfile.ZipFile, size: int):
        self.archive = archive
        infos = archive.infolist()
        names = [info.filename for info in infos]
        if len(set(names)) != len(names):
            raise ValueError("the zip names a member twice")
        if _STATE not in names:
            raise ValueError(f"the zip holds no {_STATE}")
        indices = sorted(int(m.group(1)) for n in names if (m := _ARRAY.fullmatch(n)))
        strays = sorted(set(names) - {_STATE} - {f"arr_{k}.npy" for k in indices})
        if strays or indices != list(range(len(indices))):
            raise ValueError(f"the zip's members must be {_STATE} and arr_0.npy ... "
                             f"arr_<n-1>.npy, got {names[:10]}")
        for info in infos:
            if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1 \
                    or info.compress_size != info.file_size:
                raise ValueError(f"{info.filename} is compressed or encrypted (plain data "
                                 "is stored as is)")
        if sum(info.file_size for info in infos) > size:
            raise ValueError(f"the zip's members add up to more bytes than its {size}")
        self.infos = {info.filename: info for info in infos}
        self.count = len(indices)
        self.used: set[int] = set()

    def untag(self, pairs: list[tuple[str, Any]]) -> Any:
        """A JSON object as the value it stands for (``json.loads``' ``object_pairs_hook``)."""
        if len(pairs) == 1 and pairs[0][0].startswith("$"):
            return self._tagged(*pairs[0])
        value = dict(pairs)
        if len(value) != len(pairs):
            raise ValueError(f"{_STATE} repeats a key in an object")
        if "$" in "".join(value) and any(key[:1] == "$" for key in value):
            raise ValueError(f"{_STATE} has an object with keys {sorted(value)[:5]}: a key "
                             "starting with '$' must be an object's only key, a known tag")
        return value

    def _tagged(self, tag: str, payload: Any) -> Any:
        if tag in ("$tuple", "$set", "$frozenset"):
            items = _payload(tag, payload, list)
            kind = {"$tuple": tuple, "$set": set, "$frozenset": frozenset}[tag]
            try:
                return kind(items)
            except TypeError:
                raise ValueError(f"{tag} holds an unhashable item") from None
        if tag in ("$dict", "$ordered_dict"):
            pairs = _payload(tag, payload, list)
            if not all(type(p) is list and len(p) == 2 for p in pairs):
                raise ValueError(f"{tag} must be a list of [key, value] pairs")
            try:
                value = (dict if tag == "$dict" else OrderedDict)(pairs)
            except TypeError:
                raise ValueError(f"{tag} has an unhashable key") from None
            if len(value) != len(pairs):
                raise ValueError(f"{tag} repeats a key")
            return value
        if tag == "$int":
            if not _DIGITS.fullmatch(_payload(tag, payload, str)):
                raise ValueError(f"$int must be at most 2500 decimal digits, got {payload:.40}")
            return int(payload)
        if tag == "$float":
            if _payload(tag, payload, str) not in _FLOATS:
                raise ValueError(f"$float must be one of {sorted(_FLOATS)}, got {payload:.40}")
            return _FLOATS[payload]
        if tag == "$complex":
            parts = _payload(tag, payload, list)
            if len(parts) != 2 or not all(type(p) in (float, int) or type(p) is str and p in _FLOATS
                                           for p in parts):
                raise ValueError('$complex must be [real, imag], each a number, "nan", "inf" '
                                 'or "-inf"')
            return complex(*(_FLOATS[p] if type(p) is str else p for p in parts))
        if tag in ("$bytes", "$bytearray"):
            try:
                raw = base64.b64decode(_payload(tag, payload, str), validate=True)
            except binascii.Error:
                raise ValueError(f"{tag} must be base64") from None
            return raw if tag == "$bytes" else bytearray(raw)
        if tag == "$numpy":
            return _scalar(_payload(tag, payload, list))
        if tag == "$array":
            return self._array(payload)
        raise ValueError(f"{_STATE} has an unknown tag {tag[:40]!r}")

    def _array(self, k: Any) -> np.ndarray:
        if type(k) is not int or not 0 <= k < self.count:
            raise ValueError(f"$array must be the index of one of the zip's {self.count} "
                             f"arrays, got {k!r:.40}")
        if k in self.used:
            raise ValueError(f"arr_{k}.npy is referenced twice")
        self.used.add(k)
        info = self.infos[f"arr_{k}.npy"]
        with self.archive.open(info) as member:
            dtype, shape, fortran, header = _npy_header(member, info.filename)
            size = math.prod(shape) * dtype.itemsize
            if header + size != info.file_size:
                raise ValueError(f"{info.filename}: a {dtype} array of shape {shape} takes "
                                 f"{size} bytes, the file holds {info.file_size - header}")
            raw = bytearray(member.read(size))
        if len(raw) != size:
            raise ValueError(f"{info.filename} ends early")
        return np.frombuffer(raw, dtype).reshape(shape, order="F" if fortran else "C")

    def check_all_used(self) -> None:
        unused = sorted(set(range(self.count)) - self.used)
        if unused:
            raise ValueError(f"the zip holds arrays no value refers to: {unused[:10]}")


def _payload(tag: str, payload: Any, kind: type) -> Any:
    if type(payload) is not kind:
        raise ValueError(f"{tag} must hold a {kind.__name__}, got a {type(payload).__name__}")
    return payload


def _scalar(payload: list[Any]) -> np.generic:
    if len(payload) != 2 or not all(type(p) is str for p in payload) \
            or not _DTYPE.fullmatch(payload[0]):
        raise ValueError(f"$numpy must be [numeric dtype, hex bytes], got {payload!r:.60}")
    dtype = _dtype(payload[0], "$numpy")
    try:
        raw = bytes.fromhex(payload[1])
    except ValueError:
        raise ValueError("$numpy's bytes must be hex") from None
    if len(raw) != dtype.itemsize:
        raise ValueError(f"$numpy of {dtype} must hold {dtype.itemsize} bytes, got {len(raw)}")
    return np.frombuffer(raw, dtype)[0]


def _npy_header(member: Any, name: str) -> tuple[np.dtype, tuple[int, ...], bool, int]:
    """An ``.npy`` header read by hand, so that no dtype but a plain numeric one is ever
    built: the dtype, shape, memory order and the header's length in bytes."""
    magic = member.read(8)
    if magic[:6] != _NPY_MAGIC or magic[6:] not in (b"\x01\x00", b"\x02\x00"):
        raise ValueError(f"{name} is not a .npy array of version 1 or 2")
    width = 2 if magic[6] == 1 else 4
    length = int.from_bytes(member.read(width), "little")
    if length > _MAX_HEADER:
        raise ValueError(f"{name}'s header is {length} bytes, more than {_MAX_HEADER}")
    try:
        header = ast.literal_eval(member.read(length).decode("latin1"))
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        raise ValueError(f"{name}'s header is not a Python literal") from None
    if type(header) is not dict or set(header) != {"descr", "fortran_order", "shape"}:
        raise ValueError(f"{name}'s header must hold descr, fortran_order and shape")
    descr, fortran, shape = header["descr"], header["fortran_order"], header["shape"]
    if type(descr) is not str or not _DTYPE.fullmatch(descr):
        raise ValueError(f"{name} holds an array of dtype {descr!r:.60}: only bool, integer, "
                         "floating and complex dtypes are plain data (no object, structured, "
                         "string or datetime arrays)")
    if type(fortran) is not bool or type(shape) is not tuple or len(shape) > _MAX_DIMS \
            or not all(type(d) is int and d >= 0 for d in shape):
        raise ValueError(f"{name}'s header has fortran_order {fortran!r:.20} and shape "
                         f"{shape!r:.60}: expected a bool and a tuple of at most {_MAX_DIMS} "
                         "sizes")
    return _dtype(descr, name), shape, fortran, 8 + width + length


def _dtype(descr: str, where: str) -> np.dtype:
    """The numeric dtype ``descr`` names (it matched ``_DTYPE``)."""
    try:
        dtype = np.dtype(descr)
    except TypeError:
        raise ValueError(f"{where}: {descr!r} is not a numpy dtype") from None
    if not _numeric(dtype):
        raise ValueError(f"{where}: {descr!r} is not a plain numeric dtype")
    return dtype

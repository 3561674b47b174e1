"""Naming what a file is when it is not safetensors: the files people download or copy by
mistake in place of a shard (Git LFS pointers, HTML error pages, torch zips, pickles, GGUF ...),
told apart by their first bytes. A message names the kind only, never the bytes themselves."""

from __future__ import annotations

# Bytes looked at to say what a non-safetensors file is.
SNIFF_LEN = 512

PICKLE = "is a Python pickle (a legacy PyTorch checkpoint?)"
# Protocol 4/5 pickles open with a frame whose 8-byte length can pass for a header length.
PICKLE_FRAME_STARTS = (b"\x80\x04\x95", b"\x80\x05\x95")


def sniff(head: bytes) -> tuple[str, str] | None:
    """(code, what the file looks like) for well-known non-safetensors content, else None."""
    head = head[:SNIFF_LEN]
    if head.startswith(b"version https://git-lfs.github.com/spec/"):
        size = _lfs_size(head)
        of = f" to a {size:,}-byte object" if size is not None else ""
        return "lfs_pointer", f"is a Git LFS pointer{of}, not the weights (run git lfs pull?)"
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    low = text[:16].lower()
    if low.startswith((b"<!doctype html", b"<html", b"<head", b"<body")):
        return "html", "is an HTML page (an error or login page saved instead of the file?)"
    if low.startswith(b"<?xml"):
        return "xml", "is an XML document (a storage/CDN error response saved instead of the file?)"
    if text.startswith((b"{", b"[")):
        return "json_file", "is a JSON document (an index or config file?)"
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip", "is a zip archive (a PyTorch .bin/.pt checkpoint?)"
    if head.startswith(b"\x1f\x8b"):
        return "gzip", "is gzip-compressed (decompress it first?)"
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "pickle", PICKLE
    if head.startswith(b"GGUF"):
        return "gguf", "is a GGUF file (llama.cpp format)"
    if head.startswith(b"\x93NUMPY"):
        return "npy", "is a NumPy .npy array file"
    if head and _looks_like_text(head):
        # Never quoted: a shard path may be a symlink to anything (it may be a private key).
        return "text_file", "is a text file, not safetensors"
    return None


def _lfs_size(head: bytes) -> int | None:
    for line in head.split(b"\n"):
        if line.startswith(b"size "):
            digits = line[5:].strip()
            if digits.isdigit() and len(digits) < 25:
                return int(digits)
    return None


def _looks_like_text(head: bytes) -> bool:
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A multi-byte character cut off by the sniff window is still text.
        if exc.start < len(head) - 3:
            return False
        text = head[: exc.start].decode("utf-8")
    return bool(text) and all(ch.isprintable() or ch in "\t\r\n" for ch in text)

"""Name scopes: which Keras layer an HLO instruction came from.

Keras opens a JAX name scope per layer, which XLA keeps in each
instruction's ``op_name`` metadata; :func:`scopes_of` reads the scope paths
(and the pass) from it, and :func:`layer_for_scope` maps a scope path to a
known layer path.
"""

from __future__ import annotations

import functools
import re


def scopes_of(op_name: str) -> tuple[tuple[str, ...], str]:
    """``(name-scope paths, pass)`` from op_name metadata.

    The scope path is what Keras's layer name scopes left (autodiff wrappers
    removed, the primitive dropped). A combined collective joins several op
    names as ``(a:b:c)``; each gives a scope path.

    >>> scopes_of("jit(forward)/down/dot_general")
    (('down',), 'forward')
    >>> scopes_of("jit(step)/transpose(jvp(my_model))/block_0/up/dot_general")
    (('my_model/block_0/up',), 'backward')
    >>> scopes_of("jit(step)/transpose(jvp(attn))/(query/abc,cde->abde/dot_general:key/reduce_sum)")
    (('attn/query/abc,cde->abde', 'attn/key'), 'backward')
    """
    body = op_name
    m = re.match(r"p?jit\([^)]*\)/(.*)$", body)
    if m:
        body = m.group(1)
    scopes, backward = [], False
    for name in _expand(body):
        scope, is_backward = _scope_of_one(name)
        backward |= is_backward
        if scope and scope not in scopes:
            scopes.append(scope)
    return tuple(scopes), ("backward" if backward else "forward")


def _expand(name: str) -> list[str]:
    """Expand a combined op name ``a/(b/x:c/y)`` into ``a/b/x`` and ``a/c/y``."""
    parts = _split_top(name, "/")
    for i, part in enumerate(parts):
        if part.startswith("(") and part.endswith(")") and len(_split_top(part[1:-1], ":")) > 1:
            prefix = "/".join(parts[:i])
            out = []
            for alt in _split_top(part[1:-1], ":"):
                out += [f"{prefix}/{e}" if prefix else e for e in _expand(alt)]
            return out
    return [name]


def _split_top(text: str, sep: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _scope_of_one(name: str) -> tuple[str, bool]:
    parts = name.split("/")
    backward = any("transpose(" in p for p in parts)
    cleaned = []
    for p in parts[:-1]:  # the last part is the primitive
        while True:
            m = re.fullmatch(r"(?:jvp|transpose|vmap|remat|checkpoint|jit|pjit)\((.*)\)", p)
            if not m:
                break
            p = m.group(1)
        if p and not p.startswith(("while", "cond", "body", "branch")):
            cleaned.append(p)
    return "/".join(cleaned), backward


def layer_for_scope(scope: str, layer_paths) -> str | None:
    """The Keras layer a name-scope path belongs to: the known layer path
    that ends with the longest run of the scope's names (``stateless_call``
    opens no scope for the model itself, so scopes may lack the model's
    name; a nested model's scope, such as a causal LM's backbone, may carry
    a name its layers' paths lack). Ties go to the run that starts first.

    >>> layer_for_scope("block_0/down/xyz", ["my_model/block_0/up", "my_model/block_0/down"])
    'my_model/block_0/down'
    >>> layer_for_scope("attn/query/abc,cde->abde", ["attn", "attn/query"])
    'attn/query'
    >>> layer_for_scope("backbone/block_0/ffw/btf,fd->btd", ["backbone", "block_0/ffw"])
    'block_0/ffw'
    """
    parts = scope.split("/")
    index = _suffixes(tuple(layer_paths))
    best, best_length = None, 0
    for start in range(len(parts)):
        for stop in range(len(parts), start + best_length, -1):
            path = index.get("/".join(parts[start:stop]))
            if path is not None:
                best, best_length = path, stop - start
                break
    return best


@functools.lru_cache(maxsize=8)
def _suffixes(layer_paths: tuple[str, ...]) -> dict[str, str]:
    """Every path's trailing runs of names, each to the first path that has it."""
    index: dict[str, str] = {}
    for path in layer_paths:
        names = path.split("/")
        for k in range(len(names)):
            index.setdefault("/".join(names[k:]), path)
    return index


_GROUPED = re.compile(r"\bconvolution\((?=[^\n]*\b(?:feature|batch)_group_count=(\d+))"
                      r"[^\n]*op_name=\"([^\"]*)\"")


def grouped_convolution_layers(hlo_text: str, layer_paths) -> list[str]:
    """The layer paths of the grouped convolutions in a program (a feature or
    batch group count above 1; the gradient of a grouped convolution's kernel
    is one with a batch group count), in the order they appear.

    >>> text = ('%c = f32[4,8]{1,0} convolution(%a, %b), feature_group_count=32, '
    ...         'metadata={op_name="jit(step)/transpose(jvp(dw))/conv_general_dilated"}')
    >>> grouped_convolution_layers(text, ["dw", "post"])
    ['dw']
    """
    found: list[str] = []
    for count, op_name in _GROUPED.findall(hlo_text):
        if int(count) <= 1:
            continue
        for scope in scopes_of(op_name)[0]:
            layer = layer_for_scope(scope, layer_paths)
            if layer:
                if layer not in found:
                    found.append(layer)
                break
    return found

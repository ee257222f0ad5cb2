"""YAML shown highlighted by a real YAML lexer: PyYAML's scanner (the one that reads the spec) marks keys, quoted
strings, numbers, booleans and anchors, and a comment is only what the scanner skips starting with ``#`` after a
blank: ``AI-MO/NuminaMath-TIR#1000`` stays one value. (Streamlit's code block highlights YAML with highlight.js,
which colours ``#1000`` there as a comment.)"""

from __future__ import annotations

import html
import re

import streamlit as st
import yaml

COLOURS = {"key": "#0550ae", "string": "#0a3069", "number": "#953800", "literal": "#8250df", "comment": "#6e7781",
           "punct": "#57606a"}
STYLE = ("font-family: 'Source Code Pro', monospace; font-size: 14px; line-height: 1.5; white-space: pre-wrap; "
         "overflow-wrap: anywhere; background: rgb(240, 242, 246); border-radius: 0.5rem; padding: 1rem; margin: 0")
_NUMBER = re.compile(r"[-+]?(\d[\d_]*(\.\d*)?([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?|\.inf|\.nan)$", re.IGNORECASE)
_LITERAL = re.compile(r"(true|false|yes|no|on|off|null|~)$", re.IGNORECASE)


def _kind(token: yaml.Token, after_key: bool) -> str | None:
    if isinstance(token, yaml.ScalarToken):
        if after_key:
            return "key"
        if token.style:
            return "string"
        return "number" if _NUMBER.match(token.value) else "literal" if _LITERAL.match(token.value) else None
    if isinstance(token, (yaml.AnchorToken, yaml.AliasToken, yaml.TagToken)):
        return "literal"
    if isinstance(token, (yaml.FlowSequenceStartToken, yaml.FlowSequenceEndToken, yaml.FlowMappingStartToken,
                          yaml.FlowMappingEndToken, yaml.FlowEntryToken, yaml.BlockEntryToken, yaml.ValueToken)):
        return "punct"
    return None


def _gap(text: str) -> str:
    """Text between tokens: blanks, and the comments the scanner skipped (a '#' at a line start or after a blank)."""
    return re.sub(r"(^|(?<=[ \t]))#[^\n]*", lambda m: _span("comment", m[0]), html.escape(text), flags=re.M)


def _span(kind: str, escaped: str) -> str:
    return f'<span style="color: {COLOURS[kind]}">{escaped}</span>'


def highlight(text: str) -> str:
    """YAML text as HTML: every token at its place, coloured by what the scanner says it is. Text PyYAML cannot
    scan is shown plain."""
    try:
        tokens = list(yaml.scan(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError:
        return html.escape(text)
    out, pos, after_key = [], 0, False
    for token in tokens:
        start, end = token.start_mark.index, token.end_mark.index
        if end <= start or start < pos:
            after_key = isinstance(token, yaml.KeyToken)
            continue
        out.append(_gap(text[pos:start]))
        kind = _kind(token, after_key)
        raw = html.escape(text[start:end])
        out.append(_span(kind, raw) if kind else raw)
        pos = end
        after_key = isinstance(token, yaml.KeyToken)
    out.append(_gap(text[pos:]))
    return "".join(out)


def yaml_code(text: str) -> None:
    """Draw YAML text highlighted (a code block)."""
    st.html(f'<pre data-testid="yaml-code" style="{STYLE}">{highlight(text)}</pre>')
